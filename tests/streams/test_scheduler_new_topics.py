"""The scheduler worker on the real stack sends to a connector's dispatch topic that did not
exist when it started: it creates the topic (with the plane's partition count) and goes on
deciding (streams/app.py ``declare_new_topics``)."""
from __future__ import annotations

import asyncio
import time
import uuid

import pytest
from aiokafka.admin import AIOKafkaAdminClient

from suanli.config import load_settings, to_env
from suanli.deploy.plane import worker_processes
from suanli.processors.model import from_avro, to_avro
from suanli.schemas.codec import Codec
from suanli.schemas.registry import RegistryClient
from suanli.streams.kafka_io import EventConsumer, EventProducer, ensure_topics
from suanli.streams.topics import TopicNames, core_topics

pytestmark = pytest.mark.stack


def _payload(kind: str, fields: dict) -> dict:
    """A complete Avro payload from the fields that matter (the model fills the defaults)."""
    return to_avro(from_avro(kind, fields))


async def _publish(settings, events: list[tuple[str, dict]]) -> None:
    with RegistryClient(settings.registry_url) as registry:
        async with EventProducer(settings.bootstrap_servers, Codec(registry), namespace=settings.namespace) as producer:
            for kind, fields in events:
                await (await producer.publish(kind, _payload(kind, fields)))


async def _read(settings, topic: str) -> list:
    with RegistryClient(settings.registry_url) as registry:
        async with EventConsumer(settings.bootstrap_servers, Codec(registry), [topic]) as consumer:
            return await consumer.read_until_end(idle_ms=1000)


async def _topics(settings) -> dict[str, int]:
    admin = AIOKafkaAdminClient(bootstrap_servers=settings.bootstrap_servers)
    await admin.start()
    try:
        names = await admin.list_topics()
        described = await admin.describe_topics([n for n in names if n.startswith(settings.namespace + ".")])
        return {d["topic"]: len(d["partitions"]) for d in described}
    finally:
        await admin.close()


def _wait(what: str, probe, timeout: float = 120.0):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = probe()
        if last:
            return last
        time.sleep(0.5)
    pytest.fail(f"timed out after {timeout:.0f}s waiting for {what}; last seen: {last!r}")


def test_a_dispatch_topic_created_after_the_scheduler_started_gets_its_commands(stack):
    settings = load_settings(namespace=f"t{uuid.uuid4().hex[:10]}", partitions=2)
    topics = TopicNames(settings.namespace)
    run = uuid.uuid4().hex[:6]
    cell, connector = f"late-{run}", f"late{run}"
    asyncio.run(ensure_topics(settings.bootstrap_servers, core_topics(settings.partitions, settings.namespace)))
    assert topics.dispatch(connector) not in asyncio.run(_topics(settings))
    services = [worker_processes(settings)[role] for role in ("intake", "scheduler")]
    for service, argv in services:
        service.start(argv, env=to_env(settings))
    try:
        node = {"event_id": f"reg-{run}", "node_id": f"n-{run}", "cell": cell, "site": "s", "region": "r",
                "zone": "z", "tier": "onprem", "arch": "x86_64", "cpu_milli": 8000, "memory_mib": 16384,
                "accelerators": [], "registered_at": 0, "connector": connector}
        tasks = [{"event_id": f"sub{i}-{run}", "task_id": f"t{i}-{run}", "tenant": "e2e", "cell": cell,
                  "submitted_at": 1 + i,
                  "resources": {"cpu_milli": 1000, "memory_mib": 1024}} for i in range(2)]
        asyncio.run(_publish(settings, [("NodeRegistered", node), ("TaskSubmitted", tasks[0])]))

        def commands() -> dict[str, dict]:
            if topics.dispatch(connector) not in asyncio.run(_topics(settings)):
                return {}
            return {r.payload["task_id"]: r.payload for r in asyncio.run(_read(settings, topics.dispatch(connector)))
                    if r.kind == "DispatchCommand"}

        first = _wait("the first task's DispatchCommand on the new topic", commands)
        assert first[tasks[0]["task_id"]]["node_id"] == node["node_id"]
        # The scheduler goes on deciding after its first send to the new topic.
        asyncio.run(_publish(settings, [("TaskSubmitted", tasks[1])]))
        both = _wait("the second task's DispatchCommand", lambda: len(commands()) == 2 and commands())
        assert set(both) == {t["task_id"] for t in tasks}
        placed = [r.payload["task_id"] for r in asyncio.run(_read(settings, topics.decisions)) if r.kind == "TaskPlaced"]
        assert sorted(placed) == sorted(t["task_id"] for t in tasks)
        # Created by the scheduler as the plane creates its own: with the plane's partitions.
        assert asyncio.run(_topics(settings))[topics.dispatch(connector)] == settings.partitions
    finally:
        for service, _argv in reversed(services):
            service.stop()
