"""Burst scenarios: arrival spikes through the production core, to compare policies and to
generate the episodes of a reinforcement-learning environment.

The timed openb what-if of ``qos_whatif.py`` (arrivals and departures from ``timed.py``,
tiers, the cell clock, prices, the cost fold), with the failures replaced by *bursts* and
availability by *deadline success*. No broker: every input goes through
``processors.decide`` at position ``(trace.<workload>.burst, 0, n)``. Run it with
``python -m suanli.replay.burst_whatif`` (see :func:`main`) or ``suanli whatif --burst``.

**Workload.** The openb node and pod lists (defaults: ``settings().openb_dir``), the
cluster shrunk to a seeded sample (``timed.shrink``), arrivals compressed by ``load``
(``timed.build``), then cut to the first ``tasks`` tasks of the trace (their departures
kept, the others' dropped). Tiers are drawn per task as in ``qos_whatif.assign_tiers``
(``random.Random(f"tiers/{seed}")``).

**Bursts.** ``bursts`` spikes during which tasks arrive ``burst_factor`` times as fast,
each lasting ``burst_minutes`` of simulated time. A seeded piecewise-linear warp of the
arrival clock: inside a burst segment the arrival clock runs ``burst_factor`` times faster
(a 10-minute window at 5x holds 50 minutes' worth of trace arrivals); everything after a
burst moves earlier by what the burst saved. Each task keeps its lifetime (departure -
arrival). The segments are drawn in the trace's (loaded) clock with
``random.Random(f"bursts/{seed}")``: uniformly among the non-overlapping placements inside
``[arrival of the warmup quantile, last arrival]``, so the cluster is loaded before the
first one. The burst windows are reported in simulated time (``burst_windows_ms``).

**Success.** A task succeeds when its first ``TaskPlaced`` comes within its tier's deadline
(``deadlines_ms``: GOLD 30 s, SILVER 120 s, BRONZE 600 s) after its arrival and, for GOLD,
it is never preempted. A task cancelled (departed) before it was placed, or marked
unschedulable, fails. *In burst*: the task arrived inside a burst window (sim time).

**Time.** A ``CellTick`` every ``tick_ms`` (1 s) from the first event, as in qos_whatif, so
retries, aging and preemption grace run. The run stops at the last arrival plus the longest
deadline, when every outcome is known (a gold preemption later is not seen).

**Figures** (:func:`simulate_burst`): success under burst / overall / per tier, gold
preempted, time-weighted GPU allocation over the *measured window* (from the warm-up
arrival to the last arrival; also during the bursts), cost over the same window, and the
wall time of each ``decide`` on a ``TaskSubmitted``. **Cost**: the nodes carry
qos_whatif's prices (:func:`~suanli.replay.qos_whatif.price_nodes`); the cost fold
(``projections/cost.py``) gives each task's intervals; ``cost_total`` is the price of the
node-hours *used* (a node is used while it holds at least one task: a packing policy leaves
whole nodes to be switched off), ``cost_per_gpu_hour`` that over the allocated GPU-hours,
``task_cost`` the fold's own share-of-node pricing at tier rates.

**Seeds.** Evaluation seeds are 1..100 (:data:`EVAL_SEEDS`), training seeds 1000 and up
(:data:`TRAIN_SEED_START`): :func:`evaluate` refuses any other seed, :func:`train_scenario`
refuses any seed below 1000, so an agent is never trained on the episodes it is scored on.
"""
from __future__ import annotations

import argparse
import bisect
import json
import math
import random
import sys
import time
from dataclasses import asdict, dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterable, Mapping, Optional, Protocol, Sequence, Union

import numpy as np

from suanli.errors import ReplayError
from suanli.processors import CellState
from suanli.processors import model as m
from suanli.processors.state import HOLDING, TERMINAL
from suanli.projections.cost import MS_PER_HOUR, Interval

from .fgd_protocol import policy_config
from .metrics import percentiles
from .progress import Progress, run_jobs
from .qos_whatif import (_ARRIVE, _DEPART, _TICK, IDLE_FACTOR, TIERS, LedgerCell, _inputs, _merge, _seeds,
                         assign_tiers, clip, price_nodes)
from .timed import TimedWorkload, build

