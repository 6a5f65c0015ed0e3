"""Gold availability under node failures: a timed what-if through the production core (C10).

The acceptance check of issue 14, with no broker: the openb trace with arrivals and
departures (``timed.py``), arrivals compressed (``load``) until the cluster runs at
>= 85 % GPU allocation, tiers drawn per task, nodes failing during the run. Every input
goes through ``processors.decide`` exactly as in ``timed.run``; this module adds the
failures, the cell clock (CellTicks, for preemption grace, retries and aging), prices, and
the accounting. Run it with ``python -m suanli.replay.qos_whatif`` (see :func:`main`).

**Tiers.** Each task's ``qos_tier`` is drawn with ``random.Random(f"tiers/{seed}")``:
GOLD, SILVER, BRONZE with probabilities ``tier_mix`` (default 25/50/25), in trace order.

**Failures.** ``k = round(fraction x N)`` nodes (at least 1 when fraction > 0) drawn by
``random.Random(f"failures/{seed}").sample`` over the cluster's nodes; the run window is cut
into k equal slots and the i-th failure happens at a uniform time within slot i (spread
over the run). A node that fails at ``t_f``:

* is dead from ``t_f`` (its tasks stop running: the accounting counts from here);
* is reported ``NodeStatusChanged DOWN`` to the core at ``t_f + down_after_ms`` (default
  15 s, the core's heartbeat DOWN timeout): the core learns of it only then, may place work
  on it until then, and then evacuates it (gold migrated if a place exists, preempting
  bronze; the others lost and queued again first);
* comes back empty with ``NodeStatusChanged READY`` at ``t_f + repair_ms`` (default 10 min).

**Time.** A ``CellTick`` every ``tick_ms`` (1 s, as the live ticker) from the first event
to the end of the window. Decisions are made at event times: a placement is taken to run
at its ``decided_at`` (no dispatch or start-up delay is modelled).

**Window.** The run's steady part: from the arrival of the ``window[0]`` quantile of tasks
to that of the ``window[1]`` quantile (default 50 % .. 100 %: on openb, shrunk to 30 % at
load 2000, allocation climbs through the first half of the arrivals and crosses 90 % near
the 45 % quantile, then stays at 93-96 %; the allocation series of each run is in its
figures, to check). Failures happen inside it;
allocation, availability, preemptions and cost are measured on it (intervals clipped to it);
the run stops at its end.

**Availability** (per tier, reported for gold). A task *asks* for the time from its first
placement to its trace departure, clipped to the window. It *runs* during its placements
(``projections/cost.py`` intervals) minus the periods its node was dead (``t_f`` to repair:
from the failure, not from its detection); with a gold standby (``--gold-standby``, policy
``qos.gold_standby``) during the placements of either of its copies: the task runs while
one does. Availability = sum of running / sum of asked.
A gold task *not back before departure* departed while out; *out at window end* was still
out when the window closed. Gaps are the stretches of asked time not running.

**Prices** (the openb nodes carry none): :data:`GPU_PRICE` per GPU-hour by model, plus
:data:`CPU_CORE_PRICE` per core-hour and :data:`MEM_GIB_PRICE` per GiB-hour, on demand
(the simulated connector's table, ``connectors/simulated.py``, copied: importing it would
import a Kafka client); the idle price of every node is ``idle_factor`` times its price
(default 0.4, the simulator's ``IDLE_PRICE_SHARE``). Bronze pays the idle price, so the
bronze-vs-silver saving on the same intervals is
``1 - idle_factor`` by construction; the *effective* saving (``projections/cost.py``)
charges bronze for the work preemptions threw away and is the figure that says something.
"""
from __future__ import annotations

import argparse
import json
import math
import random
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Iterable, Mapping, Optional, Sequence

import numpy as np

from suanli.errors import ReplayError
from suanli.processors import CellState, decide
from suanli.processors import model as m
from suanli.processors.qos import primary_of
from suanli.processors.state import HOLDING, TERMINAL
from suanli.projections.cost import MS_PER_HOUR, CostLedger, Interval, bronze_vs_silver

from .fgd_protocol import policy_config
from .metrics import percentiles, thin
from .progress import Progress, run_jobs
from .timed import TimedWorkload, build

