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

import argparse
import json
import sys
import time
from typing import Any

from suanli.bench import synthetic
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
    ap = argparse.ArgumentParser(prog="python -m suanli.bench.registration", description=__doc__.split("\n")[0])
    ap.add_argument("--nodes", type=int, nargs="+", default=[1000, 5000, 20000], help="cell sizes")
    ap.add_argument("--tasks", type=int, default=2000, help="placements before the snapshot")
    ap.add_argument("--json", help="also write the figures to this file")
    argv = sys.argv[1:] if argv is None else argv
    args = ap.parse_args(argv)
    rows = []
    for n in args.nodes:
        row = registration_seconds(n, args.tasks)
        rows.append(row)
        print(f"{n:>6} nodes: register {row['register_seconds']:.3f} s ({row['register_us_per_node']} us/node), "
              f"restore {row['restore_seconds']:.3f} s ({row['restore_us_per_node']} us/node)", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"command": "python -m suanli.bench.registration " + " ".join(argv), "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
