"""Thin asyncio helpers over aiokafka that speak Suanli events in the wire format.

Used by connectors, drivers, tools, tests and the plain workers (intake, the scheduler).
The Faust workers (telemetry, and the scheduler's Faust fallback) use Faust's own producer
and consumer with the same :class:`~suanli.schemas.codec.Codec`.
"""
from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass
from typing import Any, AsyncIterator, Callable, Iterable, Sequence

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import TopicAlreadyExistsError

from suanli.errors import DecodeError, StackError
from suanli.schemas.codec import Codec
from suanli.streams.busy_fetch import BUSY_RECORDS, BusyFetch
from suanli.streams.intake import lane_headers
from suanli.streams.kafka_security import KafkaSecurity, client_options
from suanli.streams.partitioner import KeyPartitioner
from suanli.streams.records import RawRecord
from suanli.streams.topics import TopicSpec, raw_route


async def ensure_topics(bootstrap: str, specs: Iterable[TopicSpec]) -> None:
    """Create the topics that do not exist yet (idempotent), each replicated on as many
    brokers as the cluster has, up to 3 (1 on the single broker, 3 on the three-broker
    stack). Raises :class:`StackError` naming a topic the cluster refused."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, **client_options(bootstrap))
    await admin.start()
    try:
        existing = set(await admin.list_topics())
        replicas = max(1, min(3, len((await admin.describe_cluster()).get("brokers", []))))
        new = [NewTopic(s.name, s.partitions, replicas, topic_configs=_topic_configs(s))
               for s in specs if s.name not in existing]
        if new:
            try:
                response = await admin.create_topics(new)
            except TopicAlreadyExistsError:
                return
            refused = [(t[0], t[1], t[2] if len(t) > 2 else "") for t in response.topic_errors
                       if t[1] not in (0, TopicAlreadyExistsError.errno)]
            if refused:
                raise StackError("topics not created: " + "; ".join(f"{name} (error {code}: {msg})"
                                                                      for name, code, msg in refused))
    finally:
        await admin.close()


async def timestamp_types(bootstrap: str, topics: Iterable[str]) -> dict[str, str]:
    """``{topic: "CreateTime" or "LogAppendTime"}``: what the record timestamps of each topic
    are (its ``message.timestamp.type``), in one request. Raises :class:`StackError` naming a
    topic the cluster cannot say it of, e.g. one that does not exist."""
    from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, **client_options(bootstrap))
    await admin.start()
    try:
        [response] = await admin.describe_configs(
            [ConfigResource(ConfigResourceType.TOPIC, t, configs={"message.timestamp.type": None}) for t in topics])
        types = {}
        for code, message, _type, topic, entries in response.resources:
            if code or not entries:
                raise StackError(f"the timestamp type of {topic} is unknown "
                                 f"(error {code}: {message or 'no such topic?'})")
            types[topic] = str(entries[0][1])
        return types
    finally:
        await admin.close()


def _topic_configs(spec: TopicSpec) -> dict[str, str]:
    """The configs a new topic of ``spec`` is created with: compacted, or kept forever (the
    log is the source of truth); with the broker's append time as record timestamps when
    ``spec.log_append_time``."""
    configs = {"cleanup.policy": "compact"} if spec.compact else {"retention.ms": "-1"}
    if spec.log_append_time:
        configs["message.timestamp.type"] = "LogAppendTime"
    if spec.segment_ms is not None:
        configs["segment.ms"] = str(spec.segment_ms)
    return configs


class EventProducer:
    """Idempotent producer (acks=all) of Suanli events.

    ``namespace`` is needed only by :meth:`publish` (which picks the raw topic itself);
    :meth:`send` takes an explicit topic.
    """

    def __init__(self, bootstrap: str, codec: Codec, *, linger_ms: int = 5, namespace: str | None = None,
                 security: KafkaSecurity | None = None):
        self.codec = codec
        self.namespace = namespace
        # ``security``: this producer's own principal (a tenant's, say) instead of the process's
        options = security.aiokafka() if security else client_options(bootstrap)
        self._producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", enable_idempotence=True,
                                          linger_ms=linger_ms, max_batch_size=1 << 20,
                                          partitioner=KeyPartitioner(), **options)

    async def __aenter__(self) -> EventProducer:
        await self._producer.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._producer.stop()

    async def send(self, topic: str, kind: str, payload: dict[str, Any], key: str | bytes | None) -> asyncio.Future:
        """Queue one event; returns a future resolved with its RecordMetadata when stored. An
        urgent task carries ``records.URGENT_HEADER`` (``intake.lane_headers``)."""
        value = self.codec.encode(kind, payload)
        return await self.send_raw(topic, value, key, lane_headers(kind, payload))

    async def send_raw(self, topic: str, value: bytes | None, key: str | bytes | None,
                       headers: Sequence[tuple[str, bytes]] = (), partition: int | None = None) -> asyncio.Future:
        """Queue already-encoded bytes (used to forward records verbatim); ``partition``: this
        one rather than the key's."""
        key_bytes = key.encode() if isinstance(key, str) else key
        return await self._producer.send(topic, value, key=key_bytes, headers=list(headers) or None,
                                         partition=partition)

    async def publish(self, kind: str, payload: dict[str, Any]) -> asyncio.Future:
        """Send a producer-side event to its raw topic in this producer's namespace."""
        if self.namespace is None:
            raise ValueError("EventProducer.publish needs the producer's namespace (EventProducer(..., namespace=...))")
        topic, key = raw_route(kind, payload, self.namespace)
        return await self.send(topic, kind, payload, key=key)

    async def flush(self) -> None:
        await self._producer.flush()


