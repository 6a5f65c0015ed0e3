"""The prewarm planner: fetch model weights to edge sites before the tasks that need them (#20).

Pure: the core calls :func:`on_submitted` for each submission and :func:`plan` on a
``CellTick`` once every ``period_ms`` of the cell clock (never per event), while the
policy's ``prewarm.enabled`` is on. Its book lives in ``CellState.prewarm`` (plain JSON, in
the snapshot):

* ``demand``: site -> model family -> ``[value, t]``, an exponentially decayed count of the
  submissions of tasks with a model of that family at that site (``value x 2^-(now - t) /
  half_life`` now). A model's family is its ``model_arch`` up to ``@`` (``llama@3`` is a
  version of ``llama``): demand follows the family, so when a new version appears (its
  first task anywhere in the cell) the family's demand is the new version's, and it is
  fetched to the sites that want the family before their first request for it. A task's
  site is its ``user-site`` label, else ``data-site``, else ``*`` (the cell);
* ``models``: model_arch -> ``[artifact_uri, size_mib]`` as last submitted; ``latest``:
  family -> the version whose first task came last (the newest);
* ``credit``: site -> MiB of origin bandwidth the site may still spend (a token bucket:
  ``bandwidth_mib_s x elapsed`` added each run (one period's worth at the first), capped at
  ``burst_periods`` periods' worth,
  so a 70 GiB model waits until enough has been saved up rather than blowing the budget);
* ``next_at``, ``last_at``: the cell clock of the next and of the last run.

**Expected demand.** A decayed count ``c`` with half-life ``H`` estimates the arrival rate
as ``c x ln 2 / H``; a site's expected arrivals of a model over ``horizon_ms`` are that rate
(blended: ``(1 - global_weight)`` x the site's own + ``global_weight`` x the cell's rate
per site: popularity is shared across sites, and the cell sees ten times the arrivals a
site does, so a model rising elsewhere is fetched before its first local request) times the
horizon, plus one for each task of that site waiting in the queue now.

**A run.** For each site (sorted) of the prewarmed tiers (``tiers``, default edge only: a
cloud region sits next to the object store, and its loads are the "origin" anyway) with at
least one READY node with a cache: the models with expected arrivals ``>= min_expected``
that no node of the site holds, most expected first (ties by name). Each goes to the
site's READY node with the most free GPU milli (where the next task is most likely to land),
then the most free cache, then the smallest id, that can take it:

* without evicting anything the site expects at least as much of (``keep``), nor a load
  still in flight;
* with the node's prewarmed-but-unused MiB kept within ``cache_share`` of its capacity;
* within the site's bandwidth credit (a model that does not fit the credit now stops the
  site's run: the credit is saved for it; one larger than the whole bucket is skipped);

at most ``max_per_run`` per site. The node's cache takes it at once as *loading*, ready when
its load from the origin ends (``ready_at = now + load_ms(size, "origin")``): a task placed
meanwhile waits for the rest, which is what the simulator does too. Each becomes a
:class:`~.model.PrewarmCommand` with its reason; the runner sends it to the node's
connector (a command, not a decision).

Reservations are not read yet (their tasks' models are not known before they claim).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from . import model as m
from .args import arg
from .model_cache import PREWARM, Entry, cache_of, model_of

SITE_LABELS = ("user-site", "data-site")
CELL_WIDE = "*"


@dataclass(frozen=True, slots=True)
class PrewarmArgs:
    """The ``prewarm`` key of a cell's policy (defaults here)."""
    enabled: bool = arg(False, "run the prewarm planner (and keep its arrival history)")
    period_ms: int = arg(60_000, "on the cell clock, the planner runs this often (on a CellTick)", ge=1000)
    bandwidth_mib_s: float = arg(60.0, "origin bandwidth a site's prewarms may use on average, MiB/s", ge=0)
    burst_periods: int = arg(20, "unused bandwidth carries over for up to this many periods", ge=1)
    cache_share: float = arg(0.6, "share of a node's cache that prewarmed models nobody used yet may fill",
                             gt=0, le=1)
    half_life_ms: int = arg(1_800_000, "half-life of the decayed arrival counts", ge=1000)
    horizon_ms: int = arg(1_800_000, "how far ahead expected arrivals are counted", ge=1000)
    min_expected: float = arg(0.5, "expected arrivals at a site over the horizon for a model to be prewarmed",
                              ge=0)
    global_weight: float = arg(0.5, "weight of the cell-wide arrival rate (per site) in a site's", ge=0, le=1)
    max_per_run: int = arg(4, "prewarms per site per run at most", ge=1)
    tiers: tuple[str, ...] = arg(("edge",), "node tiers whose sites are prewarmed")


