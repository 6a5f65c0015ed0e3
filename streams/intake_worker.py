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
committed, and once more when the worker stops (``streams/plain_worker.py``, which the
scheduler's loop shares). Only stored offsets are ever committed, so a crash at any point
re-reads, never skips (at least once; the scheduler ignores a repeated input).

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
from typing import Any

from aiokafka import TopicPartition
from aiokafka.errors import IllegalStateError

from suanli.config import Settings
from suanli.streams.busy_fetch import BUSY_RECORDS, BusyFetch
from suanli.streams.intake import ticks, triage
from suanli.streams.kafka_io import EventProducer, ReadabilityProbe, ensure_topics, list_topics
from suanli.streams.log_clock import RawWatermark
from suanli.streams.metrics import REFRESH_SECONDS, WorkerMetrics
from suanli.streams.plain_worker import COMMIT_INTERVAL_S, LINGER_MS, PlainWorker, group_consumer, run_plain
from suanli.streams.records import OutRecord, RawRecord
from suanli.streams.send_now import send_now
from suanli.streams.topics import core_topics

log = logging.getLogger(__name__)

TICK_PROBE_TIMEOUT_S = 2.0     # a raw partition that does not answer within this holds the ticks back


class IntakeWorker(PlainWorker):
    """One intake process (``instance``: which of the role's workers; all share the group).
    :meth:`run` until :meth:`stop`."""

    role = "intake"

    def __init__(self, settings: Settings, instance: int = 1):
        super().__init__(settings)
        self.instance = instance
        self.cells: set[str] = set()           # cells forwarded to: the ones this worker ticks
        self.watermark: RawWatermark = RawWatermark()
        self.batches = 0
        self.records = 0
        self.producer: EventProducer | None = None
        self.busy_fetch: BusyFetch | None = None
        self.metrics: WorkerMetrics | None = None
        self._held: list[str] = []

    def revoked(self, partitions: Any) -> None:
        if partitions:
            log.info("intake: partitions revoked: %s", sorted(map(tuple, partitions)))

    def assigned(self, partitions: Any) -> None:
        log.info("intake: partitions assigned: %s", sorted(map(tuple, partitions)))

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
        self.consumer = group_consumer(s, self.topics.worker_group("intake"))
        self.busy_fetch = BusyFetch.of_consumer(self.consumer, s.fetch_busy_min_bytes, s.fetch_max_wait_ms)
        probe = ReadabilityProbe(s.bootstrap_servers, self.topics.raw, timeout_s=TICK_PROBE_TIMEOUT_S)
        async with self.producer:
            log.warning("intake: reading %s as group %s", ", ".join(sources), self.topics.worker_group("intake"))
            try:
                await self.consume(sources, [(s.tick_ms / 1000.0, "tick", lambda: self.tick(probe)),
                                             (COMMIT_INTERVAL_S, "commit", self.commit_stored),
                                             (REFRESH_SECONDS, "metrics refresh", self._refresh_metrics)])
            finally:
                await probe.stop()
        self.raise_failure()

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
        self.metrics.set_lag(*self.lag_inputs())

    def state(self) -> dict[str, Any]:
        """What SIGUSR1 logs: the assignment, positions as committed, and the loop's counts."""
        assigned = sorted(f"{tp.topic}:{tp.partition}" for tp in self.consumer.assignment()) if self.consumer else []
        return {"assigned": assigned, "committed": {f"{tp.topic}:{tp.partition}": o for tp, o in sorted(self.committed.items())},
                "batches": self.batches, "records": self.records, "cells": sorted(self.cells),
                "busy_min_bytes": self.busy_fetch.current if self.busy_fetch else None}


def run_intake(settings: Settings, instance: int = 1) -> None:
    """Run one intake worker until SIGTERM or SIGINT (it then finishes its batch, commits and
    leaves the group); SIGUSR1 logs its state."""
    run_plain(lambda: IntakeWorker(settings, instance), lambda worker: f"intake: state {worker.state()}")