@dataclass(frozen=True)
class Received(RawRecord):
    """One consumed record: decoded, or with the reason it could not be."""

    kind: str | None = None
    payload: dict[str, Any] | None = None
    error: DecodeError | None = None
    headers: tuple[tuple[str, bytes], ...] = ()     # the record's Kafka headers, in order


class EventConsumer:
    """Consumes topics and decodes every record; bad records come back with ``error`` set.

    ``group_id=None`` reads without a consumer group (from ``from_beginning`` or the end).
    """

    def __init__(self, bootstrap: str, codec: Codec, topics: Iterable[str], *, group_id: str | None = None,
                 from_beginning: bool = True, security: KafkaSecurity | None = None, **kwargs: Any):
        self.codec = codec
        options = security.aiokafka() if security else client_options(bootstrap)
        self._consumer = AIOKafkaConsumer(
            *topics, bootstrap_servers=bootstrap, **options, group_id=group_id,
            auto_offset_reset="earliest" if from_beginning else "latest",
            enable_auto_commit=group_id is not None, **kwargs)

    async def __aenter__(self) -> EventConsumer:
        try:
            await self._consumer.start()
        except BaseException:
            await self._consumer.stop()        # no broker: close what start() opened
            raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._consumer.stop()

    @property
    def raw(self) -> AIOKafkaConsumer:
        return self._consumer

    def _decode(self, record: Any) -> Received:
        try:
            kind, payload = self.codec.decode(record.value, topic=record.topic,
                                              partition=record.partition, offset=record.offset)
            error = None
        except DecodeError as exc:
            kind, payload, error = None, None, exc
        return Received(record.topic, record.partition, record.offset, record.timestamp,
                        record.key, record.value, kind, payload, error, tuple(record.headers or ()))

    async def batches(self, timeout_ms: int = 500, max_records: int = 2000,
                      busy_min_bytes: int = 1) -> AsyncIterator[list[Received]]:
        """Yield lists of decoded records (possibly empty on timeouts) forever. With
        ``busy_min_bytes`` above 1, after a busy batch the fetches wait at the broker for that
        many bytes (or 20 ms), after a quiet one they return at the first record
        (``streams/busy_fetch.py``)."""
        busy = BusyFetch.of_consumer(self._consumer, busy_min_bytes) if busy_min_bytes > 1 else None
        while True:
            fetched = await self._consumer.getmany(timeout_ms=timeout_ms, max_records=max_records)
            if busy is not None:
                busy.after("batches", sum(map(len, fetched.values())) >= BUSY_RECORDS)
            out = [self._decode(r) for tp in sorted(fetched, key=lambda t: (t.topic, t.partition))
                   for r in fetched[tp]]
            yield out

    async def read_until_end(self, timeout_ms: int = 60_000) -> list[Received]:
        """Every record of the subscribed topics up to (at least) their end offsets as of this
        call, in partition order (a topic's partitions in turn; each in offset order). A fetch
        may bring records written after the call too; they are kept, so a caller that goes on
        consuming (``batches``) misses nothing.

        Waits on the offsets, not on silence: a slow fetch cannot cut the read short. Raises
        :class:`StackError` if the ends are not reached within ``timeout_ms``."""
        ends = await self._end_offsets_now()
        by_tp: dict[TopicPartition, list[Received]] = {tp: [] for tp in ends}
        pending = {tp for tp, end in ends.items() if end > 0}
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_ms / 1000
        while pending:
            left = deadline - loop.time()
            if left <= 0:
                raise StackError(f"read of {sorted(self._consumer.subscription())} did not reach the end offsets "
                                 f"within {timeout_ms} ms; still behind on {sorted(map(str, pending))}")
            fetched = await self._consumer.getmany(timeout_ms=int(min(left, 0.5) * 1000), max_records=10000)
            for tp, records in fetched.items():
                by_tp.setdefault(tp, []).extend(self._decode(r) for r in records)
            assigned = self._consumer.assignment()
            for tp in [tp for tp in pending if tp in assigned]:
                if await self._consumer.position(tp) >= ends[tp]:
                    pending.discard(tp)
        return [r for tp in sorted(by_tp, key=lambda t: (t.topic, t.partition)) for r in by_tp[tp]]

    async def _end_offsets_now(self) -> dict[TopicPartition, int]:
        """The end offset of every partition of the subscribed topics (none for a topic that
        does not exist yet). The consumer's ``start`` waited on the topics' metadata."""
        tps = [TopicPartition(topic, p) for topic in sorted(self._consumer.subscription())
               for p in sorted(self._consumer.partitions_for_topic(topic) or ())]
        return dict(await self._consumer.end_offsets(tps)) if tps else {}


