"""The API's read model: a background fold of the namespace's log, kept in memory.

``projections/reader.load_lifecycle`` rebuilds the lifecycle view from scratch and waits
for a second of silence on each topic, so one read costs seconds. The API instead folds
the same topics once at start-up and then follows them:

* the cell log, the decisions and the dead letters into a
  :class:`~suanli.projections.lifecycle.LifecycleView` (the same fold as ``load_lifecycle``;
  at start-up the topics are read together, each fetched batch in :data:`ROLES` order, as
  the live loop reads them);
* the raw tasks topic for submissions intake has not forwarded yet (shown as SUBMITTED;
  one is dropped once the lifecycle knows its task) and for reservation bids;
* the decisions, per task, for the audit (:mod:`suanli.api.audit`);
* the bids, the reservation decisions and the placements of tasks labelled ``reservation``
  into a :class:`~suanli.projections.reservations.ReservationsView` (bids SUBMITTED ->
  GRANTED | LOST, tokens GRANTED -> CLAIMED | EXPIRED ...).

Reads are answered from memory, through the lifecycle's indexes where a walk of every task
would grow with the history (``bench/read_model_growth.py``). Staleness is bounded by the follow loop
(a fetch every 200 ms at most; while busy, each fetch waits at the broker for 16 KiB or
20 ms, ``streams/busy_fetch.py``); :meth:`LogFollower.sync` is a read-your-writes barrier: it
waits until everything stored before the call has been folded. Memory grows with the tasks
kept: the follower's model keeps the newest ``Settings.api_finished_tasks`` finished tasks
and forgets older ones with their decisions (:meth:`ReadModel.forget`, leaving tombstones:
``LifecycleView.forget_finished``). A decision the follower read off the wire is kept as
its record's bytes and decoded again only when the audit asks for its task
(:meth:`ReadModel.task_decisions`): a decoded decision with its provenance costs several
times its bytes in memory (``python -m suanli.bench.read_model_memory``). The audit
projection in ``projections/audit.py`` is the durable index of the same decisions.

:class:`ReadModel` is the pure part (no I/O; tests feed it records); :class:`LogFollower`
is the Kafka edge.
"""
from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass, field
from typing import Any, Callable, NamedTuple

from aiokafka import AIOKafkaConsumer, TopicPartition

from suanli.streams.kafka_security import client_options
from suanli.config import Settings
from suanli.errors import DecodeError, UnavailableError
from suanli.projections.lifecycle import LifecycleView
from suanli.projections.reservations import KINDS as RESERVATION_KINDS
from suanli.projections.reservations import BidState, ReservationsView
from suanli.processors.model import TASK_DECISION_KINDS
from suanli.schemas.codec import Codec
from suanli.schemas.models import validate_event
from suanli.streams.busy_fetch import BUSY_RECORDS, BusyFetch
from suanli.streams.topics import TopicNames

log = logging.getLogger(__name__)

# The order a fetched batch is folded in (see the module docstring); the roles name TopicNames attributes.
ROLES = ("cell_log", "raw_tasks", "decisions", "dead_letters")


@dataclass(frozen=True)
class DecisionRecord:
    """One decision as stored: its kind, its Avro payload and its coordinates."""

    kind: str
    payload: dict[str, Any]
    topic: str
    partition: int
    offset: int


class KeptDecision(NamedTuple):
    """One decision as the read model keeps it: ``body`` is the record's wire bytes (decoded
    when read) or, fed without them, the payload as given."""

    event_id: str | None
    kind: str
    body: bytes | dict[str, Any]
    topic: str
    partition: int
    offset: int


@dataclass
class Submission:
    """A TaskSubmitted seen on the raw topic (valid by intake's rules)."""

    task_id: str
    tenant: str
    cell: str
    submitted_at: int
    priority: int
    qos_tier: str
    job_id: str = ""


