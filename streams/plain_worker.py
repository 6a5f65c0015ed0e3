"""What the plain aiokafka workers share: intake (``streams/intake_worker.py``) and the
scheduler (``streams/scheduler_worker.py``).

- :func:`group_consumer`: the role's group consumer, committing by hand, with the workers'
  10 s session and the settings' fetch wait.
- :class:`PlainWorker`: stopping, side tasks that run beside the loop (a crash of one stops
  the worker, which then raises it), and the commit of *stored* offsets: the offset after
  each partition's last record whose outputs the broker has acknowledged. Only those are
  ever committed, so a crash re-reads and never skips.
- :func:`run_plain`: one worker in its own event loop, with SIGTERM/SIGINT to stop and
  SIGUSR1 to log its state.

The commit is kept off each batch's path: the broker's group coordinator lingers before it
writes an offset commit (Kafka 4's ``group.coordinator.append.linger.ms``, 5 ms), and a
commit after every batch made each one 6 ms longer (intake at 100 records/s: 6.6 ms a batch,
of which 5.8 the commit). So stored offsets are committed every ``COMMIT_INTERVAL_S``, when
partitions are revoked and when the worker stops.
"""
from __future__ import annotations

import asyncio
import logging
from typing import Any, Awaitable, Callable

from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener, TopicPartition
from aiokafka.errors import CommitFailedError, IllegalStateError, KafkaError

from suanli.config import Settings
from suanli.schemas.codec import Codec
from suanli.schemas.registry import RegistryClient
from suanli.streams.kafka_security import client_options
from suanli.streams.topics import TopicNames

log = logging.getLogger("suanli.streams")

BATCH = 1000                   # records a batch takes at most
LINGER_MS = 2                  # the producer's linger (a batch's sends leave at once: send_now)
POLL_MS = 200                  # how long an idle getmany waits before the loop checks for a stop
SESSION_TIMEOUT_MS = 10_000    # a killed worker's partitions move after this (streams/app.py SESSION_TIMEOUT_S)
COMMIT_INTERVAL_S = 1.0        # how often stored offsets are committed (Faust's broker_commit_interval)


def group_consumer(settings: Settings, group: str) -> AIOKafkaConsumer:
    """A consumer of ``group`` that commits only what it is told to, from the earliest offset
    of a partition the group never committed."""
    return AIOKafkaConsumer(
        bootstrap_servers=settings.bootstrap_servers, group_id=group,
        enable_auto_commit=False, auto_offset_reset="earliest", fetch_max_wait_ms=settings.fetch_max_wait_ms,
        session_timeout_ms=SESSION_TIMEOUT_MS, heartbeat_interval_ms=SESSION_TIMEOUT_MS // 3,
        **client_options(settings.bootstrap_servers))


class WaitForBatch(ConsumerRebalanceListener):
    """Lets a rebalance take partitions away only between batches: it waits for the batch in
    hand (``batch_lock``), commits what is stored, then tells the worker (``revoked``)."""

    def __init__(self, worker: "PlainWorker"):
        self.worker = worker

    async def on_partitions_revoked(self, revoked: Any) -> None:
        async with self.worker.batch_lock:
            await self.worker.commit_stored()
            self.worker.forget_offsets(revoked)
            self.worker.revoked(revoked)

    async def on_partitions_assigned(self, assigned: Any) -> None:
        self.worker.assigned(assigned)


