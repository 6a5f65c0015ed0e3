"""The Faust shell: the scheduler's former Faust agent, and what the workers share.

``scheduler`` cell log -> core -> decisions + dispatch commands             (streams/cell_runner.py)

The scheduler runs as a plain aiokafka loop (``streams/scheduler_worker.py``) unless
``SUANLI_SCHEDULER_LOOP=faust`` picks the agent built here, kept for one release as a
fallback; intake is a plain loop too (``streams/intake_worker.py``). This module also holds
what the loops share: the snapshot policy (``snapshot_due``), the stall test, the latency
report (:class:`DecisionLatency`) and the worker directories.

The agent consumes with ``stream.take_events`` (micro-batches), produces every output of a
batch and *waits for the broker's acknowledgement* before the batch's offsets are acked, so
a committed offset always means its outputs are durable (at-least-once). It keeps its cells'
snapshots in a RocksDB table (``rocksdb://`` via rocksdict) whose changelog is the topic the
plain loop keeps them on (``streams/snapshot_store.py``): written every ``SNAPSHOT_EVERY``
inputs or ``SNAPSHOT_SECONDS`` (but no sooner than ``SNAPSHOT_COST_RATIO`` times the last
one's cost, or ``QUIET_SNAPSHOT_COST_RATIO`` times with fewer than ``SNAPSHOT_EVERY`` inputs
waiting), serialised in a forked child off the event loop (``streams/snapshot_fork.py``),
plus silent re-application of the cell log after the snapshot.
Values are raw bytes: our codec, not Faust's, decodes them, so bad bytes become dead
letters instead of crashing an agent.
"""
from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import time
import weakref
from pathlib import Path
from typing import Any, Awaitable, Iterator

import faust
from faust.streams import _current_event
from faust.types import TP, Message

from suanli.config import Settings
from suanli.schemas.codec import Codec
from suanli.schemas.registry import RegistryClient
from suanli.streams.cell_runner import CellRunner
from suanli.streams.kafka_io import read_range
from suanli.streams.metrics import SchedulerMetrics
from suanli.streams.partitioner import KeyPartitioner
from suanli.streams.records import OutRecord, RawRecord, is_urgent
from suanli.streams.send_now import send_now
from suanli.streams.batch_wait import MARKER, BatchWait
from suanli.streams.fetch_wait import set_fetch_wait
from suanli.streams.gc_pauses import GcPauses
from suanli.streams.lean_monitor import LeanMonitor
from suanli.streams.raw_schema import RawSchema
from suanli.streams.snapshot_fork import ForkedSnapshots
from suanli.streams.snapshot_store import PartitionSnapshots, restore_newer
from suanli.streams.topics import TopicNames

log = logging.getLogger("suanli.streams")

BATCH = 1000
BATCH_WITHIN = 0.02          # seconds a micro-batch waits to fill
SNAPSHOT_EVERY = 5000        # inputs per partition between snapshots
SNAPSHOT_SECONDS = 5.0
# A snapshot costs CPU (a large cell: hundreds of ms of JSON, in a forked child that shares the
# machine's cores with the loop), so the next one waits at least this many times as long as
# the last took: at most ~5 % of a core, whatever the cell's size, at the price of
# re-applying more of the log after a crash.
SNAPSHOT_COST_RATIO = 20.0
# A snapshot due to time alone (fewer than SNAPSHOT_EVERY inputs since the last) saves the
# re-application of few inputs, and each one disturbs the loop: the fork stops it for a few ms,
# and the child's CPU and copy-on-write faults slow it for as long as the child runs. On a
# 1,523-node cell with 12,000 tasks (about 0.3 s a snapshot) one every ~6 s set the urgent
# tier's p99 (bench/urgent_latency.py). So such a snapshot waits this many times its cost (a
# 0.3 s one: a minute; a small cell's: still SNAPSHOT_SECONDS). The re-application after a
# crash stays bounded by SNAPSHOT_EVERY inputs either way.
QUIET_SNAPSHOT_COST_RATIO = 200.0
SNAPSHOT_REAP_SECONDS = 0.2  # how often an idle scheduler looks for finished snapshot children