@dataclass
class ReadModel:
    """Everything the API reads, folded from decoded records. Idempotent on event ids."""

    lifecycle: LifecycleView = field(default_factory=LifecycleView)
    submissions: dict[str, Submission] = field(default_factory=dict)
    reservations: ReservationsView = field(default_factory=ReservationsView)
    # Task id -> its decisions in log order, each once (by event id). Kept as wire bytes when
    # ``decode`` is set and apply is given them: see the module docstring.
    decisions: dict[str, list[KeptDecision]] = field(default_factory=dict)
    # Wire bytes -> (kind, payload): the follower's codec. None: payloads are kept decoded.
    decode: Callable[[bytes], tuple[str, dict[str, Any]]] | None = None
    # Finished tasks kept whole, and tombstones of forgotten ones (LifecycleView.forget_finished);
    # None: keep every task. A pass comes once an eighth of ``keep_finished`` more have finished.
    keep_finished: int | None = None
    keep_ids: int = 200_000
    # Called with the ids of the tasks each pass forgot (the dashboard drops its marks of them).
    forget_listeners: list[Callable[[list[str]], None]] = field(default_factory=list)
    _next_pass: int = field(default=0, init=False, repr=False)
    # Called after each record is folded, with apply's arguments (the dashboard, api/ui/state.py,
    # follows node places, conditions and per-tenant counts this way). Same loop, no awaits.
    listeners: list[Callable[..., None]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._next_pass = max(1, (self.keep_finished or 0) // 8)

    def apply(self, role: str, kind: str, payload: dict[str, Any], topic: str = "", partition: int = 0,
              offset: int = 0, wire: bytes | None = None) -> None:
        """Fold one decoded record read from the topic of ``role`` (one of :data:`ROLES`);
        ``wire``: the record's bytes, which ``payload`` was decoded from. A record about a
        forgotten task is dropped (a duplicate or a stale report)."""
        if payload.get("task_id") in self.lifecycle.forgotten:
            return
        if kind in RESERVATION_KINDS and role != "dead_letters":
            self.reservations.apply(kind, payload)
        if role in ("cell_log", "dead_letters", "decisions"):
            self.lifecycle.apply(kind, payload)
            self._known(payload)
            if role == "decisions":
                self._on_decision(kind, payload, topic, partition, offset, wire)
        elif role == "raw_tasks":
            self._on_raw(kind, payload)
        for listener in self.listeners:
            listener(role, kind, payload, topic, partition, offset)
        if self.keep_finished is not None and self.lifecycle.finished_held() > self.keep_finished + self._next_pass:
            self.forget()

    def forget(self) -> list[str]:
        """Forget the oldest finished tasks beyond ``keep_finished`` (their decisions too) and
        tell the forget listeners; the next pass waits for another eighth of it (the finished
        members of unfinished jobs, kept, count on top). Returns the ids forgotten."""
        keep = self.keep_finished or 0
        gone = self.lifecycle.forget_finished(keep, self.keep_ids)
        for task_id in gone:
            self.decisions.pop(task_id, None)
        self._next_pass = self.lifecycle.finished_held() - keep + max(1, keep // 8)
        for listener in self.forget_listeners:
            listener(gone)
        return gone

    @property
    def bids(self) -> dict[str, BidState]:
        """Bid id -> what is known of it (the reservation fold's)."""
        return self.reservations.bids

    def _known(self, p: dict[str, Any]) -> None:
        """The lifecycle knows the task now: its submission answers nothing more (every read
        looks in the lifecycle first), so it goes, and ``submissions`` stays as short as
        what intake has not forwarded yet."""
        task_id = p.get("task_id")
        if task_id is not None and task_id in self.lifecycle.tasks:
            self.submissions.pop(task_id, None)

    def _on_raw(self, kind: str, p: dict[str, Any]) -> None:
        if kind == "TaskSubmitted":
            if validate_event(kind, p) is None and p["task_id"] not in self.submissions \
                    and p["task_id"] not in self.lifecycle.tasks and p["task_id"] not in self.lifecycle.forgotten:
                self.submissions[p["task_id"]] = Submission(p["task_id"], p["tenant"], p["cell"], p["submitted_at"],
                                                            p.get("priority", 0), p.get("qos_tier", ""),
                                                            p.get("job_id") or "")

    def _on_decision(self, kind: str, p: dict[str, Any], topic: str, partition: int, offset: int,
                     wire: bytes | None) -> None:
        if kind not in TASK_DECISION_KINDS:
            return
        kept = self.decisions.setdefault(p["task_id"], [])
        event_id = p.get("event_id")
        # A redelivered decision carries its event id again; a task has few decisions, so
        # its own list is the set to look in (a set of every id would grow with the log).
        if event_id is not None and any(d.event_id == event_id for d in kept):
            return
        body = wire if wire is not None and self.decode is not None else p
        kept.append(KeptDecision(event_id, kind, body, topic, partition, offset))

    def task_decisions(self, task_id: str) -> list[DecisionRecord]:
        """Every decision about ``task_id`` in log order, each once, decoded (the audit's)."""
        out = []
        for d in self.decisions.get(task_id, ()):
            payload = d.body if isinstance(d.body, dict) else self.decode(d.body)[1]
            out.append(DecisionRecord(d.kind, payload, d.topic, d.partition, d.offset))
        return out


class LogFollower:
    """Folds the namespace's topics into a :class:`ReadModel` in the background.

    Contract: after :meth:`start`, :attr:`ready` becomes true once everything stored before
    the start has been folded (each fetched batch in :data:`ROLES` order); from then on new records are folded
    as they arrive. :meth:`wait_ready` raises :class:`UnavailableError` on timeout.
    All methods run on one asyncio loop; the model is only mutated between awaits.
    """

    def __init__(self, settings: Settings, codec: Codec, *, model: ReadModel | None = None, poll_ms: int = 200):
        self.settings = settings
        self.codec = codec
        self.model = model or ReadModel(keep_finished=settings.api_finished_tasks, keep_ids=settings.api_forgotten_ids)
        if self.model.decode is None:
            self.model.decode = codec.decode
        self.poll_ms = poll_ms
        names = TopicNames(settings.namespace)
        self._role_of = {getattr(names, role): role for role in ROLES}
        self._consumer: AIOKafkaConsumer | None = None
        self._offsets: AIOKafkaConsumer | None = None       # for sync()'s end offsets only
        self._task: asyncio.Task | None = None
        self._ready = asyncio.Event()
        self._progress = asyncio.Condition()
        self._tps: list[TopicPartition] = []
        self._error: BaseException | None = None

    @property
    def ready(self) -> bool:
        """Caught up once, and still following (False again if the follow loop died)."""
        return self._ready.is_set() and self._error is None

    async def start(self) -> None:
        """Connect and start folding (returns at once; see :attr:`ready`)."""
        bootstrap = self.settings.bootstrap_servers
        self._consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, **client_options(bootstrap), group_id=None,
                                          enable_auto_commit=False, auto_offset_reset="earliest")
        await self._consumer.start()
        # sync()'s end offsets come over a connection of their own. The follower's consumer
        # long-polls at the partitions' ends, and a broker answers one connection's requests
        # in order, so a ListOffsets sent behind that fetch waited out the fetch's whole
        # wait: every sync() on a quiet plane took 0.5 s (bench/read_your_writes.py).
        self._offsets = AIOKafkaConsumer(bootstrap_servers=bootstrap, **client_options(bootstrap), group_id=None,
                                         enable_auto_commit=False)
        await self._offsets.start()
        self._task = asyncio.create_task(self._run(), name="suanli-api-follower")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
        for consumer in (self._consumer, self._offsets):
            if consumer is not None:
                await consumer.stop()

    async def wait_ready(self, timeout: float) -> None:
        if self._error is not None:
            raise UnavailableError(f"the read model stopped: {self._error}")
        try:
            await asyncio.wait_for(self._ready.wait(), timeout)
        except TimeoutError:
            raise UnavailableError("the read model is still catching up with the log; retry shortly") from None

    async def sync(self, timeout: float = 2.0) -> bool:
        """Wait until every record stored before this call is folded; False on timeout."""
        if not self.ready or self._consumer is None or self._offsets is None:
            return False
        try:
            ends = await self._offsets.end_offsets(self._tps)
        except Exception as exc:   # noqa: BLE001 - a barrier that cannot be set is just not met
            log.warning("sync: cannot read end offsets: %s", exc)
            return False

        async def caught_up() -> bool:
            for tp, end in ends.items():
                if await self._consumer.position(tp) < end:
                    return False
            return True

        try:
            async with asyncio.timeout(timeout):
                async with self._progress:
                    while not await caught_up():
                        await self._progress.wait()
            return True
        except TimeoutError:
            return False

    # ------------------------------------------------------------------ the loop
    async def _partitions(self) -> list[TopicPartition]:
        consumer = self._consumer
        await consumer._client.force_metadata_update()  # noqa: SLF001 - topics made just before
        tps = []
        for topic in self._role_of:
            parts = consumer.partitions_for_topic(topic) or set()
            tps.extend(TopicPartition(topic, p) for p in sorted(parts))
        return tps

    def _apply(self, records: dict[TopicPartition, list[Any]]) -> None:
        order = {role: i for i, role in enumerate(ROLES)}
        for tp in sorted(records, key=lambda t: (order[self._role_of[t.topic]], t.partition)):
            role = self._role_of[tp.topic]
            for record in records[tp]:
                try:
                    kind, payload = self.codec.decode(record.value, topic=record.topic,
                                                      partition=record.partition, offset=record.offset)
                except DecodeError:
                    continue    # intake dead-letters it; the dead letter is what we fold
                self.model.apply(role, kind, payload, record.topic, record.partition, record.offset, record.value)

    async def _notify(self) -> None:
        async with self._progress:
            self._progress.notify_all()

    async def _run(self) -> None:
        consumer = self._consumer
        try:
            self._tps = await self._partitions()
            if self._offsets is not None:     # its connection and metadata now, not in the first sync()
                with contextlib.suppress(Exception):
                    await self._offsets.end_offsets(self._tps)
            consumer.assign(self._tps)
            await consumer.seek_to_beginning(*self._tps)
            ends = await consumer.end_offsets(self._tps)
            # Catch up on every topic at once, as the live loop reads them: the fold takes the
            # topics in any order (statuses wait for their placement), and read one after the
            # other nothing would finish before the decisions came, so the model would hold
            # the whole history on the way however much it forgets (bench/read_model_memory.py).
            while True:
                behind = [tp for tp in self._tps if await consumer.position(tp) < ends[tp]]
                if not behind:
                    break
                self._apply(await consumer.getmany(*behind, timeout_ms=1000, max_records=5000))
            self._ready.set()
            await self._notify()
            log.info("read model ready: %d tasks, %d nodes", len(self.model.lifecycle.tasks),
                     len(self.model.lifecycle.nodes))
            # while busy, fuller fetches: fewer of them, each a larger batch (streams/busy_fetch.py)
            busy = BusyFetch.of_consumer(consumer, self.settings.fetch_busy_min_bytes) \
                if self.settings.fetch_busy_min_bytes > 1 else None
            while True:
                fetched = await consumer.getmany(timeout_ms=self.poll_ms, max_records=5000)
                if busy is not None:
                    busy.after("follow", sum(map(len, fetched.values())) >= BUSY_RECORDS)
                self._apply(fetched)
                await self._notify()
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self._error = exc
            log.exception("the API read model stopped")
            raise


def require_ready(follower: LogFollower | None) -> None:
    """Raise :class:`UnavailableError` unless ``follower`` has caught up."""
    if follower is not None and not follower.ready:
        raise UnavailableError("the read model is still catching up with the log; retry shortly")
