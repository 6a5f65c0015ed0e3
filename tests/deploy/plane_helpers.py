"""Helpers the plane tests share: reading a topic to its end, and a policy that is in force
before the workload's first task."""
from __future__ import annotations

import asyncio
from typing import Any, Awaitable, Callable

from suanli.schemas.codec import Codec
from suanli.schemas.registry import RegistryClient
from suanli.streams.kafka_io import EventConsumer
from suanli.streams.topics import TopicNames


async def read_topic(settings, topic: str) -> list:
    """Every record of ``topic``, decoded, read up to its end offsets."""
    with RegistryClient(settings.registry_url) as registry:
        async with EventConsumer(settings.bootstrap_servers, Codec(registry), [topic]) as consumer:
            return await consumer.read_until_end()


async def publish_policy_in_force(settings, publish: Callable[[str, dict], Awaitable[Any]],
                                  policy: dict[str, Any], timeout_s: float = 60) -> None:
    """Publish ``policy`` (a PolicyChanged payload) and return once it is in the cell log.

    A policy travels on the raw policy topic and a task on the raw tasks topic; intake reads
    both, and Kafka orders nothing across topics. A workload whose first tasks must be decided
    under the policy waits here: from then on every task enters the cell log after it.
    """
    future = await publish("PolicyChanged", policy)
    await future                                   # on the raw topic
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    with RegistryClient(settings.registry_url) as registry:
        async with EventConsumer(settings.bootstrap_servers, Codec(registry),
                                 [TopicNames(settings.namespace).cell_log]) as consumer:
            async for batch in consumer.batches(timeout_ms=250):
                if any(r.kind == "PolicyChanged" and r.payload["event_id"] == policy["event_id"] for r in batch):
                    return
                if loop.time() > deadline:
                    raise AssertionError(f"policy {policy['event_id']} not in the cell log after {timeout_s:.0f} s")