def snapshot_due(inputs_since: int, seconds_since: float, last_cost_s: float) -> bool:
    """Whether a partition's snapshot is due: ``SNAPSHOT_EVERY`` inputs since the last one and
    at least ``SNAPSHOT_COST_RATIO`` times the last one's cost (``last_cost_s``: seconds, 0
    before this process wrote one); or, with fewer inputs, ``SNAPSHOT_SECONDS`` and at least
    ``QUIET_SNAPSHOT_COST_RATIO`` times that cost."""
    if inputs_since >= SNAPSHOT_EVERY:
        return seconds_since >= SNAPSHOT_COST_RATIO * last_cost_s
    return seconds_since >= max(SNAPSHOT_SECONDS, QUIET_SNAPSHOT_COST_RATIO * last_cost_s)


GC_FREEZE_AFTER_MS = 20.0    # a full collection longer than this freezes what it left
LATENCY_SECONDS = 2.0        # how often the scheduler writes its latency figures (DecisionLatency)
SESSION_TIMEOUT_S = 10.0     # consumer-group session of every worker (see make_app)
CATCH_UP_SLICE = 2000        # records re-applied between yields to the loop (heartbeats go on)
STALL_CHECK_SECONDS = 15.0   # how often a scheduler looks for its partitions that wait but do not move


def stalled(previous: tuple[int, int] | None, as_of: int, end: int) -> bool:
    """Whether a partition looks stalled: the last check (``previous``: its state's offset
    and the log's end offset then) already found records past the state, nothing was applied
    since, and records still wait (``end`` is the next offset to be written)."""
    return previous is not None and previous[0] == as_of and previous[1] > as_of + 1 and end > as_of + 1


def stalled_changelogs(partitions: Any, offsets: Any, highwaters: Any,
                       progress: dict[Any, tuple[int, int]]) -> list[str]:
    """Of the changelog ``partitions`` Faust's table recovery restores, those (as
    ``topic:partition``) that had records waiting at the last check and received none since:
    :func:`stalled` on the recovery's ``offsets`` (the last offset applied, -1: none) and
    ``highwaters`` (the last offset there is). Updates ``progress`` for the next check."""
    found = []
    for tp in sorted(partitions):
        offset, highwater = offsets.get(tp), highwaters.get(tp)
        if offset is None or highwater is None:
            continue
        if stalled(progress.get(tp), offset, highwater + 1):
            found.append(f"{tp.topic}:{tp.partition}")
        progress[tp] = (offset, highwater + 1)
    return found


def _broker_url(bootstrap: str) -> str:
    return ";".join(f"kafka://{host.strip()}" for host in bootstrap.split(",") if host.strip())


def worker_dir(settings: Settings, role: str, instance: int = 1) -> Path:
    """Where one worker process keeps its local state (RocksDB, latency figures). Workers of
    one role share a consumer group but never a directory: instance 1 is ``role``, the
    others ``role-N``."""
    return settings.home / "workers" / settings.namespace / (role if instance == 1 else f"{role}-{instance}")


