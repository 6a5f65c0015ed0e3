"""Cold starts with and without caching and prewarming: a timed what-if through the production core (#20).

Every input goes through ``processors.decide`` as in ``qos_whatif.py``: node registrations,
the policy, arrivals (TaskSubmitted), completions (TaskStatusChanged COMPLETED) and the cell
clock (a CellTick every ``tick_ms``). Three arms per seed (:data:`ARMS`), on the same
workload, all with the ``default`` strategy (1.5.0: ModelLocality, local reads first):

* ``no_cache`` ("no cache", the issue's "before"): the nodes register ``model_cache_mib=0``,
  so the core keeps no model cache, ModelLocality has nothing to score and every start
  pulls its weights from the origin; the prewarm planner off (it could fill nothing anyway).
* ``off`` ("on-demand cache"): ``cache_gib`` of cache per node; a placed task's model stays
  in its node's cache (LRU); the prewarm planner off.
* ``on`` ("cache + prewarm"): the same, with the prewarm planner on (``prewarm.enabled``;
  its other arguments are :data:`PREWARM` over the planner's defaults).

Comparisons (:data:`COMPARISONS`, ``aggregate["changes"]``): relative changes of p50, p95 and
origin bytes, the hit rate's change in points (relative too, except against no cache, whose
hit rate is 0 by construction):

* ``on_vs_no_cache``: what caching and prewarming together buy over the "before";
* ``on_vs_off``: what the prewarm planner adds on top of on-demand caching (also kept as
  ``aggregate["change"]``, its name before the no-cache arm);
* ``off_vs_no_cache``: what on-demand caching alone buys.

The goals (:data:`GOALS`: p50 -80 %, hit rate >= 80 %, wasted prefetch <= 20 %) are checked for
the prewarm-on arm against each baseline (``aggregate["goals_by_baseline"]["no_cache"|"off"]``,
each with its ``goals`` and ``met``, all of them met); only the p50 change depends on the
baseline, the hit rate and the wasted prefetch are the on arm's own. ``aggregate["goals"]`` is
the check against the on-demand cache, as before the no-cache arm. Run it with
``python -m suanli.replay.prewarm_whatif [--seeds 1-10] [--run-on H] [--json OUT] [--quiet]``;
``--sweep "max_waste=0.2;max_waste=0.3,min_use=0.05"`` runs the prewarm-on arm once per set
of planner arguments instead (the hit/waste trade-off, :func:`sweep`). Each run also reports
the workload's hit-rate ceilings (:func:`hit_ceilings`).

**Cluster.** ``sites`` (10) edge sites, each its own region and zone, with ``nodes_per_site``
(3) nodes of 4 GPUs (24 GiB each, an L4-class inference card), 64 cores, 256 GiB of memory
and ``cache_gib`` (256 GiB) of NVMe set aside for model weights (``model_cache_mib``).

**Models.** ``families`` (40) model families; family sizes drawn log-uniform between 1 and 70
GiB (``random.Random(f"catalog/{seed}")``); a task needs ``ceil(1.2 x size / 24 GiB)``
GPUs (at most 4). Each family releases new versions over time (Poisson, mean
``release_every_h``, 3 h; the first at t = 0; a version is ``<family>@<n>``, its size the
family's): a task asks for its family's newest version, so popularity drifts from
versions to their successors, the way a model hub's does.

**Popularity.** Zipf over the families with ``s`` = 1.1 (ranks a seeded permutation), times a
per-site log-normal factor (sigma 0.5), renormalised per site: sites agree on what is popular
but not exactly.

**Arrivals.** Poisson per site, ``rate_per_h`` (12) an hour each, labelled ``user-site`` (the
topology filter keeps them at their site); durations log-normal, median 10 min, sigma 0.5.
``hours`` (10) of arrivals; the first ``warmup_h`` (2) warm the caches and are not measured.
Arrivals go on for ``run_on_h`` (1) more, not measured either: they only tell whether the
prewarms of the window's last hour were used (without them, every late prewarm would count as
waste because the run ended, not because nobody wanted it).

**What is measured** (dispatches, i.e. placements, in the measured window): *dispatch ->
model ready*: the load time of ``processors/model_loading.py`` from where the model was at
that instant: the node's own cache (what is left of a load in flight, plus a disk read), a
node of the same site (the soonest ready: what is left of its load plus a LAN copy), else
the origin. A task runs its duration after that. *Hit*: not from the origin (the site's
caches served it; local hits are reported too). *Origin bytes*: origin loads by tasks plus
every prewarm (without caches: the dispatched models' sizes, ``dispatched_gib``, all of
them). *Wasted prefetch*: MiB of prewarms issued in the window that no task used (locally,
or from a peer at the site) by the end of the run-on, over all MiB prewarmed in the window. The three arms
place the same tasks (same dispatches); where, and so when each ends, differ with the caches.

Figures are pooled over the seeds (all dispatches together) with a 95 % interval across
seeds (mean +- t x sd / sqrt(n) of the per-seed figures).
"""
from __future__ import annotations

import argparse
import heapq
import json
import math
import random
import sys
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Optional, Sequence

