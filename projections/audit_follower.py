"""The Kafka edge of the audit index: catch up, follow, rebuild.

The index tracks its own source positions (stored with its rows, see ``audit.py``), so the
follower needs no consumer group: it assigns every partition of the decisions topic and
seeks each one to the stored position. Several processes can therefore read the same
topic into their own index without disturbing each other or the workers.

How it reads: a catch-up (and so a rebuild) with the compiled kernel built fetches whole
record sets (``audit_fetch.py``) and hands them to the kernel; otherwise, and in
:meth:`AuditFollower.follow`, an aiokafka consumer hands out records.

Where the index lives: ``<SUANLI_HOME>/audit/<namespace>`` (RocksDB). A running follower
holds RocksDB's lock; queries from another process then open the index read-only and
answer from its state as of that moment.
"""
from __future__ import annotations

import asyncio
import logging
import time
from contextlib import asynccontextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, AsyncIterator, Callable

from aiokafka import AIOKafkaClient, AIOKafkaConsumer, TopicPartition

from suanli.streams.kafka_security import client_options
from suanli.config import Settings
from suanli.errors import AuditError, DecodeError, RegistryError
from suanli.projections.audit import KERNEL, ApplyResult, AuditIndex, SourceRecord, WriterSchema
from suanli.projections.audit_avro import compile_extractor, schema_digest
from suanli.projections import audit_fetch
from suanli.projections.audit_fetch import fetch_chunks
from suanli.projections.audit_store import MemoryStore, RocksStore, Store
from suanli.schemas.codec import Codec
from suanli.streams.topics import TopicNames

log = logging.getLogger(__name__)


def index_dir(settings: Settings) -> Path:
    """Where the namespace's audit index lives."""
    return Path(settings.home) / "audit" / settings.namespace


def open_store(path: Path | None, *, backend: str = "rocksdb", read_only: bool = False) -> Store:
    if backend == "memory":
        return MemoryStore()
    if backend != "rocksdb":
        raise AuditError(f"unknown audit backend {backend!r} (rocksdb or memory)")
    if path is None:
        raise AuditError("the rocksdb audit backend needs a directory")
    return RocksStore(path, read_only=read_only)


@dataclass
class CatchUp:
    """What one catch-up (or rebuild) read and did."""

    topic: str
    records: int = 0
    seconds: float = 0.0
    result: ApplyResult = field(default_factory=ApplyResult)
    positions: dict[str, int] = field(default_factory=dict)
    read_only: bool = False
    # CPU seconds of this process meanwhile (all its threads, RocksDB's too): on a shared
    # machine a steadier measure of the fold's cost than the wall clock.
    cpu_seconds: float = 0.0

    @property
    def rate(self) -> float:
        return self.records / self.seconds if self.seconds > 0 else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {"topic": self.topic, "records": self.records, "seconds": round(self.seconds, 3),
                "events_per_s": round(self.rate, 1), "cpu_seconds": round(self.cpu_seconds, 3),
                "events_per_cpu_s": round(self.records / self.cpu_seconds, 1) if self.cpu_seconds > 0 else 0.0,
                **asdict(self.result), "positions": self.positions, "read_only": self.read_only}


def _positions(index: AuditIndex, topic: str) -> dict[str, int]:
    return {f"{t}[{p}]": o for (t, p), o in sorted(index.positions().items()) if t == topic}


async def _partitions(consumer: AIOKafkaConsumer, topic: str) -> list[int]:
    partitions = consumer.partitions_for_topic(topic)
    if not partitions:
        await consumer._client.force_metadata_update()  # noqa: SLF001 - first metadata fetch
        partitions = consumer.partitions_for_topic(topic)
    return sorted(partitions or ())