def make_app(role: str, settings: Settings, instance: int = 1) -> faust.App:
    """A Faust app for one worker process of ``role`` ('intake', 'scheduler' or 'telemetry').
    Every ``instance`` of a role joins the same consumer group (the app id), and Faust
    shares the role's partitions among them."""
    datadir = worker_dir(settings, role, instance)
    datadir.mkdir(parents=True, exist_ok=True)
    security = settings.kafka_security
    app = faust.App(
        TopicNames(settings.namespace).worker_group(role),
        broker=_broker_url(settings.bootstrap_servers),
        broker_credentials=security.faust() if security else None,     # SASL_SSL on the secure stack
        store="rocksdb://",
        datadir=str(datadir),
        web_enabled=False,
        Monitor=LeanMonitor,            # no per-record statistics nobody reads (streams/lean_monitor.py)
        topic_partitions=settings.partitions,
        topic_replication_factor=settings.replication,      # Faust's changelogs too
        topic_allow_declare=True,
        processing_guarantee="at_least_once",
        producer_acks=-1,
        # records sent together share a request; a batch's records do not wait out the linger
        # once they are all with the producer (``streams/send_now.py``)
        producer_linger_ms=2,
        producer_partitioner=KeyPartitioner(),   # aiokafka's choice, the hash compiled
        producer_max_batch_size=1 << 20,
        key_serializer="raw",
        value_serializer="raw",
        consumer_auto_offset_reset="earliest",
        broker_commit_every=1000,
        broker_commit_interval=1.0,
        table_standby_replicas=0,
        stream_wait_empty=False,
        # A worker killed without leaving its group holds its partitions until its session
        # times out: 10 s instead of Faust's 60 s, so its cells resume elsewhere (or in its
        # restarted self) that much sooner. Heartbeats go every 3 s, and the loop yields
        # during long catch-ups (``CATCH_UP_SLICE``), so a live worker keeps its session.
        broker_session_timeout=SESSION_TIMEOUT_S,
    )
    # Fetches wait 20 ms at the broker (the default), not Faust's fixed 1.5 s, so a busy
    # partition's records never wait long behind a fetch for idle ones (streams/fetch_wait.py).
    set_fetch_wait(app, settings.fetch_max_wait_ms)
    return app


def _raw(message: Any) -> RawRecord:
    """A Faust message as a record (Faust's timestamp is in seconds)."""
    ts = message.timestamp
    return RawRecord(message.topic, message.partition, message.offset,
                     int(ts * 1000) if ts is not None else 0, message.key, message.value)


async def _produce_all(app: faust.App, records: list[OutRecord]) -> None:
    """Send every record and wait until the broker has stored all of them. They go at once,
    not after the producer's linger (``send_now``): nothing else would join them while this
    waits for their answers."""
    if not records:
        return
    futures = [await app.producer.send(r.topic, r.key, r.value, None, None, r.kafka_headers()) for r in records]
    send_now(app.producer)
    await asyncio.gather(*futures)


class SnapshotStore:
    """The scheduler's snapshots and durable marks (``streams/snapshot_store.py``: the
    layout) in the Faust app's table ``cell-snapshots``, for one partition at a time."""

    def __init__(self, table: faust.Table):
        self.table = table

    @contextlib.contextmanager
    def of(self, event: Any, partition: int) -> Iterator[PartitionSnapshots]:
        """The partition's snapshots; ``event``: one of its events. Faust routes a table write
        to the partition of the "current event"; a micro-batch spans partitions, so the
        context points at an event of the partition written."""
        token = _current_event.set(weakref.ref(event))
        try:
            yield PartitionSnapshots(self.table, partition)
        finally:
            _current_event.reset(token)



def latency_path(settings: Settings, instance: int = 1) -> Path:
    return worker_dir(settings, "scheduler", instance) / "latency.json"


