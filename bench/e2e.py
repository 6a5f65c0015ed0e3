"""End to end through the real broker and registry, modelled on SchedulingBasic.

Phase 1 submits every task as fast as the driver can and measures sustained placements/s
(placements divided by the time from the first submission to the last placement, both
taken from Kafka record timestamps). Two measured phases follow: 100 submissions/s offered
(low load, at most ``LOW_LOAD_TASKS`` tasks) and 50 % of the sustained rate (half load).
Each reports submit-to-decision latency per task: the TaskPlaced record's timestamp minus
the task's ``submitted_at`` (both wall-clock milliseconds on this machine), over the tasks
after the first 10 % (warm-up: worker start-up and partition assignment); and the stage
breakdown of ``bench/stages.py`` (producer -> raw topic -> intake -> cell log -> scheduler ->
decisions topic -> read model, p50/p99 per stage; a read model runs in this process during
those phases only, so the sustained rate is measured without it). CPU and RSS of each
worker, of the stack's broker and registry, and of this driver are read at the end of each
phase (``workers``; the driver's RSS is its peak), and the CPU of each between the first
submission and the last placement (``placement_window``, ``bench/cpu_window.py``). The
simulated nodes heartbeat every 5 s but send no metrics samples (``METRICS_INTERVAL_S``).
"""
from __future__ import annotations

import asyncio
import contextlib
import resource
import statistics
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any, Callable, Iterator

from suanli import gc_policy
from suanli.bench import synthetic
from suanli.bench.cpu_window import CpuSampler
from suanli.bench.stages import StageProbe, percentile
from suanli.config import Settings, load_settings
from suanli.deploy.plane import Plane, PlaneOptions
from suanli.deploy.processes import cpu_seconds
from suanli.deploy.stack import StackPaths, broker_services, registry_service


# The simulated nodes send heartbeats (every 5 s: 1,000 a second at 5,000 nodes, all through
# intake and the scheduler) but no metrics samples: ~380 series a node every 15 s would make
# this a benchmark of the telemetry path, which bench/telemetry.py measures on its own (the
# figures before issue 16 were taken before the simulator had metrics).
METRICS_INTERVAL_S = 0.0

LOW_LOAD_RATE = 100.0        # submissions/s offered in the low-load phase (issue 16)
LOW_LOAD_TASKS = 3000        # enough for a p99 at 100/s in 30 s, whatever the full run's size


async def cell_records(settings: Settings) -> list[Any]:
    """Every record of the namespace's cell log, then of its decisions topic, decoded
    (``kafka_io.EventConsumer`` records: ``kind``, ``payload``, ``timestamp``)."""
    from suanli.schemas.codec import Codec
    from suanli.schemas.registry import RegistryClient
    from suanli.streams.kafka_io import EventConsumer
    from suanli.streams.topics import TopicNames

    names = TopicNames(settings.namespace)
    out: list[Any] = []
    with RegistryClient(settings.registry_url) as registry:
        codec = Codec(registry)
        for topic in (names.cell_log, names.decisions):
            async with EventConsumer(settings.bootstrap_servers, codec, [topic]) as consumer:
                out.extend(await consumer.read_until_end())
    return out