# ============================================================================ defaults and seeds
# Chosen by measurement (2-core machine, seed 1): one episode takes 15-21 s (default 21 s,
# first-fit 15 s, fgd 17 s). 3 bursts x 10 min x 5 consume 9000 s of the loaded trace clock
# after the warm-up, so the load must stay low (openb's first ~800 tasks are spread over
# 2868 h: the head is cheap, ~20 us per idle tick); with 7 % of the nodes (404 GPUs) the
# cluster runs at ~91 % GPU allocation and 15-25 % of the tasks miss their deadline (more
# in the bursts). 10 % of the nodes: ~99 % success for everyone; 5 %: ~50 % in bursts.
DEFAULT_TASKS: Optional[int] = 3000
DEFAULT_SHRINK: Optional[float] = 0.07
DEFAULT_LOAD = 80.0
DEFAULT_SHRINK_SEED = 1
DEADLINES_MS = {"GOLD": 30_000, "SILVER": 120_000, "BRONZE": 600_000}

EVAL_SEEDS = range(1, 101)
TRAIN_SEED_START = 1000
TRAIN_SEEDS = range(TRAIN_SEED_START, 2 ** 31)     # lazily: every seed from 1000 up


def is_eval_seed(seed: int) -> bool:
    return seed in EVAL_SEEDS


def is_train_seed(seed: int) -> bool:
    return seed >= TRAIN_SEED_START


def train_seeds(n: int, start: int = 0) -> list[int]:
    """``n`` training seeds from the ``start``-th one (1000 + start, ...)."""
    return [TRAIN_SEED_START + start + i for i in range(n)]


# The plain rule engine: hand-written label rules over first fit, no scoring. Fractional
# GPU requests go to best fit (the classic "pack the small ones" rule, so whole GPUs stay
# free); everything else takes the first node that fits.
RULE_ENGINE: tuple[str, dict[str, Any]] = ("rules", {
    "fallback": "first-fit",
    "rules": [{"name": "pack-shared", "match": {"@kind": "shared"}, "strategy": "bestfit"}],
})
NAMED_POLICIES: dict[str, tuple[str, dict[str, Any]]] = {"rule-engine": RULE_ENGINE}
Policy = Union[str, tuple[str, Mapping[str, Any]]]


# ============================================================================ the scenario
@dataclass(frozen=True, slots=True)
class BurstScenario:
    """One episode but the policy. ``tasks``/``shrink``/``shrink_seed``/``load`` shape the
    workload when it is built from paths; a :class:`TimedWorkload` given to
    :func:`simulate_burst` is taken as shrunk and loaded already (only ``tasks`` cuts it)."""
    seed: int = 1
    tasks: Optional[int] = DEFAULT_TASKS
    shrink: Optional[float] = DEFAULT_SHRINK
    shrink_seed: int = DEFAULT_SHRINK_SEED
    load: float = DEFAULT_LOAD
    bursts: int = 3
    burst_factor: float = 5.0
    burst_minutes: float = 10.0
    warmup: float = 0.3                # arrival quantile before which no burst starts
    deadlines_ms: Mapping[str, int] = field(default_factory=lambda: dict(DEADLINES_MS))
    tick_ms: int = 1_000
    tier_mix: tuple[float, float, float] = (0.25, 0.5, 0.25)
    qos: Mapping[str, Any] = field(default_factory=lambda: {"gold_share": 0.25})
    idle_factor: float = IDLE_FACTOR

    def check(self) -> None:
        if self.tasks is not None and self.tasks < 1:
            raise ReplayError(f"tasks must be >= 1 (or None: all), not {self.tasks}")
        if self.bursts < 0 or self.burst_factor < 1 or self.burst_minutes <= 0:
            raise ReplayError(f"bursts must be >= 0, burst_factor >= 1 and burst_minutes > 0, not "
                              f"{self.bursts}, {self.burst_factor}, {self.burst_minutes}")
        if not 0 <= self.warmup < 1:
            raise ReplayError(f"warmup must be an arrival quantile in [0, 1), not {self.warmup}")
        if set(self.deadlines_ms) != set(TIERS) or min(self.deadlines_ms.values()) <= 0:
            raise ReplayError(f"deadlines_ms must give each of {', '.join(TIERS)} a positive deadline, "
                              f"not {dict(self.deadlines_ms)}")
        if self.tick_ms <= 0:
            raise ReplayError(f"tick_ms must be > 0, not {self.tick_ms}")
        if len(self.tier_mix) != 3 or min(self.tier_mix) < 0 or not math.isclose(sum(self.tier_mix), 1.0):
            raise ReplayError(f"tier mix must be three shares (gold, silver, bronze) summing to 1, not {self.tier_mix}")

    def describe(self) -> dict[str, Any]:
        d = asdict(self)
        d["deadlines_ms"], d["qos"] = dict(self.deadlines_ms), dict(self.qos)
        return d


