"""Intake's ticks never overtake the raw records it has still to read, on the real stack.

A backlog of 20,000 submissions is written to the raw topic (its four partitions) before
intake starts, each stamped ten minutes ago plus its index in ms, as record timestamp and as
``submitted_at``. Intake then reads it, ticking every 10 ms. In the cell log, every tick that
comes before the backlog's last record claims no later a time than the newest submission ahead
of it; with the wall clock (the old rule: tick while a micro-batch is not full) a tick in the
backlog would claim ten minutes later than the records behind it, which is how heartbeats
queued behind a burst made healthy nodes SUSPECT. Once the backlog is read, the clock is the
wall clock again.
"""
from __future__ import annotations

import asyncio
import time
import uuid

import pytest
from aiokafka import AIOKafkaProducer

from suanli.bench.cells_across_workers import read_topic, task_event
from suanli.config import load_settings, to_env
from suanli.deploy.plane import worker_processes
from suanli.deploy.waiting import wait_for
from suanli.processors.model import from_avro, to_avro
from suanli.schemas.codec import Codec
from suanli.schemas.registry import RegistryClient
from suanli.streams.kafka_io import ensure_topics
from suanli.streams.topics import TopicNames, core_topics, raw_route

pytestmark = pytest.mark.stack

BACKLOG = 20_000


async def _write_backlog(settings, cell: str, t0: int) -> None:
    with RegistryClient(settings.registry_url) as registry:
        codec = Codec(registry)
        producer = AIOKafkaProducer(bootstrap_servers=settings.bootstrap_servers, linger_ms=20)
        await producer.start()
        try:
            pending = []
            for i in range(BACKLOG):
                kind, fields = task_event(cell, i)
                fields["submitted_at"] = t0 + i
                topic, key = raw_route(kind, fields, settings.namespace)
                value = codec.encode(kind, to_avro(from_avro(kind, fields)))
                pending.append(await producer.send(topic, value, key=key.encode(), timestamp_ms=t0 + i))
            await asyncio.gather(*pending)
        finally:
            await producer.stop()


def test_intake_ticks_never_claim_a_time_past_the_raw_records_still_unread(stack):
    settings = load_settings(namespace=f"t{uuid.uuid4().hex[:10]}", tick_ms=10)
    topics = TopicNames(settings.namespace)
    cell = f"clock-{uuid.uuid4().hex[:6]}"
    asyncio.run(ensure_topics(settings.bootstrap_servers, core_topics(settings.partitions, settings.namespace)))
    t0 = int(time.time() * 1000) - 600_000
    asyncio.run(_write_backlog(settings, cell, t0))

    service, argv = worker_processes(settings)["intake"]
    service.start(argv, env=to_env(settings))
    try:
        def read_and_ticked_after() -> list | None:
            records = asyncio.run(read_topic(settings, topics.cell_log))
            submitted = [i for i, r in enumerate(records) if r.kind == "TaskSubmitted"]
            done = len(submitted) == BACKLOG and any(r.kind == "CellTick" for r in records[submitted[-1]:])
            return records if done else None
        records = wait_for("the backlog in the cell log, and a tick after it", read_and_ticked_after, timeout=240)
    finally:
        service.stop()

    records = [r for r in records if r.payload.get("cell") == cell]      # one cell: one partition, in order
    last_submission = max(i for i, r in enumerate(records) if r.kind == "TaskSubmitted")
    newest, in_backlog, overtaking = 0, [], []
    for r in records[:last_submission]:
        if r.kind == "TaskSubmitted":
            newest = max(newest, r.payload["submitted_at"])
        elif r.kind == "CellTick":
            in_backlog.append(r.payload["at"])
            if r.payload["at"] > newest:
                overtaking.append((r.payload["at"] - newest, r.payload["at"]))
    assert overtaking == [], f"{len(overtaking)} ticks claimed a time past the newest record read: {overtaking[:5]}"
    # the clock went on while the backlog was read (it did not just stop), and forward only
    assert len(in_backlog) >= 2 and in_backlog == sorted(set(in_backlog)), in_backlog[:20]
    assert in_backlog[-1] - in_backlog[0] > 0
    # read to the end, the ticks run on the wall clock again: ten minutes past the backlog's times
    after = [r.payload["at"] for r in records[last_submission:] if r.kind == "CellTick"]
    assert after and after[-1] > t0 + 590_000, (after[-3:], t0)
