"""Timed mode: an openb trace with arrivals and departures, through the production core.

* **Arrival**: a task is submitted at ``creation_time / load`` (seconds -> ms; ``load``
  > 1 compresses the arrival process to add contention, lifetimes are unchanged).
* **Departure**: at ``arrival + (deletion_time - creation_time)``, i.e. the trace's
  deletion time when ``load`` is 1. A task *holding* resources then gets a
  ``TaskStatusChanged COMPLETED`` (the core releases it and retries the queue); a task
  still *pending* then gets a ``TaskCancelled`` (it left before it ever ran: *abandoned*).
  Tasks without a deletion time never depart.
* **Order**: by time; at the same millisecond departures come before arrivals (resources
  free first), then trace order.
* **Cluster**: the node list, optionally shrunk to a seeded sample (:func:`shrink`).
* **Clock**: a ``CellTick`` goes in before an input whenever a preempted task's grace, the
  batch window or a reservation rule falls due before it (:func:`next_due`).
* **Policy**: ``PolicyChanged`` first, with ``seed`` and, for fgd/default, the pod list's
  typical tasks (as the FGD protocol does) unless the policy sets them.

Every input goes through ``processors.decide`` at position ``(trace.<workload>, 0, n)``.
"""
from __future__ import annotations

import csv
import random
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from suanli.errors import ReplayError
from suanli.processors import CellState, decide, reservations
from suanli.processors.model import (CellTick, NodeRegistered, PolicyChanged, TaskCancelled, TaskStatusChanged,
                                     TaskSubmitted, from_avro)
from suanli.processors.frag import TypicalTasks
from suanli.processors.state import HOLDING, PENDING, PREEMPTED

from .fgd_protocol import policy_config, typical_tasks
from .metrics import RunMetrics
from .openb import read_nodes, read_pods
from .progress import Progress

TIME_COLUMNS = ("creation_time", "deletion_time")


@dataclass
class Cluster:
    nodes: list[dict[str, Any]]
    description: dict[str, Any]


@dataclass
class TimedWorkload:
    name: str
    cluster: Cluster
    tasks: list[dict[str, Any]]
    events: list[tuple[int, int, int]]       # (t ms, 0 departure / 1 arrival, task index)
    typical: list[dict[str, Any]]
    load: float
    info: dict[str, Any] = field(default_factory=dict)


def shrink(nodes: list[dict[str, Any]], fraction: float | None, seed: int, source: str = "") -> Cluster:
    """A seeded sample of the nodes: ``k = round(fraction * N)`` row indices drawn by
    ``random.Random(seed).sample(range(N), k)`` over the node list in file order, kept in
    file order. ``fraction`` None or 1 keeps every node."""
    n = len(nodes)
    gpus_all = sum(a["count"] for nd in nodes for a in nd["accelerators"])
    if fraction is None or fraction >= 1.0:
        kept, how = nodes, "all nodes"
    else:
        if not 0.0 < fraction < 1.0:
            raise ReplayError(f"--shrink must be in (0, 1], not {fraction}")
        k = max(1, round(fraction * n))
        rows = sorted(random.Random(seed).sample(range(n), k))
        kept = [nodes[i] for i in rows]
        how = (f"k = round({fraction:g} x {n}) = {k} rows drawn by Python random.Random({seed}).sample(range({n}), {k}) "
               f"over the node list in file order (row 0 = first data row), kept in file order")
    gpus = sum(a["count"] for nd in kept for a in nd["accelerators"])
    return Cluster(kept, {"source": source, "nodes_total": n, "nodes_kept": len(kept), "gpus_total": gpus_all,
                          "gpus_kept": gpus, "shrink": fraction, "shrink_seed": seed if kept is not nodes else None,
                          "method": how})


def _check_timed(pods_csv: str | Path) -> None:
    with open(pods_csv, newline="") as f:
        header = next(csv.reader(f), [])
    missing = [c for c in TIME_COLUMNS if c not in header]
    if missing:
        raise ReplayError(f"{Path(pods_csv).name} has no {'/'.join(missing)} column(s) (columns: {','.join(header)}): "
                          "it is not a timed trace, so timed mode cannot run on it; use --protocol fgd")