class ReadabilityProbe:
    """Whether every partition of some topics has a leader that answers now: one ListOffsets
    request to each partition's leader, on a client of its own (no group), bounded by
    ``timeout_s``. A partition whose leader died is unreadable until the controller has
    moved its leadership (the broker session timeout, then the election)."""

    def __init__(self, bootstrap: str, topics: Iterable[str], timeout_s: float = 2.0):
        self.bootstrap = bootstrap
        self.topics = sorted(topics)
        self.timeout_s = timeout_s
        self._consumer: AIOKafkaConsumer | None = None      # made on first use, in the loop that runs it
        self.asked: list[TopicPartition] = []               # the partitions the last ask sent ListOffsets to

    async def unreadable(self) -> list[str]:
        """Empty when every partition answered; else one line saying which topics could not be
        asked for their end offsets, and the error."""
        try:
            return await asyncio.wait_for(self._ask(), self.timeout_s)
        except Exception as exc:  # noqa: BLE001 - whatever stops the answer (a dead leader, no cluster) counts
            return [f"{', '.join(self.topics)} ({type(exc).__name__})"]

    async def _ask(self) -> list[str]:
        if self._consumer is None:
            consumer = AIOKafkaConsumer(bootstrap_servers=self.bootstrap, group_id=None, enable_auto_commit=False,
                                        request_timeout_ms=int(self.timeout_s * 1000),
                                        **client_options(self.bootstrap))
            try:
                await consumer.start()
                # The client's metadata then covers these topics and only these: a consumer
                # neither subscribed nor assigned tracks none, so its client would ask for
                # every topic of the cluster and keep none of the answer (``topics()`` returns
                # a separate copy), once a tick, on a shared cluster thousands of topics
                await consumer._client.set_topics(self.topics)  # noqa: SLF001 - no public way to track topics
            except BaseException:
                with contextlib.suppress(Exception):
                    await consumer.stop()
                raise
            self._consumer = consumer
        tps = [TopicPartition(t, p) for t in self.topics for p in sorted(self._consumer.partitions_for_topic(t) or ())]
        self.asked = tps
        if not tps:
            # the topics do not exist yet (intake creates them): ask again next time
            await self._consumer._client.force_metadata_update()   # noqa: SLF001
            return []
        await self._consumer.end_offsets(tps)
        return []

    async def stop(self) -> None:
        if self._consumer is not None:
            with contextlib.suppress(Exception):
                await self._consumer.stop()
            self._consumer = None


