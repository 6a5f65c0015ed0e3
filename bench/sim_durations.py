"""Do simulated tasks run for their trace durations? A headless plane run, measured from the log.

    python -m suanli.bench.sim_durations --tasks 100 --time-scale 5e-6 [--json out.json]
    python -m suanli.bench.sim_durations --from-run up.json --time-scale 5e-6   # after `suanli up --json up.json`

Runs the plane of ``suanli up --exit-when-drained`` (stack, intake and scheduler workers, the
simulated openb cluster, the openb workload driver) with one difference: the workload does not
stop at "every task has a decision" (for a placed task that is RUNNING) but waits until every
task has ended, so each one runs its full simulated duration before the connector stops.

For each task the *expected* run time is what the trace gives it, ``duration_estimate_ms``
(deletion - scheduled time, see ``replay/openb.py``; the simulator's default, 60 s, when the
trace has none) times the time scale; the *measured* run time is ``COMPLETED.at - RUNNING.at``
of the connector's TaskStatusChanged events, read back from the run's cell log. It prints the
distribution of measured/expected and of measured - expected (the ratio alone says little
for tasks whose scaled duration is a few milliseconds).
"""
from __future__ import annotations

import argparse
import asyncio
import json
import math
import secrets
import sys
import time
from pathlib import Path
from typing import Any, Callable

DEFAULT_DURATION_MS = 60_000   # the sim connector's default_duration_ms (connectors/launch.py)
TERMINAL = ("COMPLETED", "FAILED")
LONG_MS = 1000.0               # tasks expected to run this long: the ratio is not dominated by fixed latency


def expected_ms(task: dict[str, Any], time_scale: float, default_ms: int = DEFAULT_DURATION_MS) -> float:
    """Wall milliseconds the simulator should run ``task`` (a TaskSubmitted payload) for."""
    duration = task.get("duration_estimate_ms")
    return max(0.0, (default_ms if duration is None else duration) * time_scale)


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (``q`` in 0..100) of a non-empty list."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


def measure(tasks: list[dict[str, Any]], statuses: list[dict[str, Any]], time_scale: float,
            default_ms: int = DEFAULT_DURATION_MS, outcomes: tuple[str, ...] = TERMINAL) -> dict[str, Any]:
    """Per-task expected vs measured run times from the TaskStatusChanged payloads, and the summary.

    Only tasks that ended with one of ``outcomes`` are measured (a run read after the fact
    passes ``("COMPLETED",)``: its FAILED tasks may have been stopped with the plane)."""
    seen: dict[str, dict[str, int]] = {}
    for p in statuses:
        seen.setdefault(p["task_id"], {}).setdefault(p["status"], p["at"])
    rows = []
    for task in tasks:
        got = seen.get(task["task_id"], {})
        end = next((s for s in TERMINAL if s in got), None)
        row = {"task_id": task["task_id"], "trace_ms": task.get("duration_estimate_ms"),
               "expected_ms": expected_ms(task, time_scale, default_ms), "outcome": end, "measured_ms": None}
        if end in outcomes and "RUNNING" in got:
            row["measured_ms"] = got[end] - got["RUNNING"]
        rows.append(row)
    done = [r for r in rows if r["measured_ms"] is not None]
    ratios = [r["measured_ms"] / r["expected_ms"] for r in done if r["expected_ms"] > 0]
    long_ratios = [r["measured_ms"] / r["expected_ms"] for r in done if r["expected_ms"] >= LONG_MS]
    excess = [r["measured_ms"] - r["expected_ms"] for r in done]

    def dist(values: list[float], digits: int) -> dict[str, float | None]:
        if not values:
            return {"min": None, "p50": None, "p95": None, "max": None}
        return {"min": round(min(values), digits), "p50": round(percentile(values, 50), digits),
                "p95": round(percentile(values, 95), digits), "max": round(max(values), digits)}

    return {
        "time_scale": time_scale, "tasks": len(tasks), "measured": len(done),
        "completed": sum(r["outcome"] == "COMPLETED" for r in rows),
        "without_trace_duration": sum(r["trace_ms"] is None for r in rows),
        "expected_ms": dist([r["expected_ms"] for r in rows], 1),
        "ratio": dist(ratios, 4),                      # measured / expected
        "long": len(long_ratios),                      # tasks expected to run >= LONG_MS
        "ratio_long": dist(long_ratios, 4),            # measured / expected of those
        "excess_ms": dist(excess, 1),                  # measured - expected
        "rows": rows,
    }


