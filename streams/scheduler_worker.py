"""The scheduler's worker: a plain aiokafka consumer and producer around the cell runner.

It reads the cell log, decides with :class:`~suanli.streams.cell_runner.CellRunner` and sends
the decisions and dispatch commands. It did this as a Faust agent (``streams/app.py``
``build_scheduler``, still there behind ``SUANLI_SCHEDULER_LOOP=faust``), and Faust hands
every record on as an event of its own (its consumer thread, the conductor, the stream's
queue and an acknowledgement each): about half of the scheduler's CPU at full load went
there, as intake's had (``streams/intake_worker.py``; BENCHMARKS.md, "The scheduler without
Faust").

**The loop** (:meth:`SchedulerWorker.run`), one batch at a time:

1. ``getmany``: whatever the consumer has fetched, up to ``BATCH`` records (what came while
   the last batch was decided is the next batch). While the last batch was busy, fetches
   wait at the broker for ``Settings.fetch_busy_min_bytes`` (``streams/busy_fetch.py``).
2. For each record of a partition this worker owns, in offset order: the partition's first
   record since it was assigned, or one past a gap, first *recovers* the partition
   (:meth:`recover`); then the runner applies it. A quiet batch (fewer than ``BUSY_RECORDS``)
   sends each input's outputs as soon as they are decided (an urgent one's at once); a busy
   one sends them all at its end.
3. Wait until the broker stored every output, then mark the batch's partitions durable up
   to their last record (``streams/snapshot_store.py``) and note the offsets after them as
   stored.
4. Fork a snapshot of each partition that is due (``snapshot_due``), and store the ones whose
   children finished.

Stored offsets are committed once a second (``COMMIT_INTERVAL_S``), when partitions are
revoked and when the worker stops. A rebalance waits for the batch in hand (the listener
takes the same lock).

**State and recovery.** The cells' state lives in memory, with a snapshot per partition in
the compacted topic ``<group>-cell-snapshots-changelog`` (:mod:`suanli.streams.snapshot_store`,
the same keys the Faust loop's table wrote, so either loop recovers from the other's). A
partition is recovered from the state in memory or its stored snapshot, whichever is further
along; the log from there up to the record in hand is re-applied, silently up to the
partition's durable mark (those outputs are stored) and *with* its outputs after it (nobody
is known to have sent them: their duplicates carry the same event ids and bytes).

The consumer group is the role's (``TopicNames.worker_group("scheduler")``, the Faust app id
it had), so this loop resumes at the offsets a Faust one committed. The two cannot share the
group at the same time (its members must agree on one assignment protocol): stop the old
workers first, as the plane does.
"""
from __future__ import annotations

import asyncio
import logging
import os
import time
from typing import Any, Awaitable

from aiokafka import TopicPartition

from suanli.config import Settings
from suanli.streams.app import (CATCH_UP_SLICE, GC_FREEZE_AFTER_MS, LATENCY_SECONDS, SNAPSHOT_REAP_SECONDS,
                                STALL_CHECK_SECONDS, DecisionLatency, latency_path, snapshot_due, stalled,
                                worker_dir)
from suanli.streams import diagnostics
from suanli.streams.busy_fetch import BUSY_RECORDS, BusyFetch
from suanli.streams.cell_runner import CellRunner
from suanli.streams.gc_pauses import GcPauses
from suanli.streams.kafka_io import EventProducer, end_offsets, ensure_topics, read_range
from suanli.streams.metrics import REFRESH_SECONDS, SchedulerMetrics
from suanli.streams.plain_worker import COMMIT_INTERVAL_S, LINGER_MS, PlainWorker, group_consumer, run_plain
from suanli.streams.records import OutRecord, RawRecord, is_urgent
from suanli.streams.send_now import send_now
from suanli.streams.snapshot_fork import ForkedSnapshots
from suanli.streams.snapshot_store import ChangelogTable, PartitionSnapshots, changelog_topic, restore_newer
from suanli.streams.topics import TopicSpec, core_topics