def train_scenario(seed: int, **overrides: Any) -> BurstScenario:
    """The scenario of a training episode; refuses evaluation (and any < 1000) seeds."""
    if not is_train_seed(seed):
        raise ReplayError(f"seed {seed} is not a training seed (training seeds are >= {TRAIN_SEED_START}; "
                          f"{EVAL_SEEDS.start}..{EVAL_SEEDS.stop - 1} are kept for evaluation)")
    return BurstScenario(seed=seed, **overrides)


# ============================================================================ the time warp (pure)
@dataclass(frozen=True, slots=True)
class BurstPlan:
    """Burst segments in the trace's (loaded) arrival clock: ``starts`` (sorted, ms), each
    ``length_ms x factor`` long in that clock and ``length_ms`` long in simulated time."""
    starts: tuple[int, ...]
    length_ms: int
    factor: float

    @property
    def span_ms(self) -> int:
        """Length of one segment in the trace clock."""
        return int(round(self.length_ms * self.factor))

    def warp(self, t: int) -> int:
        """Trace arrival time -> simulated arrival time (monotone, piecewise linear)."""
        saved = 0.0
        for s in self.starts:
            if t <= s:
                break
            inside = min(t - s, self.span_ms)
            saved += inside * (1.0 - 1.0 / self.factor)
        return int(round(t - saved))

    def windows(self) -> list[tuple[int, int]]:
        """The burst windows ``[start, end)`` in simulated time."""
        return [(self.warp(s), self.warp(s) + self.length_ms) for s in self.starts]


def plan_bursts(arrivals: Sequence[int], n: int, length_ms: int, factor: float, warmup: float,
                seed: int) -> BurstPlan:
    """``n`` non-overlapping segments drawn uniformly among the placements inside
    ``[warmup quantile arrival, last arrival]`` (trace clock) with ``Random(f"bursts/{seed}")``."""
    plan = BurstPlan((), length_ms, factor)
    if n == 0:
        return plan
    xs = sorted(arrivals)
    if not xs:
        raise ReplayError("the workload has no tasks")
    lo = xs[min(len(xs) - 1, int(warmup * (len(xs) - 1)))]
    hi = xs[-1]
    free = (hi - lo) - n * plan.span_ms
    if free < 0:
        raise ReplayError(f"{n} bursts of {length_ms / 60000:g} min x {factor:g} need {n * plan.span_ms / 1000:.0f} s "
                          f"of trace arrivals after the warm-up, the workload has {(hi - lo) / 1000:.0f} s: "
                          "lower the load, or take more tasks, fewer or shorter bursts")
    rnd = random.Random(f"bursts/{seed}")
    # n sorted uniform gaps in the free room, then segment i after i segments: uniform over placements
    offsets = sorted(rnd.uniform(0, free) for _ in range(n))
    return BurstPlan(tuple(int(lo + u + i * plan.span_ms) for i, u in enumerate(offsets)), length_ms, factor)


def warp_workload(w: TimedWorkload, plan: BurstPlan) -> TimedWorkload:
    """A copy of the workload with the arrivals warped and every lifetime kept."""
    arrive = [t["submitted_at"] for t in w.tasks]
    new_arrive = [plan.warp(a) for a in arrive]
    tasks = [dict(t, submitted_at=a) for t, a in zip(w.tasks, new_arrive)]
    events = sorted((new_arrive[i] if kind == 1 else new_arrive[i] + (t - arrive[i]), kind, i)
                    for t, kind, i in w.events)
    return replace(w, tasks=tasks, events=events, info={**w.info, "bursts": len(plan.starts)})


def cap(w: TimedWorkload, n: Optional[int]) -> TimedWorkload:
    """The first ``n`` tasks of the trace (trace order) with their own events."""
    if n is None or n >= len(w.tasks):
        return w
    events = [e for e in w.events if e[2] < n]
    return replace(w, tasks=w.tasks[:n], events=events, info={**w.info, "tasks": n, "cut_to": n})


# ============================================================================ the workload
def default_paths() -> tuple[str, str]:
    from suanli.config import settings

    d = settings().openb_dir
    return str(d / "openb_node_list_all_node.csv"), str(d / "openb_pod_list_default.csv")


@lru_cache(maxsize=4)
def _built(nodes_csv: str, pods_csv: str, shrink: Optional[float], shrink_seed: int, load: float,
           stamp: tuple[int, ...]) -> TimedWorkload:
    return build(nodes_csv, pods_csv, shrink_fraction=shrink, shrink_seed=shrink_seed, load=load)


