"""``send_now`` (streams/send_now.py): what a producer holds back for its linger leaves at
once, on the real broker; a producer without the internals it reaches is left alone."""
from __future__ import annotations

import asyncio
import logging

import pytest
from aiokafka import AIOKafkaProducer

from suanli.streams.kafka_io import TopicSpec, ensure_topics
from suanli.streams import send_now as send_now_module
from suanli.streams.send_now import aiokafka_producer, send_now

LINGER_MS = 120_000      # far beyond the test's wait: only send_now can get the records out in time
WAIT_S = 5


async def _stored_in_time(bootstrap: str, topic: str, hurry: bool) -> tuple[bool, list[int]]:
    await ensure_topics(bootstrap, [TopicSpec(topic, 2)])
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=LINGER_MS)
    await producer.start()
    try:
        await producer.partitions_for(topic)              # the topic's metadata known beforehand
        futures = [await producer.send(topic, f"r{i}".encode(), partition=i % 2) for i in range(6)]
        if hurry:
            assert send_now(producer)
        done, _ = await asyncio.wait(futures, timeout=WAIT_S)
        offsets = [f.result().offset for f in futures if f in done]
        return len(done) == len(futures), offsets
    finally:
        send_now(producer)               # stop() sends what is held: not after the linger
        await producer.stop()


@pytest.mark.stack
def test_records_held_for_the_linger_are_stored_at_once_after_send_now(stack, topic_name):
    stored, offsets = asyncio.run(_stored_in_time(stack.bootstrap_servers, topic_name, hurry=True))
    assert stored
    assert offsets == [0, 0, 1, 1, 2, 2]          # in order within each partition


@pytest.mark.stack
def test_without_send_now_the_same_records_wait_for_the_linger(stack, topic_name):
    stored, offsets = asyncio.run(_stored_in_time(stack.bootstrap_servers, topic_name, hurry=False))
    assert not stored and offsets == []


def test_a_producer_without_those_internals_is_left_alone_and_the_log_says_so_once(caplog, monkeypatch):
    class Other:
        pass

    monkeypatch.setattr(send_now_module, "_warned", [])
    with caplog.at_level(logging.WARNING, logger="suanli.streams.send_now"):
        assert send_now(Other()) is False
        assert send_now(Other()) is False
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 1 and "has no _message_accumulator; urgent records wait out the linger" in said[0]


def test_a_faust_producer_is_reached_through_its_aiokafka_producer():
    async def check() -> None:
        inner = AIOKafkaProducer(bootstrap_servers="127.0.0.1:1")     # never started: no connection

        class FaustLike:
            _producer = inner

        assert aiokafka_producer(FaustLike()) is inner and aiokafka_producer(inner) is inner
        assert send_now(FaustLike())          # nothing held: closes nothing, wakes the sender
        await inner.stop()                    # never started: nothing to send, no connection to close

    asyncio.run(check())
