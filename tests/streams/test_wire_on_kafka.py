"""Produce to and consume from the real broker, through the real registry."""
from __future__ import annotations

import asyncio
import shutil
import struct
import subprocess
import uuid

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from suanli.errors import DecodeError

pytestmark = pytest.mark.stack


async def _produce(bootstrap: str, topic: str, values: list[bytes | None]) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", enable_idempotence=True)
    await producer.start()
    try:
        for value in values:
            await producer.send_and_wait(topic, value, key=b"openb")
    finally:
        await producer.stop()


async def _consume(bootstrap: str, topic: str, count: int) -> list:
    consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                                enable_auto_commit=False, group_id=None)
    await consumer.start()
    records = []
    try:
        while len(records) < count:
            batch = await asyncio.wait_for(consumer.getmany(timeout_ms=1000), 30)
            for part_records in batch.values():
                records.extend(part_records)
    finally:
        await consumer.stop()
    return records


def _task(i: int) -> dict:
    return {
        "event_id": f"ev-{i}", "task_id": f"task-{i}", "tenant": "acme", "cell": "openb",
        "submitted_at": 1_700_000_000_000 + i,
        "resources": {"cpu_milli": 1000 * (i + 1), "memory_mib": 2048, "gpu_count": 1, "gpu_milli": 500,
                      "gpu_models": [], "gpu_memory_mib": 0, "accelerators": []},
        "qos_tier": "SILVER", "priority": 0, "labels": {}, "deadline": None,
        "duration_estimate_ms": None, "command": None, "profile": None, "env": {"RANK": str(i)},
        "job_id": f"job-{i % 3}" if i % 2 else None,
    }


def test_events_survive_a_trip_through_kafka(stack, codec, topic_name):
    sent = [_task(i) for i in range(50)]
    asyncio.run(_produce(stack.bootstrap_servers, topic_name, [codec.encode("TaskSubmitted", e) for e in sent]))
    records = asyncio.run(_consume(stack.bootstrap_servers, topic_name, len(sent)))
    got = [codec.decode(r.value, topic=r.topic, partition=r.partition, offset=r.offset) for r in records]
    assert [kind for kind, _ in got] == ["TaskSubmitted"] * len(sent)
    assert [payload for _, payload in got] == sent


def test_bad_records_on_the_wire_fail_with_their_coordinates(stack, codec, topic_name):
    good = codec.encode("TaskSubmitted", _task(1))
    values = [b"not avro at all", struct.pack(">bI", 0, 1_999_999_999) + good[5:], good]
    asyncio.run(_produce(stack.bootstrap_servers, topic_name, values))
    records = asyncio.run(_consume(stack.bootstrap_servers, topic_name, 3))
    outcomes = []
    for r in records:
        try:
            outcomes.append(codec.decode(r.value, topic=r.topic, partition=r.partition, offset=r.offset)[0])
        except DecodeError as exc:
            outcomes.append(str(exc))
    assert outcomes[0] == f"cannot decode record at {topic_name}[0]@0: magic byte is 0x6e, not 0x00: not the Confluent wire format"
    assert outcomes[1] == f"cannot decode record at {topic_name}[0]@1: unknown schema id 1999999999"
    assert outcomes[2] == "TaskSubmitted"


def test_kcat_reads_the_standard_wire_format(stack, codec, topic_name):
    kcat = shutil.which("kcat")
    assert kcat, "kcat (Debian package 'kcat') must be installed: .ci/run installs it"
    data = codec.encode("TaskSubmitted", _task(7))
    asyncio.run(_produce(stack.bootstrap_servers, topic_name, [data]))
    out = subprocess.run([kcat, "-C", "-b", stack.bootstrap_servers, "-t", topic_name, "-o", "beginning",
                          "-c", "1", "-e", "-f", "%s"], capture_output=True, timeout=60, check=True).stdout
    schema_id = struct.unpack(">I", data[1:5])[0]
    assert out[:5] == b"\x00" + struct.pack(">I", schema_id)
    assert out == data


def test_read_until_end_reads_every_partition_to_its_end_offset(stack, codec):
    """The read stops at the end offsets taken when it starts, not at a pause: every record
    of a three-partition topic comes back, each partition in offset order, and a topic
    that is empty reads as nothing at once."""
    from suanli.streams.kafka_io import EventConsumer, ensure_topics
    from suanli.streams.topics import TopicSpec

    topic = f"suanlitest.read-to-end.{uuid.uuid4().hex[:8]}"
    empty = f"{topic}.empty"
    asyncio.run(ensure_topics(stack.bootstrap_servers, [TopicSpec(topic, 3), TopicSpec(empty, 1)]))

    async def produce_and_read() -> tuple[list, list]:
        producer = AIOKafkaProducer(bootstrap_servers=stack.bootstrap_servers, acks="all")
        await producer.start()
        try:
            for i in range(300):
                await producer.send(topic, codec.encode("TaskSubmitted", _task(i)), key=f"k{i % 7}".encode())
            await producer.flush()
        finally:
            await producer.stop()
        async with EventConsumer(stack.bootstrap_servers, codec, [topic]) as consumer:
            got = await consumer.read_until_end()
        async with EventConsumer(stack.bootstrap_servers, codec, [empty]) as consumer:
            none = await consumer.read_until_end(timeout_ms=10_000)
        return got, none

    got, none = asyncio.run(produce_and_read())
    assert sorted(r.payload["task_id"] for r in got) == sorted(f"task-{i}" for i in range(300))
    assert {r.partition for r in got} == {0, 1, 2}
    order = [(r.partition, r.offset) for r in got]
    assert order == sorted(order)
    assert none == []