TIERS = ("GOLD", "SILVER", "BRONZE")
# On-demand price per GPU-hour by model (connectors/simulated.py GPU_PRICE); 1.0 for others.
GPU_PRICE = {"A10": 1.2, "A100": 3.0, "G2": 1.5, "G3": 2.0, "P100": 1.0, "T4": 0.6, "V100M16": 2.0, "V100M32": 2.5}
CPU_CORE_PRICE = 0.04      # per core-hour
MEM_GIB_PRICE = 0.005      # per GiB-hour
IDLE_FACTOR = 0.4          # idle price / price (connectors/simulated.py IDLE_PRICE_SHARE)

STANDBY_VICTIM = "GOLD standby copy"     # victims_by_tier's key for evicted standby copies

# event ranks at one millisecond: resources free first, then node news, then the clock, then arrivals
_DEPART, _DOWN, _READY, _TICK, _ARRIVE = range(5)


# ============================================================================ the scenario
@dataclass(frozen=True, slots=True)
class Scenario:
    """One run: the trace is fixed by the :class:`TimedWorkload`; this is everything else."""
    seed: int = 0
    failure_fraction: float = 0.01
    down_after_ms: int = 15_000
    repair_ms: int = 600_000
    tick_ms: int = 1_000
    window: tuple[float, float] = (0.5, 1.0)
    tier_mix: tuple[float, float, float] = (0.25, 0.5, 0.25)
    strategy: str = "default"
    qos: Mapping[str, Any] = field(default_factory=lambda: {"gold_share": 0.25})
    idle_factor: float = IDLE_FACTOR

    def check(self) -> None:
        if not 0 <= self.failure_fraction <= 1:
            raise ReplayError(f"failure fraction must be in [0, 1], not {self.failure_fraction}")
        if not 0 <= self.window[0] < self.window[1] <= 1:
            raise ReplayError(f"window quantiles must satisfy 0 <= lo < hi <= 1, not {self.window}")
        if len(self.tier_mix) != 3 or min(self.tier_mix) < 0 or not math.isclose(sum(self.tier_mix), 1.0):
            raise ReplayError(f"tier mix must be three shares (gold, silver, bronze) summing to 1, not {self.tier_mix}")
        if self.repair_ms <= self.down_after_ms:
            raise ReplayError(f"repair time ({self.repair_ms} ms) must exceed the detection time "
                              f"({self.down_after_ms} ms): a node comes back after it was reported DOWN")
        if self.tick_ms <= 0 or self.down_after_ms < 0:
            raise ReplayError("tick_ms must be > 0 and down_after_ms >= 0")


@dataclass(frozen=True, slots=True)
class NodeFailure:
    node_id: str
    fail_at: int          # ms: dead from here
    detect_at: int        # ms: NodeStatusChanged DOWN reaches the core
    repair_at: int        # ms: NodeStatusChanged READY, back empty


def plan_failures(node_ids: Sequence[str], fraction: float, start: int, end: int, seed: int,
                  down_after_ms: int, repair_ms: int) -> tuple[NodeFailure, ...]:
    """The failures of one run (see the module docstring), in time order."""
    if fraction <= 0 or not node_ids or end <= start:
        return ()
    k = min(len(node_ids), max(1, round(fraction * len(node_ids))))
    rnd = random.Random(f"failures/{seed}")
    nodes = rnd.sample(list(node_ids), k)
    slot = (end - start) / k
    out = []
    for i, nid in enumerate(nodes):
        t = int(start + (i + rnd.random()) * slot)
        out.append(NodeFailure(nid, t, t + down_after_ms, t + repair_ms))
    return tuple(sorted(out, key=lambda f: (f.fail_at, f.node_id)))


def assign_tiers(tasks: Sequence[dict[str, Any]], seed: int,
                 mix: tuple[float, float, float] = (0.25, 0.5, 0.25)) -> list[dict[str, Any]]:
    """Copies of ``tasks`` with ``qos_tier`` drawn per task (trace order) by seed."""
    rnd = random.Random(f"tiers/{seed}")
    return [dict(t, qos_tier=rnd.choices(TIERS, weights=mix)[0]) for t in tasks]


def node_price(node: Mapping[str, Any]) -> float:
    """On-demand price per hour of a ``read_nodes`` payload (see :data:`GPU_PRICE`)."""
    gpus = sum(a["count"] * GPU_PRICE.get(a["model"], 1.0) for a in node["accelerators"] if a["kind"] == "GPU")
    return round(node["cpu_milli"] / 1000 * CPU_CORE_PRICE + node["memory_mib"] / 1024 * MEM_GIB_PRICE + gpus, 6)