import numpy as np

from suanli.processors.model_loading import LINKS, load_ms
from suanli.errors import ReplayError
from suanli.processors import CellState, decide
from suanli.processors import model as m

from .metrics import percentiles
from .progress import Progress, run_jobs

GIB = 1024
GPU_MEM_GIB = 24
# the arms, in their order in the runs and the table: key -> (label, model cache, prewarm planner)
ARMS: dict[str, tuple[str, bool, bool]] = {
    "no_cache": ("no cache", False, False),
    "off": ("on-demand cache", True, False),
    "on": ("cache + prewarm", True, True),
}
# the comparisons reported: key -> (arm, baseline); "on_vs_off" is also the legacy ``change``
COMPARISONS: dict[str, tuple[str, str]] = {
    "on_vs_no_cache": ("on", "no_cache"),
    "on_vs_off": ("on", "off"),
    "off_vs_no_cache": ("off", "no_cache"),
}
PREWARM: dict[str, Any] = {"enabled": True}      # the planner's defaults (processors/prewarm.py PrewarmArgs)
GOALS = {"p50_change_pct": -80.0, "hit_rate_pct": 80.0, "wasted_prefetch_pct": 20.0}
# The figure "judged" leaves out the prewarms of the window's last hour (their fate rests on
# the run-on alone); it is reported beside the goal's figure, not for the goal.
JUDGE_MS = 3_600_000

# event ranks at one millisecond: completions free resources first, then the clock, then arrivals
_DONE, _TICK, _ARRIVE = range(3)


@dataclass(frozen=True, slots=True)
class Workload:
    """The scenario (see the module docstring); one seed draws one instance."""
    seed: int = 1
    sites: int = 10
    nodes_per_site: int = 3
    cache_gib: int = 256
    families: int = 40
    zipf_s: float = 1.1
    site_sigma: float = 0.5
    release_every_h: float = 3.0
    rate_per_h: float = 12.0
    duration_median_min: float = 10.0
    hours: float = 10.0
    warmup_h: float = 2.0
    run_on_h: float = 1.0
    tick_ms: int = 5_000

    def check(self) -> None:
        if self.sites < 1 or self.nodes_per_site < 1 or self.families < 1 or self.hours <= self.warmup_h \
                or self.run_on_h < 0 or not self.release_every_h > 0:
            raise ReplayError("prewarm what-if: sites, nodes and families >= 1, hours > warmup_h, run_on_h >= 0, "
                              "release_every_h > 0")


@dataclass(slots=True)
class Arm:
    """One arm's raw tallies for one seed."""
    waits_ms: list[int] = field(default_factory=list)
    sources: dict[str, int] = field(default_factory=lambda: {"local": 0, "peer": 0, "origin": 0})
    origin_mib: int = 0
    prefetched_mib: int = 0
    prefetched_unused_mib: int = 0
    judged_mib: int = 0              # prewarms issued at least JUDGE_MS before the window's end
    judged_unused_mib: int = 0
    local_ms: list[int] = field(default_factory=list)     # the same dispatches' load if it were a local hit
    sizes_mib: list[int] = field(default_factory=list)    # the same dispatches' model sizes
    prewarms: int = 0
    dispatches: int = 0
    seconds: float = 0.0


# ============================================================================ the workload (pure)
def catalog(w: Workload) -> dict[str, Any]:
    """Family sizes (MiB), Zipf weights per site, and version releases, from the seed."""
    rnd = random.Random(f"catalog/{w.seed}")
    sizes = [int(round(math.exp(rnd.uniform(math.log(1.0), math.log(70.0))) * GIB)) for _ in range(w.families)]
    ranks = list(range(1, w.families + 1))
    rnd.shuffle(ranks)
    base = [1.0 / r ** w.zipf_s for r in ranks]
    per_site = []
    for site in range(w.sites):
        srnd = random.Random(f"site/{w.seed}/{site}")
        ws = [b * math.exp(srnd.gauss(0.0, w.site_sigma)) for b in base]
        tot = sum(ws)
        per_site.append([x / tot for x in ws])
    releases: list[list[int]] = []              # family -> release times (ms), first at 0
    vrnd = random.Random(f"versions/{w.seed}")
    mean = w.release_every_h * 3_600_000
    end, run_end = int(w.hours * 3_600_000), int((w.hours + w.run_on_h) * 3_600_000)
    for fam in range(w.families):
        ts, t = [0], 0.0
        while True:
            t += vrnd.expovariate(1.0 / mean)
            if t >= end:
                break
            ts.append(int(t))
        # the run-on's releases from a stream of their own (exponential gaps are memoryless), so
        # the window's workload does not depend on the run-on's length
        rrnd, t = random.Random(f"versions/{w.seed}/run-on/{fam}"), float(end)
        while True:
            t += rrnd.expovariate(1.0 / mean)
            if t >= run_end:
                break
            ts.append(int(t))
        releases.append(ts)
    return {"sizes": sizes, "weights": per_site, "releases": releases}


def version_at(releases: list[int], t: int) -> int:
    """The family's newest version (1-based) at ``t``."""
    v = 0
    for r in releases:
        if r <= t:
            v += 1
    return v