class PlainWorker:
    """The loop's frame (module docstring). A subclass sets ``role`` and ``consumer``, handles
    each batch under ``batch_lock``, notes ``stored[tp]`` after its outputs are stored, and
    runs its side jobs with :meth:`start_side`; ``revoked`` and ``assigned`` are its hooks into
    a rebalance (subscribe with ``listener=WaitForBatch(worker)``)."""

    role = "worker"

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.topics = TopicNames(settings.namespace)
        self.codec = Codec(RegistryClient(settings.registry_url))
        self.consumer: AIOKafkaConsumer | None = None
        self.batch_lock = asyncio.Lock()                # held by a batch, and by a rebalance between batches
        self.stored: dict[TopicPartition, int] = {}      # partition -> the offset after its last record stored
        self.committed: dict[TopicPartition, int] = {}   # partition -> the offset committed last
        self._commit_lock = asyncio.Lock()              # one commit at a time: the bookkeeping follows the broker
        self._stopping = asyncio.Event()
        self._failure: BaseException | None = None      # a side task's crash

    def revoked(self, partitions: Any) -> None:
        """``partitions`` were taken away (after the batch in hand, their stored offsets committed)."""

    def assigned(self, partitions: Any) -> None:
        """The worker's whole new assignment (eager rebalancing)."""

    def stop(self) -> None:
        """Finish the batch in hand, commit it, leave the group and return from ``run``."""
        self._stopping.set()

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    async def consume(self, topics: list[str], jobs: list[tuple[float, str, Callable[[], Awaitable[None]]]]) -> None:
        """Start the consumer on ``topics`` and handle each fetched batch (``handle``) until
        :meth:`stop`, with the side ``jobs`` beside the loop (:meth:`start_side`); then commit
        what is stored and leave the group, so the partitions move at once."""
        await self.consumer.start()
        side: list[asyncio.Task] = []
        try:
            self.consumer.subscribe(topics, listener=WaitForBatch(self))
            side = self.start_side(jobs)
            while not self.stopping:
                fetched = await self.consumer.getmany(timeout_ms=POLL_MS, max_records=BATCH)
                if fetched:
                    await self.handle(fetched)
            await self.commit_stored()           # a stop: what is stored, committed before leaving
        finally:
            for task in side:
                task.cancel()
            await asyncio.gather(*side, return_exceptions=True)
            await self.consumer.stop()

    async def handle(self, fetched: dict[TopicPartition, list[Any]]) -> None:
        """One fetched batch (the subclass's loop body)."""
        raise NotImplementedError

    def start_side(self, jobs: list[tuple[float, str, Callable[[], Awaitable[None]]]]) -> list[asyncio.Task]:
        """Run each ``(seconds, name, job)`` every ``seconds`` beside the loop (:meth:`every`);
        the caller cancels them when it stops."""
        tasks = [asyncio.create_task(self.every(seconds, name, job)) for seconds, name, job in jobs]
        for task in tasks:
            task.add_done_callback(self._side_done)
        return tasks

    def _side_done(self, task: asyncio.Task) -> None:
        """A side task that crashed stops the worker, which then raises its error: a bug in
        the ticker must not leave intake running without ticks, nor the scheduler without
        commits."""
        if not task.cancelled() and task.exception() is not None:
            self._failure = task.exception()
            self._stopping.set()

    def raise_failure(self) -> None:
        if self._failure is not None:
            raise self._failure

    async def every(self, seconds: float, name: str, job: Callable[[], Awaitable[None]]) -> None:
        """Run ``job()`` every ``seconds`` until cancelled; a run that fails with a broker or
        network error is logged, and the next one runs on time (a tick must not stop for one
        broker hiccup)."""
        while True:
            await asyncio.sleep(seconds)
            try:
                await job()
            except asyncio.CancelledError:
                raise
            except (KafkaError, OSError, AssertionError) as exc:
                log.warning("%s: %s failed: %s", self.role, name, exc)

    async def commit_stored(self) -> None:
        """Commit the stored offsets that moved since they were last committed (of the
        partitions still assigned). A commit the group refuses (it rebalanced meanwhile) is
        logged; the partitions' next owner reads those records again."""
        async with self._commit_lock:
            assigned = self.consumer.assignment()
            offsets = {tp: o for tp, o in self.stored.items() if tp in assigned and self.committed.get(tp) != o}
            if not offsets:
                return
            try:
                await self.consumer.commit(offsets)
            except (CommitFailedError, IllegalStateError) as exc:
                log.warning("%s: commit refused (%s); the records are read again by the partitions' owner",
                            self.role, exc)
                return
            self.committed.update(offsets)

    def forget_offsets(self, partitions: Any) -> None:
        """Revoked ``partitions`` (TopicPartitions): their offsets are no longer this worker's."""
        for tp in partitions:
            self.stored.pop(tp, None)
            self.committed.pop(tp, None)

    def lag_inputs(self) -> tuple[dict[tuple[str, int], int], dict[tuple[str, int], int]]:
        """``(end offsets, committed offsets)`` of the assigned partitions, as the consumer last
        heard them: what ``WorkerMetrics.set_lag`` takes."""
        ends = {}
        for tp in self.consumer.assignment():
            end = self.consumer.highwater(tp)
            if end is not None:
                ends[(tp.topic, tp.partition)] = end
        return ends, {(tp.topic, tp.partition): o for tp, o in self.committed.items()}


def run_plain(make: Callable[[], Any], state: Callable[[Any], str]) -> None:
    """Run the worker ``make()`` builds (in the event loop) until SIGTERM or SIGINT (it then
    finishes its batch, commits and leaves the group); SIGUSR1 logs ``state(worker)``."""
    import signal

    async def main() -> None:
        worker = make()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, worker.stop)
        loop.add_signal_handler(signal.SIGUSR1, lambda: log.warning("%s", state(worker)))
        await worker.run()

    asyncio.run(main())
