"""Intake's worker: a plain aiokafka consumer and producer around :func:`intake.triage`.

Intake is stateless: it reads the raw topics, forwards each valid scheduler input verbatim
to the cell log (or dead-letters it), and ticks the cell clocks. It used to be a Faust
agent. Faust hands every record on as an event of its own, through its consumer thread, the
conductor, the stream's queue and an acknowledgement each, and at full load that machinery
was most of intake's CPU: 156-169 us a placement in the E2E max phase, against 50 us for
this loop on the same records (BENCHMARKS.md, "Intake without Faust").

**The loop** (:meth:`IntakeWorker.run`), one batch at a time:

1. ``getmany``: whatever the consumer has fetched, up to ``BATCH`` records. There is no
   wait for company on top: the fetches themselves gather a busy batch at the broker
   (:class:`~suanli.streams.busy_fetch.BusyFetch`: while the last batch was busy, a fetch
   waits for ``Settings.fetch_busy_min_bytes`` or the fetch wait), and a quiet record is
   handed on as soon as it is fetched.
2. ``triage`` every record, in partition order, offset order within a partition.
3. Send the outputs, close the producer's open batches (``send_now``) and wait until the
   broker has stored every one of them.
4. Note, per partition, the offset after its last record as *stored*.

Every ``COMMIT_INTERVAL_S`` (1 s, as Faust committed) the stored offsets that moved are
committed, and once more when the worker stops. Only stored offsets are ever committed, so a
crash at any point re-reads, never skips (at least once; the scheduler ignores a repeated
input, as it did Faust's redeliveries). The commit is kept off the path of each batch: the
broker's group coordinator lingers before it writes an offset commit (Kafka 4's
``group.coordinator.append.linger.ms``, 5 ms), and a commit after every batch made each of
them 6 ms longer (a batch at 100 records/s: 6.6 ms, of which 5.8 the commit).

A rebalance waits for the batch in hand (the listener takes the same lock) and commits what
is stored, so a partition leaves this worker with its outputs stored and its offset
committed. A commit the group refuses (it rebalanced meanwhile) is logged; the partition's
new owner reads those records again.

**Ticks** (:meth:`IntakeWorker.tick`): every ``Settings.tick_ms``, a CellTick into every cell
log this worker forwarded to, as the Faust timer did: held back while a raw partition cannot
be read, and bounded by the raw partitions it is behind on (``streams/log_clock.py``).

The worker's consumer group is the role's (``TopicNames.worker_group("intake")``, the Faust
app id it had), so a worker of this version resumes at the offsets a Faust one committed.
It cannot share the group with a Faust intake still running (the group's members must agree
on one assignment protocol): stop the old workers first, as the plane does.
"""
from __future__ import annotations

import asyncio
import logging
import re
import time
from typing import Any, Awaitable, Callable

from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener, TopicPartition
from aiokafka.errors import CommitFailedError, IllegalStateError, KafkaError

from suanli.config import Settings
from suanli.schemas.codec import Codec
from suanli.schemas.registry import RegistryClient
from suanli.streams.busy_fetch import BUSY_RECORDS, BusyFetch
from suanli.streams.intake import ticks, triage
from suanli.streams.kafka_io import EventProducer, ReadabilityProbe, ensure_topics, list_topics
from suanli.streams.kafka_security import client_options
from suanli.streams.log_clock import RawWatermark
from suanli.streams.metrics import REFRESH_SECONDS, WorkerMetrics
from suanli.streams.records import OutRecord, RawRecord
from suanli.streams.send_now import send_now
from suanli.streams.topics import TopicNames, core_topics

log = logging.getLogger(__name__)

BATCH = 1000                   # records a batch takes at most
POLL_MS = 200                  # how long an idle getmany waits before the loop checks for a stop
LINGER_MS = 2                  # the producer's linger (a batch's sends leave at once: send_now)
SESSION_TIMEOUT_MS = 10_000    # as the Faust workers' (streams/app.py SESSION_TIMEOUT_S)
COMMIT_INTERVAL_S = 1.0        # how often stored offsets are committed (Faust's broker_commit_interval)
TICK_PROBE_TIMEOUT_S = 2.0     # a raw partition that does not answer within this holds the ticks back


class _WaitForBatch(ConsumerRebalanceListener):
    """Lets a rebalance take partitions away only between batches (module docstring)."""

    def __init__(self, worker: "IntakeWorker"):
        self.worker = worker

    async def on_partitions_revoked(self, revoked: Any) -> None:
        async with self.worker.batch_lock:
            await self.worker.commit_stored()
            for tp in revoked:
                self.worker.stored.pop(tp, None)
                self.worker.committed.pop(tp, None)
        if revoked:
            log.info("intake: partitions revoked: %s", sorted(map(tuple, revoked)))

    async def on_partitions_assigned(self, assigned: Any) -> None:
        log.info("intake: partitions assigned: %s", sorted(map(tuple, assigned)))