async def list_topics(bootstrap: str) -> list[str]:
    """Every topic of the cluster at ``bootstrap``."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, **client_options(bootstrap))
    await admin.start()
    try:
        return list(await admin.list_topics())
    finally:
        await admin.close()


async def end_offsets(bootstrap: str, topic: str) -> dict[int, int]:
    """``{partition: next offset}`` of a topic."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, **client_options(bootstrap))
    await consumer.start()
    try:
        partitions = consumer.partitions_for_topic(topic) or set()
        if not partitions:
            await consumer._client.force_metadata_update()  # noqa: SLF001 - first metadata fetch
            partitions = consumer.partitions_for_topic(topic) or set()
        tps = [TopicPartition(topic, p) for p in sorted(partitions)]
        ends = await consumer.end_offsets(tps) if tps else {}
        return {tp.partition: off for tp, off in ends.items()}
    finally:
        await consumer.stop()


async def wait_until_consumed(bootstrap: str, group: str, topics: Iterable[str], timeout: float = 60.0) -> None:
    """Wait until consumer group ``group`` has committed, on every partition of ``topics``, an
    offset at or past the partition's end offset as of this call: everything written to them
    before the call has been handled (every worker commits only after its batch's outputs
    are stored, so those are on their topics too). Raises :class:`StackError` with the records
    still unhandled if that takes longer than ``timeout`` seconds."""
    topics = sorted(topics)
    ends = {(t, p): end for t in topics for p, end in (await end_offsets(bootstrap, t)).items() if end > 0}
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, **client_options(bootstrap))
    await admin.start()
    try:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            committed = {(tp.topic, tp.partition): meta.offset
                         for tp, meta in (await admin.list_consumer_group_offsets(group)).items()}
            behind = {tp: end - max(0, committed.get(tp, 0)) for tp, end in ends.items()
                      if committed.get(tp, 0) < end}
            if not behind:
                return
            if loop.time() > deadline:
                raise StackError(f"group {group} has not handled {sum(behind.values())} records of {topics} "
                                 f"after {timeout:g} s (by partition: {dict(sorted(behind.items()))})")
            await asyncio.sleep(0.2)       # the group commits once a second: poll its offsets
    finally:
        await admin.close()


async def read_range(bootstrap: str, topic: str, partition: int, start: int, end: int,
                     on_read: Callable[[int], None] | None = None) -> list[Any]:
    """The raw records of ``topic[partition]`` with ``start <= offset < end``, in order.
    ``on_read(k)``: called as each batch of ``k`` offsets is read (a progress bar)."""
    if end <= start:
        return []
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, **client_options(bootstrap), enable_auto_commit=False, group_id=None,
                                auto_offset_reset="earliest")
    await consumer.start()
    out: list[Any] = []
    done = start                 # offsets read so far (for on_read)
    try:
        tp = TopicPartition(topic, partition)
        consumer.assign([tp])
        consumer.seek(tp, start)
        while True:
            fetched = await consumer.getmany(tp, timeout_ms=2000, max_records=5000)
            records = fetched.get(tp, [])
            if not records:
                position = await consumer.position(tp)
                if position >= end:
                    return out
                continue
            if on_read is not None:
                upto = min(records[-1].offset + 1, end)
                on_read(upto - done)
                done = upto
            for record in records:
                if record.offset >= end:
                    return out
                out.append(record)
            if records[-1].offset >= end - 1:
                return out
    finally:
        await consumer.stop()