async def _timings(settings: Settings, cell: str) -> tuple[list[int], list[float], int, dict[str, int]]:
    """(placement record timestamps, per-task latency ms, first submission ms, how many
    records of each kind the cell log and the decisions topic hold) of a cell."""
    submitted: dict[str, int] = {}
    placed: dict[str, int] = {}
    kinds: dict[str, int] = {}
    for r in await cell_records(settings):
        if r.payload is None or r.payload.get("cell") != cell:
            continue
        kinds[r.kind] = kinds.get(r.kind, 0) + 1
        if r.kind == "TaskSubmitted":
            submitted[r.payload["task_id"]] = r.payload["submitted_at"]
        elif r.kind == "TaskPlaced":
            placed.setdefault(r.payload["task_id"], r.timestamp)
    # The first 10 % of submissions (by time) are warm-up: they include the workers'
    # start-up and partition assignment, which is not the steady state being measured.
    order = sorted(submitted, key=lambda t: (submitted[t], t))
    steady = set(order[len(order) // 10:])
    latencies = [placed[t] - submitted[t] for t in placed if t in steady]
    return sorted(placed.values()), latencies, min(submitted.values(), default=0), dict(sorted(kinds.items()))


def _measured(plane: Plane, settings: Settings) -> list[tuple[str, Callable[[], float], Callable[[], float]]]:
    """(name, CPU seconds so far, RSS MiB) of everything that runs during a phase: the plane's
    workers, the stack's brokers and registry (they share the 2 cores, so a phase's
    throughput is bounded by their sum) and this driver process (the workload and, in the
    measured phases, the read model)."""
    services = [s for s, _argv in plane.services]
    services += [*broker_services(settings), registry_service(StackPaths(settings.home))]
    out: list[tuple[str, Callable[[], float], Callable[[], float]]] = [
        (s.name, lambda s=s: cpu_seconds(s.pid() or -1) or 0.0, lambda s=s: s.rss_mib() or 0.0)
        for s in services if s.pid() is not None]
    own = lambda: sum(resource.getrusage(resource.RUSAGE_SELF)[:2])  # noqa: E731 (user + system)
    out.append(("driver", own, lambda: resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024))
    return out


def _usage(measured: list[tuple[str, Callable[[], float], Callable[[], float]]],
           cpu_before: dict[str, float]) -> dict[str, Any]:
    return {name: {"cpu_seconds": round(cpu() - cpu_before.get(name, 0.0), 2), "rss_mib": round(rss(), 1)}
            for name, cpu, rss in measured}


def phase(settings: Settings, nodes_csv: Path, pods_csv: Path, tasks: int, rate: float,
           stages: bool = False) -> dict[str, Any]:
    """One plane run of ``tasks`` at ``rate``/s (0: as fast as possible); ``stages``: with the
    stage breakdown (``bench/stages.py``: its workload publishes the tasks and runs a read model)."""
    probe = StageProbe(settings, rate) if stages else None
    plane = Plane(settings, PlaneOptions(tasks=tasks, rate=rate, exit_when_drained=True, quiet=True,
                                         nodes_csv=nodes_csv, pods_csv=pods_csv, drain_timeout=900,
                                         metrics_interval_s=METRICS_INTERVAL_S,
                                         workload=probe.workload if probe else None),
                  out=lambda _m: None)
    plane.start()
    try:
        measured = _measured(plane, settings)
        cpu_before = {name: cpu() for name, cpu, _rss in measured}
        started = time.monotonic()
        with CpuSampler([(name, cpu) for name, cpu, _rss in measured]) as sampler:
            result = asyncio.run(plane.run())
        wall = time.monotonic() - started
        usage = _usage(measured, cpu_before)
    finally:
        plane.stop()
    stamps, latencies, first_submit, kinds = asyncio.run(_timings(settings, plane.cell))
    span = (stamps[-1] - first_submit) / 1000 if stamps else float("nan")
    extra = {"stages": asyncio.run(probe.collect())} if probe else {}
    if stamps and span > 0:
        extra["placement_window"] = _window_cpu(sampler, first_submit, stamps[-1], len(stamps))
    return {**extra, "tasks": tasks, "offered_rate": rate, "placed": len(stamps),
            "placements_per_s": round(len(stamps) / span, 1) if span and span > 0 else None,
            "latency_ms": {"p50": percentile(latencies, 50), "p95": percentile(latencies, 95),
                           "p99": percentile(latencies, 99), "mean": round(statistics.fmean(latencies), 1)
                           if latencies else None},
            "workers": usage, "wall_seconds": round(wall, 1), "capacity_violations": result["capacity_violations"],
            "records_by_kind": kinds}


def _window_cpu(sampler: CpuSampler, start_ms: int, end_ms: int, placed: int) -> dict[str, Any]:
    """What each process spent while the placements happened (first submission to last
    placement): CPU seconds, microseconds per placement, and the cores busy in all."""
    spent = sampler.spent(start_ms, end_ms)
    seconds = (end_ms - start_ms) / 1000
    return {"seconds": round(seconds, 2),
            "cores_busy": round(sum(spent.values()) / seconds, 2),
            "cpu_seconds": {name: round(cpu, 2) for name, cpu in spent.items()},
            "cpu_us_per_placement": {name: round(1e6 * cpu / placed) for name, cpu in spent.items()}}


def fresh() -> Settings:
    """Settings of a namespace of its own: a fresh plane, whose scheduler carries no earlier
    phase's cells in its state or its snapshots."""
    return load_settings(namespace=f"bench{uuid.uuid4().hex[:8]}")


@contextlib.contextmanager
def workload(node_count: int, task_count: int) -> Iterator[tuple[Path, Path]]:
    """``(nodes_csv, pods_csv)``: ``node_count`` synthetic nodes and ``task_count`` tasks,
    in a temporary directory removed on leaving."""
    with tempfile.TemporaryDirectory() as tmp:
        yield (synthetic.write_node_csv(Path(tmp) / "nodes.csv", node_count),
               synthetic.write_pod_csv(Path(tmp) / "pods.csv", task_count))


def run(node_count: int, task_count: int, max_only: bool = False, rate: float | None = None) -> dict[str, Any]:
    """The three phases (``max_only``: the first alone; ``rate``: one phase at that many
    submissions/s instead, with the stage breakdown, as the half-load phase runs), each on a
    fresh namespace (:func:`fresh`); returns the figures."""
    with workload(node_count, task_count) as (nodes_csv, pods_csv):
        if rate is not None:
            return {"nodes": node_count, "at_rate": phase(fresh(), nodes_csv, pods_csv, task_count, rate=rate,
                                                          stages=True)}
        peak = phase(fresh(), nodes_csv, pods_csv, task_count, rate=0)
        if max_only:
            return {"nodes": node_count, "max": peak}
        low = phase(fresh(), nodes_csv, pods_csv, min(task_count, LOW_LOAD_TASKS), rate=LOW_LOAD_RATE,
                     stages=True)
        rate = max(1.0, 0.5 * (peak["placements_per_s"] or 2.0))
        half = phase(fresh(), nodes_csv, pods_csv, task_count, rate=round(rate, 1), stages=True)
    return {"nodes": node_count, "max": peak, "low_load": low, "half_load": half}


def main(argv: list[str] | None = None) -> None:
    """``python -m suanli.bench.e2e [--nodes N] [--tasks N] [--max-only | --rate R] [--json F]``, stack up."""
    import argparse
    import json

    parser = argparse.ArgumentParser(prog="python -m suanli.bench.e2e", description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--tasks", type=int, default=10000)
    parser.add_argument("--max-only", action="store_true",
                        help="only phase 1 (as fast as possible): the sustained rate, its records and workers' CPU")
    parser.add_argument("--rate", type=float,
                        help="only one phase, at this many submissions/s, with the stage breakdown (as the half-load "
                             "phase): to compare settings at one offered rate")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args(argv)
    if args.rate is not None and (args.max_only or args.rate <= 0):
        parser.error("--rate takes a rate above 0, and not with --max-only")
    gc_policy.apply()        # the driver folds the read model, as `suanli api serve` does: its policy
    figures = run(args.nodes, args.tasks, max_only=args.max_only, rate=args.rate)
    text = json.dumps(figures, indent=1)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")


if __name__ == "__main__":
    main()