def within(row: dict[str, Any], low: float = 0.9, slack_ms: float = 2000.0) -> bool:
    """The correctness relation: ``expected * low <= measured <= expected + slack``."""
    m, e = row["measured_ms"], row["expected_ms"]
    return m is not None and e * low <= m <= e + slack_ms


def completion_workload(s: Any, submitted: list[dict[str, Any]], statuses: list[dict[str, Any]], *, rate: float,
                        timeout: float, log: Callable[[str], None] = lambda _m: None) -> Callable[..., Any]:
    """A Plane workload: publish every task at ``rate``, then follow the cell log until each task
    has a terminal TaskStatusChanged; the plane drains once this returns. The tasks go to
    ``submitted``, the run's TaskStatusChanged payloads to ``statuses``."""

    async def workload(publish, _send_raw, tasks, names) -> None:
        from aiokafka import TopicPartition

        from suanli.replay.driver import drive
        from suanli.schemas.codec import Codec
        from suanli.schemas.registry import RegistryClient
        from suanli.streams.kafka_io import EventConsumer, end_offsets

        submitted.extend(tasks)
        cell = tasks[0]["cell"]
        ids = {t["task_id"] for t in tasks}
        start = await end_offsets(s.bootstrap_servers, names.cell_log)
        ended: set[str] = set()
        with RegistryClient(s.registry_url) as registry:
            async with EventConsumer(s.bootstrap_servers, Codec(registry), [], group_id=None) as consumer:
                consumer.raw.assign([TopicPartition(names.cell_log, p) for p in start])
                for p, offset in start.items():
                    consumer.raw.seek(TopicPartition(names.cell_log, p), offset)
                await drive(publish, tasks, rate)
                deadline = time.monotonic() + timeout
                last_log = 0.0
                batches = consumer.batches(timeout_ms=250)
                while ended != ids:
                    if time.monotonic() > deadline:
                        raise TimeoutError(f"{len(ids - ended)} of {len(ids)} tasks had not ended after {timeout:.0f}s")
                    for r in await anext(batches):
                        p = r.payload
                        if r.kind == "TaskStatusChanged" and p["cell"] == cell and p["task_id"] in ids:
                            statuses.append(p)
                            if p["status"] in TERMINAL:
                                ended.add(p["task_id"])
                    if time.monotonic() - last_log > 5:
                        log(f"sim_durations: {len(ended)}/{len(ids)} tasks ended")
                        last_log = time.monotonic()
                await batches.aclose()

    return workload


def run(tasks: int, time_scale: float, *, rate: float = 500.0, timeout: float = 900.0,
        nodes_csv: Path | None = None, pods_csv: Path | None = None, settings: Any = None,
        log: Callable[[str], None] = lambda _m: None) -> dict[str, Any]:
    """One headless plane run of ``tasks`` openb tasks; the measurement (see :func:`measure`)."""
    from suanli.config import settings as default_settings
    from suanli.deploy.plane import Plane, PlaneOptions

    s = settings or default_settings()
    submitted: list[dict[str, Any]] = []
    statuses: list[dict[str, Any]] = []
    options = PlaneOptions(tasks=tasks, rate=rate, time_scale=time_scale, exit_when_drained=True, quiet=True,
                           nodes_csv=nodes_csv, pods_csv=pods_csv, drain_timeout=timeout + 120,
                           workload=completion_workload(s, submitted, statuses, rate=rate, timeout=timeout, log=log))
    plane = Plane(s, options, out=log)
    try:
        plane.start()
        figures = asyncio.run(plane.run())
    finally:
        plane.stop()
    result = measure(submitted, statuses, time_scale)
    result.update(run_id=plane.run_id, cell=plane.cell, namespace=s.namespace,
                  plane={k: figures[k] for k in ("submitted", "placed", "completed", "failed", "pending",
                                                 "dead_lettered", "capacity_violations", "seconds")})
    return result


