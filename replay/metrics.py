"""What-if figures of one run, folded from its inputs and the core's decisions.

Definitions (all from event times, never the wall clock):

* *queueing time* of a placed task = its TaskPlaced ``provenance.decided_at`` minus its
  ``submitted_at`` (0 when placed on arrival). Percentiles are numpy's linear
  interpolation over placed tasks; ``queueing_waited_s`` is the same over tasks that
  waited at all.
* *abandoned*: a task withdrawn while still pending (timed mode: its trace deletion time
  came first); *unschedulable*: refused for good (``TaskUnschedulable``), by reason;
  ``first_pending_reason``: why tasks that had to wait waited, the filter that removed
  the most nodes on their first attempt.
* *GPU allocation %*: GPU milli held by placed tasks / GPU capacity of the cell;
  *demand %*: GPU milli asked by tasks in the system (placed or waiting) / capacity.
  ``time_mean`` weighs each value by how long it held, over the *arrival window*: from
  the first submission to the last one (the long tail of departures after the last
  arrival would otherwise dominate: on openb one pod lives 145 days). Plotted series
  cover the same window.
* *fragmentation %*: the FGD paper's expected fragmented GPU milli w.r.t. the typical
  tasks (``processors/frag.py``), / capacity, sampled at evenly spaced inputs.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from suanli.processors.frag import TypicalTasks, cluster_frag_milli, typical_from_counts
from suanli.processors import model as m
from suanli.processors.core import event_time as input_time  # noqa: F401  (re-exported for whatif)
from suanli.processors.state import CellState

TIERS = ("GOLD", "SILVER", "BRONZE")
MAX_POINTS = 600       # series points kept for plots and JSON


def _gpu(resources: m.TaskResources) -> int:
    """GPU milli a task asks for in total (``Request.gpu_total``)."""
    return m.Request.of(resources).gpu_total


def percentiles(xs: list[float]) -> dict[str, float | int | None]:
    if not xs:
        return {"n": 0, "mean": None, "p50": None, "p95": None, "p99": None, "max": None}
    a = np.asarray(xs, dtype=np.float64)
    p50, p95, p99 = np.percentile(a, [50, 95, 99])
    return {"n": int(a.size), "mean": round(float(a.mean()), 3), "p50": round(float(p50), 3),
            "p95": round(float(p95), 3), "p99": round(float(p99), 3), "max": round(float(a.max()), 3)}


def thin(xs: list, k: int = MAX_POINTS) -> list:
    if len(xs) <= k:
        return list(xs)
    idx = np.linspace(0, len(xs) - 1, k).round().astype(int)
    return [xs[i] for i in idx]


class RunMetrics:
    """Feed :meth:`on_input` for every input (before deciding it), :meth:`on_decision`
    for every decision, then :meth:`after_input`; :meth:`summary` at the end."""

    def __init__(self, typical: TypicalTasks | None = None, frag_every: int = 100):
        self.typical = typical            # None: the cell's observed histogram at each sample
        self.frag_every = max(1, frag_every)
        self.tasks: dict[str, dict[str, Any]] = {}
        self.alloc = 0
        self.demand = 0
        self.t0: int | None = None
        self.t = 0
        self.n_inputs = 0
        self.alloc_area = 0.0
        self.demand_area = 0.0
        self.peak_alloc = 0
        self.peak_demand = 0
        self.unschedulable: dict[str, int] = {}
        self.evicted: dict[str, int] = {}        # TaskPreempted / TaskLost decisions
        self.pending_reason: dict[str, int] = {}
        self.series: list[tuple[int, int, int]] = []          # (t ms, alloc milli, demand milli)
        self.frag: list[tuple[int, float]] = []               # (t ms, frag milli)
        self.capacity = 0
        self.window: tuple[float, float, int] | None = None   # areas and time at the last submission

    # ------------------------------------------------------------------ feeding
    def on_input(self, event: Any, at_ms: int) -> None:
        """An input (a ``model`` value), before the core decides it."""
        if isinstance(event, m.TaskSubmitted) and event.task_id not in self.tasks:
            if self.t0 is None:
                self.t0 = self.t = at_ms
            self.tasks[event.task_id] = {
                "sub": event.submitted_at or at_ms, "qos": event.qos_tier or "SILVER",
                "gpu": _gpu(event.resources), "placed_at": None, "held": 0, "outcome": None}
            self._advance(at_ms)
            self.window = (self.alloc_area, self.demand_area, self.t)
            return
        self._advance(at_ms)

    def _advance(self, at_ms: int) -> None:
        if self.t0 is None or at_ms <= self.t:
            return
        dt = at_ms - self.t
        self.alloc_area += self.alloc * dt
        self.demand_area += self.demand * dt
        self.t = at_ms

    def on_decision(self, p: Any) -> None:
        """A decision (a ``model`` value); other outputs (dispatch commands) are ignored."""
        kind = type(p).__name__
        task = self.tasks.get(getattr(p, "task_id", None))
        if task is None:
            return
        if kind == "TaskPlaced":
            if task["placed_at"] is None:
                task["placed_at"] = p.provenance.decided_at
            task["held"] = p.gpu_milli * len(p.gpu_devices)
            self.alloc += task["held"]
            if task["outcome"] is None:
                self.demand += task["gpu"]
                task["outcome"] = "placed"
            else:
                task["outcome"] = "placed"
        elif kind == "TaskPending":
            if task["outcome"] is None:
                task["outcome"] = "pending"
                self.demand += task["gpu"]
                reasons = p.reasons
                if reasons:
                    top = max(reasons, key=lambda r: r.nodes).reason
                    self.pending_reason[top] = self.pending_reason.get(top, 0) + 1
        elif kind == "TaskUnschedulable":
            reason = p.reasons[0].reason if p.reasons else "unknown"
            self.unschedulable[reason] = self.unschedulable.get(reason, 0) + 1
            if task["outcome"] == "pending":
                self.demand -= task["gpu"]
            task["outcome"] = "unschedulable"
        elif kind in ("TaskPreempted", "TaskLost"):
            # evicted for a higher tier, or its node went down: its place is free, it waits again
            self.evicted[kind] = self.evicted.get(kind, 0) + 1
            if task["outcome"] == "placed":
                self.alloc -= task["held"]
                task["held"] = 0
                task["outcome"] = "pending"
        elif kind == "TaskReleased":
            if task["outcome"] in ("placed", "pending"):
                self.demand -= task["gpu"]
            if task["outcome"] == "placed":
                self.alloc -= task["held"]
                task["held"] = 0
                task["outcome"] = "completed" if p.cause == "COMPLETED" else p.cause.lower() or "released"
            elif task["outcome"] == "pending":
                task["outcome"] = "abandoned"

    def after_input(self, state: CellState) -> None:
        self.n_inputs += 1
        self.peak_alloc = max(self.peak_alloc, self.alloc)
        self.peak_demand = max(self.peak_demand, self.demand)
        if self.t0 is not None:
            if self.series and self.series[-1][0] == self.t:
                self.series[-1] = (self.t, self.alloc, self.demand)
            else:
                self.series.append((self.t, self.alloc, self.demand))
            if self.n_inputs % self.frag_every == 0:
                self.sample_frag(state)

    def sample_frag(self, state: CellState) -> None:
        tt = self.typical
        if tt is None:
            tt = TypicalTasks.from_list(typical_from_counts(state.class_counts))
        if tt.total > 0 and state.n_nodes:
            self.frag.append((self.t, cluster_frag_milli(tt, state)))

    def finish(self, state: CellState) -> None:
        self.capacity = state.gpu_capacity_milli()
        self.sample_frag(state)

    # ------------------------------------------------------------------ results
    def summary(self) -> dict[str, Any]:
        cap = self.capacity or 1
        pct = lambda milli: round(100.0 * milli / cap, 3)  # noqa: E731
        alloc_area, demand_area, t_end = self.window or (0.0, 0.0, self.t0 or 0)
        span = (t_end - self.t0) if self.t0 is not None else 0
        waits = {tier: [] for tier in TIERS}
        counts: dict[str, dict[str, int]] = {tier: {} for tier in TIERS}
        all_waits: list[float] = []
        for task in self.tasks.values():
            tier = task["qos"] if task["qos"] in counts else "SILVER"
            outcome = task["outcome"] or "undecided"
            if task["placed_at"] is not None:
                w = (task["placed_at"] - task["sub"]) / 1000.0
                waits[tier].append(w)
                all_waits.append(w)
                outcome = "placed"
            elif outcome == "pending":
                outcome = "pending_at_end"
            c = counts[tier]
            c["submitted"] = c.get("submitted", 0) + 1
            c[outcome] = c.get(outcome, 0) + 1
        total = {k: sum(c.get(k, 0) for c in counts.values())
                 for k in ("submitted", "placed", "abandoned", "unschedulable", "pending_at_end")}
        waited = [w for w in all_waits if w > 0]
        total["placed_immediately"] = len(all_waits) - len(waited)
        total["placed_after_wait"] = len(waited)
        frag = [f for t, f in self.frag if t <= t_end] or [f for _t, f in self.frag[-1:]]
        qos = {}
        for tier in TIERS:
            c = counts[tier]
            if not c:
                continue
            qos[tier] = {"submitted": c.get("submitted", 0), "placed": c.get("placed", 0),
                         "abandoned": c.get("abandoned", 0), "unschedulable": c.get("unschedulable", 0),
                         "pending_at_end": c.get("pending_at_end", 0),
                         "success_pct": round(100.0 * c.get("placed", 0) / c["submitted"], 3),
                         "queueing_s": percentiles(waits[tier])}
        return {
            "tasks": total,
            "placement_success_pct": round(100.0 * total["placed"] / total["submitted"], 3) if total["submitted"] else None,
            "evictions": {"preempted": self.evicted.get("TaskPreempted", 0), "lost": self.evicted.get("TaskLost", 0)},
            "rejections": {"unschedulable": dict(sorted(self.unschedulable.items(), key=lambda kv: -kv[1])),
                           "abandoned": total["abandoned"],
                           "first_pending_reason": dict(sorted(self.pending_reason.items(), key=lambda kv: -kv[1]))},
            "queueing_s": percentiles(all_waits),
            "queueing_waited_s": percentiles(waited),
            "gpu_capacity_milli": self.capacity,
            "gpu_allocation_pct": {"time_mean": round(100.0 * alloc_area / span / cap, 3) if span else pct(self.alloc),
                                   "peak": pct(self.peak_alloc), "final": pct(self.alloc)},
            "gpu_demand_pct": {"time_mean": round(100.0 * demand_area / span / cap, 3) if span else pct(self.demand),
                               "peak": pct(self.peak_demand)},
            "frag_gpu_pct": {"time_mean": round(100.0 * float(np.mean(frag)) / cap, 3) if frag else None,
                             "max": round(100.0 * max(frag) / cap, 3) if frag else None,
                             "last_in_window": round(100.0 * frag[-1] / cap, 3) if frag else None,
                             "samples": len(frag)},
            "qos": qos,
            "arrival_window_s": round(span / 1000.0, 3),
        }

    def plot_series(self) -> dict[str, Any]:
        """Thinned series for plots/JSON over the arrival window, in seconds from the first
        submission; the queueing times of tasks that waited, sorted (distribution plot)."""
        cap = self.capacity or 1
        t0 = self.t0 or 0
        t_end = self.window[2] if self.window else self.t
        s = thin([x for x in self.series if x[0] <= t_end])
        f = thin([x for x in self.frag if x[0] <= t_end])
        waited = sorted(w for w in ((t["placed_at"] - t["sub"]) / 1000.0 for t in self.tasks.values()
                                    if t["placed_at"] is not None) if w > 0)
        return {"t_s": [round((t - t0) / 1000.0, 3) for t, _a, _d in s],
                "alloc_pct": [round(100.0 * a / cap, 3) for _t, a, _d in s],
                "demand_pct": [round(100.0 * d / cap, 3) for _t, _a, d in s],
                "frag_t_s": [round((t - t0) / 1000.0, 3) for t, _f in f],
                "frag_pct": [round(100.0 * x / cap, 3) for _t, x in f],
                # quantiles of the queueing times of tasks that waited (evenly thinned)
                "waited_s_sorted": thin(waited, 2000), "waited_n": len(waited)}