def workload(paths: Optional[tuple[str, str]], sc: BurstScenario) -> TimedWorkload:
    """The shrunk, loaded, cut workload of the scenario (built once per process and file
    version; do not mutate it)."""
    nodes_csv, pods_csv = paths or default_paths()
    try:
        stamp = tuple(Path(f).stat().st_mtime_ns for f in (nodes_csv, pods_csv))
    except OSError as exc:
        raise ReplayError(f"cannot read the trace: {exc}") from None
    return cap(_built(str(nodes_csv), str(pods_csv), sc.shrink, sc.shrink_seed, float(sc.load), stamp), sc.tasks)


@dataclass(frozen=True)
class Episode:
    """Everything one run needs but the policy: the warped workload with tiers drawn, the
    burst plan, the measured window and the stop time (all ms, simulated time)."""
    workload: TimedWorkload
    plan: BurstPlan
    windows: tuple[tuple[int, int], ...]
    window: tuple[int, int]
    stop_at: int
    deadlines_ms: Mapping[str, int]

    def in_burst(self, t: int) -> bool:
        i = bisect.bisect_right([a for a, _b in self.windows], t) - 1
        return i >= 0 and t < self.windows[i][1]


def episode(source: Union[TimedWorkload, tuple[str, str], None], sc: BurstScenario, *, tiers: bool = True) -> Episode:
    """The episode of a scenario over a workload or ``(nodes_csv, pods_csv)`` (None: openb)."""
    sc.check()
    w = cap(source, sc.tasks) if isinstance(source, TimedWorkload) else workload(source, sc)
    if not w.tasks:
        raise ReplayError("the workload has no tasks")
    arrivals = [t["submitted_at"] for t in w.tasks]
    plan = plan_bursts(arrivals, sc.bursts, int(round(sc.burst_minutes * 60_000)), sc.burst_factor, sc.warmup,
                       sc.seed)
    ww = warp_workload(w, plan)
    if tiers:
        ww = replace(ww, tasks=assign_tiers(ww.tasks, sc.seed, sc.tier_mix))
    sim = sorted(t["submitted_at"] for t in ww.tasks)
    start = sim[min(len(sim) - 1, int(sc.warmup * (len(sim) - 1)))]
    last = sim[-1]
    return Episode(ww, plan, tuple(plan.windows()), (start, max(last, start + 1)),
                   last + max(sc.deadlines_ms.values()), dict(sc.deadlines_ms))


# ============================================================================ success accounting
@dataclass(slots=True)
class TaskOutcome:
    task_id: str
    tier: str
    arrived_at: int
    in_burst: bool
    deadline_ms: int
    placed_at: Optional[int] = None         # first TaskPlaced
    preempted: int = 0

    @property
    def wait_ms(self) -> Optional[int]:
        return None if self.placed_at is None else self.placed_at - self.arrived_at

    @property
    def success(self) -> bool:
        w = self.wait_ms
        return w is not None and w <= self.deadline_ms and not (self.tier == "GOLD" and self.preempted)


class SuccessTracker:
    """Per-task outcomes, fed the decisions as they come (an RL reward can read it after
    every input: :meth:`outcome`, :attr:`changed`)."""

    def __init__(self, ep: Episode) -> None:
        self.outcomes: dict[str, TaskOutcome] = {}
        for t in ep.workload.tasks:
            tier = t["qos_tier"]
            self.outcomes[t["task_id"]] = TaskOutcome(t["task_id"], tier, t["submitted_at"],
                                                      ep.in_burst(t["submitted_at"]), ep.deadlines_ms[tier])
        self.gold_preempted = 0
        self.changed: list[TaskOutcome] = []     # outcomes touched by the last :meth:`on_outputs`

    def outcome(self, task_id: str) -> Optional[TaskOutcome]:
        return self.outcomes.get(task_id)

    def on_outputs(self, outs: Iterable[Any]) -> None:
        self.changed = []
        for out in outs:
            if isinstance(out, m.TaskPlaced):
                o = self.outcomes.get(out.task_id)
                if o is not None and o.placed_at is None:
                    o.placed_at = out.provenance.decided_at
                    self.changed.append(o)
            elif isinstance(out, m.TaskPreempted):
                o = self.outcomes.get(out.task_id)
                if o is not None:
                    o.preempted += 1
                    self.gold_preempted += o.tier == "GOLD"
                    self.changed.append(o)

    def figures(self) -> dict[str, Any]:
        def pct(xs: list[TaskOutcome]) -> Optional[float]:
            return round(100.0 * sum(o.success for o in xs) / len(xs), 4) if xs else None

        every = list(self.outcomes.values())
        burst = [o for o in every if o.in_burst]
        waits = [o.wait_ms / 1000 for o in every if o.wait_ms is not None]
        return {"success_under_burst_pct": pct(burst), "success_pct": pct(every),
                "success_by_tier_pct": {t: pct([o for o in every if o.tier == t]) for t in TIERS},
                "success_under_burst_by_tier_pct": {t: pct([o for o in burst if o.tier == t]) for t in TIERS},
                "gold_preempted": self.gold_preempted,
                "tasks": len(every), "tasks_in_burst": len(burst),
                "tasks_by_tier": {t: sum(o.tier == t for o in every) for t in TIERS},
                "placed": sum(o.placed_at is not None for o in every),
                "wait_s": percentiles(waits)}


