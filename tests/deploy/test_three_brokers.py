"""The three-broker stack (`suanli stack up --brokers 3`).

A KRaft quorum of three brokers on loopback ports of its own (29092-29097, registry 28081),
in a home of its own, beside the suite's single-broker stack. Every topic is replicated 3
times with min.insync.replicas=2, and a plane on it survives the SIGKILL of the broker leading
its cell log's partition.
"""
from __future__ import annotations

import asyncio
import json
import time
import uuid

import pytest
from aiokafka.admin import AIOKafkaAdminClient

from suanli.config import Settings
from suanli.deploy import stack as stack_mod
from suanli.streams.kafka_io import ensure_topics
from suanli.streams.topics import TopicNames, core_topics

pytestmark = pytest.mark.stack


@pytest.fixture(scope="module")
def quorum(side_stack) -> Settings:
    """The three-broker stack with its registry, started for this module and stopped after."""
    with side_stack("three-broker", brokers=3, kafka_port=29092, controller_port=29093,
                    registry_port=28081, namespace=f"q{uuid.uuid4().hex[:8]}", partitions=2) as settings:
        yield settings


async def _describe(settings: Settings, topics: list[str]) -> dict[str, list[dict]]:
    admin = AIOKafkaAdminClient(bootstrap_servers=settings.bootstrap_servers)
    await admin.start()
    try:
        return {d["topic"]: d["partitions"] for d in await admin.describe_topics(topics)}
    finally:
        await admin.close()


def test_every_topic_is_replicated_three_times(quorum):
    assert quorum.bootstrap_servers == "127.0.0.1:29092,127.0.0.1:29094,127.0.0.1:29096"
    rows = stack_mod.status(quorum)
    assert [r["service"] for r in rows[:3]] == ["kafka-1", "kafka-2", "kafka-3"] and all(r["ready"] for r in rows)
    asyncio.run(ensure_topics(quorum.bootstrap_servers, core_topics(quorum.partitions, quorum.namespace)))
    names = TopicNames(quorum.namespace)
    topics = [names.cell_log, names.decisions, "kafkasql-journal"]
    deadline = time.monotonic() + 30          # a created topic reaches every broker's metadata shortly after
    while True:
        described = asyncio.run(_describe(quorum, topics))
        if all(described.get(t) for t in topics) or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    for topic, partitions in described.items():
        assert partitions and all(len(p["replicas"]) == 3 for p in partitions), (topic, partitions)


def test_a_broker_killed_under_load_loses_no_task_and_replays_identical(quorum):
    """The broker leading the cell's partition of the cell log is SIGKILLed a third of the way
    into a 3,000-task stream and started again 10 s later (``bench/broker_failure.py``): every
    task is answered, none placed twice, decisions go on after the failover, and the cell log
    replays to the recorded decisions byte for byte."""
    from suanli.bench.broker_failure import Options, run

    figures = run(quorum, Options(tasks=3000, rate=100, down_s=10, kill_after=0.3), log=print)
    print(f"broker failure: {json.dumps(figures)}")
    assert figures["lost_count"] == 0, figures["lost"]
    assert figures["placed_twice_count"] == 0, figures
    assert figures["replay"] == "IDENTICAL", figures["replay"]
    assert figures["latency_ms"]["after"]["tasks"] > 0, figures