def test_wait_until_consumed_waits_for_the_group_to_commit_past_the_end_offsets(stack):
    """A group that has committed only part of a two-partition topic is reported behind, with
    the count; once it commits the rest, the wait returns. A topic with nothing written needs
    no commit."""
    from aiokafka.structs import OffsetAndMetadata, TopicPartition

    from suanli.errors import StackError
    from suanli.streams.kafka_io import ensure_topics, wait_until_consumed
    from suanli.streams.topics import TopicSpec

    topic = f"suanlitest.consumed.{uuid.uuid4().hex[:8]}"
    empty = f"{topic}.empty"
    group = f"{topic}.group"
    asyncio.run(ensure_topics(stack.bootstrap_servers, [TopicSpec(topic, 2), TopicSpec(empty, 1)]))

    async def scenario() -> str:
        producer = AIOKafkaProducer(bootstrap_servers=stack.bootstrap_servers, acks="all")
        await producer.start()
        try:
            for i in range(10):
                await producer.send(topic, b"x", partition=i % 2)
            await producer.flush()
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(bootstrap_servers=stack.bootstrap_servers, group_id=group,
                                    enable_auto_commit=False)
        await consumer.start()
        try:
            consumer.assign([TopicPartition(topic, 0), TopicPartition(topic, 1)])
            await consumer.commit({TopicPartition(topic, 0): OffsetAndMetadata(5, ""),
                                   TopicPartition(topic, 1): OffsetAndMetadata(2, "")})
            with pytest.raises(StackError) as behind:
                await wait_until_consumed(stack.bootstrap_servers, group, [topic, empty], timeout=1)
            await consumer.commit({TopicPartition(topic, 1): OffsetAndMetadata(5, "")})
            await wait_until_consumed(stack.bootstrap_servers, group, [topic, empty], timeout=30)
        finally:
            await consumer.stop()
        return str(behind.value)

    message = asyncio.run(scenario())
    assert f"group {group} has not handled 3 records" in message
    assert f"('{topic}', 1): 3" in message


def test_the_readability_probe_tells_answering_partitions_from_a_cluster_that_does_not(stack):
    """Intake's ticker asks it before each tick (a partition without a live leader holds the
    cell clock back). The suite's broker answers for a two-partition topic; a loopback port
    where no broker listens does not, within the probe's bound, and is named."""
    import socket

    from suanli.streams.kafka_io import ReadabilityProbe, ensure_topics
    from suanli.streams.topics import TopicSpec

    topic = f"suanlitest.probe.{uuid.uuid4().hex[:8]}"
    asyncio.run(ensure_topics(stack.bootstrap_servers, [TopicSpec(topic, 2)]))
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        dead = f"127.0.0.1:{sock.getsockname()[1]}"

    asked: list[list[tuple[str, int]]] = []

    async def ask(bootstrap: str) -> list[list[str]]:
        probe = ReadabilityProbe(bootstrap, [topic], timeout_s=2.0)
        try:
            out = []
            for _ in range(2):
                out.append(await probe.unreadable())
                asked.append(sorted((tp.topic, tp.partition) for tp in probe.asked))
            return out
        finally:
            await probe.stop()

    assert asyncio.run(ask(stack.bootstrap_servers)) == [[], []]
    # each ask really sent ListOffsets to both partitions (the first one too: starting, the
    # probe's client learns its topics' metadata, and only theirs)
    assert asked == [[(topic, 0), (topic, 1)]] * 2
    first, _second = asyncio.run(ask(dead))
    assert first and topic in first[0]


def test_the_cell_log_is_stamped_by_the_broker_and_the_raw_topics_by_their_producers(stack):
    """``core_topics`` creates the cell log with LogAppendTime: a record's timestamp there is
    the broker's clock when it arrived, whatever time its producer put on it; a raw topic
    keeps the producer's CreateTime."""
    import time

    from suanli.errors import StackError
    from suanli.streams.kafka_io import ensure_topics, timestamp_types
    from suanli.streams.topics import TopicNames, core_topics

    names = TopicNames(f"suanlitest{uuid.uuid4().hex[:8]}")
    asyncio.run(ensure_topics(stack.bootstrap_servers, core_topics(1, names.namespace)))
    claimed = 1_000_000_000_000          # 2001: a producer's clock far behind

    async def scenario() -> dict[str, tuple[int, int]]:
        producer = AIOKafkaProducer(bootstrap_servers=stack.bootstrap_servers, acks="all")
        await producer.start()
        try:
            for topic in (names.cell_log, names.raw_tasks):
                await (await producer.send(topic, b"x", timestamp_ms=claimed))
        finally:
            await producer.stop()
        got = {}
        for topic in (names.cell_log, names.raw_tasks):
            consumer = AIOKafkaConsumer(topic, bootstrap_servers=stack.bootstrap_servers, auto_offset_reset="earliest")
            await consumer.start()
            try:
                record = await asyncio.wait_for(consumer.getone(), 30)
                got[topic] = (record.timestamp_type, record.timestamp)
            finally:
                await consumer.stop()
        return got

    before = int(time.time() * 1000)
    got = asyncio.run(scenario())
    kind, at = got[names.cell_log]
    assert kind == 1 and before <= at <= int(time.time() * 1000)     # 1: LogAppendTime
    assert got[names.raw_tasks] == (0, claimed)                      # 0: CreateTime, as sent
    stamps = asyncio.run(timestamp_types(stack.bootstrap_servers, [names.cell_log, names.raw_tasks]))
    assert stamps[names.cell_log] == "LogAppendTime"
    assert stamps[names.raw_tasks] == "CreateTime"
    with pytest.raises(StackError, match="no such topic"):
        asyncio.run(timestamp_types(stack.bootstrap_servers, [f"{names.namespace}.nothing"]))