def build(nodes_csv: str | Path, pods_csv: str | Path, *, shrink_fraction: float | None = None,
          shrink_seed: int = 0, load: float = 1.0) -> TimedWorkload:
    """The timed workload of a trace (see the module docstring)."""
    _check_timed(pods_csv)
    if load <= 0:
        raise ReplayError(f"--load must be > 0, not {load}")
    nodes = read_nodes(nodes_csv)
    pods = read_pods(pods_csv)
    cluster = shrink(nodes, shrink_fraction, shrink_seed, Path(nodes_csv).name)
    events: list[tuple[int, int, int]] = []
    tasks = []
    no_departure = 0
    for i, pod in enumerate(pods):
        labels = pod["labels"]
        created = int(labels.get("creation_time") or 0)
        deleted = labels.get("deletion_time")
        arrive = int(round(created * 1000 / load))
        tasks.append(dict(pod, submitted_at=arrive))
        events.append((arrive, 1, i))
        if deleted not in (None, "") and int(deleted) >= created:
            events.append((arrive + (int(deleted) - created) * 1000, 0, i))
        else:
            no_departure += 1
    events.sort()
    return TimedWorkload(Path(pods_csv).stem, cluster, tasks, events, typical_tasks(pods), load,
                         {"tasks": len(tasks), "without_departure": no_departure,
                          "span_s": (events[-1][0] - events[0][0]) / 1000.0 if events else 0})


def next_due(state: CellState, until: int) -> int | None:
    """The first time before ``until`` at which a clock rule falls due — a preempted task's
    grace ends, the batch window closes, a reservation rule (clearing, hold, window, purge;
    ``processors/reservations.next_due``) — or None (a live cell's ticker would say so within a
    tick). Periodic retries are not ticked: departures retry the queue here, and a tick a
    second over a trace that spans months would cost more than the run."""
    due = [t for t in ((state.grace[0][0] if state.grace else None), state.batch_close_at or None,
                       reservations.next_due(state))
           if t is not None and t < until]
    return max(int(min(due)), state.now) if due else None


def run(w: TimedWorkload, policy: dict[str, Any], *, seed: int = 42, progress: bool = False,
        frag_samples: int = 200) -> dict[str, Any]:
    """One policy over the timed workload. Returns summary, series and timings."""
    t0 = time.perf_counter()
    state = CellState("openb")
    topic = f"trace.{w.name}"
    off = 0
    for node in w.cluster.nodes:
        state, _ = decide(state, from_avro(NodeRegistered, node), (topic, 0, off))
        off += 1
    config = {**policy_config(policy["strategy"], seed, w.typical), **(policy.get("config") or {})}
    state, _ = decide(state, PolicyChanged.of("openb", policy["strategy"], config), (topic, 0, off))
    off += 1
    metrics = RunMetrics(TypicalTasks.from_list(w.typical), frag_every=max(1, len(w.events) // frag_samples))
    bar = Progress(len(w.events), f"timed {policy['strategy']}", enabled=progress)
    t1 = time.perf_counter()
    for at, arrival, i in w.events:
        while (due := next_due(state, at)) is not None:   # clock rules falling due before this input
            state, outs = decide(state, CellTick(event_id=f"tick/{due}", cell="openb", at=due), (topic, 0, off))
            off += 1
            for out in outs:
                metrics.on_decision(out)
        task = w.tasks[i]
        tid = task["task_id"]
        if arrival:
            event: Any = from_avro(TaskSubmitted, task)
        else:
            rec = state.tasks.get(tid)
            status = rec.status if rec is not None else None
            if status in HOLDING:
                event = TaskStatusChanged(event_id=f"{tid}/end", task_id=tid, cell="openb", node_id=rec.node,
                                          status="COMPLETED", at=at, exit_code=0)
            elif status in (PENDING, PREEMPTED):     # waiting (or a victim in its grace): it leaves
                event = TaskCancelled(event_id=f"{tid}/cancel", task_id=tid, cell="openb", tenant=task["tenant"],
                                      reason="deleted before it was placed", at=at)
            else:
                bar.update()
                continue
        metrics.on_input(event, at)
        state, outs = decide(state, event, (topic, 0, off))
        off += 1
        for out in outs:
            metrics.on_decision(out)
        metrics.after_input(state)
        bar.update()
    bar.close()
    metrics.finish(state)
    t2 = time.perf_counter()
    summary = metrics.summary()
    summary.update(seconds=round(t2 - t0, 3), decide_seconds=round(t2 - t1, 3), inputs=off,
                   events_per_s=round(off / (t2 - t1)) if t2 > t1 else None, decisions=state.decisions)
    return {"summary": summary, "series": metrics.plot_series(), "config": config}