# ============================================================================ cost (pure)
def node_hours_cost(intervals: Iterable[Interval]) -> tuple[float, float]:
    """``(cost, node_hours)`` of the nodes while they held at least one task, at their price."""
    spans: dict[str, list[tuple[int, int]]] = {}
    price: dict[str, float] = {}
    for iv in intervals:
        spans.setdefault(iv.node.node_id, []).append((iv.start, iv.end))
        price[iv.node.node_id] = iv.node.price_per_hour
    cost = hours = 0.0
    for nid, ss in spans.items():
        h = sum(b - a for a, b in _merge(ss)) / MS_PER_HOUR
        hours += h
        cost += h * price[nid]
    return cost, hours


# ============================================================================ one run
class Observer(Protocol):
    """What :func:`simulate_burst` calls (``start(state)`` too, when the object has it)."""

    def after_input(self, at_ms: int, event: Any, outs: list[Any], state: CellState) -> None: ...


def _area(series: list[tuple[int, int]], lo: int, hi: int) -> float:
    """Integral over ``[lo, hi)`` of a step function given as ``(t, value from t)``."""
    total = 0.0
    for (t, v), nxt in zip(series, series[1:] + [(hi, 0)]):
        a, b = max(t, lo), min(nxt[0], hi)
        if b > a:
            total += v * (b - a)
    return total


def _departure(task: Mapping[str, Any], state: CellState, at: int) -> Optional[Any]:
    """The event of a task's trace departure: completed if it holds resources, cancelled if
    it still waits, nothing if it is gone (as in qos_whatif.simulate)."""
    tid = task["task_id"]
    rec = state.tasks.get(tid)
    if rec is None or rec.status in TERMINAL:
        return None
    if rec.status in HOLDING:
        return m.TaskStatusChanged(event_id=f"{tid}/end", task_id=tid, cell="openb", node_id=rec.node,
                                   status="COMPLETED", at=at, exit_code=0)
    return m.TaskCancelled(event_id=f"{tid}/cancel", task_id=tid, cell="openb", tenant=task["tenant"],
                           reason="deleted before it ran", at=at)