class IntakeWorker:
    """One intake process (``instance``: which of the role's workers; all share the group).
    :meth:`run` until :meth:`stop`."""

    def __init__(self, settings: Settings, instance: int = 1):
        self.settings = settings
        self.instance = instance
        self.topics = TopicNames(settings.namespace)
        self.codec = Codec(RegistryClient(settings.registry_url))
        self.cells: set[str] = set()           # cells forwarded to: the ones this worker ticks
        self.watermark: RawWatermark = RawWatermark()
        self.stored: dict[TopicPartition, int] = {}      # partition -> the offset after its last record stored
        self.committed: dict[TopicPartition, int] = {}   # partition -> the offset committed last
        self.batch_lock = asyncio.Lock()
        self._commit_lock = asyncio.Lock()              # one commit at a time: the bookkeeping follows the broker
        self.batches = 0
        self.records = 0
        self._stopping = asyncio.Event()
        self.consumer: AIOKafkaConsumer | None = None
        self.producer: EventProducer | None = None
        self.busy_fetch: BusyFetch | None = None
        self.metrics: WorkerMetrics | None = None
        self._held: list[str] = []
        self._failure: BaseException | None = None     # a side task's (the ticker's) crash

    def stop(self) -> None:
        """Finish the batch in hand, commit it, leave the group and return from :meth:`run`."""
        self._stopping.set()

    async def source_topics(self) -> list[str]:
        """The shared raw topics, and the tenants' own raw topics that exist now (a tenant
        added later is read after intake restarts, as before)."""
        pattern = re.compile(self.topics.tenant_raw_pattern)
        own = sorted(t for t in await list_topics(self.settings.bootstrap_servers) if pattern.fullmatch(t))
        return [*self.topics.raw, *own]

    async def run(self) -> None:
        s = self.settings
        needed = {*self.topics.raw, self.topics.cell_log, self.topics.dead_letters}
        await ensure_topics(s.bootstrap_servers, [t for t in core_topics(s.partitions, s.namespace) if t.name in needed])
        sources = await self.source_topics()
        self.metrics = WorkerMetrics("intake", s.namespace, self.codec, sources)
        self.producer = EventProducer(s.bootstrap_servers, self.codec, linger_ms=LINGER_MS)
        self.consumer = AIOKafkaConsumer(
            bootstrap_servers=s.bootstrap_servers, group_id=self.topics.worker_group("intake"),
            enable_auto_commit=False, auto_offset_reset="earliest", fetch_max_wait_ms=s.fetch_max_wait_ms,
            session_timeout_ms=SESSION_TIMEOUT_MS, heartbeat_interval_ms=SESSION_TIMEOUT_MS // 3,
            **client_options(s.bootstrap_servers))
        self.busy_fetch = BusyFetch.of_consumer(self.consumer, s.fetch_busy_min_bytes, s.fetch_max_wait_ms)
        probe = ReadabilityProbe(s.bootstrap_servers, self.topics.raw, timeout_s=TICK_PROBE_TIMEOUT_S)
        async with self.producer:
            await self.consumer.start()
            side: list[asyncio.Task] = []
            try:
                self.consumer.subscribe(sources, listener=_WaitForBatch(self))
                side = [asyncio.create_task(self._every(s.tick_ms / 1000.0, "tick", lambda: self.tick(probe))),
                        asyncio.create_task(self._every(COMMIT_INTERVAL_S, "commit", self.commit_stored)),
                        asyncio.create_task(self._every(REFRESH_SECONDS, "metrics refresh", self._refresh_metrics))]
                for task in side:
                    task.add_done_callback(self._side_done)
                log.warning("intake: reading %s as group %s", ", ".join(sources), self.topics.worker_group("intake"))
                while not self._stopping.is_set():
                    fetched = await self.consumer.getmany(timeout_ms=POLL_MS, max_records=BATCH)
                    if fetched:
                        await self.handle(fetched)
                await self.commit_stored()           # a stop: what is stored, committed before leaving
            finally:
                for task in side:
                    task.cancel()
                await asyncio.gather(*side, return_exceptions=True)
                await self.consumer.stop()           # leaves the group: its partitions move at once
                await probe.stop()
        if self._failure is not None:
            raise self._failure

    def _side_done(self, task: asyncio.Task) -> None:
        """A side task that crashed stops the worker, which then raises its error: a bug in the
        ticker must not leave intake running without ticks."""
        if not task.cancelled() and task.exception() is not None:
            self._failure = task.exception()
            self._stopping.set()

    async def handle(self, fetched: dict[TopicPartition, list[Any]]) -> None:
        """One batch: triage, send and wait for the broker, then commit (module docstring)."""
        async with self.batch_lock:
            n = sum(map(len, fetched.values()))
            self.busy_fetch.after("intake", n >= BUSY_RECORDS)
            outputs: list[OutRecord] = []
            records: list[Any] = []
            for tp in sorted(fetched, key=lambda t: (t.topic, t.partition)):
                for r in fetched[tp]:
                    outputs.extend(triage(self.codec, RawRecord.of_kafka(r), self.topics))
                    records.append(r)
            self.cells.update(o.key.decode() for o in outputs if o.topic == self.topics.cell_log and o.key)
            await self.send_all(outputs)
            for tp, recs in fetched.items():   # handed on, the last of each partition and all before it
                if recs:
                    self.watermark.handed((tp.topic, tp.partition), recs[-1].offset, int(recs[-1].timestamp or 0))
            for tp, recs in fetched.items():
                if recs:
                    self.stored[tp] = recs[-1].offset + 1
            self.metrics.batch_done(records, outputs)
            self.batches += 1
            self.records += n

    async def send_all(self, outputs: list[OutRecord]) -> None:
        """Send ``outputs`` in order and wait until the broker stored every one (the sends leave
        at once, not after the linger: nothing else would join them while this waits)."""
        if not outputs:
            return
        futures = [await self.producer.send_raw(o.topic, o.value, o.key, o.headers) for o in outputs]
        send_now(self.producer)
        await asyncio.gather(*futures)

    async def commit_stored(self) -> None:
        """Commit the stored offsets that moved since they were last committed (of the
        partitions still assigned)."""
        async with self._commit_lock:
            assigned = self.consumer.assignment()
            offsets = {tp: o for tp, o in self.stored.items() if tp in assigned and self.committed.get(tp) != o}
            if not offsets:
                return
            try:
                await self.consumer.commit(offsets)
            except (CommitFailedError, IllegalStateError) as exc:
                # the group rebalanced meanwhile: the partitions' next owner reads these again
                log.warning("intake: commit refused (%s); the records are read again by the partitions' owner", exc)
                return
            self.committed.update(offsets)

    def _raw_end(self, partition: tuple[str, int]) -> int | None:
        """The end offset of a raw partition as the consumer last heard it; None when it has
        not heard yet or no longer reads the partition (then it bounds no tick)."""
        try:
            return self.consumer.highwater(TopicPartition(*partition))
        except (AssertionError, IllegalStateError):
            return None

    async def tick(self, probe: ReadabilityProbe) -> None:
        """The cell clock's heartbeat: a CellTick into every cell log seen (the one wall clock
        of the plane lives here, at the edge; the scheduler only reads ticks), at the wall
        clock or, while intake is behind on a raw partition, the time it has read to."""
        if not self.cells:
            return
        unreadable = await probe.unreadable()
        if unreadable:
            if not self._held:
                log.warning("intake: ticks held back: cannot read %s", ", ".join(unreadable))
            self._held[:] = unreadable
            return
        if self._held:
            log.warning("intake: ticks go on: every raw partition can be read again")
            self._held.clear()
        at = self.watermark.next_tick(int(time.time() * 1000), self._raw_end)
        if at is None:                     # behind on a raw partition since the last tick
            return
        records = ticks(self.codec, self.cells, at, self.settings.tick_ms, self.topics)
        await self.send_all(records)
        self.metrics.batch_done((), records)

    async def _refresh_metrics(self) -> None:
        ends = {}
        for tp in self.consumer.assignment():
            end = self.consumer.highwater(tp)
            if end is not None:
                ends[(tp.topic, tp.partition)] = end
        self.metrics.set_lag(ends, {(tp.topic, tp.partition): o for tp, o in self.committed.items()})

    async def _every(self, seconds: float, name: str, job: Callable[[], Awaitable[None]]) -> None:
        """Run ``job()`` every ``seconds`` until cancelled; a failing run is logged, and the
        next one runs on time (a tick must not stop for one broker hiccup)."""
        while True:
            await asyncio.sleep(seconds)
            try:
                await job()
            except asyncio.CancelledError:
                raise
            except (KafkaError, OSError, AssertionError) as exc:
                log.warning("intake: %s failed: %s", name, exc)

    def state(self) -> dict[str, Any]:
        """What SIGUSR1 logs: the assignment, positions as committed, and the loop's counts."""
        assigned = sorted(f"{tp.topic}:{tp.partition}" for tp in self.consumer.assignment()) if self.consumer else []
        return {"assigned": assigned, "committed": {f"{tp.topic}:{tp.partition}": o for tp, o in sorted(self.committed.items())},
                "batches": self.batches, "records": self.records, "cells": sorted(self.cells),
                "busy_min_bytes": self.busy_fetch.current if self.busy_fetch else None}


def run_intake(settings: Settings, instance: int = 1) -> None:
    """Run one intake worker until SIGTERM or SIGINT (it then finishes its batch, commits and
    leaves the group); SIGUSR1 logs its state."""
    import signal

    async def main() -> None:
        worker = IntakeWorker(settings, instance)
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, worker.stop)
        loop.add_signal_handler(signal.SIGUSR1, lambda: log.warning("intake: state %s", worker.state()))
        await worker.run()

    asyncio.run(main())