def site_of(task: m.Task) -> str:
    """The site a task asks to be near (``user-site``, else ``data-site``), else ``*``."""
    for key in SITE_LABELS:
        v = task.labels.get(key)
        if v:
            return v
    return CELL_WIDE


def _decayed(v: list, now: int, half_life: int) -> float:
    value, t = v
    return value * math.pow(0.5, (now - t) / half_life) if now > t else value


def on_submitted(s: Any, task: m.Task, args: PrewarmArgs) -> None:
    """Count a submission in the site's decayed demand for its model (only while enabled;
    a task without a model costs one attribute read)."""
    model = model_of(task)
    if model is None or not args.enabled:
        return
    book = s.prewarm
    site = site_of(task)
    fam = family(model.model_arch)
    per = book.setdefault("demand", {}).setdefault(site, {})
    v = per.get(fam)
    per[fam] = [(_decayed(v, s.now, args.half_life_ms) if v else 0.0) + 1.0, s.now]
    models = book.setdefault("models", {})
    if model.model_arch not in models:           # a version first seen now is the family's newest
        book.setdefault("latest", {})[fam] = model.model_arch
    models[model.model_arch] = [model.artifact_uri, int(model.size_mib)]


def family(model_arch: str) -> str:
    """``llama@3`` -> ``llama``: versions of one model share its demand."""
    return model_arch.split("@", 1)[0]


def expected(s: Any, args: PrewarmArgs, sites: list[str]) -> dict[str, dict[str, float]]:
    """site -> model (the newest version of each family) -> expected arrivals over the
    horizon (see the module docstring)."""
    now, hl = s.now, args.half_life_ms
    demand = s.prewarm.get("demand", {})
    rate_k = math.log(2) / hl * args.horizon_ms
    cell: dict[str, float] = {}
    own: dict[str, dict[str, float]] = {}
    latest = s.prewarm.get("latest", {})
    for site in sorted(demand):
        for fam in sorted(demand[site]):
            arch = latest.get(fam, fam)
            x = _decayed(demand[site][fam], now, hl) * rate_k
            cell[arch] = cell.get(arch, 0.0) + x
            if site != CELL_WIDE:
                own.setdefault(site, {})[arch] = x
    n = max(1, len(sites))
    g = args.global_weight
    out: dict[str, dict[str, float]] = {}
    for site in sites:
        mine = own.get(site, {})
        out[site] = {a: (1 - g) * mine.get(a, 0.0) + g * cell[a] / n for a in sorted(cell)}
    for item in s.queue:                   # tasks waiting now: each is one arrival for sure
        t = s.tasks[item[-1]]
        if t.status == "PENDING":
            model = model_of(t.task)
            site = site_of(t.task)
            if model is not None and site in out:
                out[site][model.model_arch] = out[site].get(model.model_arch, 0.0) + 1.0
    return out


def _prune(s: Any, args: PrewarmArgs) -> None:
    """Forget counts decayed below 0.001 (keeps the book, and the snapshot, bounded)."""
    demand = s.prewarm.get("demand", {})
    for site in list(demand):
        for arch in list(demand[site]):
            if _decayed(demand[site][arch], s.now, args.half_life_ms) < 1e-3:
                del demand[site][arch]
        if not demand[site]:
            del demand[site]


