"""The scheduler worker on the real stack sends to a connector's dispatch topic that did not
exist when it started: it creates the topic (with the plane's partition count) and goes on
deciding (streams/app.py ``declare_new_topics``)."""
from __future__ import annotations

import asyncio
import uuid

import pytest
from aiokafka.admin import AIOKafkaAdminClient

from suanli.bench.cells_across_workers import publish, read_topic, wait_for
from suanli.config import load_settings, to_env
from suanli.deploy.plane import worker_processes
from suanli.streams.kafka_io import ensure_topics
from suanli.streams.topics import TopicNames, core_topics

pytestmark = pytest.mark.stack


async def _topics(settings) -> dict[str, int]:
    admin = AIOKafkaAdminClient(bootstrap_servers=settings.bootstrap_servers)
    await admin.start()
    try:
        names = await admin.list_topics()
        described = await admin.describe_topics([n for n in names if n.startswith(settings.namespace + ".")])
        return {d["topic"]: len(d["partitions"]) for d in described}
    finally:
        await admin.close()


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
        asyncio.run(publish(settings, [("NodeRegistered", node), ("TaskSubmitted", tasks[0])]))

        def commands() -> dict[str, dict]:
            if topics.dispatch(connector) not in asyncio.run(_topics(settings)):
                return {}
            return {r.payload["task_id"]: r.payload for r in asyncio.run(read_topic(settings, topics.dispatch(connector)))
                    if r.kind == "DispatchCommand"}

        first = wait_for("the first task's DispatchCommand on the new topic", commands, timeout=120)
        assert first[tasks[0]["task_id"]]["node_id"] == node["node_id"]
        # The scheduler goes on deciding after its first send to the new topic.
        asyncio.run(publish(settings, [("TaskSubmitted", tasks[1])]))
        both = wait_for("the second task's DispatchCommand", lambda: len(commands()) == 2 and commands(),
                        timeout=120)
        assert set(both) == {t["task_id"] for t in tasks}
        placed = [r.payload["task_id"] for r in asyncio.run(read_topic(settings, topics.decisions)) if r.kind == "TaskPlaced"]
        assert sorted(placed) == sorted(t["task_id"] for t in tasks)
        # Created by the scheduler as the plane creates its own: with the plane's partitions.
        assert asyncio.run(_topics(settings))[topics.dispatch(connector)] == settings.partitions
    finally:
        for service, _argv in reversed(services):
            service.stop()