def simulate_burst(source: Union[TimedWorkload, tuple[str, str], None], scenario: BurstScenario, strategy: str,
                   config: Optional[Mapping[str, Any]] = None, *, observer: Optional[Observer] = None,
                   progress: bool = False, tiers: bool = True, outcomes: bool = False) -> dict[str, Any]:
    """One episode under one policy; returns its figures (JSON-able; see the module docstring).

    ``source``: a :class:`TimedWorkload` or ``(nodes_csv, pods_csv)`` (None: openb);
    ``config``: the strategy's config, over ``policy_config(strategy, seed, typical)``; its
    ``qos`` key, if any, over the scenario's. ``tiers=False`` keeps the tasks' own tiers
    (hand-made cases); ``outcomes=True`` adds the per-task outcomes."""
    ep = episode(source, scenario, tiers=tiers)
    w = ep.workload
    tasks = w.tasks
    config = dict(config or {})
    nodes = price_nodes(w.cluster.nodes, scenario.idle_factor)
    tracker = SuccessTracker(ep)

    t0 = time.perf_counter()
    cell = LedgerCell(f"trace.{w.name}.burst", nodes)
    feed = cell.feed
    policy = {**policy_config(strategy, scenario.seed, w.typical), **config,
              "qos": {**scenario.qos, **(config.get("qos") or {})}}
    feed(m.PolicyChanged.of("openb", strategy, policy))
    if observer is not None and hasattr(observer, "start"):
        observer.start(cell.state)

    inputs = _inputs(w, (), scenario.tick_ms, ep.stop_at)
    bar = Progress(len(inputs), f"burst {strategy} seed {scenario.seed}", enabled=progress)
    capacity = cell.state.gpu_capacity_milli() or 1
    series: list[tuple[int, int]] = [(inputs[0][0] if inputs else 0, 0)]   # (t, allocated GPU milli from t)
    decide_ms: list[float] = []
    for at, rank, what in inputs:
        event: Any
        if rank == _ARRIVE:
            event = m.from_avro(m.TaskSubmitted, tasks[what])
            cell.ledger.apply(event)
        elif rank == _DEPART:
            event = _departure(tasks[what], cell.state, at)
            if event is None:
                bar.update()
                continue
        else:
            assert rank == _TICK
            event = m.CellTick(event_id=f"tick/{at}", cell="openb", at=at, period_ms=scenario.tick_ms)
        if rank == _ARRIVE:
            d0 = time.perf_counter()
            outs = feed(event)
            decide_ms.append((time.perf_counter() - d0) * 1000.0)
        else:
            outs = feed(event)
        tracker.on_outputs(outs)
        alloc = cell.state.gpu_allocated_milli()
        if series[-1][0] == at:
            series[-1] = (at, alloc)
        elif series[-1][1] != alloc:
            series.append((at, alloc))
        if observer is not None:
            observer.after_input(at, event, outs, cell.state)
        bar.update()
    bar.close()
    seconds = time.perf_counter() - t0

    w0, w1 = ep.window
    intervals = clip(cell.ledger.intervals(until=w1), ep.window)
    node_cost, node_hours = node_hours_cost(intervals)
    gpu_hours = sum(iv.gpu_hours for iv in intervals)
    burst_ms = sum(b - a for a, b in ep.windows)
    dms = np.asarray(decide_ms) if decide_ms else np.zeros(1)
    out: dict[str, Any] = {
        "strategy": strategy, "config": {k: v for k, v in config.items() if k != "typical_tasks"},
        "seed": scenario.seed,
        **tracker.figures(),
        "gpu_alloc_pct": round(100.0 * _area(series, w0, w1) / (w1 - w0) / capacity, 4),
        "gpu_alloc_burst_pct": round(100.0 * sum(_area(series, a, b) for a, b in ep.windows) / burst_ms / capacity, 4)
        if burst_ms else None,
        "cost_total": round(node_cost, 9), "node_hours": round(node_hours, 9), "gpu_hours": round(gpu_hours, 9),
        "cost_per_gpu_hour": round(node_cost / gpu_hours, 6) if gpu_hours else None,
        "task_cost": round(sum(iv.cost for iv in intervals), 6),
        "decision_ms_p50": round(float(np.percentile(dms, 50)), 4),
        "decision_ms_p99": round(float(np.percentile(dms, 99)), 4),
        "decisions": cell.state.decisions, "inputs": cell.off,
        "burst_windows_ms": [list(x) for x in ep.windows], "window_ms": list(ep.window), "stop_at_ms": ep.stop_at,
        "gpu_capacity": capacity / 1000, "nodes": len(nodes),
        "seconds": round(seconds, 3),
    }
    if outcomes:
        out["outcomes"] = outcome_rows(tracker)
    return out


def outcome_rows(tracker: SuccessTracker) -> list[list[Any]]:
    """``[task_id, tier, arrived_at, in_burst, placed_at, preempted, success]`` per task."""
    return [[o.task_id, o.tier, o.arrived_at, o.in_burst, o.placed_at, o.preempted, o.success]
            for o in tracker.outcomes.values()]


# ============================================================================ many runs
def resolve_policy(p: Policy) -> tuple[str, str, dict[str, Any]]:
    """``(label, strategy, config)`` of a policy: a name of :data:`NAMED_POLICIES`, a
    ``NAME[:key=value...]`` item (``strategy_config.parse_policy``), or ``(name, config)``
    (name: a strategy, or a named policy whose config the given one updates)."""
    from .strategy_config import parse_policy

    if isinstance(p, str):
        if p in NAMED_POLICIES:
            strategy, cfg = NAMED_POLICIES[p]
            return p, strategy, dict(cfg)
        label, spec = parse_policy(p)
        return label, spec["strategy"], dict(spec["config"])
    name, cfg = p
    if name in NAMED_POLICIES:
        strategy, base = NAMED_POLICIES[name]
        return name, strategy, {**base, **cfg}
    parse_policy(name)                         # an unknown strategy is refused here, with the reason
    return name, name, dict(cfg)


def check_eval_seeds(seeds: Iterable[int]) -> list[int]:
    seeds = list(seeds)
    bad = [s for s in seeds if not is_eval_seed(s)]
    if bad:
        raise ReplayError(f"evaluation seeds are {EVAL_SEEDS.start}..{EVAL_SEEDS.stop - 1} (training seeds are >= "
                          f"{TRAIN_SEED_START}); refused: {', '.join(map(str, bad[:10]))}")
    if not seeds:
        raise ReplayError("no evaluation seed given")
    return seeds


