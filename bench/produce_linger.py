"""What a producer's linger costs a lone record, on the running broker (``streams/send_now.py``).

    python -m suanli.bench.produce_linger [--records 400] [--rate 20] [--runs 2] [--json out.json]

Each run creates a fresh one-partition topic, starts a consumer on it, and sends
``--records`` small records at ``--rate`` per second, one at a time, in each of three ways:

* ``linger 0``: an aiokafka producer with ``linger_ms=0`` (each record sent at once);
* ``linger 2``: ``linger_ms=2``, the workers' setting (``streams/app.py``), waiting for each
  record's acknowledgement as the workers wait for a batch's;
* ``linger 2 + send_now``: the same, with :func:`~suanli.streams.send_now.send_now` right after
  the send, as the workers now do once a batch's records are with the producer.

The figure per record: the wall clock when the consumer got it minus its CreateTime (the
producer's clock: same machine), in ms; p50 / p90 / p99 / max per way, pooled over runs.
The ways alternate within a run, so the machine's drift touches them alike. The stack must
be up (``suanli stack up``).
"""
from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
import uuid
from typing import Any

from suanli.bench import save
from suanli.bench.stages import percentile, spread

WAYS = ("linger 0", "linger 2", "linger 2 + send_now")


async def one_way(bootstrap: str, way: str, records: int, rate: float) -> list[float]:
    """Latencies (ms) of ``records`` records sent ``way`` at ``rate``/s to a fresh topic."""
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

    from suanli.streams.kafka_io import ensure_topics
    from suanli.streams.send_now import send_now
    from suanli.streams.topics import TopicSpec

    topic = f"bench.linger.{uuid.uuid4().hex[:10]}"
    await ensure_topics(bootstrap, [TopicSpec(topic, 1)])
    consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                                enable_auto_commit=False, group_id=None)
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=0 if way == "linger 0" else 2)
    await consumer.start()
    await producer.start()
    latencies: list[float] = []
    try:
        await producer.partitions_for(topic)

        async def consume() -> None:
            async for record in consumer:
                latencies.append(time.time() * 1000 - record.timestamp)
                if len(latencies) >= records:
                    return

        reader = asyncio.create_task(consume())
        await asyncio.sleep(0.5)                       # the consumer's first fetch is out
        for i in range(records):
            fut = await producer.send(topic, b"x" * 300)
            if way.endswith("send_now"):
                send_now(producer)
            await fut
            await asyncio.sleep(1 / rate)
        await asyncio.wait_for(reader, 60)             # every record read
    finally:
        await producer.stop()
        await consumer.stop()
    return latencies


def run(bootstrap: str, records: int = 400, rate: float = 20.0, runs: int = 2) -> dict[str, Any]:
    pooled: dict[str, list[float]] = {w: [] for w in WAYS}
    for r in range(runs):
        for way in WAYS:
            got = asyncio.run(one_way(bootstrap, way, records, rate))
            pooled[way] += got
            print(f"run {r + 1} {way:>20}: p50 {percentile(got, 50):.2f} p99 {percentile(got, 99):.2f} ms",
                  file=sys.stderr)
    summary = {w: spread(v, 2) for w, v in pooled.items()}
    return {"records_per_way_and_run": records, "rate": rate, "runs": runs, "ms": summary}


def main(argv: list[str] | None = None) -> int:
    from suanli.config import load_settings

    ap = argparse.ArgumentParser(prog="python -m suanli.bench.produce_linger", description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=400, help="records per way and run")
    ap.add_argument("--rate", type=float, default=20.0, help="records per second")
    ap.add_argument("--runs", type=int, default=2, help="rounds of the three ways")
    ap.add_argument("--json", help="also write the figures here")
    args = ap.parse_args(argv)
    figures = run(load_settings().bootstrap_servers, args.records, args.rate, args.runs)
    print(json.dumps(figures, indent=1))
    save(args.json, figures)
    return 0


if __name__ == "__main__":
    sys.exit(main())