def arrivals(w: Workload, cat: dict[str, Any]) -> list[dict[str, Any]]:
    """Every task: ``{task_id, site, at, family, arch, size_mib, gpus, duration_ms}``, by time
    (through the run-on)."""
    out = []
    end = int((w.hours + w.run_on_h) * 3_600_000)
    for site in range(w.sites):
        rnd = random.Random(f"arrivals/{w.seed}/{site}")
        t = 0.0
        k = 0
        while True:
            t += rnd.expovariate(w.rate_per_h / 3_600_000)
            if t >= end:
                break
            fam = rnd.choices(range(w.families), weights=cat["weights"][site])[0]
            size = cat["sizes"][fam]
            dur = int(w.duration_median_min * 60_000 * math.exp(rnd.gauss(0.0, 0.5)))
            at = int(t)
            out.append({"task_id": f"s{site:02d}-t{k:05d}", "site": site_name(site), "at": at, "family": fam,
                        "arch": f"f{fam:02d}@{version_at(cat['releases'][fam], at)}", "size_mib": size,
                        "gpus": min(4, max(1, math.ceil(1.2 * size / (GPU_MEM_GIB * GIB)))), "duration_ms": dur})
            k += 1
    out.sort(key=lambda x: (x["at"], x["task_id"]))
    return out


def hit_ceilings(w: Workload, tasks: Optional[list[dict[str, Any]]] = None) -> dict[str, int]:
    """What no cache policy can beat, from the workload alone: of the window's arrivals
    (``measured``), how many are the first request of their model version at their site
    (``site_first``: a miss for any cache that only keeps what was asked, however large,
    since a peer counts only at the same site) and how many the first anywhere in the cell
    (``cell_first``: a miss even with perfect prewarming, since a version is known only once
    it is asked for)."""
    tasks = arrivals(w, catalog(w)) if tasks is None else tasks
    start, end = int(w.warmup_h * 3_600_000), int(w.hours * 3_600_000)
    at_site: set[tuple[str, str]] = set()
    in_cell: set[str] = set()
    out = {"measured": 0, "site_first": 0, "cell_first": 0}
    for t in tasks:
        first_site, first_cell = (t["site"], t["arch"]) not in at_site, t["arch"] not in in_cell
        at_site.add((t["site"], t["arch"]))
        in_cell.add(t["arch"])
        if start <= t["at"] < end:
            out["measured"] += 1
            out["site_first"] += first_site
            out["cell_first"] += first_cell
    return out


def site_name(i: int) -> str:
    return f"edge-{i:02d}"


def nodes(w: Workload, cache: bool = True) -> list[m.NodeRegistered]:
    """The cluster's registrations; ``cache`` False: ``model_cache_mib=0`` (the core keeps no
    model cache for them, so ModelLocality has nothing to score and the planner nothing to fill)."""
    out = []
    for i in range(w.sites):
        site = site_name(i)
        for j in range(w.nodes_per_site):
            out.append(m.NodeRegistered(
                event_id=f"{site}-n{j}/reg", node_id=f"{site}-n{j}", cell="edge", site=site, region=site,
                zone=f"{site}-a", tier="edge", arch="x86_64", cpu_milli=64_000, memory_mib=256 * GIB,
                accelerators=(m.Accelerator(kind="GPU", model="L4", count=4, memory_mib=GPU_MEM_GIB * GIB),),
                registered_at=0, model_cache_mib=w.cache_gib * GIB if cache else 0))
    return out


# ============================================================================ one run
def _view(s: CellState) -> dict[str, dict[str, tuple[int, str]]]:
    """The caches as they are: node -> model -> (ready_at, via)."""
    return {n: {a: (e.ready_at, e.via) for a, e in c.entries.items()} for n, c in s.model_caches.items()}


def _wait(view: dict, site_of: dict[str, str], node: str, arch: str, size: int, now: int
          ) -> tuple[str, int, Optional[str]]:
    """``(source, ms until the model is in memory, holder)`` from the caches before the placement."""
    mine = view.get(node, {})
    if arch in mine:
        return "local", max(0, mine[arch][0] - now) + load_ms(size, "local"), node
    site = site_of[node]
    peers = sorted((max(0, v[arch][0] - now), n) for n, v in view.items()
                   if arch in v and site_of[n] == site and n != node)
    if peers:
        left, n = peers[0]
        return "peer", left + load_ms(size, "peer"), n
    return "origin", load_ms(size, "origin"), None


def arm_of(prewarm: bool, cache: bool) -> str:
    """The arm's key in :data:`ARMS` (``"no_cache"`` for any run without caches)."""
    return "no_cache" if not cache else "on" if prewarm else "off"


