"""Registration and restore: the cost of a cell's nodes arriving, and of a snapshot coming back.

``registration_seconds(n)`` folds ``n`` synthetic ``NodeRegistered`` inputs into an empty cell
through ``processors.core.decide`` (what the scheduler and ``suanli replay`` do with a log's
registrations), then places ``tasks`` synthetic tasks, writes the state's snapshot as JSON and
times ``CellState.from_snapshot`` on it (what a scheduler restarting from a checkpoint does).
Both should grow linearly with ``n``: ``us_per_node`` that climbs with the cell's size means
each node costs a copy of the ones before it.

    python -m suanli.bench.registration --nodes 1000 5000 20000 --json bench/registration.json
"""
from __future__ import annotations

import json
import time
from typing import Any

from suanli.bench import synthetic
from suanli.bench.per_size import per_size_main
from suanli.processors.core import decide
from suanli.processors.model import NodeRegistered, TaskSubmitted, from_avro
from suanli.processors.state import CellState
from suanli.streams.topics import TopicNames

LOG = TopicNames("bench").cell_log


def registration_seconds(node_count: int, tasks: int = 2000) -> dict[str, Any]:
    """Seconds to register ``node_count`` nodes, and to restore the snapshot of that cell
    after ``tasks`` placements (checked equal to the state it was written from)."""
    nodes = [from_avro(NodeRegistered, n) for n in synthetic.nodes(node_count)]   # decoding is not the cost
    state = CellState("bench")
    started = time.perf_counter()
    for offset, node in enumerate(nodes):
        decide(state, node, (LOG, 0, offset))
    register = time.perf_counter() - started
    for offset, task in enumerate(synthetic.tasks(tasks), start=node_count):
        decide(state, from_avro(TaskSubmitted, task), (LOG, 0, offset))
    snapshot = state.to_snapshot()
    snap = json.loads(json.dumps(snapshot))
    started = time.perf_counter()
    restored = CellState.from_snapshot(snap)
    restore = time.perf_counter() - started
    if restored.to_snapshot() != snapshot:
        raise AssertionError("the restored state differs from the one its snapshot was written from")
    return {"nodes": node_count, "tasks": tasks, "register_seconds": round(register, 3),
            "register_us_per_node": round(1e6 * register / node_count, 1),
            "restore_seconds": round(restore, 3), "restore_us_per_node": round(1e6 * restore / node_count, 1)}


def main(argv: list[str] | None = None) -> int:
    return per_size_main(
        "python -m suanli.bench.registration", __doc__, argv, [1000, 5000, 20000],
        ("--tasks", 2000, "placements before the snapshot"), registration_seconds,
        lambda row: (f"{row['nodes']:>6} nodes: register {row['register_seconds']:.3f} s "
                     f"({row['register_us_per_node']} us/node), restore {row['restore_seconds']:.3f} s "
                     f"({row['restore_us_per_node']} us/node)"))


if __name__ == "__main__":
    raise SystemExit(main())