log = logging.getLogger("suanli.streams")

# The snapshots' topic gets a durable mark per partition and batch (hundreds a second under
# load), and a recovery reads its partition whole: segments that roll every 10 minutes let
# the broker compact the marks away (it compacts closed segments only), so that read stays
# short on a plane that runs for weeks. (A topic the Faust loop created keeps its configs.)
SNAPSHOT_SEGMENT_MS = 600_000


class SchedulerWorker(PlainWorker):
    """One scheduler process (``instance``: which of the role's workers; all share the group).
    :meth:`run` until :meth:`stop`."""

    role = "scheduler"

    def __init__(self, settings: Settings, instance: int = 1):
        super().__init__(settings)
        self.group = self.topics.worker_group("scheduler")
        self.snapshot_topic = changelog_topic(self.group)
        self.runner = CellRunner(self.codec, self.topics)
        self.metrics = SchedulerMetrics(settings.namespace, self.codec, [self.topics.cell_log]).bind(self.runner)
        self.latency = DecisionLatency(latency_path(settings, instance))
        self.forked = ForkedSnapshots(worker_dir(settings, "scheduler", instance), self.runner.snapshot)
        self.owned: set[int] = set()           # cell-log partitions assigned to this worker now
        self.started: set[int] = set()         # owned partitions recovered since their assignment
        self.tables: dict[int, ChangelogTable] = {}     # per started partition, its snapshots' table
        self.since_snapshot: dict[int, int] = {}
        self.last_snapshot: dict[int, float] = {}
        self.snapshot_cost: dict[int, float] = {}      # seconds the last snapshot of a partition took
        self.progress: dict[int, tuple[int, int]] = {}  # per owned partition, (state offset, log end) at the last stall check
        self.declared: set[str] = set()
        self.batches = 0
        self.records = 0
        # batches per mode (quiet: "idle", "busy") and batches whose urgent input's outputs left
        # at once ("urgent"): the latency report's ``batch_waits``, as the Faust loop's BatchWait
        # counts its waits
        self.modes: dict[str, int] = {"idle": 0, "busy": 0, "urgent": 0}
        self.latency.batch_wait = self.modes
        self.producer: EventProducer | None = None
        self.busy_fetch: BusyFetch | None = None

    # ------------------------------------------------------------------ the loop
    async def run(self) -> None:
        s = self.settings
        await ensure_topics(s.bootstrap_servers, [
            *(t for t in core_topics(s.partitions, s.namespace) if t.name in (self.topics.cell_log, self.topics.decisions)),
            TopicSpec(self.snapshot_topic, s.partitions, compact=True, segment_ms=SNAPSHOT_SEGMENT_MS)])
        # the collector's pauses, in the latency report; and the cell's objects frozen once a
        # full collection takes longer than GC_FREEZE_AFTER_MS (streams/gc_pauses.py says why)
        self.latency.gc = GcPauses(GC_FREEZE_AFTER_MS).install()
        self.producer = EventProducer(s.bootstrap_servers, self.codec, linger_ms=LINGER_MS)
        self.consumer = group_consumer(s, self.group)
        self.busy_fetch = BusyFetch.of_consumer(self.consumer, s.fetch_busy_min_bytes, s.fetch_max_wait_ms)
        async with self.producer:
            log.warning("scheduler: reading %s as group %s (plain aiokafka loop)", self.topics.cell_log, self.group)
            try:
                await self.consume([self.topics.cell_log], [
                    (COMMIT_INTERVAL_S, "commit", self.commit_stored),
                    (SNAPSHOT_REAP_SECONDS, "snapshot store", self.store_snapshots),
                    (STALL_CHECK_SECONDS, "stall check", self.warn_of_stalls),
                    (LATENCY_SECONDS, "latency report", self._write_latency),
                    (REFRESH_SECONDS, "metrics refresh", self._refresh_metrics)])
            finally:
                self.forked.close()
        self.latency.write()
        self.raise_failure()

    async def handle(self, fetched: dict[TopicPartition, list[Any]]) -> None:
        """One batch (module docstring)."""
        async with self.batch_lock:
            n = sum(map(len, fetched.values()))
            busy = n >= BUSY_RECORDS
            self.busy_fetch.after("scheduler", busy)
            # A quiet log's decisions leave as each input is decided; a busy one's at the batch's
            # end (trickled sends make more, smaller produce requests and consumer fetches).
            eager = not busy
            self.modes["busy" if busy else "idle"] += 1
            urgent_sent = False
            batch_start = time.time() * 1000
            outputs: list[OutRecord] = []                    # sent (in log order)
            unsent: list[OutRecord] = []                     # decided, not yet handed to the producer
            acks: list[Awaitable[Any]] = []                  # the broker's answers to the batch's sends
            last: dict[int, int] = {}                        # partition -> offset of its last record applied
            answered: list[tuple[str, int, float]] = []      # (kind, log ms, decided ms) of inputs with decisions
            handled: list[Any] = []
            for tp in sorted(fetched, key=lambda t: t.partition):
                partition = tp.partition
                if partition not in self.owned:
                    continue
                for message in fetched[tp]:
                    if partition not in self.started or message.offset > self.runner.partition(partition).as_of + 1:
                        # the partition's first record since it was assigned, or a gap
                        unsent.extend(await self.recover(partition, message.offset))
                    raw = RawRecord.of_kafka(message)
                    t0 = time.perf_counter()
                    out = self.runner.apply(raw)
                    t1 = time.perf_counter()
                    kind = self.codec.kind_of(raw.value) or "?"
                    self.latency.applied(kind, (t1 - t0) * 1e6)
                    if any(r.topic == self.topics.decisions for r in out):
                        answered.append((kind, raw.timestamp, time.time() * 1000))
                    unsent.extend(out)
                    if eager:
                        await self.send(unsent, outputs, acks)
                        if is_urgent(message.headers):
                            send_now(self.producer)      # its decision and dispatch leave now, not after the linger
                            urgent_sent = True
                    last[partition] = message.offset
                    handled.append(message)
                    self.since_snapshot[partition] = self.since_snapshot.get(partition, 0) + 1
            await self.send(unsent, outputs, acks)
            send_now(self.producer)
            await asyncio.gather(*acks)
            self.modes["urgent"] += urgent_sent
            for partition, offset in last.items():
                table = self.tables[partition]
                PartitionSnapshots(table, partition).mark_durable(self.runner.partition(partition).as_of)
                await table.send_queued()
                self.stored[TopicPartition(self.topics.cell_log, partition)] = offset + 1
            acked = time.time() * 1000
            self.metrics.batch_done(handled, outputs, acked_ms=acked)
            for kind, log_ms, decided in answered:
                self.latency.decided(kind, log_ms, batch_start, decided, acked)
            self.latency.batch(len(handled))
            self.batches += 1
            self.records += n
            self.fork_due_snapshots(last)
            await self.store_snapshots()
            self.latency.maybe_write()

    async def send(self, unsent: list[OutRecord], outputs: list[OutRecord], acks: list[Awaitable[Any]]) -> None:
        """Hand ``unsent`` to the producer in order (one producer: the broker stores them in
        that order), moving them to ``outputs`` and their answers to ``acks``."""
        if not unsent:
            return
        await self.declare_new_topics(unsent)
        for r in unsent:
            acks.append(await self.producer.send_raw(r.topic, r.value, r.key, r.headers))
        outputs.extend(unsent)
        unsent.clear()

    async def declare_new_topics(self, records: list[OutRecord]) -> None:
        """Create each output topic this process has not sent to yet, before sending to it: a
        connector kind's dispatch topic exists only once a plane pre-created it, and a send to
        a missing topic waits on the broker's auto-creation (with its default partitions)."""
        new = sorted({r.topic for r in records} - self.declared)
        if new:
            await ensure_topics(self.settings.bootstrap_servers, [TopicSpec(t, self.settings.partitions) for t in new])
            self.declared.update(new)

    # ------------------------------------------------------------------ recovery
    async def recover(self, partition: int, first_offset: int) -> list[OutRecord]:
        """Bring the partition's state up to ``first_offset`` (the record in hand); returns the
        outputs to send, in log order, before the record's own (module docstring)."""
        bootstrap = self.settings.bootstrap_servers
        table = ChangelogTable(self.snapshot_topic, partition, self.producer.send_raw)
        end = (await end_offsets(bootstrap, self.snapshot_topic)).get(partition, 0)
        table.load(await read_range(bootstrap, self.snapshot_topic, partition, 0, end))
        self.tables[partition] = table
        source, durable = restore_newer(self.runner, PartitionSnapshots(table, partition))
        if source == "snapshot":
            self.metrics.snapshot_saved(partition)
        as_of = self.runner.partition(partition).as_of
        missing = await read_range(bootstrap, self.topics.cell_log, partition, as_of + 1, first_offset)
        silent = [r for r in missing if r.offset <= durable]
        unsent = missing[len(silent):]
        for i in range(0, len(silent), CATCH_UP_SLICE):
            self.runner.catch_up(RawRecord.of_kafka(r) for r in silent[i:i + CATCH_UP_SLICE])
            await asyncio.sleep(0)               # heartbeats and the side tasks go on
        outputs = [out for r in unsent for out in self.runner.apply(RawRecord.of_kafka(r))]
        if partition not in self.started:
            self.started.add(partition)
            self.last_snapshot[partition] = time.monotonic()
        cells = self.runner.partition(partition).cells.values()
        log.warning("scheduler: partition %s recovered: state from %s as of %s, re-applied %s records "
                    "(%s with their outputs sent from here: not marked as stored), resuming at %s; "
                    "its cells hold %s tasks and %s tombstones of forgotten ones",
                    partition, source, as_of, len(missing), len(unsent), first_offset,
                    sum(len(c.tasks) for c in cells), sum(len(c.forgotten) for c in cells))
        return outputs

    def assigned(self, partitions: Any) -> None:
        # The whole assignment (eager rebalancing): for operators, the plane
        # (deploy/plane.py ASSIGNED) and the scale-out tests.
        mine = sorted(tp.partition for tp in partitions if tp.topic == self.topics.cell_log)
        self.owned.update(mine)
        self.progress.clear()             # a new generation: the stall check starts afresh
        log.warning("scheduler: cell-log partitions assigned: %s", mine)

    def revoked(self, partitions: Any) -> None:
        self.forget([tp.partition for tp in partitions if tp.topic == self.topics.cell_log])

    def forget(self, partitions: list[int]) -> None:
        """Partitions revoked: each is recovered again at its next record should it come back
        (another worker may have decided on it meanwhile; the state in memory is kept, and
        used when nothing newer is stored)."""
        for partition in partitions:
            self.owned.discard(partition)
            self.started.discard(partition)
            self.tables.pop(partition, None)
            self.forked.forget(partition)
        if partitions:
            log.warning("scheduler: cell-log partitions revoked: %s", sorted(partitions))

    # ------------------------------------------------------------------ snapshots
    def fork_due_snapshots(self, partitions: Any) -> None:
        now = time.monotonic()
        for partition in partitions:
            if partition in self.started and not self.forked.busy(partition) and snapshot_due(
                    self.since_snapshot.get(partition, 0), now - self.last_snapshot[partition],
                    self.snapshot_cost.get(partition, 0.0)):
                t0 = time.perf_counter()
                self.forked.start(partition, self.runner.partition(partition).as_of)
                self.latency.snapshot_forked((time.perf_counter() - t0) * 1000)
                self.since_snapshot[partition] = 0
                self.last_snapshot[partition] = now

    async def store_snapshots(self) -> None:
        """Store the snapshots whose children finished (each as of the offset it was forked
        at; that record's outputs were acknowledged before the fork)."""
        for done in self.forked.reap():
            table = self.tables.get(done.partition)
            if not done.ok or table is None or done.partition not in self.owned:
                continue
            t0 = time.perf_counter()
            PartitionSnapshots(table, done.partition).save(done.blob, done.as_of)
            await table.send_queued()
            self.snapshot_cost[done.partition] = done.seconds
            self.latency.snapshot(done.seconds * 1000, (time.perf_counter() - t0) * 1000)
            self.metrics.snapshot_saved(done.partition, done.seconds)

    # ------------------------------------------------------------------ side jobs
    async def warn_of_stalls(self) -> None:
        """Log each partition of this worker that has records waiting yet applied none since
        the last check (:func:`~suanli.streams.app.stalled`); the gauge
        ``suanli_stalled_partitions`` counts them. It only reports; it changes nothing."""
        mine = sorted(self.owned)
        if not mine:
            self.progress.clear()
            self.metrics.stalled.set(0)
            return
        ends = await self.consumer.end_offsets([TopicPartition(self.topics.cell_log, p) for p in mine])
        count = 0
        for partition in mine:
            end = ends.get(TopicPartition(self.topics.cell_log, partition))
            if end is None:
                continue
            held = self.runner.partitions.get(partition)
            as_of = held.as_of if held is not None else -1
            if stalled(self.progress.get(partition), as_of, end):
                count += 1
                log.warning("scheduler: partition %s stalled: %s records wait past offset %s and none was "
                            "applied in the last %.0f s", partition, end - as_of - 1, as_of, STALL_CHECK_SECONDS)
            self.progress[partition] = (as_of, end)
        self.metrics.stalled.set(count)

    async def _write_latency(self) -> None:
        self.latency.maybe_write()

    async def _refresh_metrics(self) -> None:
        self.metrics.refresh()
        self.metrics.set_lag(*self.lag_inputs())

    def state(self) -> list[str]:
        """What SIGUSR1 logs (one line each): the loop's counts, the partitions fetched and
        owned, how far each is applied, stored and committed, and the Kafka consumer's
        positions (``streams/diagnostics.py``, as a Faust worker logs them)."""
        assigned = self.consumer.assignment() if self.consumer is not None else set()
        lines = [f"loop: batches={self.batches} records={self.records} pid={os.getpid()} "
                 f"busy_min_bytes={self.busy_fetch.current if self.busy_fetch else None}",
                 f"fetching: {sorted(f'{tp.topic}:{tp.partition}' for tp in assigned)}",
                 f"owned: {sorted(self.owned)} started={sorted(self.started)}",
                 f"applied: { {p: self.runner.partition(p).as_of for p in sorted(self.owned)} }",
                 f"stored: { {tp.partition: o for tp, o in sorted(self.stored.items())} } "
                 f"committed={ {tp.partition: o for tp, o in sorted(self.committed.items())} }"]
        try:
            lines.append(f"kafka consumer: {diagnostics.kafka_state(self.consumer)}")
        except Exception as exc:  # noqa: BLE001 - not started, or mid-rebalance: say so
            lines.append(f"kafka consumer: unavailable ({type(exc).__name__}: {exc})")
        return lines


def run_scheduler(settings: Settings, instance: int = 1) -> None:
    """Run one scheduler worker until SIGTERM or SIGINT (it then finishes its batch, commits
    and leaves the group); SIGUSR1 logs its state."""
    run_plain(lambda: SchedulerWorker(settings, instance), lambda worker: "worker state:\n" + "\n".join(worker.state()))