def plan(s: Any, args: PrewarmArgs, pos: tuple[str, int, int]) -> list[m.PrewarmCommand]:
    """One run of the planner at ``s.now`` (see the module docstring): updates the caches and
    the book, returns the PrewarmCommands. The caller runs it on a CellTick when
    ``s.now >= s.prewarm["next_at"]``."""
    from suanli.connectors.model_loading import load_ms

    book = s.prewarm
    now = s.now
    last = int(book.get("last_at", now - args.period_ms))     # a first run has earned one period
    book["last_at"] = now
    book["next_at"] = now + args.period_ms
    _prune(s, args)
    models = book.get("models", {})
    # the prewarmed sites and their READY nodes with a cache
    by_site: dict[str, list[int]] = {}
    for row, nid in enumerate(s.node_ids):
        node = s.nodes[nid]
        if node.tier in args.tiers and node.site and node.model_cache_mib > 0:
            by_site.setdefault(node.site, []).append(row)
    sites = sorted(by_site)
    if not sites or not models:
        return []
    exp = expected(s, args, sites)
    cap = args.bandwidth_mib_s * args.period_ms / 1000.0 * args.burst_periods
    credit = book.setdefault("credit", {})
    out: list[m.PrewarmCommand] = []
    t, p, o = pos
    for site in sites:
        c0 = float(credit.get(site, 0.0))
        credit[site] = budget = min(cap, c0 + args.bandwidth_mib_s * max(0, now - last) / 1000.0)
        rows = [r for r in by_site[site] if s.ready[r]]
        if not rows:
            continue
        want = exp.get(site, {})
        at_site = set()
        for r in by_site[site]:
            c = s.model_caches.get(s.node_ids[r])
            if c is not None:
                at_site.update(c.entries)
        cands = sorted(((x, a) for a, x in want.items() if x >= args.min_expected and a not in at_site
                        and a in models), key=lambda xa: (-xa[0], xa[1]))
        done = 0
        for x, arch in cands:
            if done >= args.max_per_run:
                break
            uri, size = models[arch]
            if size > cap:
                continue                       # never fits the bucket: not for prewarming
            if size > budget:
                break                          # save the credit up for it
            keep = (lambda a, e, x=x: e.ready_at > now or want.get(a, 0.0) >= x)
            order = sorted(rows, key=lambda r: (-int(s.gpu_free_total[r]), -cache_of(s, s.node_ids[r]).free_mib,
                                                s.node_ids[r]))
            for r in order:
                nid = s.node_ids[r]
                c = cache_of(s, nid)
                if c.prewarmed_unused_mib() + size > args.cache_share * c.capacity_mib:
                    continue
                ready = now + load_ms(size, "origin")
                evicted = c.insert(arch, size, now, ready, PREWARM, keep)
                if evicted is None:
                    continue
                budget -= size
                credit[site] = budget
                done += 1
                why = (f"prewarm {arch} ({size} MiB) to {nid} at site {site}: ~{x:.1f} expected arrivals in the "
                       f"next {args.horizon_ms / 60000:g} min, none of the site's nodes holds it; ready in "
                       f"~{(ready - now) / 1000:.0f} s (origin)")
                if evicted:
                    why += "; evicts " + ", ".join(ev.model_arch for ev in evicted) + " (least recently used)"
                out.append(m.PrewarmCommand(event_id=f"{s.cell}/{t}/{p}/{o}/prewarm/{len(out)}", node_id=nid,
                                            cell=s.cell, model_arch=arch, artifact_uri=uri, size_mib=size, at=now,
                                            reason=why))
                break
    return out


__all__ = ["PrewarmArgs", "on_submitted", "plan", "expected", "site_of", "Entry"]
