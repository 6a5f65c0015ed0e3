"""A topic's record sets as the broker sends them, for the audit catch-up's compiled fold.

A consumer hands out one object per record (aiokafka's ConsumerRecord: about 3 us each
here, a third of a rebuild's time once the fold was compiled). The catch-up does not need
them: :func:`fetch_chunks` sends one Fetch request per partition leader for every partition
still short of its end and returns each partition's record set as the bytes it arrived in,
and the compiled fold (``kernels/src/lib.rs`` ``fold_chunks``) parses the record batches
itself. Only the catch-up reads this way; :class:`~.audit_follower.AuditFollower.follow`
keeps the consumer.

What the consumer did and this keeps: read-uncommitted (as the consumer was configured),
control batches skipped, CRC-32C checked, leaders from the cluster metadata, refreshed on
a "not leader" answer. A record set the compiled fold does not parse (a compressed or
older-format batch) is turned into records by aiokafka's own parser (:func:`records_of`),
so the fold sees exactly what the consumer would have handed out.
"""
from __future__ import annotations

import asyncio
from collections import defaultdict
from typing import NamedTuple

from aiokafka import AIOKafkaClient, TopicPartition
from aiokafka import errors as kafka_errors
from aiokafka.protocol.fetch import FetchRequest
from aiokafka.record.memory_records import MemoryRecords

from suanli.errors import AuditError
from suanli.projections.audit import ApplyResult, AuditIndex, Decode, SchemaLookup

READ_UNCOMMITTED = 0


class Chunk(NamedTuple):
    """One partition's record set from one fetch: ``records`` from ``fetch_offset`` on (the
    first batch may start before it); only offsets below ``end`` are to be folded."""

    topic: str
    partition: int
    fetch_offset: int
    end: int
    records: bytes


class Record(NamedTuple):
    """What the fold reads of a record (:class:`~.audit.RawRecord`)."""

    topic: str
    partition: int
    offset: int
    value: bytes | None


async def fetch_chunks(client: AIOKafkaClient, topic: str, positions: dict[int, int], ends: dict[int, int], *,
                       max_partition_bytes: int, max_bytes: int) -> list[Chunk]:
    """One round of fetches: for each partition with ``positions[p] < ends[p]``, the record
    set from ``positions[p]``, from its leader, one request per leader (sent concurrently).
    A partition whose leader is unknown or moved is left out of this round (and the
    metadata refreshed): the caller asks again. Raises :class:`AuditError` on any other
    error the broker answers with."""
    by_leader: dict[int, list[tuple[int, int, int]]] = defaultdict(list)
    stale = False
    for partition, position in positions.items():
        if position >= ends[partition]:
            continue
        leader = client.cluster.leader_for_partition(TopicPartition(topic, partition))
        if leader is None or leader < 0:
            stale = True
            continue
        by_leader[leader].append((partition, position, max_partition_bytes))
    if stale:
        await client.force_metadata_update()
    requests = [(leader, FetchRequest(0, 1, max_bytes, READ_UNCOMMITTED, [(topic, parts)]))
                for leader, parts in by_leader.items()]
    responses = await asyncio.gather(*(client.send(leader, request) for leader, request in requests))
    chunks = []
    for response in responses:
        for _topic, partitions in response.topics:
            for partition, error_code, _highwater, *data in partitions:
                error = kafka_errors.for_code(error_code)
                if error in (kafka_errors.NotLeaderForPartitionError, kafka_errors.UnknownTopicOrPartitionError):
                    await client.force_metadata_update()
                    continue
                if error is not kafka_errors.NoError:
                    raise AuditError(f"fetching {topic}[{partition}] at offset {positions[partition]}: "
                                     f"{error.__name__}")
                chunks.append(Chunk(topic, partition, positions[partition], ends[partition], data[-1]))
    return chunks


def records_of(chunk: Chunk) -> tuple[list[Record], int]:
    """The records of ``chunk`` a consumer would hand out (control batches skipped, offsets
    from ``fetch_offset`` and below ``end``), by aiokafka's own parser, and the offset to
    fetch next. For the record sets the compiled fold leaves to Python."""
    out: list[Record] = []
    records = MemoryRecords(chunk.records)
    next_offset = chunk.fetch_offset
    while records.has_next():
        batch = records.next_batch()
        if not batch.validate_crc():
            raise AuditError(f"corrupt record batch in {chunk.topic}[{chunk.partition}] near offset {next_offset}")
        if not batch.is_control_batch:
            for record in batch:
                if chunk.fetch_offset <= record.offset < chunk.end:
                    out.append(Record(chunk.topic, chunk.partition, record.offset, record.value))
        next_offset = max(next_offset, batch.next_offset)
    return out, next_offset


class Scan(NamedTuple):
    """One round's record sets, looked over before they are folded."""

    next_fetch: list[int]                     # each chunk's next fetch offset
    headers: set[bytes] | None                # the kernel parsed them: the records' Confluent headers
    parsed: list[list[Record]] | None         # it did not: aiokafka's records, chunk by chunk


def scan(index: AuditIndex, chunks: list[Chunk]) -> Scan:
    """Where each chunk's next fetch starts (so the next fetch can go out before this round
    is folded), by the compiled kernel, else by aiokafka's parser."""
    scanned = index.scan_chunks(chunks)
    if scanned is not None:
        return Scan(list(scanned[1]), scanned[0], None)
    parsed = [records_of(chunk) for chunk in chunks]
    return Scan([n for _rs, n in parsed], None, [rs for rs, _n in parsed])


def fold(index: AuditIndex, chunks: list[Chunk], scanned: Scan, schemas: SchemaLookup,
         decode: Decode) -> tuple[ApplyResult, int]:
    """Fold one round into ``index``: by the compiled kernel if it parsed the record sets
    and takes every record, else aiokafka's records through :meth:`AuditIndex.apply_raw`
    (the same store either way). The result, and how many records were folded."""
    if scanned.headers is not None:
        result = index.apply_chunks(chunks, scanned.headers, schemas)
        if result is not None:
            return result, result.by_kernel
    parsed = scanned.parsed if scanned.parsed is not None else [records_of(chunk)[0] for chunk in chunks]
    batch = [r for rs in parsed for r in rs]
    return index.apply_raw(batch, schemas, decode), len(batch)