def simulate(w: Workload, prewarm: bool, *, cache: bool = True, prewarm_args: Optional[dict[str, Any]] = None,
             progress: bool = False) -> dict[str, Any]:
    """One arm over one seed's workload; returns its tallies and figures. ``cache`` False: the
    nodes register no model cache (the no-cache arm runs it with ``prewarm`` False; with the
    planner on it has no cache to fill and issues nothing)."""
    w.check()
    cat = catalog(w)
    tasks = arrivals(w, cat)
    by_id = {t["task_id"]: t for t in tasks}
    end = int(w.hours * 3_600_000)               # the measured window is [start, end)
    start = int(w.warmup_h * 3_600_000)
    run_end = int((w.hours + w.run_on_h) * 3_600_000)
    t0 = time.perf_counter()
    state = CellState("edge")
    off = 0
    topic = "whatif.prewarm"

    def feed(event: Any) -> list[Any]:
        nonlocal state, off
        state, outs = decide(state, event, (topic, 0, off))
        off += 1
        return outs

    regs = nodes(w, cache)
    for e in regs:
        feed(e)
    site_of = {e.node_id: e.site for e in regs}
    config: dict[str, Any] = {"seed": w.seed, "typical_tasks": "observed",
                              "prewarm": {**PREWARM, **(prewarm_args or {})} if prewarm else {"enabled": False}}
    feed(m.PolicyChanged.of("edge", "default", config))

    heap: list[tuple[int, int, int, str]] = []
    for i, t in enumerate(tasks):
        heap.append((t["at"], _ARRIVE, i, t["task_id"]))
    for k, at in enumerate(range(w.tick_ms, run_end + 1, w.tick_ms)):
        heap.append((at, _TICK, k, ""))
    heapq.heapify(heap)
    arm = Arm()
    # prewarm records: (node, arch) -> [ready_at, size, issued_at, used]
    live: dict[tuple[str, str], list] = {}
    issued: list[list] = []
    bar = Progress(len(heap), f"{ARMS[arm_of(prewarm, cache)][0]} seed {w.seed}", enabled=progress)
    while heap:
        at, rank, i, tid = heapq.heappop(heap)
        if rank == _ARRIVE:
            t = tasks[i]
            event: Any = m.TaskSubmitted(
                event_id=f"{tid}/sub", task_id=tid, tenant="inference", cell="edge", submitted_at=at,
                resources=m.TaskResources(cpu_milli=8000, memory_mib=32 * GIB, gpu_count=t["gpus"], gpu_milli=1000),
                labels={"user-site": t["site"]}, duration_estimate_ms=t["duration_ms"],
                profile=m.TaskProfile(model_arch=t["arch"], model_uri=f"s3://hub/{t['arch']}",
                                      model_size_mib=t["size_mib"]))
        elif rank == _DONE:
            rec = state.tasks.get(tid)
            if rec is None or rec.node is None or rec.status not in ("PLACED", "DISPATCHED", "RUNNING"):
                bar.update()
                continue
            event = m.TaskStatusChanged(event_id=f"{tid}/done", task_id=tid, cell="edge", node_id=rec.node,
                                        status="COMPLETED", at=at, exit_code=0)
        else:
            event = m.CellTick(event_id=f"tick/{at}", cell="edge", at=at, period_ms=w.tick_ms)
        view = _view(state)
        for out in feed(event):
            if isinstance(out, m.TaskPlaced):
                t = by_id[out.task_id]
                source, wait, holder = _wait(view, site_of, out.node_id, t["arch"], t["size_mib"], at)
                heapq.heappush(heap, (at + wait + t["duration_ms"], _DONE, 0, out.task_id))
                rec = live.get((holder, t["arch"])) if holder else None
                if rec is not None and view[holder][t["arch"]] == (rec[0], "prewarm"):
                    rec[3] = True
                if start <= t["at"] < end:          # measured: the window's arrivals, wherever placed
                    arm.dispatches += 1
                    arm.waits_ms.append(wait)
                    arm.local_ms.append(load_ms(t["size_mib"], "local"))
                    arm.sizes_mib.append(t["size_mib"])
                    arm.sources[source] += 1
                    if source == "origin":
                        arm.origin_mib += t["size_mib"]
            elif isinstance(out, m.PrewarmCommand):
                entry = state.model_caches[out.node_id].entries[out.model_arch]
                rec = [entry.ready_at, out.size_mib, at, False]
                live[(out.node_id, out.model_arch)] = rec
                issued.append(rec)
        bar.update()
    bar.close()
    for ready, size, at, used in issued:
        if start <= at < end:
            arm.prewarms += 1
            arm.prefetched_mib += size
            arm.origin_mib += size
            if not used:
                arm.prefetched_unused_mib += size
            if at < end - JUDGE_MS:
                arm.judged_mib += size
                arm.judged_unused_mib += 0 if used else size
    arm.seconds = round(time.perf_counter() - t0, 2)
    return {"seed": w.seed, "arm": arm_of(prewarm, cache), "prewarm": prewarm, "cache": cache, **figures(arm),
            "ceilings": hit_ceilings(w, tasks),
            "seconds": arm.seconds, "inputs": off, "tasks": len(tasks),
            "waits_ms": arm.waits_ms, "local_ms": arm.local_ms, "sizes_mib": arm.sizes_mib}


