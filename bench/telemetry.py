"""Telemetry at scale on the real stack: the openb cluster's metrics flowing while the plane schedules.

    python -m suanli.bench.telemetry [--rounds 12] [--rate 20] [--json out.json]

Runs the plane of ``suanli up`` in a fresh namespace (stack, intake, scheduler and telemetry
workers, the simulated openb cluster: 1,523 nodes, each sending a NodeMetrics with 228-482
exporter-named series every 15 s, about 38,500 samples/s) and submits openb tasks at
``--rate`` per second for the whole measurement, so the scheduler places (and the connector
runs) work while the metrics flow.

The window is ``--rounds`` x 15 s of wall time, starting once a full round has been ingested;
its ends are two writes of the telemetry worker's own stats file (``streams/telemetry_app.py``,
every 2 s), and the figures come from that file and ``/proc``:

- **ingested**: NodeMetrics records and samples (typed fields + ``extended`` series) per second;
- **lag**: from a sample's ``at`` (set by the connector when it starts a round) to the moment
  the telemetry worker's batch holding it was acknowledged, p50 / p99 / max (10 ms buckets).
  It includes generating the 1,523 samples of a round, encoding and producing them;
- **CPU**: (utime + stime) of each worker process over the window / wall time, in % of one
  core (``/proc/PID/stat``), and its resident memory;
- **conditions**: NodeConditionChanged produced in the window (what reaches the scheduler).
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import sys
import time
from pathlib import Path
from typing import Any

ROUND_S = 15.0
GOAL_LAG_S = 5.0


def proc_cpu_seconds(pid: int) -> float:
    """utime + stime of a process, in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def proc_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def hist_percentile(hist: dict[int, int], q: float) -> int | None:
    """Nearest-rank percentile (``q`` in 0..100) of a histogram {bucket_ms: count}: the bucket's lower bound."""
    total = sum(hist.values())
    if total == 0:
        return None
    rank, seen = max(1, -(-q * total // 100)), 0
    for bucket in sorted(hist):
        seen += hist[bucket]
        if seen >= rank:
            return bucket
    return max(hist)


def hist_delta(after: dict[str, int], before: dict[str, int]) -> dict[int, int]:
    out = {int(k): v - before.get(k, 0) for k, v in after.items()}
    return {k: v for k, v in out.items() if v > 0}


def summarize(s0: dict[str, Any], s1: dict[str, Any], cpu0: dict[str, tuple[float, float]],
              cpu1: dict[str, tuple[float, float]], rss: dict[str, float], rounds: int, nodes: int) -> dict[str, Any]:
    """The figures of a window between two stats snapshots (see the module docstring)."""
    if s1["pid"] != s0["pid"]:
        raise RuntimeError("the telemetry worker restarted during the window; figures would mix two processes")
    seconds = (s1["updated_ms"] - s0["updated_ms"]) / 1000     # the worker's own write times
    records, samples = s1["records"] - s0["records"], s1["samples"] - s0["samples"]
    lag = hist_delta(s1["lag_ms"], s0["lag_ms"])
    cpu = {}
    for role in cpu1:
        (c0, w0), (c1, w1) = cpu0[role], cpu1[role]
        cpu[role] = round(100 * (c1 - c0) / (w1 - w0), 1)
    p = {q: hist_percentile(lag, q) for q in (50, 99, 100)}
    return {
        "rounds": rounds, "window_s": round(seconds, 1), "nodes": nodes,
        "records": records, "records_per_s": round(records / seconds, 1),
        "samples": samples, "samples_per_s": round(samples / seconds),
        "samples_per_record": round(samples / records, 1) if records else None,
        "expected_records": round(seconds / ROUND_S * nodes),
        "lag_ms": {"p50": p[50], "p99": p[99], "max": p[100], "bucket_ms": s1["lag_bucket_ms"]},
        "lag_goal_met": p[99] is not None and p[99] <= GOAL_LAG_S * 1000,
        "cpu_pct_of_one_core": cpu, "rss_mib": {k: round(v) for k, v in rss.items()},
        "condition_changes": s1["changes"] - s0["changes"],
        "loadavg_1m_at_end": float(Path("/proc/loadavg").read_text().split()[0]),
        "cpus": os.cpu_count(),
    }


def run(rounds: int, rate: float, partitions: int, out=print) -> dict[str, Any]:
    from suanli.config import load_settings
    from suanli.deploy.plane import Plane, PlaneOptions, worker_processes
    from suanli.streams.telemetry_app import stats_path

    settings = load_settings(namespace=f"benchtel{secrets.token_hex(3)}", partitions=partitions)
    path = stats_path(settings)
    tasks_needed = max(1, int(rate * (rounds + 2) * ROUND_S))
    figures: dict[str, Any] = {}

    def stats() -> dict[str, Any] | None:
        try:
            return json.loads(path.read_text())
        except (OSError, ValueError):
            return None

    def cpu_now(plane: Plane) -> dict[str, tuple[float, float]]:
        pids = {s.name: s.pid() for s, _argv in plane.services}
        return {name: (proc_cpu_seconds(pid), time.monotonic()) for name, pid in pids.items() if pid}

    async def fresh(at_least: int, timeout: float) -> dict[str, Any]:
        """The next stats snapshot the worker writes (with at least ``at_least`` records): a
        window's ends are the worker's own write times."""
        deadline = time.monotonic() + timeout
        before = stats()
        while time.monotonic() < deadline:
            s = stats()
            if s and s["records"] >= at_least and (before is None or s["updated_ms"] != before["updated_ms"]):
                return s
            await asyncio.sleep(0.05)
        raise RuntimeError(f"telemetry stats did not reach {at_least} records in {timeout:.0f} s: {stats()}")

    def make_workload(plane: Plane):
        async def workload(publish, send_raw, tasks, names) -> None:
            nodes = sum(1 for _ in open(plane.nodes_csv)) - 1
            first = await fresh(nodes, 120)                       # one full round in: the worker is warm
            await asyncio.sleep(ROUND_S - 2)
            s0 = await fresh(first["records"], 30)
            cpu0 = cpu_now(plane)
            out(f"bench telemetry: window starts after {s0['records']} records; {rounds} rounds of {ROUND_S:g} s, "
                f"submitting {rate:g} tasks/s")
            started = time.monotonic()
            submitter = asyncio.create_task(_submit(publish, tasks, rate))
            await asyncio.sleep(rounds * ROUND_S - 0.5)
            s1 = await fresh(s0["records"], 30)
            cpu1 = cpu_now(plane)
            rss = {s.name: proc_rss_mib(s.pid()) for s, _ in plane.services if s.pid()}
            await submitter                                       # every task published (the plane expects it)
            figures.update(summarize(s0, s1, cpu0, cpu1, rss, rounds, nodes),
                           tasks_submitted=len(tasks), submit_s=round(time.monotonic() - started, 1))
        return workload

    plane = Plane(settings, PlaneOptions(tasks=tasks_needed, rate=rate, exit_when_drained=True, quiet=True,
                                         drain_timeout=rounds * ROUND_S + 600), out=out)
    plane.o.workload = make_workload(plane)
    try:
        plane.start()
        out(f"bench telemetry: plane up in namespace {settings.namespace}: "
            f"{', '.join(worker_processes(settings))} + sim connector")
        result = asyncio.run(plane.run())
    finally:
        plane.stop()
    figures["plane"] = {k: result[k] for k in ("submitted", "placed", "completed", "pending", "unschedulable",
                                               "dead_lettered", "capacity_violations", "worker_restarts")}
    return figures


async def _submit(publish, tasks: list[dict[str, Any]], rate: float) -> None:
    from suanli.replay.driver import drive

    await drive(publish, tasks, rate)


def report(f: dict[str, Any]) -> str:
    lag = f["lag_ms"]
    cpu = f["cpu_pct_of_one_core"]
    lines = [
        f"telemetry at scale: {f['nodes']} nodes, {f['rounds']} rounds of 15 s ({f['window_s']} s window), "
        f"{f['tasks_submitted']} tasks submitted meanwhile; {f['cpus']} CPUs, load average "
        f"{f['loadavg_1m_at_end']} at the end",
        f"  ingested      {f['records']} NodeMetrics ({f['expected_records']} expected), "
        f"{f['records_per_s']}/s; {f['samples']:,} samples, {f['samples_per_s']:,}/s "
        f"({f['samples_per_record']} per record)",
        f"  lag           p50 {lag['p50'] / 1000:.2f} s, p99 {lag['p99'] / 1000:.2f} s, max {lag['max'] / 1000:.2f} s "
        f"(sample at -> batch acknowledged; {lag['bucket_ms']} ms buckets); goal p99 <= {GOAL_LAG_S:g} s: "
        f"{'met' if f['lag_goal_met'] else 'NOT met'}",
        "  CPU           " + ", ".join(f"{k} {v}%" for k, v in sorted(cpu.items())) + " (of one core)",
        "  RSS           " + ", ".join(f"{k} {v} MiB" for k, v in sorted(f["rss_mib"].items())),
        f"  conditions    {f['condition_changes']} NodeConditionChanged into the cell log in the window",
        f"  plane         {f['plane']}",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="suanli-bench-telemetry", description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=12, help="metric rounds (15 s each) in the window")
    parser.add_argument("--rate", type=float, default=20.0, help="tasks submitted per second during the window")
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--json", metavar="FILE")
    args = parser.parse_args(argv)
    figures = run(args.rounds, args.rate, args.partitions, out=lambda m: print(m, file=sys.stderr, flush=True))
    print(report(figures))
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2) + "\n")
    return 0 if figures["lag_goal_met"] else 1


if __name__ == "__main__":
    sys.exit(main())