class DecisionLatency:
    """How long the scheduler takes to answer, measured inside the worker (for the benches,
    ``bench/urgent_latency.py``); cumulative figures of one process.

    For every cell-log input that yields at least one decision, by input kind (from the
    record's schema id), the wall time from the record's log timestamp (its arrival in the
    cell log: the broker's append time, ``core_topics``; on a cell log created before
    2026-12-05, its CreateTime, intake's clock when it forwarded the record) to

    - ``start_ms``: the start of the micro-batch holding it (broker, fetch, the Faust loop's
      take buffer of up to ``BATCH_WITHIN``, and the batch before it still being processed),
    - ``decided_ms``: the core returned its decisions (the batch's earlier inputs included),
    - ``acked_ms``: the broker acknowledged the batch's outputs (the decisions are durable),

    as histograms in 1 ms buckets ({lower bound: count}; the log timestamp has 1 ms resolution),
    and ``in_batch_100us``: from the start of its micro-batch to its decisions, in 0.1 ms buckets
    (the part the core and the inputs before it in the batch account for); also the core's time
    per input kind (``apply``: count, total and max in microseconds, every input), the micro-batches'
    sizes, the batches begun after a quiet and after a busy batch and the waits an urgent
    record ended early (``batch_waits``, see ``streams/batch_wait.py``; the plain loop,
    ``streams/scheduler_worker.py``, which does not wait, counts its quiet and busy batches
    and the batches whose urgent input's outputs left at once), and the snapshots:
    their serialisation in the forked child (``snapshot_ms_*``) and what the loop spent on
    them (``snapshot_fork_ms_*`` forking, ``snapshot_store_ms_*`` storing), and the garbage
    collector's pauses per generation, as the worker times them (``gc``: count, total and
    longest ms; ``streams/gc_pauses.py``), which stop the loop as a long input does. Written every
    ``LATENCY_SECONDS`` to :func:`latency_path` (``<home>/workers/<namespace>/scheduler/latency.json``).
    """

    def __init__(self, path: Path):
        self.path = path
        self.started_ms = int(time.time() * 1000)
        self.hist: dict[str, dict[str, dict[int, int]]] = {}     # kind -> stage -> {bucket ms: count}
        self.apply: dict[str, list[float]] = {}                  # kind -> [count, total us, max us]
        self.batches = self.batch_events = self.batch_max = 0
        self.snapshots, self.snapshot_ms_total, self.snapshot_ms_max = 0, 0.0, 0.0
        self.store_ms_total = self.store_ms_max = 0.0
        self.forks, self.fork_ms_total, self.fork_ms_max = 0, 0.0, 0.0
        self.batch_wait: dict[str, int] = {}                     # batches begun per wait mode (BatchWait.waits)
        self.gc: GcPauses | None = None                          # the collector's pauses, when timed
        self.written = 0.0

    def applied(self, kind: str, us: float) -> None:
        a = self.apply.setdefault(kind, [0, 0.0, 0.0])
        a[0] += 1
        a[1] += us
        a[2] = max(a[2], us)

    def decided(self, kind: str, log_ms: int, start_ms: float, decided_ms: float, acked_ms: float) -> None:
        stages = self.hist.setdefault(kind, {"start_ms": {}, "decided_ms": {}, "acked_ms": {},
                                             "in_batch_100us": {}})
        for stage, bucket in (("start_ms", int(start_ms - log_ms)), ("decided_ms", int(decided_ms - log_ms)),
                              ("acked_ms", int(acked_ms - log_ms)),
                              ("in_batch_100us", int((decided_ms - start_ms) * 10))):
            h = stages[stage]
            h[max(0, bucket)] = h.get(max(0, bucket), 0) + 1

    def batch(self, events: int) -> None:
        self.batches += 1
        self.batch_events += events
        self.batch_max = max(self.batch_max, events)

    def snapshot_forked(self, ms: float) -> None:
        """A snapshot's child was forked: ``ms`` the loop spent on the fork."""
        self.forks += 1
        self.fork_ms_total += ms
        self.fork_ms_max = max(self.fork_ms_max, ms)

    def snapshot(self, ms: float, store_ms: float) -> None:
        """A snapshot was stored: ``ms`` its serialisation took in the child, ``store_ms`` the
        loop spent storing it."""
        self.snapshots += 1
        self.snapshot_ms_total += ms
        self.snapshot_ms_max = max(self.snapshot_ms_max, ms)
        self.store_ms_total += store_ms
        self.store_ms_max = max(self.store_ms_max, store_ms)

    def maybe_write(self) -> None:
        if time.monotonic() - self.written >= LATENCY_SECONDS:
            self.write()

    def write(self) -> None:
        self.written = time.monotonic()
        body = {"pid": os.getpid(), "started_ms": self.started_ms, "updated_ms": int(time.time() * 1000),
                "bucket_ms": 1,
                "kinds": {k: {stage: {str(b): n for b, n in sorted(h.items())} for stage, h in v.items()}
                          for k, v in sorted(self.hist.items())},
                "apply": {k: {"count": int(c), "total_us": round(t), "max_us": round(mx)}
                          for k, (c, t, mx) in sorted(self.apply.items())},
                "batches": self.batches, "batch_events": self.batch_events, "batch_max": self.batch_max,
                "snapshots": self.snapshots, "snapshot_ms_total": round(self.snapshot_ms_total, 1),
                "snapshot_ms_max": round(self.snapshot_ms_max, 1),
                "snapshot_store_ms_total": round(self.store_ms_total, 1),
                "snapshot_store_ms_max": round(self.store_ms_max, 1),
                "snapshot_forks": self.forks, "snapshot_fork_ms_total": round(self.fork_ms_total, 1),
                "snapshot_fork_ms_max": round(self.fork_ms_max, 1),
                "batch_waits": dict(self.batch_wait)}
        if self.gc is not None:
            body["gc"] = self.gc.as_json()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(body))
        tmp.replace(self.path)