def figures(a: Arm) -> dict[str, Any]:
    n = max(1, a.dispatches)
    pct = percentiles([x / 1000 for x in a.waits_ms])
    return {"dispatches": a.dispatches, "ready_s": {"p50": pct["p50"], "p95": pct["p95"], "mean": pct["mean"]},
            "hit_rate_pct": round(100.0 * (a.sources["local"] + a.sources["peer"]) / n, 3),
            "local_hit_rate_pct": round(100.0 * a.sources["local"] / n, 3),
            "sources": dict(a.sources), "origin_gib": round(a.origin_mib / GIB, 3),
            "dispatched_gib": round(sum(a.sizes_mib) / GIB, 3),
            "prewarms": a.prewarms, "prefetched_gib": round(a.prefetched_mib / GIB, 3),
            "prefetched_unused_gib": round(a.prefetched_unused_mib / GIB, 3),
            "wasted_prefetch_pct": round(100.0 * a.prefetched_unused_mib / a.prefetched_mib, 3)
            if a.prefetched_mib else None,
            "judged_prefetched_gib": round(a.judged_mib / GIB, 3),
            "judged_unused_gib": round(a.judged_unused_mib / GIB, 3)}


# ============================================================================ many seeds
_T975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228,
         11: 2.201, 12: 2.179, 14: 2.145, 19: 2.093, 29: 2.045}


def interval(xs: Sequence[float]) -> dict[str, Any]:
    """Mean and 95 % interval (Student t) across seeds."""
    xs = [x for x in xs if x is not None]
    if not xs:
        return {"mean": None, "lo": None, "hi": None, "n": 0}
    mean = float(np.mean(xs))
    if len(xs) < 2:
        return {"mean": round(mean, 3), "lo": None, "hi": None, "n": 1}
    t = _T975.get(len(xs) - 1, 1.96)
    h = t * float(np.std(xs, ddof=1)) / math.sqrt(len(xs))
    return {"mean": round(mean, 3), "lo": round(mean - h, 3), "hi": round(mean + h, 3), "n": len(xs)}


def arm_key(r: dict[str, Any]) -> str:
    """A run's arm (runs written before the no-cache arm carry only ``prewarm``)."""
    return r.get("arm") or arm_of(r["prewarm"], r.get("cache", True))


def _change(a: Optional[float], b: Optional[float]) -> Optional[float]:
    """The relative change from ``a`` (the baseline) to ``b``, in %; None when ``a`` is 0 or unknown."""
    return round(100.0 * (b - a) / a, 3) if a and b is not None else None


def _compare(runs: list[dict[str, Any]], out: dict[str, Any], arm: str, base: str) -> dict[str, Any]:
    """``arm`` against ``base``: relative changes of the pooled figures (p50 also per seed,
    paired by seed), the hit rate's change in points (relative: None when the baseline's is 0)."""
    a, b = out[arm], out[base]
    per_seed_p50 = []
    for r in runs:
        if arm_key(r) == arm:
            rb = next((x for x in runs if arm_key(x) == base and x["seed"] == r["seed"]), None)
            if rb is not None:
                per_seed_p50.append(_change(rb["ready_s"]["p50"], r["ready_s"]["p50"]))
    return {
        "arm": arm, "baseline": base, "label": f"{ARMS[arm][0]} vs {ARMS[base][0]}",
        "p50_pct": _change(b["ready_s_p50"], a["ready_s_p50"]),
        "p50_pct_per_seed": interval(per_seed_p50),
        "p95_pct": _change(b["ready_s_p95"], a["ready_s_p95"]),
        "hit_rate_points": round(a["hit_rate_pct"] - b["hit_rate_pct"], 3),
        "hit_rate_pct": _change(b["hit_rate_pct"], a["hit_rate_pct"]),
        "origin_gib_pct": _change(b["origin_gib"], a["origin_gib"]),
        # the structural bound: the baseline's p50 change if every measured dispatch were a local hit
        "p50_pct_if_all_local": _change(b["ready_s_p50"], b["ready_s_p50_if_all_local"]),
    }


def _goals(change: dict[str, Any], on: dict[str, Any]) -> dict[str, Any]:
    """The goals of :data:`GOALS` for the prewarm-on arm against the baseline of ``change``.
    Only the p50 change depends on the baseline; hit rate and wasted prefetch are the on
    arm's own figures."""
    p50, hit, waste = change["p50_pct"], on["hit_rate_pct"], on["wasted_prefetch_pct"]
    return {
        "p50_change_pct": {"goal": f"<= {GOALS['p50_change_pct']:g}", "value": p50,
                           "met": p50 is not None and p50 <= GOALS["p50_change_pct"]},
        "hit_rate_pct": {"goal": f">= {GOALS['hit_rate_pct']:g}", "value": hit,
                         "met": hit >= GOALS["hit_rate_pct"]},
        "wasted_prefetch_pct": {"goal": f"<= {GOALS['wasted_prefetch_pct']:g}", "value": waste,
                                "met": waste is not None and waste <= GOALS["wasted_prefetch_pct"]},
    }