async def read_run(s: Any, cell: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The TaskSubmitted and TaskStatusChanged payloads of ``cell`` in the namespace's cell log."""
    from suanli.schemas.codec import Codec
    from suanli.schemas.registry import RegistryClient
    from suanli.streams.kafka_io import EventConsumer
    from suanli.streams.topics import TopicNames

    submitted: dict[str, dict[str, Any]] = {}
    statuses: list[dict[str, Any]] = []
    with RegistryClient(s.registry_url) as registry:
        async with EventConsumer(s.bootstrap_servers, Codec(registry), [TopicNames(s.namespace).cell_log]) as consumer:
            for r in await consumer.read_until_end():
                if r.payload is None or r.payload.get("cell") != cell:
                    continue
                if r.kind == "TaskSubmitted":
                    submitted.setdefault(r.payload["task_id"], r.payload)
                elif r.kind == "TaskStatusChanged":
                    statuses.append(r.payload)
    return list(submitted.values()), statuses


def from_run(run_json: Path, time_scale: float, settings: Any = None) -> dict[str, Any]:
    """Measure a finished ``suanli up --json FILE`` run from its cell log (COMPLETED tasks only:
    ``--exit-when-drained`` stops the connector once every task has a decision, so tasks still
    running then end FAILED, stopped)."""
    from suanli.config import settings as default_settings

    s = settings or default_settings()
    figures = json.loads(Path(run_json).read_text())
    tasks, statuses = asyncio.run(read_run(s, figures["cell"]))
    result = measure(tasks, statuses, time_scale, outcomes=("COMPLETED",))
    result.update(run_id=figures.get("run_id"), cell=figures["cell"], namespace=s.namespace,
                  plane={k: figures.get(k) for k in ("submitted", "placed", "completed", "failed", "pending",
                                                     "dead_lettered", "capacity_violations", "seconds")})
    return result


def report(result: dict[str, Any]) -> str:
    r, x, e, g = result["ratio"], result["excess_ms"], result["expected_ms"], result["ratio_long"]
    rows = [row for row in result["rows"] if row["measured_ms"] is not None]
    inside = sum(within(row) for row in rows)
    return "\n".join([
        f"sim durations: {result['tasks']} openb tasks, time scale {result['time_scale']:g} "
        f"(cell {result['cell']}); {result['measured']} measured, {result['completed']} completed, "
        f"{result['without_trace_duration']} without a trace duration (default {DEFAULT_DURATION_MS} ms)",
        f"  expected run time (trace x scale), ms:  min {e['min']}  p50 {e['p50']}  p95 {e['p95']}  max {e['max']}",
        f"  measured / expected:                    min {r['min']}  p50 {r['p50']}  p95 {r['p95']}  max {r['max']}",
        f"  ... of the {result['long']:>3} expected >= {LONG_MS / 1000:g} s:    min {g['min']}  p50 {g['p50']}  "
        f"p95 {g['p95']}  max {g['max']}",
        f"  measured - expected, ms:                min {x['min']}  p50 {x['p50']}  p95 {x['p95']}  max {x['max']}",
        f"  within [0.9 x expected, expected + 2 s]: {inside}/{len(rows)}",
    ])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m suanli.bench.sim_durations", description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=100)
    parser.add_argument("--time-scale", type=float, default=5e-6,
                        help="wall seconds per simulated second (default 5e-6: openb's longest, 145 days, "
                             "runs 63 s)")
    parser.add_argument("--rate", type=float, default=500.0, help="submissions per second")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds to wait for every task to end")
    parser.add_argument("--nodes", type=Path, help="node list CSV (default: openb all nodes)")
    parser.add_argument("--pods", type=Path, help="pod list CSV (default: openb default workload)")
    parser.add_argument("--namespace", help="topic namespace (default: a fresh one, bench-<random>, so the "
                                            "run never shares workers with a running plane)")
    parser.add_argument("--json", type=Path, help="write the result (with every task's row) to this file")
    parser.add_argument("--from-run", type=Path, metavar="UP_JSON",
                        help="run nothing: measure a finished `suanli up --json UP_JSON --time-scale X` run "
                             "(its cell, in --namespace or SUANLI_NAMESPACE) from the log; its completed tasks only")
    args = parser.parse_args(argv)
    from suanli.config import load_settings

    if args.from_run:
        settings = load_settings(namespace=args.namespace) if args.namespace else load_settings()
        result = from_run(args.from_run, args.time_scale, settings)
    else:
        namespace = args.namespace or f"bench-{secrets.token_hex(4)}"
        result = run(args.tasks, args.time_scale, rate=args.rate, timeout=args.timeout, nodes_csv=args.nodes,
                     pods_csv=args.pods, settings=load_settings(namespace=namespace),
                     log=lambda m: print(m, file=sys.stderr, flush=True))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    print(report(result))
    rows = [row for row in result["rows"] if row["measured_ms"] is not None]
    complete = args.from_run is not None or result["measured"] == result["tasks"]
    return 0 if complete and rows and all(within(row) for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
