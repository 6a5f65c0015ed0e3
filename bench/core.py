"""Core only: decisions per second of the pure scheduler processor, in process.

Measures ``processors.core.decide`` (with full provenance) on synthetic clusters of
several sizes: the scaling curve of cost per decision against cluster size.
"""
from __future__ import annotations

import time
from typing import Any

from suanli.bench import synthetic
from suanli.processors.core import decide
from suanli.processors.model import NodeRegistered, PolicyChanged, TaskPlaced, TaskSubmitted, from_avro
from suanli.processors.state import CellState
from suanli.streams.topics import TopicNames

LOG = TopicNames("bench").cell_log      # the position label of the synthetic inputs


def decisions_per_second(node_count: int, task_count: int, strategy: str = "default") -> dict[str, Any]:
    state = CellState("bench")
    offset = 0
    for node in synthetic.nodes(node_count):
        decide(state, from_avro(NodeRegistered, node), (LOG, 0, offset))
        offset += 1
    if strategy != "default":
        decide(state, PolicyChanged.of("bench", strategy, event_id="p"), (LOG, 0, offset))
        offset += 1
    work = [from_avro(TaskSubmitted, t) for t in synthetic.tasks(task_count)]   # decoding is not the core's cost
    placed = 0
    started = time.perf_counter()
    for task in work:
        _, out = decide(state, task, (LOG, 0, offset))
        offset += 1
        placed += sum(1 for d in out if isinstance(d, TaskPlaced))
    seconds = time.perf_counter() - started
    return {"nodes": node_count, "decisions": task_count, "placed": placed, "seconds": round(seconds, 4),
            "decisions_per_s": round(task_count / seconds, 1),
            "us_per_decision": round(1e6 * seconds / task_count, 1)}


def scaling_curve(sizes: tuple[int, ...], task_count: int) -> dict[str, Any]:
    rows = [decisions_per_second(n, task_count) for n in sizes]
    base = rows[0]
    for row in rows:
        # cost per decision relative to the smallest cluster, per unit of size growth:
        # < 1 means sublinear growth.
        row["cost_ratio"] = round(row["us_per_decision"] / base["us_per_decision"], 3)
        row["size_ratio"] = round(row["nodes"] / base["nodes"], 3)
    return {"rows": rows}


def _rss_mib() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def memory_footprint(node_count: int, task_count: int, strategy: str = "default") -> dict[str, Any]:
    """Resident memory of a cell holding ``node_count`` nodes and ``task_count`` tasks,
    filled by ``strategy`` (default: ``default``, so its derived caches, the FGD score
    tables and the node classes, are counted with the state). Tasks that do not fit stay
    queued, which is state too."""
    before = _rss_mib()
    state = CellState("bench")
    offset = 0
    for node in synthetic.nodes(node_count):
        decide(state, from_avro(NodeRegistered, node), (LOG, 0, offset))
        offset += 1
    if strategy != "default":
        decide(state, PolicyChanged.of("bench", strategy, event_id="p"), (LOG, 0, offset))
    started = time.perf_counter()
    for task in synthetic.tasks(task_count, prefix="mem"):
        offset += 1
        decide(state, from_avro(TaskSubmitted, task), (LOG, 0, offset))
    derived = len(state._derived)
    return {"nodes": node_count, "tasks": len(state.tasks), "strategy": strategy, "derived_entries": derived,
            "rss_mib": round(_rss_mib(), 1),
            "state_mib": round(_rss_mib() - before, 1), "fill_seconds": round(time.perf_counter() - started, 1)}