def aggregate(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Per arm (those with runs, keys of :data:`ARMS`), the comparisons of :data:`COMPARISONS`
    (``changes``), and the goals of the prewarm-on arm against each baseline
    (``goals_by_baseline``). ``change`` and ``goals`` are the on-vs-on-demand-cache ones, as
    before the no-cache arm."""
    out: dict[str, Any] = {}
    for arm in ARMS:
        rs = [r for r in runs if arm_key(r) == arm]
        if not rs:
            continue
        waits = [x / 1000 for r in rs for x in r["waits_ms"]]
        pct = percentiles(waits)
        bound = percentiles([x / 1000 for r in rs for x in r["local_ms"]])
        n = sum(r["dispatches"] for r in rs)
        jpre = sum(r["judged_prefetched_gib"] for r in rs)
        junused = sum(r["judged_unused_gib"] for r in rs)
        src = {k: sum(r["sources"][k] for r in rs) for k in ("local", "peer", "origin")}
        pre = sum(r["prefetched_gib"] for r in rs)
        unused = sum(r["prefetched_unused_gib"] for r in rs)
        out[arm] = {
            "label": ARMS[arm][0], "cache": ARMS[arm][1], "prewarm": ARMS[arm][2],
            "runs": len(rs), "dispatches": n,
            "ready_s_p50": pct["p50"], "ready_s_p95": pct["p95"], "ready_s_mean": pct["mean"],
            "ready_s_p50_per_seed": interval([r["ready_s"]["p50"] for r in rs]),
            "ready_s_p95_per_seed": interval([r["ready_s"]["p95"] for r in rs]),
            "hit_rate_pct": round(100.0 * (src["local"] + src["peer"]) / max(1, n), 3),
            "hit_rate_pct_per_seed": interval([r["hit_rate_pct"] for r in rs]),
            "local_hit_rate_pct": round(100.0 * src["local"] / max(1, n), 3),
            "sources": src,
            "source_shares_pct": {k: round(100.0 * v / max(1, n), 3) for k, v in src.items()},
            "ready_s_p50_if_all_local": bound["p50"],
            "origin_gib": round(sum(r["origin_gib"] for r in rs), 3),
            "origin_gib_per_seed": interval([r["origin_gib"] for r in rs]),
            "dispatched_gib": round(sum(r.get("dispatched_gib", 0.0) for r in rs), 3),
            "prewarms": sum(r["prewarms"] for r in rs), "prefetched_gib": round(pre, 3),
            "prefetched_unused_gib": round(unused, 3),
            "wasted_prefetch_pct": round(100.0 * unused / pre, 3) if pre else None,
            "wasted_prefetch_pct_per_seed": interval([r["wasted_prefetch_pct"] for r in rs]),
            "wasted_prefetch_judged_pct": round(100.0 * junused / jpre, 3) if jpre else None,
            **_ceilings(rs),
            "seconds": round(sum(r["seconds"] for r in rs), 1),
        }
    changes = {key: _compare(runs, out, arm, base) for key, (arm, base) in COMPARISONS.items()
               if arm in out and base in out}
    out["changes"] = changes
    if "on_vs_off" in changes:
        out["change"] = changes["on_vs_off"]
    out["goals_by_baseline"] = {}
    for key, (arm, base) in COMPARISONS.items():
        if arm == "on" and key in changes:
            goals = _goals(changes[key], out["on"])
            out["goals_by_baseline"][base] = {"baseline": base, "label": f"{ARMS['on'][0]} vs {ARMS[base][0]}",
                                              "goals": goals, "met": all(g["met"] for g in goals.values())}
    if "off" in out["goals_by_baseline"]:
        out["goals"] = out["goals_by_baseline"]["off"]["goals"]
    return out


def _ceilings(rs: list[dict[str, Any]]) -> dict[str, Any]:
    """The pooled hit-rate ceilings of :func:`hit_ceilings` (runs without them: none)."""
    cs = [r["ceilings"] for r in rs if "ceilings" in r]
    n = sum(c["measured"] for c in cs)
    if not n:
        return {}
    return {"hit_ceiling_without_prewarm_pct": round(100.0 * (1 - sum(c["site_first"] for c in cs) / n), 3),
            "hit_ceiling_pct": round(100.0 * (1 - sum(c["cell_first"] for c in cs) / n), 3)}


def sweep(base: Workload, seeds: Sequence[int], configs: Sequence[dict[str, Any]],
          workers: int = 1) -> list[dict[str, Any]]:
    """The prewarm-on arm under each of ``configs`` (planner arguments over :data:`PREWARM`) on
    ``base`` with each seed: pooled hit rate and wasted prefetch per config, the trade-off the
    planner's knobs make."""
    jobs = [(replace(base, seed=s), "on", i) for i, _ in enumerate(configs) for s in seeds]
    runs: dict[int, list[dict[str, Any]]] = {i: [] for i in range(len(configs))}
    run_jobs(_run_swept, [(w, arm, configs[i], i) for w, arm, i in jobs], workers,
             lambda r: runs[r.pop("config_index")].append(r))
    out = []
    for i, cfg in enumerate(configs):
        a = aggregate(runs[i])["on"]
        out.append({"prewarm": cfg, "hit_rate_pct": a["hit_rate_pct"], "wasted_prefetch_pct": a["wasted_prefetch_pct"],
                    "wasted_prefetch_judged_pct": a["wasted_prefetch_judged_pct"],
                    "prefetched_gib": a["prefetched_gib"], "ready_s_p50": a["ready_s_p50"]})
    return out


def _run_swept(job: tuple) -> dict[str, Any]:
    w, arm, cfg, i = job
    return simulate(w, True, prewarm_args=cfg) | {"config_index": i}


def _parse_sweep(text: str) -> list[dict[str, Any]]:
    """``"max_waste=0.2;max_waste=0.3,min_use=0.05"`` -> one dict of planner arguments per ``;``."""
    from suanli.processors.prewarm import PrewarmArgs
    known = set(PrewarmArgs.__dataclass_fields__)
    configs = []
    for part in text.split(";"):
        cfg: dict[str, Any] = {}
        for item in filter(None, (x.strip() for x in part.split(","))):
            key, sep, value = item.partition("=")
            if not sep:
                raise ReplayError(f"--sweep: {item!r} is not key=value (e.g. max_waste=0.2)")
            try:
                cfg[key.strip()] = json.loads(value)
            except ValueError:
                raise ReplayError(f"--sweep: the value of {key!r} is not a number or JSON: {value!r}") from None
        unknown = set(cfg) - known
        if unknown:
            raise ReplayError(f"--sweep: unknown planner arguments {sorted(unknown)} (known: {sorted(known)})")
        configs.append(cfg)
    return configs


def render(agg: dict[str, Any]) -> str:
    def iv(d: dict[str, Any]) -> str:
        return "-" if d["lo"] is None else f"[{d['lo']:.1f}, {d['hi']:.1f}]"

    def pc(x: Optional[float], unit: str = " %") -> str:
        return "n/a" if x is None else f"{x:+.1f}{unit}"

    rows = [("arm", "dispatches", "ready p50 s", "95% CI", "ready p95 s", "hit %", "95% CI", "local %",
             "origin GiB", "prefetched GiB", "wasted %")]
    arms = [a for a in ARMS if a in agg]
    for arm in arms:
        a = agg[arm]
        rows.append((ARMS[arm][0], str(a["dispatches"]), f"{a['ready_s_p50']:.1f}", iv(a["ready_s_p50_per_seed"]),
                     f"{a['ready_s_p95']:.1f}", f"{a['hit_rate_pct']:.1f}", iv(a["hit_rate_pct_per_seed"]),
                     f"{a['local_hit_rate_pct']:.1f}", f"{a['origin_gib']:.0f}", f"{a['prefetched_gib']:.0f}",
                     "-" if a["wasted_prefetch_pct"] is None else f"{a['wasted_prefetch_pct']:.1f}"))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.rjust(wd) for c, wd in zip(r, widths)) for r in rows]
    for c in agg["changes"].values():
        lines.append(f"{c['label']}: p50 {pc(c['p50_pct'])} (per seed {iv(c['p50_pct_per_seed'])}), "
                     f"p95 {pc(c['p95_pct'])}, hit rate {pc(c['hit_rate_points'], ' points')}, "
                     f"origin bytes {pc(c['origin_gib_pct'])}")
    base = next((b for b in ("off", "no_cache") if b in agg), None)
    if base is not None:
        bounds = ", ".join(f"{pc(_change(agg[b]['ready_s_p50'], agg[b]['ready_s_p50_if_all_local']))} vs "
                           f"{ARMS[b][0]}" for b in ("no_cache", "off") if b in agg)
        lines.append(f"bound: p50 {agg[base]['ready_s_p50_if_all_local']:.1f} s if every dispatch were a local hit "
                     f"({bounds})" + (f"; wasted prefetch of the prewarms issued before the window's last hour "
                                      f"{agg['on']['wasted_prefetch_judged_pct']} %" if "on" in agg else ""))
    some = next((a for a in agg.values() if isinstance(a, dict) and "hit_ceiling_pct" in a), None)
    if some is not None:
        lines.append(f"hit-rate ceilings of the workload: {some['hit_ceiling_without_prewarm_pct']:.1f} % for any cache "
                     f"without prewarming (each version's first request at each site misses), "
                     f"{some['hit_ceiling_pct']:.1f} % with perfect prewarming (its first request in the cell misses)")
    for g in agg["goals_by_baseline"].values():
        lines.append(f"goals, {g['label']}: " + "; ".join(
            f"{k} {v['value']} (goal {v['goal']}): {'met' if v['met'] else 'NOT met'}" for k, v in g["goals"].items())
            + f" -> {'all met' if g['met'] else 'NOT all met'}")
    return "\n".join(lines)


