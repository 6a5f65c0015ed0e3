"""The queue-retry figures quoted in BENCHMARKS.md (issue 14, "The preemption scan reads a
per-tier index"), reproduced in one process, no broker.

    python -m suanli.bench.queue_retry [--json out.json]

The urgent bench's cell (``bench/urgent_latency.py``) built by ``processors.core.decide``
directly: the openb nodes (1,523, as the urgent bench), the trace's GPU pods as SILVER until their demand
reaches the cluster's GPUs, then 5,000 SILVER tasks of 8 whole GPUs that cannot fit (each
one's cycle fails and asks for preemption victims). Then 3,000 placed tasks report RUNNING
and 500 report COMPLETED: each release retries the queue head. Prints the seconds for the
5,000 unschedulable submissions and the mean ms per COMPLETED status change, and the share
of those changes' time spent in ``preemption._scan`` (cProfile, a second 500). Last, the
mean ms of ``CellState.holding(node)`` over every node (what a node's DOWN, a drain and a
reservation claim ask first), and the ms of one NodeStatusChanged DOWN of the busiest node.

Wall-clock figures of one run on a shared machine: compare two versions of the code in one
session (the figures in BENCHMARKS.md: ``git checkout ad174c1~1 -- processors/`` for before).
"""
from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import time
from typing import Any

from suanli.bench import save
from suanli.bench.gold_migration import gpu_milli, gpu_pods, make_task
from suanli.config import load_settings
from suanli.processors import model as m
from suanli.processors.core import decide
from suanli.processors.state import CellState
from suanli.replay.openb import read_nodes

QUEUED = 5000
RUNNING = 3000
RELEASES = 500


def run() -> dict[str, Any]:
    openb = load_settings().openb_dir
    nodes = read_nodes(openb / "openb_node_list_all_node.csv")
    cell = nodes[0]["cell"]
    state = CellState(cell)
    offset = 0

    def step(event: Any) -> list[Any]:
        nonlocal offset
        offset += 1
        return decide(state, event, ("bench.cell", 0, offset))[1]

    for n in nodes:
        step(m.from_avro(m.NodeRegistered, {**n, "registered_at": 1}))
    pods = gpu_pods(openb / "openb_pod_list_default.csv")
    capacity = sum(a["count"] for n in nodes for a in n["accelerators"]) * 1000
    placed: list[m.TaskPlaced] = []
    demand = i = 0
    while demand < capacity:
        t = make_task(pods[i % len(pods)], run="qr", cell=cell, name=f"fill-{i:05d}", tier="SILVER")
        t["submitted_at"] = 1000 + i
        placed += [o for o in step(m.from_avro(m.TaskSubmitted, t)) if isinstance(o, m.TaskPlaced)]
        demand += gpu_milli(t)
        i += 1
    big = {**pods[0], "resources": {**pods[0]["resources"], "gpu_count": 8, "gpu_milli": 1000,
                                    "cpu_milli": 4000, "memory_mib": 8192}}
    started = time.perf_counter()
    for j in range(QUEUED):
        t = make_task(big, run="qr", cell=cell, name=f"queued-{j:05d}", tier="SILVER")
        t["submitted_at"] = 20_000 + j
        step(m.from_avro(m.TaskSubmitted, t))
    queued_s = time.perf_counter() - started
    now = 30_000

    def status(p: m.TaskPlaced, what: str) -> m.TaskStatusChanged:
        nonlocal now
        now += 1
        return m.TaskStatusChanged(event_id=f"{what}/{p.task_id}", task_id=p.task_id, cell=cell,
                                   node_id=p.node_id, status=what, at=now)

    for p in placed[:RUNNING]:
        step(status(p, "RUNNING"))
    done = [status(p, "COMPLETED") for p in placed[:RELEASES]]
    started = time.perf_counter()
    for e in done:
        step(e)
    per_release_ms = 1000 * (time.perf_counter() - started) / len(done)
    profiled = [status(p, "COMPLETED") for p in placed[RELEASES:2 * RELEASES]]
    prof = cProfile.Profile()
    prof.enable()
    for e in profiled:
        step(e)
    prof.disable()
    stats = pstats.Stats(prof).stats          # type: ignore[attr-defined]
    decide_ct = next(v[3] for k, v in stats.items() if k[2] == "decide" and k[0].endswith("core.py"))
    scan_ct = sum(v[3] for k, v in stats.items() if k[2] == "_scan" and k[0].endswith("preemption.py"))
    # What a node's DOWN, a drain and a reservation claim ask first: the tasks holding the node
    started = time.perf_counter()
    held = sum(len(state.holding(nid)) for nid in state.node_ids)
    holding_ms = 1000 * (time.perf_counter() - started) / state.n_nodes
    # A node reported DOWN: its tasks are lost and queued again (the queue retried after)
    row = max(range(state.n_nodes), key=lambda r: len(state.holding(state.node_ids[r])))
    started = time.perf_counter()
    step(m.NodeStatusChanged(event_id="down", cell=cell, node_id=state.node_ids[row], status="DOWN",
                             reason="bench", at=now + 1))
    down_ms = 1000 * (time.perf_counter() - started)
    return {"nodes": len(nodes), "fill_submitted": i, "fill_placed": len(placed), "queued": QUEUED,
            "queued_submissions_s": round(queued_s, 2), "completed_ms_each": round(per_release_ms, 2),
            "scan_share_of_completed": round(scan_ct / decide_ct, 3) if decide_ct else None,
            "tasks_in_cell": len(state.tasks), "holding_tasks": held,
            "holding_ms_per_node": round(holding_ms, 3), "node_down_ms": round(down_ms, 2)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", help="also write the figures here")
    args = ap.parse_args(argv)
    figures = run()
    print(json.dumps(figures, indent=1))
    save(args.json, figures)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
