"""The workers' fetch wait at low load: Faust's fixed 1.5 s against ``Settings.fetch_max_wait_ms``
(``streams/fetch_wait.py``), on the running stack.

    python -m suanli.bench.fetch_wait [--runs 3] [--nodes 5000] [--tasks 3000] [--rate 100] [--json out.json]
    python -m suanli.bench.fetch_wait --bare [--records 300] [--json out.json]

``--bare`` shows the mechanism on one aiokafka consumer and nothing else: a fresh topic of 4
partitions, a record every 10 ms into partition 0 only, and a consumer of all 4 that takes
each fetched batch and then works :data:`BARE_WORK_S` on it (longer than aiokafka's 0.1 s
prefetch backoff, as a busy worker or read model does). The figure per record is the wall
clock when ``getmany`` handed it over minus its CreateTime, for each fetch wait of
:data:`BARE_WAITS_MS` (aiokafka's default 500, Faust's 1,500, the setting's default 20),
alternating.

Each run is a phase of ``bench/e2e.py``: a fresh plane (intake, scheduler, telemetry, the
simulated connector) on a fresh namespace, ``--nodes`` synthetic nodes, ``--tasks`` tasks
offered at ``--rate`` per second (100, the low-load phase, with the stage breakdown of
``bench/stages.py``; 0, the max phase: as fast as the driver can, placements/s). The two
arms alternate, ``faust`` first, so the machine's drift touches them alike; only the
setting ``fetch_max_wait_ms`` differs (1500, the value Faust fixes, or the default), which
only the workers read.

Figures per run: placements/s, the submit -> placed latency (p50 / p95 / p99, ms, after the
warm-up) and, at a set rate, each stage's p50 / p99 and the scheduler's micro-batches (count
and mean size). The summary counts, per arm, the runs whose scheduler stage p50 was over
500 ms: the state the long wait causes, in which the scheduler takes ~1 s batches a second
behind the log.
"""
from __future__ import annotations

import argparse
import json
import sys
import uuid
from typing import Any, Mapping

from suanli.bench import save
from suanli.streams.fetch_wait import FAUST_FETCH_MAX_WAIT_MS

AIOKAFKA_FETCH_MAX_WAIT_MS = 500                 # aiokafka's own default
ARMS = {"faust": FAUST_FETCH_MAX_WAIT_MS, "default": None}          # None: the setting's default
BARE_WAITS_MS = (AIOKAFKA_FETCH_MAX_WAIT_MS, FAUST_FETCH_MAX_WAIT_MS, 20)
BARE_WORK_S = 0.15
BARE_PERIOD_S = 0.01
LOW_RATE = 100.0
BEHIND_MS = 500                                  # a scheduler stage p50 over this: the ~1 s batches


def _figures(phase: Mapping[str, Any]) -> dict[str, Any]:
    """What one run reports, from ``e2e.phase``'s result."""
    out = {"placements_per_s": phase["placements_per_s"], "latency_ms": phase["latency_ms"],
           "placed": phase["placed"], "tasks": phase["tasks"]}
    st = phase.get("stages")
    if st:
        batches = st["scheduler"]["batches"]
        out["stages"] = {s["stage"]: {"p50": s["p50"], "p99": s["p99"]} for s in st["stages"]}
        out["scheduler_batches"] = {"count": batches["count"], "mean_events": batches["mean_events"]}
        out["notes"] = st["notes"]
    return out


def summarise(runs: Mapping[str, list[Mapping[str, Any]]]) -> dict[str, Any]:
    """Per arm: the runs' placements/s, p50s and p99s in order, and (with stages) how many ran
    a second behind."""
    out: dict[str, Any] = {}
    for arm, rs in runs.items():
        out[arm] = {"placements_per_s": [r.get("placements_per_s") for r in rs],
                    "p50_ms": [r["latency_ms"]["p50"] for r in rs], "p99_ms": [r["latency_ms"]["p99"] for r in rs],
                    "runs": len(rs)}
        if all("stages" in r for r in rs):
            scheduler = [r["stages"]["cell log -> decisions topic (scheduler)"]["p50"] for r in rs]
            out[arm]["scheduler_stage_p50_ms"] = scheduler
            out[arm]["runs_behind"] = sum(1 for v in scheduler if v is not None and v > BEHIND_MS)
    return out