def _effective_prewarm() -> dict[str, Any]:
    """The planner's arguments the on arm ran with: its defaults, with :data:`PREWARM` over them."""
    from suanli.processors.prewarm import PrewarmArgs

    out = asdict(PrewarmArgs(**PREWARM))
    out["tiers"] = list(out["tiers"])
    return out


def _workload(args: argparse.Namespace) -> Workload:
    """The scenario the command line asks for (the rest at :class:`Workload`'s defaults)."""
    return Workload(hours=args.hours, run_on_h=args.run_on, release_every_h=args.release_every)


def _seeds(text: str) -> list[int]:
    out: list[int] = []
    for part in text.split(","):
        a, _, b = part.partition("-")
        try:
            out += list(range(int(a), int(b) + 1)) if b else [int(a)]
        except ValueError:
            raise ReplayError(f"--seeds: {text!r} is not a list like 1-10 or 1,5,7") from None
    return out


def _run_one(job: tuple) -> dict[str, Any]:
    w, arm = job
    _, cache, prewarm = ARMS[arm]
    return simulate(w, prewarm, cache=cache)


def _doc_head(args: argparse.Namespace, argv: Optional[Sequence[str]]) -> dict[str, Any]:
    """The command and the workload, first in every JSON this module writes."""
    return {"command": " ".join(["python -m suanli.replay.prewarm_whatif",
                                 *(argv if argv is not None else sys.argv[1:])]),
            "workload": asdict(_workload(args)) | {"seed": "per run"}}