def same_schema(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """True if ``a`` and ``b`` are one Avro schema: equal, or equal in Parsing Canonical
    Form (the registry may hand back a schema without the namespaces it inherits, or
    without docs; names, fields, types and symbols are what decoding reads)."""
    if a == b:
        return True
    from fastavro.schema import to_parsing_canonical_form

    try:
        return to_parsing_canonical_form(a) == to_parsing_canonical_form(b)
    except Exception:  # noqa: BLE001 - a schema fastavro cannot parse is simply not the same
        return False


class WriterSchemas:
    """``schema id -> WriterSchema`` for :meth:`AuditIndex.apply_raw`, from the codec's
    registry, each id fetched once (an id never changes meaning within one registry).

    Only a writer schema that is the catalog's current one of the same name (as Avro reads
    it: :func:`same_schema`) gets an extractor: resolving such a record against the current
    schema, as the codec does, changes nothing, so the raw row (decoded later with the writer
    schema alone) reads back as the codec's payload. Older versions go through the codec's
    resolution, as before. None (not cached) when the registry does
    not answer or the id is not a record schema; those records then fail in the codec too.
    """

    def __init__(self, codec: Codec):
        self.codec = codec
        self._cache: dict[int, WriterSchema] = {}

    def __call__(self, schema_id: int) -> WriterSchema | None:
        cached = self._cache.get(schema_id)
        if cached is not None:
            return cached
        try:
            schema = self.codec.registry.schema_by_id(schema_id)
        except RegistryError:
            return None
        if not isinstance(schema, dict) or schema.get("type") != "record":
            return None
        current = self.codec.events.get(schema["name"])
        same = current is not None and same_schema(current.schema, schema)
        writer = WriterSchema(schema["name"], schema, schema_digest(schema), compile_extractor(schema) if same else None)
        self._cache[schema_id] = writer
        return writer


def source_record(codec: Codec, record: Any, on_error: Callable[[DecodeError], None] | None = None) -> SourceRecord:
    """A fetched record (``topic``, ``partition``, ``offset``, ``value``) decoded for the
    index: kind and payload None when the codec refuses it (``on_error`` is told why); the
    ``decode`` that :meth:`AuditIndex.apply_raw` takes, bound to a codec."""
    try:
        kind, payload = codec.decode(record.value, topic=record.topic, partition=record.partition,
                                     offset=record.offset)
    except DecodeError as exc:
        if on_error is not None:
            on_error(exc)
        kind, payload = None, None
    return SourceRecord(record.topic, record.partition, record.offset, kind, payload)


class AuditFollower:
    """Reads the decisions topic into an :class:`AuditIndex` from the index's own positions.

    Each fetched batch (up to ``max_records``, large fetches: the rebuild reads the whole
    topic) is one :meth:`AuditIndex.apply_raw`: decisions are indexed from their bytes and
    decoded only when a query reads them.
    """

    def __init__(self, bootstrap: str, topic: str, index: AuditIndex, codec: Codec, *, max_records: int = 20000,
                 max_partition_fetch_bytes: int = 16 << 20, raw: bool = True):
        """``raw=False`` folds as before issue 16 (each record decoded by the codec, then
        :meth:`AuditIndex.apply`): same state and answers, kept as the benchmark's and the
        tests' reference."""
        self.bootstrap = bootstrap
        self.topic = topic
        self.index = index
        self.codec = codec
        self.max_records = max_records
        self.max_partition_fetch_bytes = max_partition_fetch_bytes
        self.raw = raw
        self.schemas = WriterSchemas(codec)
        # A catch-up's fetch size per partition for whole record sets: about 5,000
        # decisions, so a fold's batch stays near the consumer path's (large batches
        # made RocksDB's memtable and the final flush slower, measured).
        self.chunk_bytes = min(max_partition_fetch_bytes, 2 << 20)

    def _fold(self, records: list[Any]) -> ApplyResult:
        """One fetched batch, one atomic write."""
        if self.raw:
            return self.index.apply_raw(records, self.schemas, self._decode)
        return self.index.apply([self._decode(r) for r in records])

    def _decode(self, record: Any) -> SourceRecord:
        return source_record(self.codec, record, lambda exc: log.warning("audit: skipping %s", exc))

    @asynccontextmanager
    async def _consumer(self, assign: bool = True) -> AsyncIterator[
            tuple[AIOKafkaConsumer, list[TopicPartition], dict[TopicPartition, int]]]:
        """A consumer of the topic, its partitions and their end offsets; with ``assign``,
        every partition assigned and sought to the index's position.

        The end offsets are asked for before the assignment: once assigned, the consumer
        fetches in the background, and a fetch waiting at the end of a partition holds
        the connection's next request (the end offsets) for its whole wait (measured 1 s
        for a catch-up with nothing to read)."""
        consumer = AIOKafkaConsumer(bootstrap_servers=self.bootstrap, **client_options(self.bootstrap), group_id=None, enable_auto_commit=False,
                                    auto_offset_reset="earliest",
                                    max_partition_fetch_bytes=self.max_partition_fetch_bytes,
                                    fetch_max_bytes=max(64 << 20, self.max_partition_fetch_bytes))
        await consumer.start()
        try:
            tps = [TopicPartition(self.topic, p) for p in await _partitions(consumer, self.topic)]
            ends = await consumer.end_offsets(tps) if tps else {}
            if tps and assign:
                consumer.assign(tps)
                stored = self.index.positions()
                for tp in tps:
                    consumer.seek(tp, stored.get((tp.topic, tp.partition), 0))
            yield consumer, tps, ends
        finally:
            await consumer.stop()

    async def catch_up(self, timeout: float = 600.0, progress: bool = False) -> CatchUp:
        """Fold everything the topic holds now (up to its end offsets at the call).
        ``progress``: a bar over the records to read on a terminal (``replay/progress.py``)."""
        from suanli.replay.progress import Progress

        started, cpu_started = time.monotonic(), time.process_time()
        stats = CatchUp(self.topic)
        # With the kernel, whole record sets are fetched (_read_chunks): the consumer only
        # finds the partitions and their ends, and is not assigned (it would fetch too).
        chunked = self.raw and self.index.kernel and KERNEL
        async with self._consumer(assign=not chunked) as (consumer, tps, ends):
            if not tps:
                stats.positions = _positions(self.index, self.topic)
                return stats
            stored = self.index.positions()
            for tp in tps:
                if stored.get((tp.topic, tp.partition), 0) > ends[tp]:
                    raise AuditError(f"the audit index is ahead of {tp.topic}[{tp.partition}] "
                                     f"({stored[(tp.topic, tp.partition)]} > end {ends[tp]}): the topic was "
                                     "recreated; run `suanli audit rebuild`")
            remaining = {tp for tp in tps if stored.get((tp.topic, tp.partition), 0) < ends[tp]}
            total = sum(ends[tp] - stored.get((tp.topic, tp.partition), 0) for tp in remaining)
            deadline = time.monotonic() + timeout
            # Catch-up folds without the store's write-ahead log and makes it all durable
            # at the end (Store.unlogged); follow() keeps the log, so that read-only
            # openers (queries while it runs) see each batch.
            with self.index.store.unlogged(), \
                    Progress(total, f"audit: read {self.topic}", unit="rec", enabled=progress) as bar:
                if chunked:
                    await self._read_chunks(stats, bar, ends, stored, remaining, deadline, timeout)
                    remaining = set()
                while remaining:
                    if time.monotonic() > deadline:
                        raise AuditError(f"audit catch-up of {self.topic} did not finish in {timeout:.0f}s")
                    fetched = await consumer.getmany(*remaining, timeout_ms=1000, max_records=self.max_records)
                    batch = [r for tp in sorted(fetched, key=lambda t: t.partition)
                             for r in fetched[tp] if r.offset < ends[tp]]
                    if batch:
                        stats.result.add(self._fold(batch))
                        stats.records += len(batch)
                        bar.update(len(batch))
                    for tp in list(remaining):
                        if await consumer.position(tp) >= ends[tp]:
                            remaining.discard(tp)
        stats.seconds = time.monotonic() - started
        stats.cpu_seconds = time.process_time() - cpu_started
        stats.positions = _positions(self.index, self.topic)
        return stats

    async def _read_chunks(self, stats: CatchUp, bar: Any, ends: dict[TopicPartition, int],
                           stored: dict[tuple[str, int], int], remaining: set[TopicPartition], deadline: float,
                           timeout: float) -> None:
        """The catch-up's reads as whole record sets (``audit_fetch.py``), folded by the
        compiled kernel; record sets or records it leaves to Python are parsed by aiokafka
        and folded by :meth:`AuditIndex.apply_raw`, so the index is the same either way.
        The next fetch is sent before the current record sets are folded, so the broker
        reads and sends it meanwhile."""
        client = AIOKafkaClient(bootstrap_servers=self.bootstrap, **client_options(self.bootstrap))
        await client.bootstrap()
        pending: asyncio.Future | None = None
        try:
            await client.add_topic(self.topic)
            positions = {tp.partition: stored.get((tp.topic, tp.partition), 0) for tp in remaining}
            end = {tp.partition: ends[tp] for tp in remaining}

            def fetch() -> asyncio.Future:
                return asyncio.ensure_future(fetch_chunks(
                    client, self.topic, dict(positions), end, max_partition_bytes=self.chunk_bytes,
                    max_bytes=max(64 << 20, self.chunk_bytes)))

            pending = fetch()
            while pending is not None:
                if time.monotonic() > deadline:
                    raise AuditError(f"audit catch-up of {self.topic} did not finish in {timeout:.0f}s")
                chunks = await pending
                scanned = audit_fetch.scan(self.index, chunks)
                moved = False
                for chunk, offset in zip(chunks, scanned.next_fetch):
                    if offset > positions[chunk.partition]:
                        positions[chunk.partition], moved = offset, True
                pending = None
                if any(positions[p] < end[p] for p in positions):
                    if not moved:
                        await asyncio.sleep(0.05)    # a leader moving, or nothing whole yet: ask again
                    pending = fetch()
                result, records = audit_fetch.fold(self.index, chunks, scanned, self.schemas, self._decode)
                stats.result.add(result)
                stats.records += records
                bar.update(records)
        finally:
            if pending is not None:
                pending.cancel()
            await client.close()

    async def follow(self, stop: asyncio.Event, on_batch: Callable[[ApplyResult], None] | None = None,
                     poll_ms: int = 500) -> ApplyResult:
        """Tail the topic until ``stop`` is set; each fetched batch is one atomic write."""
        total = ApplyResult()
        while not stop.is_set():
            async with self._consumer() as (consumer, tps, _ends):
                if not tps:          # topic not created yet: look again shortly
                    try:
                        await asyncio.wait_for(stop.wait(), 2.0)
                    except asyncio.TimeoutError:
                        pass
                    continue
                while not stop.is_set():
                    fetched = await consumer.getmany(timeout_ms=poll_ms, max_records=self.max_records)
                    batch = [r for tp in sorted(fetched, key=lambda t: t.partition) for r in fetched[tp]]
                    if batch:
                        result = self._fold(batch)
                        total.add(result)
                        if on_batch is not None:
                            on_batch(result)
        return total


# ------------------------------------------------------------------------------ entry points
@asynccontextmanager
async def opened_index(settings: Settings, *, backend: str = "rocksdb", path: Path | None = None,
                       catch_up: bool = True, codec: Codec | None = None, progress: bool = False,
                       catch_up_timeout: float = 600.0) -> AsyncIterator[tuple[AuditIndex, CatchUp]]:
    """The namespace's index, caught up with the decisions topic before it is handed out
    (``progress``: with a bar on a terminal). A catch-up that takes longer than
    ``catch_up_timeout`` seconds raises :class:`AuditError`; what it folded so far stays
    (each batch is one atomic write with its positions), so the next call goes on from there.

    If another process (a follower) holds the RocksDB index, it is opened read-only and
    not caught up: the follower keeps it current.
    """
    from suanli.schemas.registry import RegistryClient

    path = path or index_dir(settings)
    topic = TopicNames(settings.namespace).decisions
    read_only = False
    try:
        store = open_store(path, backend=backend)
    except AuditError as exc:
        if not RocksStore.is_locked_error(exc):
            raise
        store, read_only = open_store(path, backend=backend, read_only=True), True
    index = AuditIndex(store)
    stats = CatchUp(topic, read_only=read_only)
    registry = None
    try:
        if catch_up and not read_only:
            if codec is None:
                registry = RegistryClient(settings.registry_url)
                codec = Codec(registry)
            stats = await AuditFollower(settings.bootstrap_servers, topic, index, codec).catch_up(
                catch_up_timeout, progress=progress)
        else:
            stats.positions = _positions(index, topic)
        yield index, stats
    finally:
        store.close()
        if registry is not None:
            registry.close()


async def rebuild(settings: Settings, *, path: Path | None = None, codec: Codec | None = None,
                  progress: bool = False) -> CatchUp:
    """Delete the local index and fold the whole decisions topic again (``progress``: with a
    bar on a terminal)."""
    path = path or index_dir(settings)
    try:
        RocksStore(path).close()        # fails (locked) while a follower runs: never delete under it
    except AuditError as exc:
        raise AuditError(f"{exc}; stop the audit follower before a rebuild") from None
    RocksStore.destroy(path)
    async with opened_index(settings, path=path, codec=codec, progress=progress) as (_index, stats):
        return stats


async def follow(settings: Settings, stop: asyncio.Event, *, path: Path | None = None,
                 on_batch: Callable[[ApplyResult], None] | None = None) -> ApplyResult:
    """Catch up, then keep the namespace's index current until ``stop`` is set."""
    from suanli.schemas.registry import RegistryClient

    path = path or index_dir(settings)
    topic = TopicNames(settings.namespace).decisions
    store = open_store(path)
    try:
        with RegistryClient(settings.registry_url) as registry:
            follower = AuditFollower(settings.bootstrap_servers, topic, AuditIndex(store), Codec(registry))
            return await follower.follow(stop, on_batch)
    finally:
        store.close()


class AuditIndexSource:
    """The API's ``AuditSource`` (``api/audit.py``) answered from an :class:`AuditIndex`:
    every decision about a task, in log order, each once, as ``DecisionRecord``s with the
    Avro payload and the decision record's coordinates. No tenant filter here: the API
    checks each record's tenant itself."""

    def __init__(self, index: AuditIndex):
        self.index = index

    async def task_decisions(self, task_id: str) -> list[Any]:
        from suanli.projections.audit import AuditQuery

        return self._records(AuditQuery(task=task_id, limit=None))

    async def job_decisions(self, job_id: str) -> list[Any]:
        """Every decision about a member of ``job_id``, in log order."""
        from suanli.projections.audit import AuditQuery

        return self._records(AuditQuery(job=job_id, limit=None))

    def _records(self, query: Any) -> list[Any]:
        from suanli.api.readmodel import DecisionRecord
        from suanli.projections.audit import payload_of

        rows = self.index.query(query)
        # The index keeps rows in the order of their decision times; the contract is log
        # order. A cell's decisions share a partition, where the two agree unless the cell's
        # clock went back.
        rows.sort(key=lambda r: (r["decision"]["topic"], r["decision"]["partition"], r["decision"]["offset"]))
        return [DecisionRecord(r["event"], payload_of(r), r["decision"]["topic"], r["decision"]["partition"],
                               r["decision"]["offset"]) for r in rows]