def _run_one(job: tuple) -> dict[str, Any]:
    label, strategy, cfg, paths, sc = job
    return dict(simulate_burst(paths, sc, strategy, cfg), policy=label)


# two-sided 95 % Student t quantiles t_{0.975, df} for df = 1..30 (scipy is not a dependency)
_T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
         2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042)


def t975(df: int) -> float:
    """The 97.5 % quantile of Student's t with ``df`` degrees of freedom (>30: 1.96 + 2.4/df,
    within 0.002 of the exact value)."""
    if df < 1:
        return math.nan
    return _T975[df - 1] if df <= len(_T975) else 1.96 + 2.4 / df


def interval(xs: Sequence[Optional[float]]) -> dict[str, Any]:
    """Mean and 95 % t-interval of the values (None skipped)."""
    a = np.asarray([x for x in xs if x is not None], dtype=float)
    if a.size == 0:
        return {"n": 0, "mean": None, "half": None, "lo": None, "hi": None}
    mean = float(a.mean())
    half = t975(a.size - 1) * float(a.std(ddof=1)) / math.sqrt(a.size) if a.size > 1 else None
    r = lambda x: None if x is None or math.isnan(x) else round(x, 4)  # noqa: E731
    return {"n": int(a.size), "mean": r(mean), "half": r(half),
            "lo": r(mean - half) if half is not None else None, "hi": r(mean + half) if half is not None else None}


METRICS = ("success_under_burst_pct", "success_pct", "gpu_alloc_pct", "gpu_alloc_burst_pct", "cost_per_gpu_hour",
           "cost_total", "decision_ms_p99", "decision_ms_p50")