def _main_sweep(args: argparse.Namespace, argv: Optional[Sequence[str]]) -> int:
    configs = _parse_sweep(args.sweep)
    started = time.perf_counter()
    rows = sweep(_workload(args), _seeds(args.seeds), configs, args.workers)
    for r in rows:
        print(f"{json.dumps(r['prewarm']):50s} hit {r['hit_rate_pct']:5.1f} %  wasted {r['wasted_prefetch_pct']} %  "
              f"(before the last hour {r['wasted_prefetch_judged_pct']} %)  prefetched {r['prefetched_gib']:.0f} GiB  "
              f"p50 {r['ready_s_p50']} s")
    if args.json:
        doc = {**_doc_head(args, argv), "seeds": args.seeds, "goals": GOALS, "sweep": rows, "seconds": round(time.perf_counter() - started, 1)}
        Path(args.json).write_text(json.dumps(doc, indent=1))
    return 0


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m suanli.replay.prewarm_whatif", description=__doc__.split("\n\n")[0])
    p.add_argument("--seeds", default="1-10")
    p.add_argument("--hours", type=float, default=10.0)
    p.add_argument("--run-on", type=float, default=1.0, dest="run_on",
                   help="hours of unmeasured arrivals after the window, to judge its last prewarms")
    p.add_argument("--release-every", type=float, default=Workload().release_every_h, dest="release_every",
                   help="mean hours between a family's new versions (default 3; a large value: versions hardly "
                        "change, and on-demand caching alone serves most starts)")
    p.add_argument("--workers", type=int, default=2, help="runs in parallel (processes)")
    p.add_argument("--json", help="write the runs and the aggregate to this file")
    p.add_argument("--quiet", action="store_true")
    p.add_argument("--sweep", help="instead of the arms: the prewarm-on arm under each ';'-separated set of planner "
                                   "arguments, e.g. 'max_waste=0.2;max_waste=0.3,min_use=0.05'")
    args = p.parse_args(argv)
    if args.sweep:
        return _main_sweep(args, argv)
    jobs = [(replace(_workload(args), seed=s), arm) for s in _seeds(args.seeds) for arm in ARMS]
    for w, _ in jobs:
        w.check()
    say = (lambda _s: None) if args.quiet else (lambda s: print(s, file=sys.stderr, flush=True))
    started = time.perf_counter()
    runs: list[dict[str, Any]] = []

    def done(r: dict[str, Any]) -> None:
        runs.append(r)
        say(f"  [{len(runs)}/{len(jobs)}] seed {r['seed']} {ARMS[r['arm']][0]}: "
            f"p50 {r['ready_s']['p50']} s, hit {r['hit_rate_pct']} %, wasted {r['wasted_prefetch_pct']} % "
            f"({r['seconds']:.0f} s)")

    run_jobs(_run_one, jobs, args.workers, done)
    order = list(ARMS)
    runs.sort(key=lambda r: (r["seed"], order.index(r["arm"])))
    agg = aggregate(runs)
    print(render(agg))
    if args.json:
        doc = {**_doc_head(args, argv),
               "load_model": {k: {"mib_per_s": v.mib_per_s, "latency_ms": v.latency_ms} for k, v in LINKS.items()},
               "arms": {k: {"label": lab, "model_cache_mib": Workload().cache_gib * GIB if cache else 0,
                            "prewarm": pre} for k, (lab, cache, pre) in ARMS.items()},
               "comparisons": {k: {"arm": a, "baseline": b} for k, (a, b) in COMPARISONS.items()},
               "prewarm_args": _effective_prewarm(), "goals": GOALS, "aggregate": agg,
               "runs": [{k: v for k, v in r.items() if k not in ("waits_ms", "local_ms", "sizes_mib")}
                        for r in runs],
               "seconds": round(time.perf_counter() - started, 1)}
        Path(args.json).write_text(json.dumps(doc, indent=1))
        say(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    try:
        raise SystemExit(main())
    except ReplayError as exc:
        print(f"prewarm_whatif: {exc}", file=sys.stderr)
        raise SystemExit(2)
