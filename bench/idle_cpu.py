"""What an idle control plane costs: CPU of each worker with nothing to do, on the real stack.

    python -m suanli.bench.idle_cpu [--nodes 2] [--settle 5] [--window 20] [--json out.json]

A plane of its own (a fresh namespace on the running broker and registry: the intake,
scheduler and telemetry workers of ``suanli up`` and the simulated cluster) over the first
``--nodes`` nodes of the openb node list, and no task at all. Once the scheduler has decided
every node's registration (every worker is running), and ``--settle`` seconds more, the CPU
time each process used over
``--window`` seconds, as % of one core, and the machine's busy share (all CPUs). What is left
is the workers' own polling: their fetches (``streams/fetch_wait.py``), their timers and the
simulated nodes' heartbeats.

An idle worker should sleep: on a 2-core machine every % a quiet plane burns is taken from
the work that arrives (issue 14's urgent tier is decided in a few ms, and any process that
holds a core meanwhile is in its way). The stack must be up (``suanli stack up``); this never
starts or stops it. The plane it starts is stopped at the end.
"""
from __future__ import annotations

import argparse
import asyncio
import csv
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

from suanli.bench.gold_migration import StackPlane
from suanli.bench.urgent_latency import cpu_sample, cpu_window


def first_nodes(openb_nodes: Path, n: int, out: Path) -> Path:
    """A node list of the first ``n`` rows of ``openb_nodes`` (header kept), written to ``out``."""
    with open(openb_nodes, newline="") as src, open(out, "w", newline="") as dst:
        rows = csv.reader(src)
        writer = csv.writer(dst)
        writer.writerow(next(rows))
        for _, row in zip(range(n), rows):
            writer.writerow(row)
    return out


async def registered(plane: StackPlane, timeout: float) -> None:
    """Until the scheduler has decided every node's registration (so every worker is running)."""
    from suanli.bench.gold_migration import Follower
    from suanli.schemas.codec import Codec
    from suanli.schemas.registry import RegistryClient

    with RegistryClient(plane.settings.registry_url) as registry:
        async with Follower(plane, Codec(registry)) as f:
            await f.until(lambda v: len(v.nodes) >= plane.expected_nodes, timeout,
                          f"{plane.expected_nodes} nodes registered")


def measure(nodes_csv: Path, settle_s: float, window_s: float, say: Callable[[str], None] = print,
            timeout: float = 180.0) -> dict[str, Any]:
    """Start an idle plane, wait until its nodes are registered and ``settle_s`` more, and
    return the CPU of the ``window_s`` after that."""
    plane = StackPlane(nodes_csv, prefix="benchidle", log=say)
    plane.start()
    try:
        asyncio.run(registered(plane, timeout))
        time.sleep(settle_s)          # quiet on purpose: what is measured is the plane doing nothing
        plane.check_alive()
        a = cpu_sample(plane.pids())
        time.sleep(window_s)
        b = cpu_sample(plane.pids())
        plane.check_alive()
    finally:
        plane.stop()
    cpu = cpu_window(a, b)
    return {"nodes": plane.expected_nodes, "settle_s": settle_s, "window_s": window_s,
            "process_pct_of_one_core": cpu["process_pct_of_one_core"],
            "workers_pct_of_one_core": round(sum(v for k, v in cpu["process_pct_of_one_core"].items()
                                                 if k != "sim"), 1),
            "machine_busy_pct": cpu["machine_busy_pct"]}


def report(f: dict[str, Any]) -> str:
    procs = ", ".join(f"{k} {v} %" for k, v in sorted(f["process_pct_of_one_core"].items()))
    return (f"idle plane ({f['nodes']} simulated nodes, no tasks), {f['window_s']:g} s from {f['settle_s']:g} s "
            "after they registered: "
            f"{procs} of one core; the three workers {f['workers_pct_of_one_core']} %; "
            f"machine {f['machine_busy_pct']} % busy")


def main(argv: list[str] | None = None) -> int:
    from suanli.config import load_settings

    p = argparse.ArgumentParser(prog="python -m suanli.bench.idle_cpu", description=__doc__.split("\n\n")[0])
    p.add_argument("--nodes", type=int, default=2, help="simulated nodes, the first of the openb list (2)")
    p.add_argument("--settle", type=float, default=5.0, help="seconds after the nodes registered, before the window (5)")
    p.add_argument("--window", type=float, default=20.0, help="seconds measured (20)")
    p.add_argument("--json", metavar="FILE", help="write the figures as JSON")
    args = p.parse_args(argv)
    if args.nodes < 1 or args.settle < 0 or args.window <= 0:
        p.error("--nodes >= 1, --settle >= 0 and --window > 0")
    with tempfile.TemporaryDirectory() as tmp:
        nodes = first_nodes(load_settings().openb_dir / "openb_node_list_gpu_node.csv", args.nodes,
                            Path(tmp) / "nodes.csv")
        f = measure(nodes, args.settle, args.window)
    f["command"] = "python -m suanli.bench.idle_cpu " + " ".join(argv if argv is not None else sys.argv[1:])
    print(report(f))
    if args.json:
        Path(args.json).write_text(json.dumps(f, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
