"""The API read model's follower on the real broker: while what it fetches is busy, its
fetches wait at the broker for ``Settings.fetch_busy_min_bytes`` (or 20 ms); once a fetch is
quiet again they return at the first record and poll at the consumer's own wait
(``streams/busy_fetch.py``)."""
from __future__ import annotations

import asyncio
import uuid

import pytest

pytestmark = pytest.mark.stack


async def _until(ready, timeout: float = 30.0) -> None:
    async def poll() -> None:
        while not ready():
            await asyncio.sleep(0.01)
    await asyncio.wait_for(poll(), timeout)


async def _follow(settings) -> tuple[list[tuple[int, int]], tuple[int, int]]:
    """The follower's fetch settings (min bytes, max wait ms), sampled every millisecond from
    its start until it has fetched a burst of 20 records and a fetch after it has found
    nothing (distinct values in the order seen), and the settings it ends with."""
    from suanli.api.readmodel import LogFollower
    from suanli.schemas.codec import Codec
    from suanli.schemas.registry import RegistryClient
    from suanli.streams.kafka_io import EventProducer, ensure_topics
    from suanli.streams.topics import TopicNames, core_topics

    decisions = TopicNames(settings.namespace).decisions
    await ensure_topics(settings.bootstrap_servers, core_topics(1, settings.namespace))
    with RegistryClient(settings.registry_url) as registry:
        codec = Codec(registry)
        follower = LogFollower(settings, codec, poll_ms=50)
        await follower.start()
        try:
            await _until(lambda: follower.ready)
            consumer = follower._consumer
            fetcher = consumer._fetcher
            seen: list[tuple[int, int]] = []

            async def sample() -> None:
                while True:
                    now = (fetcher._fetch_min_bytes, fetcher._fetch_max_wait_ms)
                    if not seen or seen[-1] != now:
                        seen.append(now)
                    await asyncio.sleep(0.001)
            sampler = asyncio.create_task(sample())
            async with EventProducer(settings.bootstrap_servers, codec) as producer:
                for i in range(20):          # a burst the fold skips (not Avro), but fetches all the same
                    await producer.send_raw(decisions, f"x{i}".encode(), key=b"k")
                await producer.flush()
            tp = next(tp for tp in consumer.assignment() if tp.topic == decisions)
            await _until_async(lambda: consumer.position(tp), 20)
            await asyncio.sleep(0.3)         # fetches that find nothing: several quiet polls
            sampler.cancel()
            return seen, (fetcher._fetch_min_bytes, fetcher._fetch_max_wait_ms)
        finally:
            await follower.stop()


async def _until_async(value, at_least: int, timeout: float = 30.0) -> None:
    async def poll() -> None:
        while await value() < at_least:
            await asyncio.sleep(0.01)
    await asyncio.wait_for(poll(), timeout)


def test_the_follower_fetches_fuller_while_busy_and_returns_to_its_quiet_poll(stack):
    settings = stack.model_copy(update={"namespace": f"t{uuid.uuid4().hex[:8]}"})
    seen, last = asyncio.run(_follow(settings))
    assert seen[0] == (1, 500) and last == (1, 500)             # aiokafka's defaults: its idle poll
    assert (16_384, 20) in seen                                  # while the burst was fetched


def test_with_the_setting_at_1_the_follower_keeps_its_fetches(stack):
    settings = stack.model_copy(update={"namespace": f"t{uuid.uuid4().hex[:8]}", "fetch_busy_min_bytes": 1})
    assert asyncio.run(_follow(settings)) == ([(1, 500)], (1, 500))