def scheduler_batch_wait(settings: Settings) -> BatchWait:
    """The scheduler's micro-batch wait: a busy batch ends at a pause of
    ``settings.batch_gap_ms`` (0: it waits the whole busy window)."""
    return BatchWait(gap_s=settings.batch_gap_ms / 1000 or None)


def build_scheduler(settings: Settings, instance: int = 1) -> faust.App:
    app = make_app("scheduler", settings, instance)
    codec = Codec(RegistryClient(settings.registry_url))
    topics = TopicNames(settings.namespace)
    runner = CellRunner(codec, topics)
    metrics = SchedulerMetrics(settings.namespace, codec, [topics.cell_log]).bind(runner).attach(app)
    latency = DecisionLatency(latency_path(settings, instance))
    # the collector's pauses, in the latency report; and the cell's objects frozen once a
    # full collection takes longer than GC_FREEZE_AFTER_MS (streams/gc_pauses.py says why)
    latency.gc = GcPauses(GC_FREEZE_AFTER_MS).install()
    batch_wait = scheduler_batch_wait(settings)
    latency.batch_wait = batch_wait.waits
    cell_log = app.topic(topics.cell_log, schema=RawSchema(), partitions=settings.partitions)
    table = app.Table("cell-snapshots", key_type=str, value_type=bytes, partitions=settings.partitions)
    snapshots = SnapshotStore(table)
    started: set[int] = set()
    # The cell-log partitions assigned to this worker now. Records of a revoked partition
    # still buffered in a micro-batch are left alone: their new owner decides them, and
    # deciding them here too would only send late duplicates.
    owned: set[int] = set()
    since_snapshot: dict[int, int] = {}
    last_snapshot: dict[int, float] = {}
    snapshot_cost: dict[int, float] = {}           # seconds the last snapshot of a partition took
    forked = ForkedSnapshots(worker_dir(settings, "scheduler", instance), runner.snapshot)
    latest_event: dict[int, Any] = {}                # per partition, an event of it (the table's write context)
    progress: dict[int, tuple[int, int]] = {}        # per owned partition, (state offset, log end) at the last stall check
    recovery_progress: dict[Any, tuple[int, int]] = {}   # the same per changelog partition Faust restores

    async def recover(event: Any, partition: int, first_offset: int) -> tuple[list[OutRecord], list[Any]]:
        """Bring the partition's state up to ``first_offset`` (the next record Faust gave us).
        Returns the outputs to send, in log order, before those of the record at
        ``first_offset``, and the re-applied records to ack to Faust once they are sent.

        The state comes from memory, or from the snapshot when that is further along (a fresh
        process has none in memory; a partition that moved away and back may have been
        advanced by another worker meanwhile). The log from there to ``first_offset`` is then
        re-applied in two parts:

        - up to the partition's durable mark (``PartitionSnapshots.mark_durable``, or the
          snapshot's offset), silently: those records' outputs are stored;
        - after it, *with* their outputs: nobody is known to have sent them. Faust may not
          have handed them to us: it drops messages in flight when a rebalance suspends its
          flow (``Consumer._drain_messages``: the read offset moves on past a callback
          ``wait_first`` abandoned), so a partition's stream can jump (seen in
          ``tests/deploy/test_cells_across_workers.py``: offsets 147-149 never delivered).
          Or a worker died between sending them and marking them. Their outputs are
          returned for the caller's micro-batch, to be sent in log order with it (duplicates
          of outputs sent elsewhere carry the same event ids and bytes); the batch's durable
          mark then covers them, and the records are acked to Faust so that its commits
          move past them too (when Faust noted them as a gap as well,
          ``streams/commit_gaps.py`` counts each once). Sending them here, ahead of the
          batch's earlier records, once put a cell's decisions out of log order.
        """
        with snapshots.of(event, partition) as stored:
            source, durable = restore_newer(runner, stored)
        if source == "snapshot":
            metrics.snapshot_saved(partition)
        as_of = runner.partition(partition).as_of
        missing = await read_range(settings.bootstrap_servers, topics.cell_log, partition, as_of + 1, first_offset)
        stored_outputs = [r for r in missing if r.offset <= durable]
        unsent = missing[len(stored_outputs):]
        for i in range(0, len(stored_outputs), CATCH_UP_SLICE):
            runner.catch_up(RawRecord.of_kafka(r) for r in stored_outputs[i:i + CATCH_UP_SLICE])
            await asyncio.sleep(0)
        outputs = [out for r in unsent for out in runner.apply(RawRecord.of_kafka(r))]
        to_ack = [Message(r.topic, r.partition, r.offset, (r.timestamp or 0) / 1000, 0, None, r.key, r.value, None,
                          tp=TP(r.topic, r.partition)) for r in unsent]
        cells = runner.partition(partition).cells.values()
        log.warning("scheduler: partition %s recovered: state from %s as of %s, re-applied %s records "
                    "(%s with their outputs sent from here: not marked as stored), resuming at %s; "
                    "its cells hold %s tasks and %s tombstones of forgotten ones",
                    partition, source, as_of, len(missing), len(unsent), first_offset,
                    sum(len(c.tasks) for c in cells), sum(len(c.forgotten) for c in cells))
        return outputs, to_ack

    @app.on_partitions_revoked.connect
    async def forget_revoked(_app: Any, revoked: set, **_kwargs: Any) -> None:
        """A revoked partition is recovered again at its next record, should it come back:
        another worker may have decided on it meanwhile (the state in memory is kept, and
        used when nothing newer is stored)."""
        mine = sorted(tp.partition for tp in revoked if tp.topic == topics.cell_log)
        started.difference_update(mine)
        owned.difference_update(mine)
        for partition in mine:
            forked.forget(partition)
            latest_event.pop(partition, None)
        if mine:
            log.warning("scheduler: cell-log partitions revoked: %s", mine)

    @app.on_partitions_assigned.connect
    async def say_assigned(_app: Any, assigned: set, **_kwargs: Any) -> None:
        """Log the worker's whole assignment of cell-log partitions (Faust rebalances
        eagerly: every assignment is the full set), for operators and the scale-out test."""
        mine = sorted(tp.partition for tp in assigned if tp.topic == topics.cell_log)
        owned.update(mine)
        progress.clear()                 # a new generation: the stall check starts afresh
        log.warning("scheduler: cell-log partitions assigned: %s", mine)

    declared: set[str] = set()

    async def declare_new_topics(records: list[OutRecord]) -> None:
        """Create each output topic this process has not sent to yet, before sending to it.
        A connector kind's dispatch topic exists only once a plane pre-created it, and a
        send to a topic that does not exist yet leaves it to the broker's auto-creation
        (broker-default partitions) while the producer waits on metadata: a scheduler once
        stalled there, its TaskPlaced unsent. Declaring is one request per topic per process."""
        for name in sorted({r.topic for r in records} - declared):
            await app.topic(name, partitions=settings.partitions, key_type=bytes, value_type=bytes).declare()
            declared.add(name)

    async def send(unsent: list[OutRecord], outputs: list[OutRecord], acks: list[Awaitable[Any]]) -> None:
        """Hand ``unsent`` to the producer in order (one producer: the broker stores them in
        that order), moving them to ``outputs`` and their answers to ``acks``; the batch waits
        for every answer before it marks its records durable."""
        if not unsent:
            return
        await declare_new_topics(unsent)
        for r in unsent:
            acks.append(await app.producer.send(r.topic, r.key, r.value, None, None, r.kafka_headers()))
        outputs.extend(unsent)
        unsent.clear()

    @app.agent(cell_log, name="scheduler")
    async def schedule(stream: faust.StreamT) -> None:
        batch_wait.attach(stream)        # 2 ms while the log is quiet; busy: to a 2 ms pause, 20 ms at most; urgent: none
        async for events in stream.take_events(BATCH, within=MARKER):
            batch_wait.after(len(events))
            # A quiet log's decisions leave as each input is decided; a busy one's at the batch's
            # end (trickled sends make more, smaller produce requests and consumer fetches:
            # measured 10-15 % fewer placements/s at full load).
            eager = len(events) < batch_wait.busy_batch
            batch_start = time.time() * 1000
            outputs: list[OutRecord] = []                    # sent (in log order)
            unsent: list[OutRecord] = []                     # decided, not yet handed to the producer
            acks: list[Awaitable[Any]] = []                  # the broker's answers to the batch's sends
            last_event: dict[int, Any] = {}
            answered: list[tuple[str, int, float]] = []      # (kind, log ms, decided ms) of inputs with decisions
            recovered: list[Any] = []                          # re-applied records to ack once the batch is sent
            for event in events:
                message = event.message
                if message.partition not in owned:
                    continue
                if message.partition not in started or message.offset > runner.partition(message.partition).as_of + 1:
                    # The partition's first record since it was assigned, or a gap: records
                    # Faust never handed over (it drops messages in flight when a rebalance
                    # suspends its flow; see ``recover``). Deciding past them would fold a
                    # state without them and leave their decisions unsent.
                    caught_up, to_ack = await recover(event, message.partition, message.offset)
                    unsent.extend(caught_up)
                    recovered.extend(to_ack)
                    if message.partition not in started:
                        started.add(message.partition)
                        last_snapshot[message.partition] = time.monotonic()
                raw = _raw(message)
                t0 = time.perf_counter()
                out = runner.apply(raw)
                t1 = time.perf_counter()
                kind = codec.kind_of(raw.value) or "?"
                latency.applied(kind, (t1 - t0) * 1e6)
                if any(r.topic == topics.decisions for r in out):
                    answered.append((kind, raw.timestamp, time.time() * 1000))
                unsent.extend(out)
                if eager:
                    await send(unsent, outputs, acks)
                    if is_urgent(message.headers):
                        send_now(app.producer)       # its decision and dispatch leave now, not after the linger
                last_event[message.partition] = event
                since_snapshot[message.partition] = since_snapshot.get(message.partition, 0) + 1
            await send(unsent, outputs, acks)
            # The batch's outputs are all with the producer and nothing else will join them while
            # the batch waits for their answers: the linger would only delay the next batch.
            send_now(app.producer)
            await asyncio.gather(*acks)
            for partition, event in last_event.items():
                with snapshots.of(event, partition) as stored:
                    stored.mark_durable(runner.partition(partition).as_of)
            for message in recovered:
                app.consumer.ack(message)
            acked = time.time() * 1000
            metrics.batch_done(events, outputs, acked_ms=acked)
            for kind, log_ms, decided in answered:
                latency.decided(kind, log_ms, batch_start, decided, acked)
            latency.batch(len(events))
            latest_event.update(last_event)
            now = time.monotonic()
            for partition in last_event:
                if not forked.busy(partition) and snapshot_due(
                        since_snapshot[partition], now - last_snapshot[partition], snapshot_cost.get(partition, 0.0)):
                    t0 = time.perf_counter()
                    forked.start(partition, runner.partition(partition).as_of)
                    latency.snapshot_forked((time.perf_counter() - t0) * 1000)
                    since_snapshot[partition] = 0
                    last_snapshot[partition] = now
            store_snapshots()
            latency.maybe_write()

    def store_snapshots() -> None:
        """Store the snapshots whose children finished (each as of the offset it was forked
        at; that record's outputs were acknowledged before the fork)."""
        for done in forked.reap():
            event = latest_event.get(done.partition)
            if not done.ok or event is None or done.partition not in owned:
                continue
            t0 = time.perf_counter()
            with snapshots.of(event, done.partition) as stored:
                stored.save(done.blob, done.as_of)
            snapshot_cost[done.partition] = done.seconds
            latency.snapshot(done.seconds * 1000, (time.perf_counter() - t0) * 1000)
            metrics.snapshot_saved(done.partition, done.seconds)

    @app.timer(interval=SNAPSHOT_REAP_SECONDS)
    async def reap_snapshots() -> None:
        store_snapshots()

    @app.timer(interval=STALL_CHECK_SECONDS)
    async def warn_of_stalls() -> None:
        """Log each partition of this worker that has records waiting yet applied none since
        the last check (:func:`stalled`): Faust has known stalls, consumers that stop
        delivering. The warning (and the gauge ``suanli_stalled_partitions``) tells an
        operator, or a test's failure report, a stalled worker from an idle one. While Faust
        restores the worker's table, a changelog partition that receives nothing while its
        records wait stalls it the same way (one did so for good before
        ``streams/changelog_refetch.py``): all the worker's partitions then count as
        stalled. It only reports; it changes nothing."""
        mine = sorted(owned)
        if mine and getattr(app, "in_recovery", False):       # (Faust counts recovery as rebalancing)
            recovery = app.tables._recovery
            waiting = stalled_changelogs(recovery.active_tps, recovery.active_offsets, recovery.active_highwaters,
                                         recovery_progress)
            if waiting:
                log.warning("scheduler: table recovery stalled: changelog partition(s) %s have records waiting and "
                            "none was received in the last %.0f s; cell-log partitions %s wait for it "
                            "(kill -USR1 %s logs the consumer's state)",
                            waiting, STALL_CHECK_SECONDS, mine, os.getpid())
            metrics.stalled.set(len(mine) if waiting else 0)
            progress.clear()
            return
        recovery_progress.clear()
        if not mine or app.rebalancing or getattr(app, "in_recovery", False):
            progress.clear()             # nothing is delivered meanwhile: not a stall
            metrics.stalled.set(0)
            return
        try:
            ends = await app.consumer.highwaters(*(TP(topics.cell_log, p) for p in mine))
        except Exception as exc:         # the consumer may not answer mid-rebalance: next time
            log.info("scheduler: stall check skipped: %s", exc)
            return
        count = 0
        for partition in mine:
            end = ends.get(TP(topics.cell_log, partition))
            if end is None:
                continue
            held = runner.partitions.get(partition)
            as_of = held.as_of if held is not None else -1
            if stalled(progress.get(partition), as_of, end):
                count += 1
                log.warning("scheduler: partition %s stalled: %s records wait past offset %s and none was "
                            "applied in the last %.0f s", partition, end - as_of - 1, as_of, STALL_CHECK_SECONDS)
            progress[partition] = (as_of, end)
        metrics.stalled.set(count)

    @app.timer(interval=LATENCY_SECONDS)
    async def write_latency() -> None:
        latency.maybe_write()

    @app.on_before_shutdown.connect
    async def stop_snapshot_children(_app: Any, **_kwargs: Any) -> None:
        forked.close()

    return app


BUILDERS = {"scheduler": build_scheduler}     # intake is not a Faust app: streams/intake_worker.py