def aggregate(runs: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Per policy (first-seen order): the mean and 95 % t-interval of each of :data:`METRICS`."""
    out: dict[str, Any] = {}
    for label in dict.fromkeys(r["policy"] for r in runs):
        rs = [r for r in runs if r["policy"] == label]
        out[label] = {"runs": len(rs), "seeds": [r["seed"] for r in rs], "strategy": rs[0]["strategy"],
                      **{k: interval([r.get(k) for r in rs]) for k in METRICS},
                      "gold_preempted": sum(r["gold_preempted"] for r in rs),
                      "seconds": round(sum(r["seconds"] for r in rs), 2)}
    return out


def evaluate(policies: Sequence[Policy], seeds: Sequence[int], scenario: Optional[BurstScenario] = None, *,
             paths: Optional[tuple[str, str]] = None, workers: int = 1,
             say: Any = None) -> dict[str, Any]:
    """Every policy on every evaluation seed (the scenario's seed is replaced); returns
    ``{"scenario", "policies", "runs", "aggregate"}``. ``say``: progress lines (str -> None)."""
    seeds = check_eval_seeds(seeds)
    scenario = scenario or BurstScenario()
    scenario.check()
    resolved = [resolve_policy(p) for p in policies]
    if len({label for label, _s, _c in resolved}) != len(resolved):
        raise ReplayError("the policies must have distinct names")
    jobs = [(label, strategy, cfg, paths, replace(scenario, seed=s))
            for label, strategy, cfg in resolved for s in seeds]
    runs: list[dict[str, Any]] = []

    def done(r: dict[str, Any]) -> None:
        runs.append(r)
        if say:
            say(f"  [{len(runs)}/{len(jobs)}] {r['policy']} seed {r['seed']}: success under burst "
                f"{r['success_under_burst_pct']} %, overall {r['success_pct']} %, alloc {r['gpu_alloc_pct']:.1f} %, "
                f"p99 {r['decision_ms_p99']:.2f} ms ({r['seconds']:.1f} s)")

    run_jobs(_run_one, jobs, workers, done)
    order = {label: i for i, (label, _s, _c) in enumerate(resolved)}
    runs.sort(key=lambda r: (order[r["policy"]], r["seed"]))
    return {"scenario": scenario.describe(), "policies": {label: {"strategy": s, "config": c}
                                                          for label, s, c in resolved},
            "seeds": seeds, "runs": runs, "aggregate": aggregate(runs)}


def render(result: Mapping[str, Any]) -> str:
    """A markdown table of :func:`evaluate`'s aggregate: mean ± 95 % half-interval."""
    agg = result.get("aggregate", result)

    def cell(x: Mapping[str, Any], digits: int) -> str:
        if x["mean"] is None:
            return "-"
        return f"{x['mean']:.{digits}f}" + (f" ± {x['half']:.{digits}f}" if x["half"] is not None else "")

    head = ("policy", "runs", "success under burst %", "success %", "GPU alloc %", "alloc in bursts %",
            "cost / GPU-h", "decide p99 ms", "gold preempted")
    rows = [head, tuple("---" for _ in head)]
    for label, a in agg.items():
        rows.append((label, str(a["runs"]), cell(a["success_under_burst_pct"], 1), cell(a["success_pct"], 1),
                     cell(a["gpu_alloc_pct"], 1), cell(a["gpu_alloc_burst_pct"], 1), cell(a["cost_per_gpu_hour"], 3),
                     cell(a["decision_ms_p99"], 2), str(a["gold_preempted"])))
    return "\n".join("| " + " | ".join(r) + " |" for r in rows)


# ============================================================================ the command line
def add_scenario_args(p: argparse.ArgumentParser, *, trace: bool = True) -> None:
    """The scenario's options (shared with ``suanli whatif --burst``)."""
    if trace:
        p.add_argument("--nodes", help="node list CSV (default: openb all nodes)")
        p.add_argument("--pods", help="pod list CSV (default: openb default pods)")
        p.add_argument("--shrink", type=float, default=DEFAULT_SHRINK, help="keep this share of the nodes")
        p.add_argument("--shrink-seed", type=int, default=DEFAULT_SHRINK_SEED)
        p.add_argument("--load", type=float, default=DEFAULT_LOAD, help="arrival compression (timed --load)")
    p.add_argument("--tasks", type=int, default=DEFAULT_TASKS, help="the first N tasks of the trace (0: all)")
    p.add_argument("--bursts", type=int, default=3)
    p.add_argument("--burst-factor", type=float, default=5.0)
    p.add_argument("--burst-minutes", type=float, default=10.0)


def scenario_of(args: argparse.Namespace) -> BurstScenario:
    return BurstScenario(tasks=args.tasks or None, shrink=args.shrink, shrink_seed=args.shrink_seed,
                         load=DEFAULT_LOAD if args.load is None else args.load, bursts=args.bursts,
                         burst_factor=args.burst_factor, burst_minutes=args.burst_minutes)


def paths_of(args: argparse.Namespace) -> tuple[str, str]:
    nodes, pods = default_paths()
    return args.nodes or nodes, args.pods or pods


def run_cli(policies: Sequence[str], seeds: Sequence[int], sc: BurstScenario, paths: tuple[str, str], *,
            workers: int, json_path: Optional[str], quiet: bool, command: str) -> int:
    say = (lambda _s: None) if quiet else (lambda s: print(s, file=sys.stderr, flush=True))
    say(f"burst what-if: {len(policies)} policies x {len(seeds)} seeds, {sc.tasks or 'all'} tasks, shrink {sc.shrink}, "
        f"load {sc.load:g}, {sc.bursts} bursts of {sc.burst_minutes:g} min x {sc.burst_factor:g}")
    t0 = time.perf_counter()
    result = evaluate(policies, seeds, sc, paths=paths, workers=workers, say=say)
    print(render(result))
    if json_path:
        doc = {"command": command, "paths": list(paths), **result, "seconds": round(time.perf_counter() - t0, 1)}
        Path(json_path).write_text(json.dumps(doc, indent=1) + "\n")
        say(f"wrote {json_path}")
    return 0


def main(argv: Optional[Sequence[str]] = None) -> int:
    """``python -m suanli.replay.burst_whatif --policies default,fgd --seeds 1-10``."""
    p = argparse.ArgumentParser(prog="python -m suanli.replay.burst_whatif", description=__doc__.split("\n\n")[0])
    p.add_argument("--policies", default="default,fgd,bestfit,rule-engine",
                   help="comma-separated: rule-engine, NAME or NAME:key=value[:key=value]")
    p.add_argument("--seeds", default="1-10", help=f"evaluation seeds ({EVAL_SEEDS.start}-{EVAL_SEEDS.stop - 1})")
    add_scenario_args(p)
    p.add_argument("--workers", type=int, default=1, help="runs in parallel (processes)")
    p.add_argument("--json", help="write every run and the aggregate to this file")
    p.add_argument("--quiet", action="store_true")
    args = p.parse_args(argv)
    policies = [x.strip() for x in args.policies.split(",") if x.strip()]
    return run_cli(policies, _seeds(args.seeds), scenario_of(args), paths_of(args), workers=args.workers,
                   json_path=args.json, quiet=args.quiet,
                   command=" ".join(["python -m suanli.replay.burst_whatif",
                                     *(argv if argv is not None else sys.argv[1:])]))


if __name__ == "__main__":
    try:
        raise SystemExit(main())
    except ReplayError as exc:
        print(f"burst_whatif: {exc}", file=sys.stderr)
        raise SystemExit(2)
