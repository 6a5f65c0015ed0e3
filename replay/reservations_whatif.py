"""Advance reservations on the openb trace: a timed what-if through the production core (#15).

Does reserving ahead cut the queueing of the big (multi-GPU) tasks, and the fragmentation,
without making everyone else wait? The openb trace with its real arrivals and lifetimes
(``timed.py``) on a shrunk cluster, arrivals compressed by ``k`` (timed ``load``); some
multi-GPU tasks bid for their GPUs ahead of their arrival; four arms, paired by seed.
Run it with ``python -m suanli.replay.reservations_whatif`` (:func:`main`), or one load
and share with ``suanli whatif --protocol timed --reservations RULE``.

**Who reserves** (:class:`Rule`, :func:`plan`; every draw seeded by the run seed):

* *candidates*: the tasks asking for more than one GPU (``gpu_count > 1``; openb default: 75);
* *who*: the first ``round(share x n)`` of the candidates in the order of a
  ``random.Random("reservations/<seed>")`` shuffle (so the 10 % set is inside the 25 % set,
  which is inside the 50 % set);
* per reserving task, its own ``random.Random("reservations/<seed>/<task_id>")`` draws, in
  this order: the lead ``U(lead_lo, lead_hi)`` (default 5 min .. 6 h), the overrun factor
  ``U(1, 2)``, the price ``U(price_lo, price_hi)`` per GPU-hour (default 1 .. 4, rounded to
  cents), and ``u`` for claiming; the ``round(unclaimed x m)`` reserving tasks with the
  smallest ``u`` never claim their token (they arrive without naming it);
* the bid (``ReservationBid``): made at ``max(0, arrival - lead)`` for the task's resources
  (gang: all its GPUs on one node), earliest start = its arrival, latest start = arrival +
  ``latest`` (default 15 min), declared duration = real lifetime x overrun, its price;
* the task itself arrives at its trace arrival, as in timed mode, naming its token
  (label ``reservation: rsv-<bid_id>``) if the bid was granted and it is a claiming one;
  it departs at its trace departure (completed if placed, cancelled if still waiting).

**Arms**, each on the same placement strategy: ``none`` (no bids: the reserving tasks just
arrive), ``hard`` (fcfs, first fit, no lending, tokens last their whole window, unused GPUs
kept), ``flexible`` (fcfs, first fit, bronze borrows held GPUs, unclaimed tokens purged
after 5 min, unused GPUs released), ``auction`` (the product defaults: a sealed-bid auction
every minute, frag-aware packing, lending, purge and release). See :data:`ARMS`.

**Clock**: a ``CellTick`` goes in before an input whenever ``timed.next_due`` says a clock
rule (a preemption's grace, the batch window, an auction clearing, a hold start, a purge, a
window end) falls due before it, and after the last input until nothing is due.

**Metrics** (per run; every task's figures from event times):

* *queueing* of a task = its first placement's ``decided_at`` - its arrival; a task never
  placed counts the time it waited (to its departure, or the end of the run): a lower
  bound, so every arm is measured on the same set; tasks refused for good (unschedulable:
  no node of the shrunk cluster can ever host them) are left out and counted.
  *Reserved* = the tasks chosen to reserve (claiming or not), the same set in every arm,
  ``none`` included; *others* = every other task;
* *fragmentation* = the FGD paper's expected fragmented GPU milli w.r.t. the typical tasks
  (``processors/frag.py``), computed on ``reservations.free_view(state)`` (GPUs held by a
  token and idle count as idle), divided by the idle GPU milli of the same view: the share
  of idle GPU capacity the typical task cannot use. Time-weighted mean over the arrival
  window (first to last arrival), sampled after every input; ``% of capacity`` is the
  same numerator over the cluster's capacity. Both also over the *reservation span*
  (first bid to the last reserving task's arrival + its declared duration, the same span in
  every arm), where the reservations act;
* *reserved GPU-hours* = sum over granted tokens of GPUs x (end_at - start_at);
  *reserved-idle GPU-hours* = the integral over the run of ``reservations.held_devices``
  (GPUs held by a token, neither claimed nor lent), before and inside windows alike;
* *GPU allocation* = ``RunMetrics``' time mean over the arrival window.

Aggregation over seeds: means with 95 % percentile-bootstrap intervals (10,000 resamples of
the seeds, numpy), and the paired difference of each arm with ``none`` (same seed, same
shrink sample, same draws), absolute and relative (ratio of means - 1).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import random
import re
import sys
import time
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterable, Mapping, Optional, Sequence

import numpy as np

from suanli.errors import ReplayError
from suanli.processors import CellState, decide
from suanli.processors import model as m
from suanli.processors.frag import TypicalTasks, node_frag
from suanli.processors.state import HOLDING, PENDING, PREEMPTED

from . import timed
from .fgd_protocol import policy_config
from .metrics import RunMetrics, percentiles
from .openb import read_nodes
from .progress import Progress, run_jobs

try:                                      # the core's token helpers (#15)
    from suanli.processors import reservations as _rsv
except ImportError:                       # pragma: no cover - before the core lands: no tokens
    _rsv = None

CELL = "openb"
ARMS: dict[str, Optional[dict[str, Any]]] = {
    "none": None,
    "hard": {"mechanism": "fcfs", "packing": "first_fit", "lend_bronze": False, "purge_idle_ms": 0,
             "release_unused": False},
    "flexible": {"mechanism": "fcfs", "packing": "first_fit", "lend_bronze": True, "purge_idle_ms": 300_000,
                 "release_unused": True},
    "auction": {},                        # the product's defaults (processors/reservation_args.py)
}
DEFAULT_SHRINK = 0.01                     # see BENCHMARKS.md: k = 2 queues the big tasks on ~12 nodes
DEFAULT_LOADS = (1.0, 1.5, 2.0, 3.0)
DEFAULT_STRATEGIES = ("default", "fgd")
DEFAULT_SEEDS = tuple(range(42, 52))
BOOTSTRAP = 10_000
# acceptance (issue #15), at k = 2 with `default`, each arm vs none
GOALS = {"reserved_queueing_rel": -0.67, "frag_rel": -0.42, "others_queueing_rel": 0.05, "idle_share": 0.05}

# event ranks at one millisecond: resources free first, then bids, then arrivals
_DEPART, _BID, _ARRIVE = 0, 1, 2


# ============================================================================ the rule
_UNITS = {"ms": 1, "s": 1000, "m": 60_000, "min": 60_000, "h": 3_600_000, "d": 86_400_000}


def parse_duration(text: str) -> int:
    """``"5m"``, ``"6h"``, ``"90s"``, ``"250ms"``, ``"1.5h"``, ``"1d"`` -> ms (a bare number is seconds)."""
    mt = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*(ms|s|min|m|h|d)?\s*", text)
    if not mt:
        raise ReplayError(f"{text!r} is not a duration (e.g. 90s, 5m, 6h)")
    return int(round(float(mt.group(1)) * _UNITS[mt.group(2) or "s"]))


def _range(text: str, conv) -> tuple:
    a, sep, b = text.partition("-")
    lo = conv(a)
    hi = conv(b) if sep else lo
    if hi < lo:
        raise ReplayError(f"range {text!r}: the upper end is below the lower one")
    return lo, hi


def _fmt_ms(ms: int) -> str:
    for unit, div in (("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1000)):
        if ms >= div and ms % div == 0:
            return f"{ms // div}{unit}"
    return f"{ms}ms"


@dataclass(frozen=True, slots=True)
class Rule:
    """Who reserves and how (see the module docstring). ``Rule.parse("share=0.25,lead=5m-6h,
    overrun=1-2,unclaimed=0.1,latest=15m,price=1-4")`` gives the defaults."""
    share: float = 0.25
    lead_ms: tuple[int, int] = (300_000, 21_600_000)
    overrun: tuple[float, float] = (1.0, 2.0)
    unclaimed: float = 0.1
    latest_ms: int = 900_000
    price: tuple[float, float] = (1.0, 4.0)

    @classmethod
    def parse(cls, text: str | None) -> "Rule":
        kw: dict[str, Any] = {}
        for part in (text or "").split(","):
            if not part.strip():
                continue
            key, sep, value = part.partition("=")
            key, value = key.strip(), value.strip()
            if not sep:
                raise ReplayError(f"--reservations {text!r}: {part!r} is not key=value")
            try:
                if key == "share":
                    kw["share"] = float(value)
                elif key == "lead":
                    kw["lead_ms"] = _range(value, parse_duration)
                elif key == "overrun":
                    kw["overrun"] = _range(value, float)
                elif key == "unclaimed":
                    kw["unclaimed"] = float(value)
                elif key == "latest":
                    kw["latest_ms"] = parse_duration(value)
                elif key == "price":
                    kw["price"] = _range(value, float)
                else:
                    raise ReplayError(f"--reservations: unknown key {key!r} "
                                      "(share, lead, overrun, unclaimed, latest, price)")
            except ValueError:
                raise ReplayError(f"--reservations: bad value {value!r} for {key}") from None
        rule = cls(**kw)
        rule.check()
        return rule

    def check(self) -> None:
        if not 0 <= self.share <= 1 or not 0 <= self.unclaimed <= 1:
            raise ReplayError("--reservations: share and unclaimed must be in [0, 1]")
        if self.lead_ms[0] < 0 or self.latest_ms < 0 or self.overrun[0] < 1 or self.price[0] < 0:
            raise ReplayError("--reservations: lead and latest >= 0, overrun >= 1, price >= 0")

    def text(self) -> str:
        return (f"share={self.share:g},lead={_fmt_ms(self.lead_ms[0])}-{_fmt_ms(self.lead_ms[1])},"
                f"overrun={self.overrun[0]:g}-{self.overrun[1]:g},unclaimed={self.unclaimed:g},"
                f"latest={_fmt_ms(self.latest_ms)},price={self.price[0]:g}-{self.price[1]:g}")

    def describe(self) -> str:
        return (f"{100 * self.share:g} % of the multi-GPU tasks (gpu_count > 1), the first of a seeded shuffle, bid "
                f"ahead: bid at arrival - lead, lead ~ U({_fmt_ms(self.lead_ms[0])}, {_fmt_ms(self.lead_ms[1])}); "
                f"window: earliest start = arrival, latest start = arrival + {_fmt_ms(self.latest_ms)}; declared "
                f"duration = real lifetime x U({self.overrun[0]:g}, {self.overrun[1]:g}); price per GPU-hour "
                f"~ U({self.price[0]:g}, {self.price[1]:g}) (cents); gang bids (all GPUs on one node); "
                f"{100 * self.unclaimed:g} % of them (the smallest seeded draws) never claim their token")


@dataclass(frozen=True, slots=True)
class Reservation:
    """One reserving task of a run's plan."""
    index: int                 # the task's index in the workload
    task_id: str
    bid_id: str
    arrival: int               # ms (the task's arrival: the window's earliest start)
    bid_at: int
    latest_start_at: int
    real_ms: int               # its real lifetime (None in the trace: 0)
    duration_ms: int           # declared
    price: float
    claims: bool
    gpus: int

    @property
    def reservation_id(self) -> str:
        return f"rsv-{self.bid_id}"


def candidates(w: timed.TimedWorkload) -> list[int]:
    """Indices of the tasks that may reserve: more than one GPU."""
    return [i for i, t in enumerate(w.tasks) if (t["resources"].get("gpu_count") or 0) > 1]


def _lifetime_ms(task: Mapping[str, Any]) -> int:
    labels = task.get("labels") or {}
    c, d = labels.get("creation_time"), labels.get("deletion_time")
    if c in (None, "") or d in (None, ""):
        return 0
    return max(0, int(d) - int(c)) * 1000


def plan(w: timed.TimedWorkload, rule: Rule, seed: int) -> list[Reservation]:
    """The reserving tasks of a run and their bids (module docstring), in trace order."""
    cand = candidates(w)
    order = list(cand)
    random.Random(f"reservations/{seed}").shuffle(order)
    chosen = sorted(order[:round(rule.share * len(cand))])
    draws = {}
    for i in chosen:
        tid = w.tasks[i]["task_id"]
        rnd = random.Random(f"reservations/{seed}/{tid}")
        lead = rnd.uniform(*rule.lead_ms)
        over = rnd.uniform(*rule.overrun)
        price = round(rnd.uniform(*rule.price), 2)
        draws[i] = (lead, over, price, rnd.random())
    n_unclaimed = round(rule.unclaimed * len(chosen))
    unclaimed = set(sorted(chosen, key=lambda i: (draws[i][3], i))[:n_unclaimed])
    out = []
    for i in chosen:
        t = w.tasks[i]
        lead, over, price, _u = draws[i]
        arrival = int(t["submitted_at"])
        real = _lifetime_ms(t)
        declared = max(60_000, int(round(real * over))) if real else rule.lead_ms[1]
        out.append(Reservation(i, t["task_id"], f"b-{t['task_id']}", arrival, max(0, int(round(arrival - lead))),
                               arrival + rule.latest_ms, real, declared, price, i not in unclaimed,
                               int(t["resources"]["gpu_count"])))
    return out


def bid_event(w: timed.TimedWorkload, r: Reservation) -> m.ReservationBid:
    t = w.tasks[r.index]
    res = t["resources"]
    return m.from_avro(m.ReservationBid, {
        "event_id": f"{CELL}/bid/{r.bid_id}", "bid_id": r.bid_id, "tenant": t["tenant"], "cell": CELL,
        "resources": {"cpu_milli": res["cpu_milli"], "memory_mib": res["memory_mib"], "gpu_count": res["gpu_count"],
                      "gpu_milli": res["gpu_milli"], "gpu_models": list(res.get("gpu_models") or []),
                      "gpu_memory_mib": res.get("gpu_memory_mib") or 0, "accelerators": []},
        "start_at": r.arrival, "duration_ms": r.duration_ms, "price": r.price, "at": r.bid_at,
        "latest_start_at": r.latest_start_at, "gang": True})


# ============================================================================ fragmentation on a view
class FragMeter:
    """FGD fragmentation of the cell with held-idle GPUs counted free; the node access table
    is computed once (the node set of a run does not change)."""

    def __init__(self, typical: TypicalTasks, state: CellState):
        self.tt = typical
        self.acc = typical.access_table(state)[:, state.model_idx].T if state.n_nodes else None
        self.capacity = state.gpu_capacity_milli()

    @staticmethod
    def view(state: CellState) -> np.ndarray:
        return _rsv.free_view(state) if _rsv is not None else np.array(state.gpu_free, copy=True)

    def measure(self, state: CellState) -> tuple[float, float]:
        """``(fragmented milli, idle milli)`` of the view."""
        gpu = self.view(state)
        idle = float(np.asarray(gpu, dtype=np.float64).sum())
        if self.acc is None or self.tt.total <= 0:
            return 0.0, idle
        frag = float(node_frag(self.tt, state.cpu_free, gpu, self.acc).sum()) / self.tt.total
        return frag, idle


class Integral:
    """Time integral of a piecewise-constant value, optionally also inside spans."""

    def __init__(self, spans: Mapping[str, tuple[int, int]]):
        self.spans = dict(spans)
        self.t: Optional[int] = None
        self.value = 0.0
        self.area = {k: 0.0 for k in ("all", *self.spans)}
        self.time = {k: 0 for k in ("all", *self.spans)}

    def advance(self, t: int, value: float) -> None:
        """The value held since the last call is ``self.value``; from ``t`` on it is ``value``."""
        if self.t is not None and t > self.t:
            self.area["all"] += self.value * (t - self.t)
            self.time["all"] += t - self.t
            for k, (a, b) in self.spans.items():
                lo, hi = max(a, self.t), min(b, t)
                if hi > lo:
                    self.area[k] += self.value * (hi - lo)
                    self.time[k] += hi - lo
        if self.t is None or t >= self.t:
            self.t = t
        self.value = value

    def mean(self, k: str = "all") -> Optional[float]:
        return self.area[k] / self.time[k] if self.time[k] else None


# ============================================================================ one run
def _held(state: CellState) -> float:
    """GPUs held and idle now (fractional: a token holds the free part of a GPU bronze shares)."""
    return float(_rsv.held_devices(state)) if _rsv is not None else 0.0


def _lent(state: CellState) -> int:
    return int(_rsv.lent_devices(state)) if _rsv is not None else 0


def _next_due(state: CellState, until: int) -> Optional[int]:
    return timed.next_due(state, until)


def simulate(w: timed.TimedWorkload, strategy: str, arm: str, reservations: Sequence[Reservation], seed: int,
             *, sets: Optional[Mapping[str, Sequence[Reservation]]] = None, progress: bool = False,
             label: str = "", policy_extra: Optional[Mapping[str, Any]] = None,
             drain_limit: int = 100_000) -> dict[str, Any]:
    """One arm over the workload. ``reservations`` is the plan whose bids go in (ignored by
    ``none``); ``sets`` names the reserved sets to measure (default: ``{"": reservations}``;
    the ``none`` arm measures several shares from one run). Returns the figures per set."""
    if arm not in ARMS:
        raise ReplayError(f"unknown arm {arm!r} ({', '.join(ARMS)})")
    t_start = time.perf_counter()
    bids = [] if ARMS[arm] is None else list(reservations)
    sets = dict(sets) if sets is not None else {"": list(reservations)}
    by_index = {r.index: r for r in bids}
    inputs: list[tuple[int, int, int]] = [(t, _DEPART if kind == 0 else _ARRIVE, i) for t, kind, i in w.events]
    inputs += [(r.bid_at, _BID, k) for k, r in enumerate(bids)]
    inputs.sort()
    departs = {i: t for t, kind, i in w.events if kind == 0}
    arrivals = sorted(t["submitted_at"] for t in w.tasks)
    window = (arrivals[0], arrivals[-1]) if arrivals else (0, 0)
    all_res = [r for rs in sets.values() for r in rs] or list(reservations)
    span = (min((r.bid_at for r in all_res), default=0),
            max((r.arrival + r.duration_ms for r in all_res), default=0))

    state = CellState(CELL)
    topic = f"trace.{w.name}.reservations"
    off = 0
    for node in w.cluster.nodes:
        state, _ = decide(state, m.from_avro(m.NodeRegistered, node), (topic, 0, off))
        off += 1
    config = {**policy_config(strategy, seed, w.typical), **(policy_extra or {})}
    if ARMS[arm] is not None:
        config["reservations"] = dict(ARMS[arm])
    state, _ = decide(state, m.PolicyChanged.of(CELL, strategy, config), (topic, 0, off))
    off += 1

    typical = TypicalTasks.from_list(w.typical)
    metrics = RunMetrics(typical, frag_every=10 ** 12)
    meter = FragMeter(typical, state)
    spans = {"window": window, "span": span}
    frag = Integral(spans)               # fragmented milli
    idle = Integral(spans)               # idle milli of the view
    share = Integral(spans)              # fragmented / idle (only while something is idle)
    held = Integral({})                  # held-idle GPUs
    lent = Integral({})
    granted: dict[str, m.ReservationGranted] = {}
    rejected: dict[str, str] = {}
    expired: dict[str, str] = {}
    released_gpus = 0
    claimed: dict[str, int] = {}         # reservation id -> placement time of its claimant
    claimant_of: dict[str, str] = {}     # task id -> reservation id it named
    preempted_by_claimants = 0
    counts = {"bids": len(bids), "ticks": 0}
    share_t: list[float] = []

    def observe(at: int, outs: Iterable[Any]) -> None:
        nonlocal released_gpus, preempted_by_claimants
        for out in outs:
            metrics.on_decision(out)
            kind = type(out).__name__
            if kind == "ReservationGranted":
                granted[out.bid_id] = out
            elif kind == "ReservationRejected":
                rejected[out.bid_id] = out.reason
            elif kind == "ReservationExpired":
                expired[out.reservation_id] = out.reason
            elif kind == "ReservationReleased":
                released_gpus += len(out.gpu_devices)
            elif kind == "TaskPlaced" and out.task_id in claimant_of:
                claimed.setdefault(claimant_of[out.task_id], out.provenance.decided_at)
            elif kind == "TaskPreempted" and getattr(out, "preempted_by", None) in claimant_of:
                preempted_by_claimants += 1

    def sample(at: int) -> None:
        f, i = meter.measure(state)
        frag.advance(at, f)
        idle.advance(at, i)
        share.advance(at, f / i if i > 0 else 0.0)
        held.advance(at, _held(state))
        lent.advance(at, _lent(state))

    def tick(due: int) -> None:
        nonlocal state, off
        metrics.on_input(m.CellTick(event_id=f"tick/{due}", cell=CELL, at=due), due)
        state, outs = decide(state, m.CellTick(event_id=f"tick/{due}", cell=CELL, at=due), (topic, 0, off))
        off += 1
        counts["ticks"] += 1
        observe(due, outs)
        metrics.after_input(state)
        sample(due)

    bar = Progress(len(inputs), label or f"{strategy} {arm}", enabled=progress)
    sample(inputs[0][0] if inputs else 0)
    for at, rank, what in inputs:
        while (due := _next_due(state, at)) is not None:
            tick(due)
        event: Any
        if rank == _BID:
            event = bid_event(w, bids[what])
        elif rank == _ARRIVE:
            task = w.tasks[what]
            r = by_index.get(what)
            if r is not None and r.claims and r.bid_id in granted and r.reservation_id not in expired:
                task = dict(task, labels={**(task.get("labels") or {}), "reservation": r.reservation_id})
                claimant_of[task["task_id"]] = r.reservation_id
            event = m.from_avro(m.TaskSubmitted, task)
        else:
            task = w.tasks[what]
            tid = task["task_id"]
            rec = state.tasks.get(tid)
            status = rec.status if rec is not None else None
            if status in HOLDING:
                event = m.TaskStatusChanged(event_id=f"{tid}/end", task_id=tid, cell=CELL, node_id=rec.node,
                                            status="COMPLETED", at=at, exit_code=0)
            elif status in (PENDING, PREEMPTED):
                event = m.TaskCancelled(event_id=f"{tid}/cancel", task_id=tid, cell=CELL, tenant=task["tenant"],
                                        reason="deleted before it was placed", at=at)
            else:
                bar.update()
                continue
        metrics.on_input(event, at)
        state, outs = decide(state, event, (topic, 0, off))
        off += 1
        observe(at, outs)
        metrics.after_input(state)
        sample(at)
        bar.update()
    end = inputs[-1][0] if inputs else 0
    for _ in range(drain_limit):              # clock rules after the last input (tokens ending)
        due = _next_due(state, 2 ** 62)
        if due is None:
            break
        tick(due)
        end = max(end, due)
    else:
        raise ReplayError(f"the clock never settles after the last input ({drain_limit} ticks)")
    bar.close()
    sample(end)
    metrics.finish(state)
    summary = metrics.summary()
    seconds = time.perf_counter() - t_start

    # ---- per-task queueing (module docstring)
    unsched = {tid for tid, t in metrics.tasks.items() if t["outcome"] == "unschedulable"}

    def wait_s(i: int) -> Optional[float]:
        tid = w.tasks[i]["task_id"]
        t = metrics.tasks.get(tid)
        if t is None or tid in unsched:
            return None
        if t["placed_at"] is not None:
            return (t["placed_at"] - t["sub"]) / 1000.0
        left = departs.get(i, end)
        return (min(left, end) - t["sub"]) / 1000.0

    waits = [wait_s(i) for i in range(len(w.tasks))]
    placed = [metrics.tasks.get(t["task_id"], {}).get("placed_at") is not None for t in w.tasks]
    cap = meter.capacity or 1
    reserved_gpu_ms = sum(len(g.gpu_devices) * (g.end_at - g.start_at) for g in granted.values())
    late = []                                  # claimants of a granted token not placed by its start + a slot
    for bid_id, g in granted.items():
        rid = g.reservation_id
        tid = next((t for t, r in claimant_of.items() if r == rid), None)
        if tid is None:
            continue
        t = metrics.tasks.get(tid)
        placed_at = t["placed_at"] if t else None
        due = max(g.start_at, t["sub"] if t else g.start_at) + 60_000
        if placed_at is None or placed_at > due:
            late.append({"task": tid, "reservation": rid, "token_start": g.start_at, "arrival": t["sub"] if t else None,
                         "placed_at": placed_at, "node": g.node_id, "devices": list(g.gpu_devices)})

    def pct(x: Optional[float], den: float = 1.0) -> Optional[float]:
        return None if x is None else round(100.0 * x / den, 4)

    base = {
        "strategy": strategy, "arm": arm, "seed": seed, "load": w.load,
        "nodes": w.cluster.description["nodes_kept"], "gpus": w.cluster.description["gpus_kept"],
        "frag_idle_pct": pct(share.mean("window")), "frag_capacity_pct": pct(frag.mean("window"), cap),
        "idle_capacity_pct": pct(idle.mean("window"), cap),
        "frag_idle_pct_span": pct(share.mean("span")), "frag_capacity_pct_span": pct(frag.mean("span"), cap),
        "gpu_allocation_pct": summary["gpu_allocation_pct"]["time_mean"],
        "reserved_gpu_h": round(reserved_gpu_ms / 3_600_000, 6),
        "reserved_idle_gpu_h": round(held.area["all"] / 3_600_000, 6),
        "lent_gpu_h": round(lent.area["all"] / 3_600_000, 6),
        "bids": len(bids), "granted": len(granted), "rejected": len(rejected),
        "rejected_reasons": _count(rejected.values()), "expired": len(expired),
        "expired_reasons": _count(expired.values()), "released_gpus": released_gpus,
        "claimants": len(claimant_of), "claimed": len(claimed), "late_claimants": late[:10], "late": len(late),
        "preempted_by_claimants": preempted_by_claimants,
        "unschedulable": len(unsched), "abandoned": summary["tasks"]["abandoned"],
        "inputs": off, "ticks": counts["ticks"], "seconds": round(seconds, 2),
        "window_s": round((window[1] - window[0]) / 1000, 1), "span_s": round((span[1] - span[0]) / 1000, 1),
    }
    base["idle_share_pct"] = (round(100.0 * base["reserved_idle_gpu_h"] / base["reserved_gpu_h"], 4)
                              if base["reserved_gpu_h"] else None)
    out = {}
    for name, rs in sets.items():
        idx = {r.index for r in rs}
        res_w = [waits[i] for i in sorted(idx) if waits[i] is not None]
        oth_w = [waits[i] for i in range(len(w.tasks)) if i not in idx and waits[i] is not None]
        row = dict(base)
        row.update(reserved=_stats(res_w), others=_stats(oth_w),
                   reserved_set=len(idx), reserved_not_placed=sum(1 for i in idx if not placed[i]),
                   reserved_unschedulable=sum(1 for i in idx if w.tasks[i]["task_id"] in unsched))
        out[name] = row
    return out


def _stats(xs: Sequence[float]) -> dict[str, Any]:
    p = percentiles(list(xs))
    return {"n": p["n"], "mean": p["mean"], "p50": p["p50"], "p95": p["p95"], "max": p["max"]}


def _count(xs: Iterable[str]) -> dict[str, int]:
    out: dict[str, int] = {}
    for x in xs:
        out[x] = out.get(x, 0) + 1
    return out


# ============================================================================ the grid
@lru_cache(maxsize=8)
def _workload(nodes_csv: str, pods_csv: str, load: float) -> tuple[timed.TimedWorkload, tuple]:
    w = timed.build(nodes_csv, pods_csv, load=load)
    return w, tuple(read_nodes(nodes_csv))


def workload(nodes_csv: str, pods_csv: str, load: float, shrink: Optional[float], seed: int) -> timed.TimedWorkload:
    """The timed workload at ``load`` on the cluster shrunk with the run seed (parsed once per process)."""
    w, nodes = _workload(str(nodes_csv), str(pods_csv), float(load))
    return dataclasses.replace(w, cluster=timed.shrink(list(nodes), shrink, seed, Path(nodes_csv).name))


def share_key(share: float) -> str:
    return f"{share:g}"


def run_job(job: tuple) -> list[dict[str, Any]]:
    """One (strategy, load, seed, arm) over its shares: rows with ``share`` set."""
    nodes_csv, pods_csv, shrink, strategy, load, seed, arm, rules, extra = job
    w = workload(nodes_csv, pods_csv, load, shrink, seed)
    plans = {share_key(r.share): plan(w, r, seed) for r in rules}
    if arm == "none":                     # no bids: one run measures every share's set
        try:
            rows = simulate(w, strategy, arm, [], seed, sets=plans, policy_extra=extra)
        except Exception as exc:          # noqa: BLE001 - recorded as a failed run, the grid goes on
            return [_failed(w, strategy, arm, seed, r.share, exc) for r in rules]
        return [dict(row, share=float(k)) for k, row in rows.items()]
    out = []
    for r in rules:
        try:
            rows = simulate(w, strategy, arm, plans[share_key(r.share)], seed, policy_extra=extra)
        except Exception as exc:          # noqa: BLE001
            out.append(_failed(w, strategy, arm, seed, r.share, exc))
            continue
        out.append(dict(rows[""], share=r.share))
    return out


def _failed(w: timed.TimedWorkload, strategy: str, arm: str, seed: int, share: float, exc: Exception) -> dict[str, Any]:
    """A run the core stopped with an exception: its identity and the error, no figures."""
    import traceback

    tb = traceback.extract_tb(exc.__traceback__)
    where = [f"{Path(f.filename).name}:{f.lineno} {f.name}" for f in tb[-4:]]
    return {"strategy": strategy, "arm": arm, "seed": seed, "load": w.load, "share": share,
            "nodes": w.cluster.description["nodes_kept"], "gpus": w.cluster.description["gpus_kept"],
            "error": f"{type(exc).__name__}: {exc}", "error_at": where, "seconds": None}


def jobs_of(nodes_csv: str, pods_csv: str, shrink: Optional[float], strategies: Sequence[str],
            loads: Sequence[float], seeds: Sequence[int], arms: Sequence[str], rules: Sequence[Rule],
            policy_extra: Optional[Mapping[str, Any]] = None, sweep: Sequence[Rule] = (),
            sweep_at: Optional[tuple[str, float]] = None) -> list[tuple]:
    """Every (strategy, load, seed, arm) job with ``rules``; the ``sweep`` rules (other shares)
    only at ``sweep_at = (strategy, load)``."""
    out = []
    for strategy in strategies:
        for load in loads:
            here = tuple(rules) + (tuple(sweep) if sweep_at == (strategy, float(load)) else ())
            for seed in seeds:
                for arm in arms:
                    out.append((str(nodes_csv), str(pods_csv), shrink, strategy, float(load), seed, arm, here,
                                dict(policy_extra or {})))
    return out


def run_grid(jobs: list[tuple], *, workers: int = 2, say=None, progress: bool = False) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    runs = sum(1 if j[6] == "none" else len(j[7]) for j in jobs)
    bar = Progress(runs, "reservations what-if", enabled=progress)
    done = [0]

    def take(batch: list[dict[str, Any]]) -> None:
        rows.extend(batch)
        n = 1 if batch and batch[0]["arm"] == "none" else len(batch)
        done[0] += n
        bar.update(n)
        if say is not None:
            for r in batch if batch[0]["arm"] != "none" else batch[:1]:
                if r.get("error"):
                    say(f"  [{done[0]}/{runs}] {r['strategy']} k={r['load']:g} seed {r['seed']} {r['arm']} share "
                        f"{r['share']:g}: FAILED {r['error']} at {' < '.join(reversed(r['error_at']))}")
                    continue
                say(f"  [{done[0]}/{runs}] {r['strategy']} k={r['load']:g} seed {r['seed']} {r['arm']}"
                    f"{'' if r['arm'] == 'none' else ' share ' + format(r['share'], 'g')}: "
                    f"reserved q mean {_f(r['reserved']['mean'])} s, others {_f(r['others']['mean'])} s, "
                    f"frag {_f(r['frag_idle_pct'])} % of idle, granted {r['granted']}/{r['bids']}, "
                    f"idle {_f(r['idle_share_pct'])} % ({r['seconds']:.1f} s)")

    run_jobs(run_job, jobs, workers, take)
    bar.close()
    rows.sort(key=lambda r: (r["strategy"], r["load"], r["share"], list(ARMS).index(r["arm"]), r["seed"]))
    return rows


def _f(x: Optional[float], nd: int = 1) -> str:
    return "-" if x is None else f"{x:,.{nd}f}"


# ============================================================================ statistics
def bootstrap(x: Sequence[float], *, n: int = BOOTSTRAP, seed: int = 0) -> dict[str, Optional[float]]:
    """Mean and 95 % percentile-bootstrap interval of the mean over ``x`` (numpy)."""
    a = np.asarray([v for v in x if v is not None], dtype=np.float64)
    if a.size == 0:
        return {"mean": None, "lo": None, "hi": None, "n": 0}
    rng = np.random.default_rng(seed)
    means = a[rng.integers(0, a.size, size=(n, a.size))].mean(axis=1)
    lo, hi = np.percentile(means, [2.5, 97.5])
    return {"mean": float(a.mean()), "lo": float(lo), "hi": float(hi), "n": int(a.size)}


def paired(x: Sequence[Optional[float]], base: Sequence[Optional[float]], *, n: int = BOOTSTRAP,
           seed: int = 0) -> dict[str, Any]:
    """Paired difference ``x - base`` (same seeds): mean and 95 % bootstrap interval, and the
    relative change ``mean(x) / mean(base) - 1`` with its interval (same resamples)."""
    pairs = [(a, b) for a, b in zip(x, base) if a is not None and b is not None]
    if not pairs:
        return {"diff": None, "diff_lo": None, "diff_hi": None, "rel": None, "rel_lo": None, "rel_hi": None, "n": 0}
    a = np.asarray([p[0] for p in pairs], dtype=np.float64)
    b = np.asarray([p[1] for p in pairs], dtype=np.float64)
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, a.size, size=(n, a.size))
    d = (a - b)[idx].mean(axis=1)
    ma, mb = a[idx].mean(axis=1), b[idx].mean(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        rel = np.where(mb > 0, ma / mb - 1.0, np.nan)
    ok = rel[~np.isnan(rel)]
    out = {"diff": float((a - b).mean()), "diff_lo": float(np.percentile(d, 2.5)),
           "diff_hi": float(np.percentile(d, 97.5)), "n": int(a.size),
           "rel": float(a.mean() / b.mean() - 1.0) if b.mean() > 0 else None,
           "rel_lo": float(np.percentile(ok, 2.5)) if ok.size else None,
           "rel_hi": float(np.percentile(ok, 97.5)) if ok.size else None}
    return out


METRICS = {   # name -> (how to read it from a row, label)
    "reserved_q_mean": (lambda r: r["reserved"]["mean"], "reserved tasks: queueing mean, s"),
    "reserved_q_p95": (lambda r: r["reserved"]["p95"], "reserved tasks: queueing p95, s"),
    "others_q_mean": (lambda r: r["others"]["mean"], "other tasks: queueing mean, s"),
    "frag_idle_pct": (lambda r: r["frag_idle_pct"], "fragmentation, % of idle GPU (arrival window)"),
    "frag_capacity_pct": (lambda r: r["frag_capacity_pct"], "fragmentation, % of capacity (arrival window)"),
    "frag_idle_pct_span": (lambda r: r["frag_idle_pct_span"], "fragmentation, % of idle GPU (reservation span)"),
    "gpu_allocation_pct": (lambda r: r["gpu_allocation_pct"], "GPU allocation, % (arrival window)"),
    "reserved_gpu_h": (lambda r: r["reserved_gpu_h"], "reserved GPU-hours"),
    "reserved_idle_gpu_h": (lambda r: r["reserved_idle_gpu_h"], "reserved-idle GPU-hours"),
    "idle_share_pct": (lambda r: r["idle_share_pct"], "reserved-idle, % of reserved GPU-hours"),
    "lent_gpu_h": (lambda r: r["lent_gpu_h"], "held GPU-hours lent to bronze"),
    "granted": (lambda r: r["granted"], "bids granted"),
    "rejected": (lambda r: r["rejected"], "bids rejected"),
    "expired": (lambda r: r["expired"], "tokens expired"),
    "claimed": (lambda r: r["claimed"], "tokens claimed"),
    "late": (lambda r: r["late"], "claimants not placed by their token's start + 1 min"),
    "abandoned": (lambda r: r["abandoned"], "tasks abandoned (left while waiting)"),
}
RELATIVE = ("reserved_q_mean", "reserved_q_p95", "others_q_mean", "frag_idle_pct", "frag_capacity_pct",
            "frag_idle_pct_span", "gpu_allocation_pct")


def _get(fn, row: Optional[Mapping[str, Any]]) -> Optional[float]:
    return None if row is None or row.get("error") else fn(row)


def aggregate(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Per (strategy, k, share) and arm: every metric's bootstrap mean, and for the metrics
    in :data:`RELATIVE` the paired difference with ``none``."""
    out: dict[str, Any] = {}
    cells = sorted({(r["strategy"], r["load"], r["share"]) for r in rows})
    for strategy, load, share in cells:
        sub = [r for r in rows if (r["strategy"], r["load"], r["share"]) == (strategy, load, share)]
        seeds = sorted({r["seed"] for r in sub})
        by = {a: {r["seed"]: r for r in sub if r["arm"] == a} for a in ARMS}
        cell: dict[str, Any] = {"strategy": strategy, "load": load, "share": share, "seeds": seeds, "arms": {}}
        for arm, runs in by.items():
            if not runs:
                continue
            vals = {k: [_get(fn, runs.get(s)) for s in seeds] for k, (fn, _l) in METRICS.items()}
            a: dict[str, Any] = {k: bootstrap(v) for k, v in vals.items()}
            ok = [r for r in runs.values() if not r.get("error")]
            a["failed_runs"] = {r["seed"]: r["error"] for r in runs.values() if r.get("error")}
            res_h = sum(r["reserved_gpu_h"] for r in ok)
            a["idle_share_pooled_pct"] = (round(100.0 * sum(r["reserved_idle_gpu_h"] for r in ok) / res_h, 4)
                                          if res_h else None)
            a["late_total"] = sum(r["late"] for r in ok)
            a["claimants_total"] = sum(r["claimants"] for r in ok)
            if arm != "none" and by["none"]:
                base = {k: [_get(fn, by["none"].get(s)) for s in seeds] for k, (fn, _l) in METRICS.items()}
                a["vs_none"] = {k: paired(vals[k], base[k]) for k in RELATIVE}
            cell["arms"][arm] = a
        out[f"{strategy}/k={load:g}/share={share:g}"] = cell
    return out


def acceptance(agg: Mapping[str, Any], strategy: str = "default", load: float = 2.0,
               share: float = 0.25) -> Optional[dict[str, Any]]:
    """The issue's goals at (strategy, k, share): per arm, each figure vs none and met or not."""
    cell = agg.get(f"{strategy}/k={load:g}/share={share:g}")
    if not cell:
        return None
    out: dict[str, Any] = {"strategy": strategy, "load": load, "share": share, "seeds": cell["seeds"], "arms": {}}
    for arm, a in cell["arms"].items():
        if arm == "none":
            continue
        v = a["vs_none"]
        idle = a["idle_share_pooled_pct"]
        checks = {
            "reserved_queueing": {**v["reserved_q_mean"], "goal": "<= -67 %",
                                  "met": v["reserved_q_mean"]["rel"] is not None
                                  and v["reserved_q_mean"]["rel"] <= GOALS["reserved_queueing_rel"]},
            "reserved_queueing_p95": {**v["reserved_q_p95"], "goal": "(reported)", "met": None},
            "fragmentation": {**v["frag_idle_pct"], "goal": "<= -42 %",
                              "met": v["frag_idle_pct"]["rel"] is not None
                              and v["frag_idle_pct"]["rel"] <= GOALS["frag_rel"]},
            "fragmentation_span": {**v["frag_idle_pct_span"], "goal": "(reported)", "met": None},
            "others_queueing": {**v["others_q_mean"], "goal": "<= +5 %",
                                "met": v["others_q_mean"]["rel"] is not None
                                and v["others_q_mean"]["rel"] <= GOALS["others_queueing_rel"]},
            "reserved_idle_share": {"pooled_pct": idle, "mean_pct": a["idle_share_pct"], "goal": "<= 5 %",
                                    "met": idle is not None and idle <= 100 * GOALS["idle_share"]},
        }
        checks["late"] = a["late_total"]
        checks["claimants"] = a["claimants_total"]
        checks["failed"] = a["failed_runs"]
        out["arms"][arm] = checks
    return out


# ============================================================================ text output
def _ci(b: Mapping[str, Any], nd: int = 1) -> str:
    if b.get("mean") is None:
        return "-"
    return f"{b['mean']:,.{nd}f} [{b['lo']:,.{nd}f}, {b['hi']:,.{nd}f}]"


def _rel(p: Mapping[str, Any]) -> str:
    if p.get("rel") is None:
        return "-"
    lo = "?" if p.get("rel_lo") is None else f"{100 * p['rel_lo']:+.0f}"
    hi = "?" if p.get("rel_hi") is None else f"{100 * p['rel_hi']:+.0f}"
    return f"{100 * p['rel']:+.1f} % [{lo}, {hi}]"


def acceptance_rows(acc: Mapping[str, Any]) -> tuple[list[str], list[tuple[str, list[str]]]]:
    arms = list(acc["arms"])
    yes = lambda c: "" if c["met"] is None else (" met" if c["met"] else " NOT met")  # noqa: E731
    body = [
        ("reserved queueing mean vs none (goal <= -67 %)",
         [_rel(acc["arms"][a]["reserved_queueing"]) + yes(acc["arms"][a]["reserved_queueing"]) for a in arms]),
        ("reserved queueing p95 vs none", [_rel(acc["arms"][a]["reserved_queueing_p95"]) for a in arms]),
        ("fragmentation (% of idle) vs none (goal <= -42 %)",
         [_rel(acc["arms"][a]["fragmentation"]) + yes(acc["arms"][a]["fragmentation"]) for a in arms]),
        ("  same, over the reservation span", [_rel(acc["arms"][a]["fragmentation_span"]) for a in arms]),
        ("others' queueing mean vs none (goal <= +5 %)",
         [_rel(acc["arms"][a]["others_queueing"]) + yes(acc["arms"][a]["others_queueing"]) for a in arms]),
        ("reserved-idle % of reserved GPU-h, pooled (goal <= 5 %)",
         [_f(acc["arms"][a]["reserved_idle_share"]["pooled_pct"]) + yes(acc["arms"][a]["reserved_idle_share"])
          for a in arms]),
        ("claimants not placed by token start + 1 min", [f"{acc['arms'][a]['late']} of {acc['arms'][a]['claimants']}"
                                                         for a in arms]),
        ("runs the core stopped with an error", [str(len(acc["arms"][a]["failed"])) for a in arms]),
    ]
    return ["metric (paired vs none, 95 % CI)", *arms], body


def cell_rows(cell: Mapping[str, Any]) -> tuple[list[str], list[tuple[str, list[str]]]]:
    arms = list(cell["arms"])
    body = []
    for k, (_fn, label) in METRICS.items():
        nd = 0 if k in ("granted", "rejected", "expired", "claimed", "late", "abandoned") else 1
        body.append((label, [_ci(cell["arms"][a][k], nd) for a in arms]))
    for k in ("reserved_q_mean", "others_q_mean", "frag_idle_pct"):
        body.append((f"  {METRICS[k][1].split(',')[0]} vs none",
                     [_rel(cell["arms"][a]["vs_none"][k]) if "vs_none" in cell["arms"][a] else "" for a in arms]))
    return ["metric (mean [95 % CI])", *arms], body


def text_table(header: Sequence[str], body: Sequence[tuple[str, Sequence[str]]]) -> str:
    rows = [list(header)] + [[n, *v] for n, v in body]
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    return "\n".join("  ".join(c.ljust(wd) if i == 0 else c.rjust(wd) for i, (c, wd) in enumerate(zip(r, widths)))
                     for r in rows)


# ============================================================================ report
def plots(doc: Mapping[str, Any], out_dir: Path) -> dict[str, Path]:
    """PNGs: reserved queueing, fragmentation, others' queueing and reserved-idle share vs k
    (per strategy, at the headline share), and the share sweep at k = 2 when run."""
    from .report import COLORS, _plt, _save

    plt = _plt()
    out_dir.mkdir(parents=True, exist_ok=True)
    agg = doc["aggregate"]
    share = doc["headline"]["share"]
    strategies = doc["grid"]["strategies"]
    loads = sorted(doc["grid"]["loads"])
    paths: dict[str, Path] = {}
    panels = [("reserved_q_mean", "reserved tasks: mean queueing (s)"), ("others_q_mean", "other tasks: mean queueing (s)"),
              ("frag_idle_pct", "fragmentation (% of idle GPU)"), ("idle_share_pct", "reserved-idle (% of reserved GPU-h)")]
    for strategy in strategies:
        fig, axes = plt.subplots(2, 2, figsize=(10, 6.6))
        for ax, (key, title) in zip(axes.flat, panels):
            for j, arm in enumerate(ARMS):
                xs, ys, lo, hi = [], [], [], []
                for load in loads:
                    cell = agg.get(f"{strategy}/k={load:g}/share={share:g}")
                    b = cell and cell["arms"].get(arm, {}).get(key)
                    if not b or b.get("mean") is None:
                        continue
                    xs.append(load + (j - 1.5) * 0.03)
                    ys.append(b["mean"])
                    lo.append(b["mean"] - b["lo"])
                    hi.append(b["hi"] - b["mean"])
                if xs:
                    ax.errorbar(xs, ys, yerr=[lo, hi], marker="o", ms=4, capsize=3, color=COLORS[j], label=arm)
            ax.set_title(title)
            ax.set_xlabel("arrival compression k")
            ax.set_xticks(loads)
        axes.flat[0].legend(fontsize=8)
        fig.suptitle(f"{strategy}: {100 * share:g} % of multi-GPU tasks reserve (mean, 95 % bootstrap CI, "
                     f"{len(doc['grid']['seeds'])} seeds)", fontsize=10)
        paths[f"by_load_{strategy}"] = _save(fig, out_dir / f"by_load_{strategy}.png", plt)
        # the paired change vs none, with the goals
        rel_panels = [("reserved_q_mean", "reserved: mean queueing", GOALS["reserved_queueing_rel"]),
                      ("others_q_mean", "others: mean queueing", GOALS["others_queueing_rel"]),
                      ("frag_idle_pct", "fragmentation", GOALS["frag_rel"])]
        fig, axes = plt.subplots(1, 3, figsize=(12, 3.6))
        for ax, (key, title, goal) in zip(axes, rel_panels):
            for j, arm in enumerate(a for a in ARMS if a != "none"):
                xs, ys, lo, hi = [], [], [], []
                for load in loads:
                    cell = agg.get(f"{strategy}/k={load:g}/share={share:g}")
                    p = cell and cell["arms"].get(arm, {}).get("vs_none", {}).get(key)
                    if not p or p.get("rel") is None or p.get("rel_lo") is None:
                        continue
                    xs.append(load + (j - 1) * 0.04)
                    ys.append(100 * p["rel"])
                    lo.append(100 * (p["rel"] - p["rel_lo"]))
                    hi.append(100 * (p["rel_hi"] - p["rel"]))
                if xs:
                    ax.errorbar(xs, ys, yerr=[lo, hi], marker="o", ms=4, capsize=3, color=COLORS[j + 1], label=arm)
            ax.axhline(0, color="#888", lw=0.8)
            ax.axhline(100 * goal, color="#d62728", lw=0.8, ls="--")
            ax.set_title(f"{title}, % vs none")
            ax.set_xlabel("arrival compression k")
            ax.set_xticks(loads)
        axes[0].legend(fontsize=8)
        fig.suptitle(f"{strategy}: paired change vs none (95 % bootstrap CI); dashed: the goal", fontsize=10)
        paths[f"vs_none_{strategy}"] = _save(fig, out_dir / f"vs_none_{strategy}.png", plt)
    shares = sorted(doc["grid"]["shares"])
    if len(shares) > 1:
        load = doc["headline"]["load"]
        fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
        for ax, (key, title) in zip(axes, [panels[0], panels[2]]):
            for j, arm in enumerate(ARMS):
                xs, ys, lo, hi = [], [], [], []
                for s in shares:
                    cell = agg.get(f"{doc['headline']['strategy']}/k={load:g}/share={s:g}")
                    b = cell and cell["arms"].get(arm, {}).get(key)
                    if not b or b.get("mean") is None:
                        continue
                    xs.append(100 * s + (j - 1.5) * 0.6)
                    ys.append(b["mean"])
                    lo.append(b["mean"] - b["lo"])
                    hi.append(b["hi"] - b["mean"])
                if xs:
                    ax.errorbar(xs, ys, yerr=[lo, hi], marker="o", ms=4, capsize=3, color=COLORS[j], label=arm)
            ax.set_title(title)
            ax.set_xlabel("% of multi-GPU tasks reserving")
        axes[0].legend(fontsize=8)
        fig.suptitle(f"{doc['headline']['strategy']}, k = {load:g}", fontsize=10)
        paths["by_share"] = _save(fig, out_dir / "by_share.png", plt)
    return paths


def html_report(doc: Mapping[str, Any], images: Mapping[str, Path], path: Path) -> Path:
    import base64
    import html

    from .report import CSS, _table_html

    e = html.escape
    parts = ["<!doctype html><html><head><meta charset='utf-8'><title>Suanli: advance reservations what-if</title>",
             f"<style>{CSS}</style></head><body>",
             "<h1>Advance reservations on the openb trace (issue #15)</h1>",
             f"<p class='sub'>{e(doc['command'])}</p>", "<h2>Set-up</h2><dl>"]
    for k, v in doc["setup"].items():
        parts.append(f"<dt>{e(k)}</dt><dd>{e(v if isinstance(v, str) else json.dumps(v))}</dd>")
    parts.append("</dl>")
    acc = doc.get("acceptance")
    if acc:
        h = doc["headline"]
        parts.append(f"<h2>Acceptance: k = {h['load']:g}, {e(h['strategy'])}, {100 * h['share']:g} % reserving, "
                     f"{len(acc['seeds'])} seeds</h2>")
        header, body = acceptance_rows(acc)
        parts.append(_table_html(header, body))
    captions = {k: (f"{k.split('_', 2)[-1]}: paired change vs none by arrival compression (95 % CI)"
                    if k.startswith("vs_none") else f"{k.split('_', 2)[-1]}: by arrival compression (mean, 95 % CI)")
                for k in images}
    captions["by_share"] = "by share of multi-GPU tasks reserving"
    parts.append("<h2>Plots</h2>")
    for key, img in images.items():
        data = base64.b64encode(Path(img).read_bytes()).decode()
        parts.append(f"<figure><img alt='{e(captions.get(key, key))}' src='data:image/png;base64,{data}'>"
                     f"<figcaption class='sub'>{e(captions.get(key, key))}</figcaption></figure>")
    parts.append("<h2>Every cell</h2>")
    for name, cell in doc["aggregate"].items():
        parts.append(f"<h3>{e(name)} ({len(cell['seeds'])} seeds)</h3>")
        header, body = cell_rows(cell)
        parts.append(_table_html(header, body))
    parts.append("<h2>Definitions</h2><ul>")
    parts += [f"<li>{e(d)}</li>" for d in DEFINITIONS]
    parts.append("</ul></body></html>")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(parts))
    return path


DEFINITIONS = [
    "queueing = first placement's decided_at - arrival; a task never placed counts its wait until it left "
    "(departure) or the run ended (a lower bound); tasks unschedulable on the shrunk cluster are left out",
    "reserved tasks = the tasks chosen to reserve (claiming or not), the same set in every arm including none; "
    "others = all the other tasks",
    "fragmentation = FGD expected fragmented GPU milli w.r.t. the typical tasks, on reservations.free_view(state) "
    "(held idle GPUs count as idle), / idle GPU milli of that view; time-weighted over the arrival window, sampled "
    "after every input and tick; 'reservation span' = first bid to the last reserving task's arrival + declared "
    "duration",
    "reserved GPU-hours = sum over ReservationGranted of GPUs x (end_at - start_at); reserved-idle GPU-hours = "
    "integral over the run of reservations.held_devices(state) (held, neither claimed nor lent)",
    "GPU allocation = GPU milli held by placed tasks / capacity, time mean over the arrival window",
    "means over seeds with 95 % percentile-bootstrap intervals (10,000 resamples of the seeds); vs none = paired "
    "by seed (same shrink sample, same draws): relative change = mean(arm) / mean(none) - 1",
]


# ============================================================================ entry points
def experiment(nodes_csv: str, pods_csv: str, *, rules: Sequence[Rule], strategies: Sequence[str],
               loads: Sequence[float], seeds: Sequence[int], shrink: Optional[float] = DEFAULT_SHRINK,
               arms: Sequence[str] = tuple(ARMS), workers: int = 2, say=None, progress: bool = False,
               command: str = "", headline: Optional[Mapping[str, Any]] = None,
               policy_extra: Optional[Mapping[str, Any]] = None, sweep: Sequence[Rule] = ()) -> dict[str, Any]:
    """The whole grid; returns the document (rows, aggregate, acceptance, set-up). ``sweep``:
    more rules (other shares) run only at the headline (strategy, load)."""
    for arm in arms:
        if arm not in ARMS:
            raise ReplayError(f"unknown arm {arm!r} ({', '.join(ARMS)})")
    if "none" not in arms:
        arms = ("none", *arms)
    started = time.perf_counter()
    version = core_version()
    head = dict(headline or {})
    head.setdefault("strategy", "default" if "default" in strategies else strategies[0])
    head.setdefault("load", 2.0 if 2.0 in [float(x) for x in loads] else float(loads[0]))
    head.setdefault("share", 0.25 if 0.25 in [r.share for r in rules] else rules[0].share)
    sweep = [r for r in sweep if r.share not in {x.share for x in rules}]
    jobs = jobs_of(nodes_csv, pods_csv, shrink, strategies, loads, seeds, arms, rules, policy_extra, sweep,
                   (head["strategy"], float(head["load"])))
    if say is not None:
        say(f"reservations what-if: {len(strategies)} strategies x {len(loads)} loads x {len(seeds)} seeds x "
            f"{len(arms)} arms, shares {','.join(f'{r.share:g}' for r in rules)}"
            + (f" (and {','.join(f'{r.share:g}' for r in sweep)} at {head['strategy']} k={head['load']:g})"
               if sweep else "") + f": {sum(1 if j[6] == 'none' else len(j[7]) for j in jobs)} runs on "
            f"{workers} worker(s)")
    rows = run_grid(jobs, workers=workers, say=say, progress=progress)
    agg = aggregate(rows)
    acc = acceptance(agg, head["strategy"], head["load"], head["share"])
    w = workload(nodes_csv, pods_csv, head["load"], shrink, seeds[0])
    cand = candidates(w)
    sizes = [rows_[0] for rows_ in [[r for r in rows if r["arm"] == "none" and r["seed"] == s] for s in seeds] if rows_]
    setup = {
        "nodes": f"{nodes_csv}",
        "cluster": (f"shrink {shrink:g}: round({shrink:g} x {w.cluster.description['nodes_total']}) nodes drawn by "
                    f"random.Random(seed).sample per seed (the run seed; same sample in every arm)"
                    if shrink else "all nodes"),
        "cluster sizes (GPUs per seed)": ", ".join(f"{r['seed']}: {r['gpus']}" for r in sizes),
        "pods": f"{pods_csv} ({len(w.tasks):,} tasks, {len(cand)} with gpu_count > 1)",
        "arrivals": "creation_time / k (k = timed load: arrivals compressed, lifetimes kept); departures at arrival "
                    "+ lifetime (COMPLETED if placed, TaskCancelled if still waiting)",
        "who reserves": "; ".join(f"[{r.text()}] {r.describe()}" for r in [*rules, *sweep]),
        "arms": {a: ARMS[a] for a in arms},
        "strategies": ", ".join(strategies) + " (the FGD protocol's config: seed and, for fgd/default, the typical "
                                               "tasks)",
        "clock": "CellTick whenever timed.next_due says a clock rule falls due before the next input, and after "
                 "the last input until nothing is due",
        "seeds": f"{seeds[0]}-{seeds[-1]}" if list(seeds) == list(range(seeds[0], seeds[-1] + 1)) else
                 ",".join(map(str, seeds)),
        "core": (f"commit {version}" if _rsv is not None else "processors.reservations MISSING (no tokens: bids "
                                                                "are ignored)"),
    }
    return {"command": command, "setup": setup,
            "grid": {"strategies": list(strategies), "loads": [float(x) for x in loads], "seeds": list(seeds),
                     "shares": [r.share for r in rules], "sweep_shares": [r.share for r in sweep], "arms": list(arms),
                     "shrink": shrink, "rules": [r.text() for r in [*rules, *sweep]]},
            "headline": head, "acceptance": acc, "aggregate": agg, "runs": rows,
            "seconds": round(time.perf_counter() - started, 1)}


def core_version() -> str:
    """The repository commit the run used, and whether processors/ differed from it."""
    import subprocess

    root = Path(__file__).resolve().parent.parent
    try:
        head = subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--", "processors"],
                               capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return f"{head}{' + uncommitted changes in processors/' if dirty else ''}" if head else "unknown"


def write_report(doc: Mapping[str, Any], out_dir: Path) -> Path:
    images = plots(doc, out_dir)
    return html_report(doc, images, out_dir / "report.html")


def _floats(text: str, what: str) -> list[float]:
    try:
        return [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ReplayError(f"{what}: {text!r} is not a comma-separated list of numbers") from None


def seeds_of(text: str) -> list[int]:
    out: list[int] = []
    for part in text.split(","):
        a, _, b = part.strip().partition("-")
        try:
            out += list(range(int(a), int(b) + 1)) if b else [int(a)]
        except ValueError:
            raise ReplayError(f"--seeds: {text!r} is not a list like 42-51 or 42,45") from None
    return out


def main(argv: Optional[Sequence[str]] = None) -> int:
    """``python -m suanli.replay.reservations_whatif``: the whole grid, its JSON and report."""
    from suanli.config import settings


    d = settings().openb_dir
    p = argparse.ArgumentParser(prog="python -m suanli.replay.reservations_whatif",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--nodes", default=str(d / "openb_node_list_gpu_node.csv"))
    p.add_argument("--pods", default=str(d / "openb_pod_list_default.csv"))
    p.add_argument("--shrink", type=float, default=DEFAULT_SHRINK,
                   help=f"keep this share of the nodes, sampled with the run seed (default {DEFAULT_SHRINK})")
    p.add_argument("--loads", default=",".join(f"{x:g}" for x in DEFAULT_LOADS), help="arrival compressions k")
    p.add_argument("--seeds", default="42-51")
    p.add_argument("--strategies", default=",".join(DEFAULT_STRATEGIES))
    p.add_argument("--shares", default="0.25", help="shares of the multi-GPU tasks that reserve, over the whole grid")
    p.add_argument("--sweep-shares", default="0.1,0.5",
                   help="more shares, run only at the headline cell (default strategy, k = 2); '' for none")
    p.add_argument("--arms", default=",".join(ARMS), help="arms (none is always run: the baseline)")
    p.add_argument("--reservations", default="", metavar="RULE",
                   help="the rest of the rule (lead, overrun, unclaimed, latest, price); "
                        "default lead=5m-6h,overrun=1-2,unclaimed=0.1,latest=15m,price=1-4")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--json", default="reservations-whatif.json", help="write every run and the aggregate here")
    p.add_argument("--report", default=None, help="report directory (default: beside --json, <stem>-report)")
    p.add_argument("--quiet", action="store_true")
    args = p.parse_args(argv)
    base = Rule.parse(args.reservations)
    rules = [dataclasses.replace(base, share=s) for s in _floats(args.shares, "--shares")]
    for r in rules:
        r.check()
    say = (lambda _s: None) if args.quiet else (lambda s: print(s, file=sys.stderr, flush=True))
    command = " ".join(["python -m suanli.replay.reservations_whatif", *(argv if argv is not None else sys.argv[1:])])
    sweep = [dataclasses.replace(base, share=s) for s in _floats(args.sweep_shares, "--sweep-shares")]
    doc = experiment(args.nodes, args.pods, rules=rules, strategies=[s for s in args.strategies.split(",") if s],
                     loads=_floats(args.loads, "--loads"), seeds=seeds_of(args.seeds), shrink=args.shrink,
                     arms=tuple(a for a in args.arms.split(",") if a), workers=args.workers, say=say,
                     progress=False, command=command, sweep=sweep)
    print_summary(doc)
    j = Path(args.json)
    j.write_text(json.dumps(doc, indent=1) + "\n")
    out = Path(args.report) if args.report else j.with_name(f"{j.stem}-report")
    page = write_report(doc, out)
    print(f"\nJSON: {j}\nreport: {page}")
    say(f"reservations what-if: {doc['seconds']:.0f} s")
    return 0


def print_summary(doc: Mapping[str, Any]) -> None:
    acc = doc.get("acceptance")
    if acc:
        h = doc["headline"]
        print(f"\nacceptance: k = {h['load']:g}, {h['strategy']}, {100 * h['share']:g} % reserving, "
              f"{len(acc['seeds'])} seeds (paired vs none, 95 % bootstrap CI)")
        print(text_table(*acceptance_rows(acc)))
    for name, cell in doc["aggregate"].items():
        if acc and name == f"{acc['strategy']}/k={acc['load']:g}/share={acc['share']:g}":
            print(f"\n{name} ({len(cell['seeds'])} seeds)")
            print(text_table(*cell_rows(cell)))


if __name__ == "__main__":
    try:
        raise SystemExit(main())
    except ReplayError as exc:
        print(f"reservations_whatif: {exc}", file=sys.stderr)
        raise SystemExit(2)
