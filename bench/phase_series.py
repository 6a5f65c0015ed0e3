"""One E2E phase at a fixed rate, with its latency read back from the topics as a time series.

``bench/e2e.py`` reports a phase's percentiles; this shows *when* in the phase the slow
decisions were: per window of ``window_ms`` from the first submission, the count, p50 and
max of submit-to-placement latency (``TaskPlaced`` record time - ``submitted_at``) and the max
of submit-to-cell-log (intake's share). A backlog at the start and stalls a few seconds apart
look alike in a p99 and nothing alike here.

``python -m suanli.bench.phase_series --rate 1000 --tasks 10000 [--json F]``, stack up.
"""
from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from suanli import gc_policy
from suanli.bench import e2e
from suanli.bench.stages import percentile
from suanli.config import Settings


async def _series(settings: Settings, window_ms: int) -> list[dict[str, Any]]:
    submitted: dict[str, tuple[int, int]] = {}          # task -> (submitted_at, cell-log time)
    placed: dict[str, int] = {}
    for r in await e2e.cell_records(settings):
        if r.kind == "TaskSubmitted":
            submitted[r.payload["task_id"]] = (r.payload["submitted_at"], r.timestamp)
        elif r.kind == "TaskPlaced":
            placed.setdefault(r.payload["task_id"], r.timestamp)
    return windows(submitted, placed, window_ms)


def windows(submitted: dict[str, tuple[int, int]], placed: dict[str, int], window_ms: int) -> list[dict[str, Any]]:
    """The series: ``submitted`` maps a task to (its ``submitted_at``, its cell-log record
    time), ``placed`` to its first ``TaskPlaced`` record time (ms). Windows count from the
    first submission; a task is in the window of its submission, and one never placed is left
    out. Windows with no placed task are left out too."""
    if not submitted:
        return []
    t0 = min(at for at, _ in submitted.values())
    by_window: dict[int, list[tuple[int, int]]] = {}
    for task, (at, logged) in submitted.items():
        if task in placed:
            by_window.setdefault((at - t0) // window_ms, []).append((placed[task] - at, logged - at))
    out = []
    for w in sorted(by_window):
        lat = [x for x, _ in by_window[w]]
        out.append({"from_s": round(w * window_ms / 1000, 3), "tasks": len(lat), "p50_ms": percentile(lat, 50),
                    "max_ms": max(lat), "intake_max_ms": max(y for _, y in by_window[w])})
    return out


def run(rate: float, tasks: int, nodes: int = 5000, window_ms: int = 500) -> dict[str, Any]:
    """One phase of ``tasks`` at ``rate``/s on ``nodes`` synthetic nodes (a fresh namespace),
    as ``bench/e2e.py`` runs it; its figures and the series."""
    settings = e2e.fresh()
    with e2e.workload(nodes, tasks) as (nodes_csv, pods_csv):
        phase = e2e.phase(settings, nodes_csv, pods_csv, tasks, rate=rate)
    return {"namespace": settings.namespace, "rate": rate, "tasks": tasks, "nodes": nodes,
            "placements_per_s": phase["placements_per_s"], "latency_ms": phase["latency_ms"],
            "window_ms": window_ms, "series": asyncio.run(_series(settings, window_ms))}


def main(argv: list[str] | None = None) -> None:
    import argparse
    import json

    parser = argparse.ArgumentParser(prog="python -m suanli.bench.phase_series", description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate", type=float, default=1000.0, help="submissions/s offered")
    parser.add_argument("--tasks", type=int, default=10000)
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--window-ms", type=int, default=500)
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args(argv)
    gc_policy.apply()                   # as the E2E driver's (bench/e2e.py)
    figures = run(args.rate, args.tasks, args.nodes, args.window_ms)
    if args.json:                       # first: a reader that stops early (| head) loses nothing
        args.json.write_text(json.dumps(figures, indent=1) + "\n")
    print(f"{figures['namespace']}: {figures['placements_per_s']} placements/s, latency {figures['latency_ms']}")
    for w in figures["series"]:
        print(f"{w['from_s']:7.1f} s  tasks {w['tasks']:5d}  p50 {w['p50_ms']:6} ms  max {w['max_ms']:6} ms  "
              f"intake max {w['intake_max_ms']:6} ms")


if __name__ == "__main__":
    main()