def price_nodes(nodes: Iterable[Mapping[str, Any]], idle_factor: float = IDLE_FACTOR) -> list[dict[str, Any]]:
    """Copies of the node payloads with ``price_per_hour`` and ``idle_price_per_hour`` set."""
    out = []
    for n in nodes:
        price = node_price(n)
        out.append(dict(n, pricing="ON_DEMAND", price_per_hour=price,
                        idle_price_per_hour=round(idle_factor * price, 6)))
    return out


def window_of(w: TimedWorkload, q: tuple[float, float]) -> tuple[int, int]:
    """``(start, end)`` ms: the arrival times of the ``q[0]`` and ``q[1]`` quantiles of tasks."""
    arrivals = sorted(t["submitted_at"] for t in w.tasks)
    if not arrivals:
        raise ReplayError("the workload has no tasks")
    lo = arrivals[min(len(arrivals) - 1, int(q[0] * (len(arrivals) - 1)))]
    hi = arrivals[min(len(arrivals) - 1, int(math.ceil(q[1] * (len(arrivals) - 1))))]
    if hi <= lo:
        raise ReplayError(f"the window {q} of the arrivals is empty ({lo} .. {hi} ms)")
    return lo, hi


# ============================================================================ accounting (pure)
def _merge(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for a, b in sorted(spans):
        if b <= a:
            continue
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def _minus(span: tuple[int, int], holes: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """``span`` without the (sorted, disjoint) ``holes``."""
    a, b = span
    out = []
    for h0, h1 in holes:
        if h1 <= a or h0 >= b:
            continue
        if h0 > a:
            out.append((a, h0))
        a = max(a, h1)
        if a >= b:
            break
    if a < b:
        out.append((a, b))
    return out


def dead_periods(failures: Iterable[NodeFailure]) -> dict[str, list[tuple[int, int]]]:
    """Per node, the merged ``[fail_at, repair_at)`` periods it was dead."""
    per: dict[str, list[tuple[int, int]]] = {}
    for f in failures:
        per.setdefault(f.node_id, []).append((f.fail_at, f.repair_at))
    return {n: _merge(v) for n, v in per.items()}


@dataclass
class TierAvailability:
    tier: str
    tasks: int = 0                     # tasks of the tier with asked time in the window
    asked_ms: int = 0
    running_ms: int = 0
    interrupted_tasks: int = 0         # tasks with at least one gap
    gaps: list[int] = field(default_factory=list)      # ms of each gap that closed (ran again)
    not_back_before_departure: int = 0
    out_at_window_end: int = 0

    @property
    def availability(self) -> Optional[float]:
        return self.running_ms / self.asked_ms if self.asked_ms else None

    def as_dict(self) -> dict[str, Any]:
        a = self.availability
        return {"tier": self.tier, "tasks": self.tasks, "asked_ms": self.asked_ms, "running_ms": self.running_ms,
                "asked_hours": round(self.asked_ms / MS_PER_HOUR, 6), "running_hours": round(self.running_ms / MS_PER_HOUR, 6),
                "availability_pct": None if a is None else round(100.0 * a, 6),
                "downtime_s": round((self.asked_ms - self.running_ms) / 1000, 3),
                "interrupted_tasks": self.interrupted_tasks,
                "gap_s": percentiles([g / 1000 for g in self.gaps]),
                "not_back_before_departure": self.not_back_before_departure,
                "out_at_window_end": self.out_at_window_end}


def availability(intervals: Iterable[Interval], departs: Mapping[str, Optional[int]],
                 failures: Iterable[NodeFailure], window: tuple[int, int], tier: str = "GOLD") -> TierAvailability:
    """Running time over asked time of the tasks of ``tier`` (see the module docstring).

    ``intervals``: the cost fold's intervals (closed at the window end when still open);
    ``departs``: each task's trace departure (None: never departs)."""
    w0, w1 = window
    dead = dead_periods(failures)
    per_task: dict[str, list[Interval]] = {}
    for iv in intervals:          # a gold standby's copy runs for its task: the task runs while either does
        if iv.tier == tier:
            per_task.setdefault(primary_of(iv.task_id) or iv.task_id, []).append(iv)
    out = TierAvailability(tier)
    for tid, ivs in per_task.items():
        first = min(iv.start for iv in ivs)
        dep = departs.get(tid)
        hi = w1 if dep is None else min(dep, w1)
        lo = max(first, w0)
        if hi <= lo:
            continue
        running: list[tuple[int, int]] = []
        for iv in ivs:
            a, b = max(iv.start, lo), min(iv.end, hi)
            if b > a:
                running += _minus((a, b), dead.get(iv.node.node_id, []))
        running = _merge(running)
        ran = sum(b - a for a, b in running)
        out.tasks += 1
        out.asked_ms += hi - lo
        out.running_ms += ran
        gaps = _minus((lo, hi), running)
        if gaps:
            out.interrupted_tasks += 1
        for a, b in gaps:
            if b < hi:
                out.gaps.append(b - a)
            elif dep is not None and dep <= w1:
                out.not_back_before_departure += 1
            else:
                out.out_at_window_end += 1
    return out


def clip(intervals: Iterable[Interval], window: tuple[int, int]) -> list[Interval]:
    """The intervals' parts inside the window (empty ones dropped; a preemption's lost work
    stays with the part that ends in the window)."""
    w0, w1 = window
    out = []
    for iv in intervals:
        a, b = max(iv.start, w0), min(iv.end, w1)
        inside = b > a or (iv.start == iv.end and w0 <= iv.start <= w1)    # a zero-length stay counts too
        if inside:
            lost = iv.work_lost_ms if iv.end <= w1 else 0
            out.append(replace(iv, start=a, end=b, work_lost_ms=min(lost, b - a)))
    return out


# ============================================================================ the run
def _inputs(w: TimedWorkload, failures: Sequence[NodeFailure], tick_ms: int, stop_at: int) -> list[tuple]:
    """Every input of the run in order: ``(t, rank, what)`` with ``what`` a task index or a failure."""
    out: list[tuple] = [(t, _DEPART if kind == 0 else _ARRIVE, i) for t, kind, i in w.events if t <= stop_at]
    for k, f in enumerate(failures):
        if f.detect_at <= stop_at:
            out.append((f.detect_at, _DOWN, k))
        if f.repair_at <= stop_at:
            out.append((f.repair_at, _READY, k))
    first = min((x[0] for x in out), default=0)
    out += [(t, _TICK, 0) for t in range(first - first % tick_ms + tick_ms, stop_at + 1, tick_ms)]
    out.sort(key=lambda x: (x[0], x[1], x[2]))
    return out


class LedgerCell:
    """A what-if's cell: inputs fed one by one through ``processors.decide`` at position
    ``(topic, 0, n)``, every output folded into a cost ledger (``projections/cost.py``).
    Made with its (priced) nodes registered; ``state``, ``ledger`` and ``off`` (the next
    position) are read by the run loop."""

    def __init__(self, topic: str, nodes: Iterable[Mapping[str, Any]]):
        self.topic, self.state, self.ledger, self.off = topic, CellState("openb"), CostLedger(), 0
        for node in nodes:
            e = m.from_avro(m.NodeRegistered, node)
            self.ledger.apply(e)
            self.feed(e)

    def feed(self, event: Any) -> list[Any]:
        self.state, outs = decide(self.state, event, (self.topic, 0, self.off))
        self.off += 1
        for out in outs:
            self.ledger.apply(out)
        return outs


def simulate(w: TimedWorkload, sc: Scenario, *, progress: bool = False, label: str = "",
             tiers: bool = True, failures: Optional[Sequence[NodeFailure]] = None,
             window: Optional[tuple[int, int]] = None) -> dict[str, Any]:
    """One scenario over the workload; returns its figures (see :func:`figures`).

    Tiers are drawn (:func:`assign_tiers`) unless ``tiers`` is False (the tasks keep theirs);
    the window comes from ``sc.window`` and the failures from :func:`plan_failures` unless
    given (hand-made cases)."""
    sc.check()
    tasks = assign_tiers(w.tasks, sc.seed, sc.tier_mix) if tiers else [dict(t) for t in w.tasks]
    nodes = price_nodes(w.cluster.nodes, sc.idle_factor)
    window = window_of(w, sc.window) if window is None else window
    if failures is None:
        failures = plan_failures([n["node_id"] for n in nodes], sc.failure_fraction, window[0], window[1], sc.seed,
                                 sc.down_after_ms, sc.repair_ms)
    failures = tuple(sorted(failures, key=lambda f: (f.fail_at, f.node_id)))
    departs: dict[str, Optional[int]] = {t["task_id"]: None for t in tasks}
    for t, kind, i in w.events:
        if kind == 0:
            departs[tasks[i]["task_id"]] = t

    t0 = time.perf_counter()
    cell = LedgerCell(f"trace.{w.name}.qos", nodes)
    feed = cell.feed
    config = {**policy_config(sc.strategy, sc.seed, w.typical), "down_after_ms": sc.down_after_ms,
              "qos": dict(sc.qos)}
    feed(m.PolicyChanged.of("openb", sc.strategy, config))

    inputs = _inputs(w, failures, sc.tick_ms, window[1])
    bar = Progress(len(inputs), label or f"qos seed {sc.seed} failures {sc.failure_fraction:g}", enabled=progress)
    alloc_area, last_t, alloc = 0.0, window[0], 0
    series: list[tuple[int, int]] = []                # (t ms, allocated GPU milli) after each input
    capacity = cell.state.gpu_capacity_milli() or 1
    victims_by_tier: dict[str, int] = {}
    for at, rank, what in inputs:
        if at > last_t:                                   # allocation, time-weighted, inside the window
            lo = max(last_t, window[0])
            if at > lo:
                alloc_area += alloc * (at - lo)
            last_t = at
        event: Any
        if rank == _ARRIVE:
            event = m.from_avro(m.TaskSubmitted, tasks[what])
            cell.ledger.apply(event)
        elif rank == _DEPART:
            tid = tasks[what]["task_id"]
            rec = cell.state.tasks.get(tid)
            if rec is None or rec.status in TERMINAL:
                bar.update()
                continue
            if rec.status in HOLDING:
                event = m.TaskStatusChanged(event_id=f"{tid}/end", task_id=tid, cell="openb", node_id=rec.node,
                                            status="COMPLETED", at=at, exit_code=0)
            else:                                         # waiting, or in a preemption's grace: it leaves
                event = m.TaskCancelled(event_id=f"{tid}/cancel", task_id=tid, cell="openb",
                                        tenant=tasks[what]["tenant"], reason="deleted before it ran again", at=at)
        elif rank == _DOWN:
            f = failures[what]
            event = m.NodeStatusChanged(event_id=f"{f.node_id}/down/{f.fail_at}", node_id=f.node_id, cell="openb",
                                        status="DOWN", reason=f"failed at {f.fail_at}", at=at)
        elif rank == _READY:
            f = failures[what]
            event = m.NodeStatusChanged(event_id=f"{f.node_id}/ready/{f.fail_at}", node_id=f.node_id,
                                        cell="openb", status="READY", reason="repaired", at=at)
        else:
            event = m.CellTick(event_id=f"tick/{at}", cell="openb", at=at, period_ms=sc.tick_ms)
        for out in feed(event):
            if isinstance(out, m.TaskPreempted) and window[0] <= out.provenance.decided_at <= window[1]:
                tier = cell.state.tasks[out.task_id].task.qos_tier
                if primary_of(out.task_id) is not None:
                    tier = STANDBY_VICTIM          # a gold copy, evicted by a gold task (preemption.py)
                victims_by_tier[tier] = victims_by_tier.get(tier, 0) + 1
        alloc = cell.state.gpu_allocated_milli()
        if series and series[-1][0] == at:
            series[-1] = (at, alloc)
        else:
            series.append((at, alloc))
        bar.update()
    bar.close()
    seconds = time.perf_counter() - t0
    span = window[1] - window[0]
    intervals = clip(cell.ledger.intervals(until=window[1]), window)
    return figures(intervals, departs, failures, window, tasks, sc,
                   alloc_pct=100.0 * alloc_area / span / capacity, victims_by_tier=victims_by_tier,
                   extra={"inputs": cell.off, "seconds": round(seconds, 2), "decisions": cell.state.decisions,
                          "anomalies": cell.ledger.anomalies[:10],
                          "allocation_series": {"t_s": [round(t / 1000, 3) for t, _a in thin(series, 300)],
                                                "pct": [round(100.0 * a / capacity, 2) for _t, a in thin(series, 300)]}})


def figures(intervals: list[Interval], departs: Mapping[str, Optional[int]], failures: Sequence[NodeFailure],
            window: tuple[int, int], tasks: Sequence[Mapping[str, Any]], sc: Scenario, *, alloc_pct: float,
            victims_by_tier: Mapping[str, int], extra: Mapping[str, Any]) -> dict[str, Any]:
    """The figures of one run from its (window-clipped) intervals. Pure."""
    tier_of = {t["task_id"]: t["qos_tier"] for t in tasks}
    gold = availability(intervals, departs, failures, window, "GOLD")
    silver = availability(intervals, departs, failures, window, "SILVER")
    bronze_ivs = [iv for iv in intervals if iv.tier == "BRONZE"]
    bronze_ran = {iv.task_id for iv in bronze_ivs}
    preempted = [iv for iv in bronze_ivs if iv.ended_by == "PREEMPTED"]
    gpu_h = sum(iv.gpu_hours for iv in bronze_ivs)
    return {
        "seed": sc.seed, "failure_fraction": sc.failure_fraction,
        "window_ms": list(window), "window_s": round((window[1] - window[0]) / 1000, 3),
        "gpu_allocation_pct": round(alloc_pct, 3),
        "nodes_failed": len(failures),
        "failures": [[f.node_id, f.fail_at, f.detect_at, f.repair_at] for f in failures],
        "tasks_by_tier": {t: sum(1 for v in tier_of.values() if v == t) for t in TIERS},
        "gold": gold.as_dict(), "silver": silver.as_dict(), "gold_gaps_s": sorted(g / 1000 for g in gold.gaps),
        "bronze": {"tasks_run": len(bronze_ran), "tasks_preempted": len({iv.task_id for iv in preempted}),
                   "preemptions": len(preempted),
                   "preempted_task_rate_pct": round(100.0 * len({iv.task_id for iv in preempted}) / len(bronze_ran), 4)
                   if bronze_ran else None,
                   "gpu_hours": round(gpu_h, 9),
                   "preemptions_per_gpu_hour": round(len(preempted) / gpu_h, 6) if gpu_h else None,
                   "work_lost_hours": round(sum(iv.work_lost_ms for iv in preempted) / MS_PER_HOUR, 9)},
        "victims_by_tier": dict(victims_by_tier),
        # what redundancy costs: GPU-hours of gold tasks' own copies and of their standbys
        "gold_gpu_hours": round(sum(iv.gpu_hours for iv in intervals if iv.tier == "GOLD"
                                    and primary_of(iv.task_id) is None), 9),
        "gold_standby_gpu_hours": round(sum(iv.gpu_hours for iv in intervals if primary_of(iv.task_id)), 9),
        "cost": bronze_vs_silver(intervals).as_dict(),
        **extra,
    }


# ============================================================================ many runs
def _run_one(args: tuple) -> dict[str, Any]:
    nodes_csv, pods_csv, shrink, shrink_seed, load, sc = args
    w = build(nodes_csv, pods_csv, shrink_fraction=shrink, shrink_seed=shrink_seed, load=load)
    return simulate(w, sc)


def aggregate(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Per failure fraction: gold availability over all seeds pooled (sum running / sum asked)
    and per seed (min/mean), the bronze figures, the cost comparison, the allocation."""
    out: dict[str, Any] = {}
    for frac in sorted({r["failure_fraction"] for r in runs}):
        rs = [r for r in runs if r["failure_fraction"] == frac]
        asked = sum(r["gold"]["asked_ms"] for r in rs)
        ran = sum(r["gold"]["running_ms"] for r in rs)
        per_seed = [r["gold"]["availability_pct"] for r in rs if r["gold"]["availability_pct"] is not None]
        b_run = sum(r["bronze"]["tasks_run"] for r in rs)
        b_pre = sum(r["bronze"]["tasks_preempted"] for r in rs)
        b_gpu_h = sum(r["bronze"]["gpu_hours"] for r in rs)
        own = sum(r["cost"]["bronze_cost"] for r in rs)
        silver = sum(r["cost"]["as_silver_cost"] for r in rs)
        useful = sum(r["cost"]["useful_as_silver_cost"] for r in rs)
        gaps = [g for r in rs for g in [r["gold"]["gap_s"]["max"]] if g is not None]
        out[f"{frac:g}"] = {
            "runs": len(rs), "seeds": [r["seed"] for r in rs],
            "nodes_failed_per_run": rs[0]["nodes_failed"],
            "gpu_allocation_pct": {"min": min(r["gpu_allocation_pct"] for r in rs),
                                   "mean": round(float(np.mean([r["gpu_allocation_pct"] for r in rs])), 3)},
            "gold_availability_pct": round(100.0 * ran / asked, 6) if asked else None,
            "gold_availability_pct_per_seed": {"min": min(per_seed) if per_seed else None,
                                               "mean": round(float(np.mean(per_seed)), 6) if per_seed else None},
            "gold_interrupted_tasks": sum(r["gold"]["interrupted_tasks"] for r in rs),
            "gold_not_back_before_departure": sum(r["gold"]["not_back_before_departure"] for r in rs),
            "gold_out_at_window_end": sum(r["gold"]["out_at_window_end"] for r in rs),
            "gold_gap_s_max": max(gaps) if gaps else None,
            "gold_gap_s": percentiles([g for r in rs for g in r.get("gold_gaps_s", [])]),
            "gold_downtime_s": round(sum(r["gold"]["downtime_s"] for r in rs), 3),
            "silver_availability_pct": round(100.0 * sum(r["silver"]["running_ms"] for r in rs)
                                             / max(1, sum(r["silver"]["asked_ms"] for r in rs)), 6),
            "bronze_preempted_task_rate_pct": round(100.0 * b_pre / b_run, 4) if b_run else None,
            "bronze_preemptions_per_gpu_hour": round(sum(r["bronze"]["preemptions"] for r in rs) / b_gpu_h, 6)
            if b_gpu_h else None,
            "non_bronze_victims": sum(v for r in rs for t, v in r["victims_by_tier"].items()
                                      if t not in ("BRONZE", STANDBY_VICTIM)),
            "standby_copies_preempted": sum(r["victims_by_tier"].get(STANDBY_VICTIM, 0) for r in rs),
            "gold_standby_gpu_hours_pct": round(100.0 * sum(r.get("gold_standby_gpu_hours", 0) for r in rs)
                                                / max(1e-9, sum(r.get("gold_gpu_hours", 0) for r in rs)), 3),
            "bronze_cost": round(own, 4), "bronze_as_silver_cost": round(silver, 4),
            "bronze_saving_pct": round(100.0 * (1 - own / silver), 3) if silver else None,
            "bronze_effective_saving_pct": round(100.0 * (1 - own / useful), 3) if useful else None,
            "seconds": round(sum(r["seconds"] for r in rs), 1),
        }
    return out


def render(agg: Mapping[str, Any]) -> str:
    rows = [("failures", "nodes", "GPU alloc %", "gold avail % (pooled)", "min seed", "interrupted", "not back",
             "gap p50/max s", "bronze preempted %", "preempt/GPU-h", "bronze cost vs silver", "per useful work")]
    change = lambda saving: "-" if saving is None else f"{-saving:+.1f} %"  # noqa: E731
    for frac, a in agg.items():
        rows.append((f"{float(frac) * 100:g} %", str(a["nodes_failed_per_run"]),
                     f"{a['gpu_allocation_pct']['min']:.1f}-{a['gpu_allocation_pct']['mean']:.1f}",
                     f"{a['gold_availability_pct']:.4f}" if a["gold_availability_pct"] is not None else "-",
                     f"{a['gold_availability_pct_per_seed']['min']:.4f}"
                     if a["gold_availability_pct_per_seed"]["min"] is not None else "-",
                     str(a["gold_interrupted_tasks"]), str(a["gold_not_back_before_departure"]),
                     "/".join("-" if v is None else f"{v:.1f}" for v in (a["gold_gap_s"]["p50"], a["gold_gap_s_max"])),
                     f"{a['bronze_preempted_task_rate_pct']:.2f}" if a["bronze_preempted_task_rate_pct"] is not None
                     else "-",
                     f"{a['bronze_preemptions_per_gpu_hour']:.4f}" if a["bronze_preemptions_per_gpu_hour"] is not None
                     else "-",
                     change(a["bronze_saving_pct"]), change(a["bronze_effective_saving_pct"])))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.rjust(wd) for c, wd in zip(r, widths)) for r in rows)


def _seeds(text: str) -> list[int]:
    out: list[int] = []
    for part in text.split(","):
        a, _, b = part.partition("-")
        try:
            out += list(range(int(a), int(b) + 1)) if b else [int(a)]
        except ValueError:
            raise ReplayError(f"--seeds: {text!r} is not a list like 0-9 or 1,5,7") from None
    return out


def main(argv: Optional[Sequence[str]] = None) -> int:
    """``python -m suanli.replay.qos_whatif``: the issue's check over seeds x failure fractions."""
    from suanli.config import settings

    d = settings().openb_dir
    p = argparse.ArgumentParser(prog="python -m suanli.replay.qos_whatif", description=__doc__.split("\n\n")[0])
    p.add_argument("--nodes", default=str(d / "openb_node_list_all_node.csv"))
    p.add_argument("--pods", default=str(d / "openb_pod_list_default.csv"))
    p.add_argument("--shrink", type=float, default=None, help="keep this share of the nodes (timed.shrink)")
    p.add_argument("--shrink-seed", type=int, default=1)
    p.add_argument("--load", type=float, default=8000.0, help="arrival compression (timed --load)")
    p.add_argument("--seeds", default="0-9")
    p.add_argument("--failures", default="0.01,0.05", help="shares of the nodes that fail during the run")
    p.add_argument("--down-after-s", type=float, default=15.0, help="failure -> DOWN reported to the core")
    p.add_argument("--repair-s", type=float, default=600.0, help="failure -> the node back, empty")
    p.add_argument("--window", default="0.5,1", help="arrival quantiles bounding the measured window")
    p.add_argument("--gold-share", type=float, default=0.25, help="policy qos.gold_share")
    p.add_argument("--no-preempt", action="store_true", help="policy qos.preempt = false")
    p.add_argument("--gold-standby", action="store_true",
                   help="policy qos.gold_standby = true: each gold task runs a hot standby copy on another node")
    p.add_argument("--strategy", default="default")
    p.add_argument("--idle-factor", type=float, default=IDLE_FACTOR, help="idle price / price of every node")
    p.add_argument("--workers", type=int, default=2, help="runs in parallel (processes)")
    p.add_argument("--json", help="write every run and the aggregate to this file")
    p.add_argument("--quiet", action="store_true")
    args = p.parse_args(argv)
    try:
        lo, hi = (float(x) for x in args.window.split(","))
        fracs = [float(x) for x in args.failures.split(",")]
    except ValueError:
        raise ReplayError("--window and --failures take comma-separated numbers") from None
    qos: dict[str, Any] = {"gold_share": args.gold_share}
    if args.no_preempt:
        qos["preempt"] = False
    if args.gold_standby:
        qos["gold_standby"] = True
    jobs = []
    for frac in fracs:
        for seed in _seeds(args.seeds):
            sc = Scenario(seed=seed, failure_fraction=frac, down_after_ms=int(args.down_after_s * 1000),
                          repair_ms=int(args.repair_s * 1000), window=(lo, hi), strategy=args.strategy, qos=qos,
                          idle_factor=args.idle_factor)
            sc.check()
            jobs.append((args.nodes, args.pods, args.shrink, args.shrink_seed, args.load, sc))
    started = time.perf_counter()
    runs: list[dict[str, Any]] = []
    say = (lambda _s: None) if args.quiet else (lambda s: print(s, file=sys.stderr, flush=True))
    say(f"qos what-if: {len(jobs)} runs ({len(fracs)} failure fractions x {len(jobs) // max(1, len(fracs))} seeds) "
        f"on {args.workers} worker(s)")

    def done(r: dict[str, Any]) -> None:
        runs.append(r)
        say(f"  [{len(runs)}/{len(jobs)}] failures {r['failure_fraction']:g} seed {r['seed']}: "
            f"alloc {r['gpu_allocation_pct']:.1f} %, gold {r['gold']['availability_pct']} %, "
            f"bronze preempted {r['bronze']['tasks_preempted']}/{r['bronze']['tasks_run']} ({r['seconds']:.0f} s)")

    run_jobs(_run_one, jobs, args.workers, done)
    runs.sort(key=lambda r: (r["failure_fraction"], r["seed"]))
    agg = aggregate(runs)
    print(render(agg))
    if args.json:
        w = build(args.nodes, args.pods, shrink_fraction=args.shrink, shrink_seed=args.shrink_seed, load=args.load)
        doc = {"command": " ".join(["python -m suanli.replay.qos_whatif", *(argv if argv is not None else sys.argv[1:])]),
               "cluster": w.cluster.description, "workload": {"pods": Path(args.pods).name, "load": args.load,
                                                              **w.info},
               "prices": {"gpu_per_hour": GPU_PRICE, "cpu_core_per_hour": CPU_CORE_PRICE,
                          "memory_gib_per_hour": MEM_GIB_PRICE, "idle_factor": args.idle_factor},
               "scenario": {"down_after_s": args.down_after_s, "repair_s": args.repair_s, "window": [lo, hi],
                            "tier_mix": [0.25, 0.5, 0.25], "strategy": args.strategy, "qos": qos},
               "aggregate": agg, "runs": runs, "seconds": round(time.perf_counter() - started, 1)}
        Path(args.json).write_text(json.dumps(doc, indent=1))
        say(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    try:
        raise SystemExit(main())
    except ReplayError as exc:
        print(f"qos_whatif: {exc}", file=sys.stderr)
        raise SystemExit(2)