def run(runs: int = 3, nodes: int = 5000, tasks: int = 3000, rate: float = LOW_RATE) -> dict[str, Any]:
    from suanli.bench import e2e
    from suanli.config import load_settings

    got: dict[str, list[dict[str, Any]]] = {arm: [] for arm in ARMS}
    with e2e.workload(nodes, tasks) as (nodes_csv, pods_csv):
        for i in range(runs):
            for arm, wait in ARMS.items():
                overrides: dict[str, Any] = {"namespace": f"benchfw{uuid.uuid4().hex[:8]}"}
                if wait is not None:
                    overrides["fetch_max_wait_ms"] = wait
                settings = load_settings(**overrides)
                phase = e2e.phase(settings, nodes_csv, pods_csv, tasks, rate=rate, stages=rate > 0)
                figures = {"fetch_max_wait_ms": settings.fetch_max_wait_ms, **_figures(phase)}
                got[arm].append(figures)
                lat = figures["latency_ms"]
                print(f"run {i + 1} {arm:>7} (fetch wait {settings.fetch_max_wait_ms} ms): "
                      f"{figures['placements_per_s']} placements/s, p50 {lat['p50']} p95 {lat['p95']} "
                      f"p99 {lat['p99']} ms; scheduler batches {figures.get('scheduler_batches', '-')}",
                      file=sys.stderr)
    return {"nodes": nodes, "tasks": tasks, "rate": rate, "runs": got, "summary": summarise(got)}


async def bare_latencies(bootstrap: str, wait_ms: int, records: int) -> list[float]:
    """Latencies (ms) of ``records`` records through one consumer fetching with ``wait_ms``
    (see the module docstring's ``--bare``)."""
    import asyncio
    import time

    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

    from suanli.streams.kafka_io import ensure_topics
    from suanli.streams.kafka_security import client_options
    from suanli.streams.topics import TopicSpec

    topic = f"bench.fetchwait.{uuid.uuid4().hex[:10]}"
    await ensure_topics(bootstrap, [TopicSpec(topic, 4)])
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=0, **client_options(bootstrap))
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                                auto_offset_reset="earliest", fetch_max_wait_ms=wait_ms, **client_options(bootstrap))
    await producer.start()
    await consumer.start()
    latencies: list[float] = []
    try:
        consumer.assign([TopicPartition(topic, p) for p in range(4)])

        async def produce() -> None:
            for _ in range(records):
                await producer.send(topic, b"x" * 200, partition=0)
                await asyncio.sleep(BARE_PERIOD_S)

        writer = asyncio.create_task(produce())
        while len(latencies) < records:
            fetched = await consumer.getmany(timeout_ms=2000)
            now = time.time() * 1000
            got = [now - r.timestamp for rs in fetched.values() for r in rs]
            latencies += got
            if got:
                await asyncio.sleep(BARE_WORK_S)          # the batch's work: no fetch is taken meanwhile
        await writer
    finally:
        await consumer.stop()
        await producer.stop()
    return latencies


def run_bare(records: int = 300) -> dict[str, Any]:
    import asyncio

    from suanli.bench.stages import spread
    from suanli.config import load_settings

    bootstrap = load_settings().bootstrap_servers
    out: dict[str, Any] = {}
    for wait in BARE_WAITS_MS:
        got = asyncio.run(bare_latencies(bootstrap, wait, records))
        out[str(wait)] = spread(got, 1)
        print(f"fetch wait {wait:>5} ms: {out[str(wait)]}", file=sys.stderr)
    return {"records": records, "period_s": BARE_PERIOD_S, "work_s": BARE_WORK_S, "ms_by_fetch_wait": out}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m suanli.bench.fetch_wait", description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=3, help="rounds of the two arms")
    ap.add_argument("--nodes", type=int, default=5000, help="synthetic nodes")
    ap.add_argument("--tasks", type=int, default=3000, help="tasks per run")
    ap.add_argument("--rate", type=float, default=LOW_RATE, help="submissions/s offered; 0: as fast as possible")
    ap.add_argument("--bare", action="store_true", help="one bare consumer per fetch wait (see above)")
    ap.add_argument("--records", type=int, default=300, help="--bare: records per fetch wait")
    ap.add_argument("--json", help="also write the figures here")
    args = ap.parse_args(argv)
    if args.rate < 0:
        ap.error("--rate must be >= 0")
    figures = run_bare(args.records) if args.bare else run(args.runs, args.nodes, args.tasks, args.rate)
    print(json.dumps(figures if args.bare else figures["summary"], indent=1))
    save(args.json, figures)
    return 0


if __name__ == "__main__":
    sys.exit(main())
