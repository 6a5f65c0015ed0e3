"""The connector adapter kit (C13): three small adapter interfaces and one runner.

An adapter says what a piece of infrastructure can do; :class:`ConnectorRunner` does all of
its Kafka I/O, so adapters never touch a producer, a consumer or the wire format.

=======================  ==========================================  =============================
interface                adapter returns / does                      runner turns it into
=======================  ==========================================  =============================
``discover()``           NodeRegistered payloads                     raw.nodes, key node_id
``heartbeats(at, seq)``  optional: ``[(kind, payload)]`` heartbeats  raw.nodes, every 5 s
                         (default: one per discovered node)
``metrics(at, seq,``     optional: metrics of one part of the nodes  raw.nodes, each part every
``part, parts)``         (default: ``monitor()`` without heartbeats) 15 s, parts spread over it
``monitor(at, seq)``     ``[(kind, payload)]`` heartbeats + metrics  (what the two above default to)
``admit(command)``       ``None`` (accept) or the reason to refuse   DispatchAck on raw.status
``execute(cmd, rep)``    runs it, reporting through ``rep``          TaskStatusChanged on raw.status
``stop(task, node, r,``   optional: stop that copy of the task,      (a StopCommand consumed)
``grace_ms=None)``       SIGTERM -> SIGKILL after ``grace_ms``
``control(request)``     optional: answer an out-of-band request     a reply on the control topic
``prewarm(command)``     optional: load a model's weights ahead of   (a PrewarmCommand consumed)
                         demand (default: ignored)
=======================  ==========================================  =============================

**Heartbeats and metrics run on two periods.** A heartbeat says "this connector still
reaches this node"; the scheduler's core judges node health from them on the cell clock
(SUSPECT after 10 s without one, DOWN after 15 s), so they go every ``heartbeat_interval_s``
(5 s). Metrics are heavier (hundreds of series per node) and go every
``monitor_interval_s`` (15 s). Either period at ``None`` or 0 turns that loop off. An
adapter with ``metric_parts = P > 1`` has its nodes sampled in P parts, one every
``monitor_interval_s / P``, as Prometheus spreads its scrapes over the interval: every node
is still sampled once per period, but the raw nodes topic carries a steady stream instead
of one burst (1,523 simulated nodes x ~380 series = ~21 MB) that every heartbeat sent behind
it has to wait for in the intake worker.

**Stop commands.** The scheduler writes a ``StopCommand`` onto the same dispatch topic when a
copy of a task must end on a node: a stale copy on a node that was DOWN and came back, a
preempted task (the victim), the old copy of a task moved reserve-first once its new copy
runs, a task cancelled while it held the node (reason ``cancelled: <reason>``). The runner finds the in-flight dispatches of that task on that node and calls
``adapter.stop(task_id, node_id, reason, grace_ms=...)``; an adapter that does not implement
it (returns False) has the run cancelled instead, its ``execute`` cancellation contract
stopping the work (at once: the grace cannot be honoured that way). Either way the dispatch
is closed with one outcome, normally FAILED "stopped by the scheduler: ..." (a process that
exits 0 within its grace reports COMPLETED: every accepted dispatch ends with exactly one
outcome, which recovery relies on). The core ignores statuses from a node that is not the
task's, so this outcome never touches the task's current placement. A stop for nothing in
flight (the copy finished meanwhile) is counted and skipped.

*The grace.* ``StopCommand.grace_ms`` is the time the task's process is given between
SIGTERM and SIGKILL; null means the connector's own default (the local connector's
``kill_grace_s``; the simulator's ``stop_grace_ms``). The core sets it when it preempts a
task (the victim's grace). The runner passes it as the keyword ``grace_ms`` (None for null;
a negative value, which the core never writes, is logged and taken as 0: stop at once).
Adapters written against the older three-argument ``stop(task_id, node_id, reason)`` keep
working: the runner looks at the signature once and passes ``grace_ms`` only to an adapter
whose ``stop`` accepts it (by name or through ``**kwargs``); the others stop with their own
default.

**Prewarm commands.** The scheduler's prewarm planner (C11) writes a ``PrewarmCommand``
(``node_id``, ``model_arch``, ``artifact_uri``, ``size_mib``, ``reason``) onto the same dispatch
topic, keyed by node id like a StopCommand: "load these weights on this node before a task
needs them". The runner passes its payload to ``adapter.prewarm(command)`` in a task of its
own, so a copy of gigabytes never delays the dispatches behind it on the topic (a dispatch of
the same model on the same node then waits for that copy in the adapter, see the local
connector). Nothing is reported back: a failed prewarm is logged and counted
(``stats.prewarm_failures``) and the task that needs the model loads it itself. An adapter
that does not implement ``prewarm`` ignores it (a debug log). Prewarms still running when
the runner stops are cancelled. A prewarm is not deduplicated: a redelivered one finds the
model cached, which is cheap.

**Control.** An adapter that implements ``control(request) -> reply`` gets a second small
consumer on ``topics.control(name)``: JSON requests ``{"request_id", "action", ...}`` written
there (by ``suanli sim fault``) are answered on the same topic with
``{"type": "reply", "request_id", ...}``. It reads from the end when the runner starts:
requests are for the running process, nothing replays them.

Event ids are deterministic: ``{dispatch_id}:ack``, ``{dispatch_id}:running``,
``{dispatch_id}:completed`` / ``:failed``, so a consumer that drops duplicate ids sees each
fact once even if a connector re-sends it.

**Effectively once.** Dispatch topics are read at least once (offsets are committed only
after the acks of a batch are stored), and every dispatch id is remembered, so a redelivered
command is acknowledged and run once. The set of seen dispatch ids is not private state: at
start the runner rebuilds it from its own DispatchAcks on raw.status (``recover=True``). A
dispatch it had accepted but never finished (the connector died mid-run) is closed with a
FAILED event, because its outcome is unknown and the process is gone; the scheduler decides
whether to retry. Limitation: run one instance per connector name (and namespace). Two
live instances would not see each other's in-flight dispatches, and recovery would close
the other one's tasks.
"""
from __future__ import annotations

import asyncio
import json
import logging
import time
from abc import ABC, abstractmethod
from contextlib import suppress
from dataclasses import asdict, dataclass
from typing import Any, Awaitable, Callable

from aiokafka import TopicPartition
from aiokafka.errors import KafkaError

from suanli.streams.kafka_security import client_options
from suanli.config import settings as load_settings
from suanli.errors import ConnectorError
from suanli.schemas.codec import Codec
from suanli.streams.kafka_io import EventConsumer, EventProducer, Received, end_offsets, ensure_topics
from suanli.streams.topics import TopicNames, TopicSpec

log = logging.getLogger("suanli.connectors")

TERMINAL = frozenset({"COMPLETED", "FAILED"})
EMITTED_KINDS = ("NodeRegistered", "NodeHeartbeat", "NodeMetrics", "DispatchAck", "TaskStatusChanged", "DeadLetter")
COMMAND_KINDS = ("DispatchCommand", "StopCommand", "PrewarmCommand")     # what a dispatch topic carries


def wall_ms() -> int:
    """Wall-clock epoch milliseconds. Connectors are edges, not deterministic processors."""
    return time.time_ns() // 1_000_000


# ---- the three adapter interfaces --------------------------------------------------------
class Discovery(ABC):
    @abstractmethod
    def discover(self) -> list[dict[str, Any]]:
        """The nodes this connector owns, as complete NodeRegistered payloads.

        Each payload's ``connector`` must be the adapter's name (that is how the dispatcher
        routes work back here) and its ``event_id`` should be deterministic.
        """


class Monitoring(ABC):
    @abstractmethod
    def monitor(self, at: int, seq: int) -> list[tuple[str, dict[str, Any]]]:
        """Heartbeats and metrics sampled at ``at`` (epoch ms): ``[("NodeHeartbeat"|"NodeMetrics", payload)]``.

        ``seq`` increases with every call (also across restarts: it is derived from ``at``);
        use it in event ids and as the heartbeat ``seq``. Must not block: it is called on
        the event loop, for every node at once.
        """

    def heartbeats(self, at: int, seq: int) -> list[tuple[str, dict[str, Any]]] | None:
        """The heartbeats alone, every heartbeat period; ``None`` (the default): the runner
        sends one :func:`heartbeat_event` per discovered node. Override to leave nodes out
        (the simulator's silenced nodes) or to send only the nodes really reached."""
        return None

    #: how many parts ``metrics`` splits the nodes into (sampled one after the other, spread
    #: over the metrics period); 1: every node at once
    metric_parts: int = 1

    def metrics(self, at: int, seq: int, part: int = 0, parts: int = 1) -> list[tuple[str, dict[str, Any]]]:
        """The metrics alone, of the nodes in ``part`` of ``parts`` (a stable split; ``parts``
        is ``metric_parts``); by default ``monitor()`` without its heartbeats (which have
        their own, shorter period)."""
        return [(kind, payload) for kind, payload in self.monitor(at, seq) if kind != "NodeHeartbeat"]


class Dispatching(ABC):
    @abstractmethod
    def admit(self, command: dict[str, Any]) -> str | None:
        """``None`` to accept a DispatchCommand, or a human-readable reason to refuse it."""

    @abstractmethod
    async def execute(self, command: dict[str, Any], report: TaskReporter) -> None:
        """Run an admitted command; call ``report.running()`` once started, then exactly one of
        ``report.completed()`` / ``report.failed()``.

        Cancellation means the connector is stopping: stop the work (kill the process) and
        re-raise; the runner reports the task FAILED. An exception is reported as FAILED too.
        """

    async def stop(self, task_id: str, node_id: str, reason: str, grace_ms: int | None = None) -> bool:
        """Stop the copy of ``task_id`` running on ``node_id`` (a StopCommand); report its
        outcome through its reporter (FAILED, saying it was stopped) and return True. The
        default returns False: the runner then cancels that dispatch's ``execute``.

        ``grace_ms``: the time between SIGTERM and SIGKILL (``>= 0``), or None for the
        adapter's own default. An override may omit the parameter (the runner then never
        passes it, see the module docstring)."""
        return False


class Adapter(Discovery, Monitoring, Dispatching):
    """A complete connector: a ``name`` (its dispatch topic and node ``connector`` field),
    a default ``cell``, and the three interfaces."""

    name: str
    cell: str

    def now_ms(self) -> int:
        """The adapter's clock for event times (wall clock unless overridden)."""
        return wall_ms()

    async def aclose(self) -> None:
        """Release resources (thread pools ...). Called once, after every task has ended."""

    def control(self, request: dict[str, Any]) -> dict[str, Any]:
        """Answer an out-of-band request from the control topic (JSON in, JSON out). Only an
        adapter that overrides this gets a control consumer (the simulator: fault injection)."""
        raise NotImplementedError

    async def prewarm(self, command: dict[str, Any]) -> None:
        """Load the weights a PrewarmCommand names (``model_arch``, ``artifact_uri``,
        ``size_mib``) onto ``command['node_id']`` ahead of demand. The runner calls it in a
        task of its own (it may take long; it never delays dispatches); an exception is logged
        and counted, nothing more. Cancellation means the connector is stopping. The default
        ignores the command: this connector has no model cache."""
        log.debug("connector %s: no model cache; prewarm of %s on %s ignored", self.name,
                  command.get("model_arch"), command.get("node_id"))


def heartbeat_event(connector: str, node: dict[str, Any], seq: int, at: int) -> tuple[str, dict[str, Any]]:
    """The NodeHeartbeat of one node (a NodeRegistered payload); event id ``{connector}/{node}/hb/{seq}``."""
    return ("NodeHeartbeat", {"event_id": f"{connector}/{node['node_id']}/hb/{seq}", "node_id": node["node_id"],
                              "cell": node["cell"], "seq": seq, "at": at})


# Nodes per NodeHeartbeat record at most when a sample's heartbeats are sent as batches
# (about 20 KB of node ids: far below Kafka's 1 MB record limit).
HEARTBEAT_BATCH = 1000


def batch_heartbeats(events: list[tuple[str, dict[str, Any]]], limit: int = HEARTBEAT_BATCH
                     ) -> list[tuple[str, dict[str, Any]]]:
    """One heartbeat sample with its single-node NodeHeartbeats merged per (cell, seq, at)
    into records of up to ``limit`` nodes: the first node's payload (its event id, unique per
    connector, node and seq) with the others in ``nodes``. 5,000 nodes beating every 5 s are
    then a record a second instead of 1,000 through intake, the cell log and the scheduler.
    Other events, and heartbeats that are batches already, pass unchanged, first."""
    out: list[tuple[str, dict[str, Any]]] = []
    groups: dict[tuple[Any, Any, Any], list[dict[str, Any]]] = {}
    for kind, payload in events:
        if kind != "NodeHeartbeat" or payload.get("nodes"):
            out.append((kind, payload))
        else:
            groups.setdefault((payload["cell"], payload["seq"], payload["at"]), []).append(payload)
    for group in groups.values():
        for i in range(0, len(group), limit):
            chunk = group[i:i + limit]
            out.append(("NodeHeartbeat", {**chunk[0], "nodes": [p["node_id"] for p in chunk[1:]]}))
    return out


def accepts_grace(stop: Callable[..., Any]) -> bool:
    """Whether an adapter's ``stop`` takes the ``grace_ms`` keyword (by name or ``**kwargs``)."""
    import inspect

    try:
        params = inspect.signature(stop).parameters.values()
    except (TypeError, ValueError):     # a builtin or C callable: call it the old way
        return False
    return any((p.name == "grace_ms" and p.kind is not p.POSITIONAL_ONLY) or p.kind is p.VAR_KEYWORD
               for p in params)


def stopped_message(reason: str) -> str:
    """The FAILED message of a dispatch stopped by a StopCommand."""
    return f"stopped by the scheduler: {reason}"


# ---- progress reporting ------------------------------------------------------------------
def status_event(command: dict[str, Any], status: str, at: int, *, exit_code: int | None = None,
                 message: str = "", usage: dict[str, Any] | None = None) -> dict[str, Any]:
    """The TaskStatusChanged payload for a dispatch; event id ``{dispatch_id}:{status}``."""
    return {"event_id": f"{command['dispatch_id']}:{status.lower()}", "task_id": command["task_id"],
            "cell": command["cell"], "node_id": command["node_id"], "status": status, "at": at,
            "exit_code": exit_code, "message": message, "usage": usage}


def ack_event(command: dict[str, Any], connector: str, accepted: bool, message: str, at: int) -> dict[str, Any]:
    """The DispatchAck payload for a dispatch; event id ``{dispatch_id}:ack``."""
    return {"event_id": f"{command['dispatch_id']}:ack", "dispatch_id": command["dispatch_id"],
            "task_id": command["task_id"], "node_id": command["node_id"], "connector": connector,
            "cell": command["cell"], "accepted": accepted, "message": message, "at": at}


class TaskReporter:
    """What an adapter calls to report one dispatch's progress.

    Idempotent: a status is reported at most once, and nothing after a terminal status, so
    an adapter (or the runner's safety nets) can never emit contradictory outcomes. The one
    repeat is :meth:`resync`: a node reconnecting states again what it runs.
    """

    def __init__(self, command: dict[str, Any], clock: Callable[[], int],
                 emit: Callable[[dict[str, Any]], Awaitable[None]]):
        self.command = command
        self._clock = clock
        self._emit = emit
        self.reported: list[str] = []
        self.resyncs = 0

    @property
    def outcome(self) -> str | None:
        """COMPLETED or FAILED once reported, else None."""
        return next((s for s in self.reported if s in TERMINAL), None)

    async def running(self, message: str = "") -> None:
        await self._report("RUNNING", message=message)

    async def completed(self, usage: dict[str, Any] | None = None, message: str = "") -> None:
        await self._report("COMPLETED", exit_code=0, message=message, usage=usage)

    async def failed(self, exit_code: int | None, message: str, usage: dict[str, Any] | None = None) -> None:
        await self._report("FAILED", exit_code=exit_code, message=message, usage=usage)

    async def resync(self, message: str = "") -> bool:
        """Report the current (non-terminal) status again, as an agent that reconnects re-states
        what it runs; event id ``{dispatch_id}:{status}-resync{n}``, a new fact. If that copy is
        stale (its node was DOWN and the task went elsewhere), the scheduler answers with a
        StopCommand. False when there is nothing to re-state (not started, or ended)."""
        if not self.reported or self.outcome is not None:
            return False
        self.resyncs += 1
        status = self.reported[-1]
        payload = status_event(self.command, status, self._clock(), message=message)
        payload["event_id"] = f"{self.command['dispatch_id']}:{status.lower()}-resync{self.resyncs}"
        await self._emit(payload)
        return True

    async def _report(self, status: str, **fields: Any) -> None:
        if status in self.reported or self.outcome is not None:
            return
        self.reported.append(status)  # before the await: a concurrent second call is a no-op
        await self._emit(status_event(self.command, status, self._clock(), **fields))


# ---- the runner --------------------------------------------------------------------------
@dataclass
class _InFlight:
    """One accepted dispatch while its ``execute`` runs."""

    command: dict[str, Any]
    task: asyncio.Task
    reporter: TaskReporter
    stop_reason: str | None = None


@dataclass
class RunnerStats:
    """Counters, for logs and tests."""

    nodes_published: int = 0
    accepted: int = 0
    refused: int = 0
    duplicates: int = 0
    foreign: int = 0
    bad_records: int = 0
    completed: int = 0
    failed: int = 0
    monitor_ticks: int = 0
    monitor_events: int = 0
    heartbeat_ticks: int = 0
    heartbeat_events: int = 0
    stops: int = 0                 # StopCommands that stopped an in-flight dispatch
    stops_unmatched: int = 0       # StopCommands for nothing in flight here
    control_requests: int = 0
    prewarms: int = 0              # PrewarmCommands handed to the adapter
    prewarm_failures: int = 0      # ... whose adapter.prewarm raised
    recovered_seen: int = 0
    recovered_lost: int = 0


class ConnectorRunner:
    """Runs one adapter against Kafka until cancelled.

    ``await runner.run()``: ensures its topics, rebuilds the seen dispatch ids from raw.status
    (``recover``), publishes the discovered nodes, then consumes ``topics.dispatch(name)`` in
    group ``<namespace>-connector-<name>`` (``suanli-connector-<name>``) while sending heartbeats every
    ``heartbeat_interval_s`` (5 s) and metrics every ``monitor_interval_s`` (15 s; ``None`` or 0:
    never), and answering the control topic if the adapter has ``control``. ``runner.ready`` is set
    once it consumes.
    Cancelling ``run()`` stops cleanly: running tasks are stopped and reported FAILED, the
    consumer and producer are closed, no task is left behind.

    Bad records on the dispatch topic (undecodable, unknown schema, none of
    ``COMMAND_KINDS``) are logged, counted, copied to the dead-letter topic with their reason, and skipped.
    Kafka failures (broker gone) are not swallowed: ``run()`` raises and a supervisor
    restarts the connector, which then recovers from the log.
    """

    def __init__(self, adapter: Adapter, *, codec: Codec, bootstrap: str | None = None, namespace: str | None = None,
                 monitor_interval_s: float | None = 15.0, heartbeat_interval_s: float | None = 5.0,
                 partitions: int | None = None, recover: bool = True, recover_timeout_s: float = 120.0,
                 poll_timeout_ms: int = 500):
        if not getattr(adapter, "name", ""):
            raise ConnectorError("an adapter needs a non-empty name")
        self.adapter = adapter
        self.codec = codec
        self.name = adapter.name
        self.bootstrap = bootstrap or load_settings().bootstrap_servers
        self.topics = TopicNames(namespace or load_settings().namespace)
        self.topic = self.topics.dispatch(self.name)
        self.group_id = f"{self.topics.namespace}-connector-{self.name}"  # 'suanli-connector-<name>' by default
        self.monitor_interval_s = monitor_interval_s
        self.heartbeat_interval_s = heartbeat_interval_s
        self.control_topic = self.topics.control(self.name)
        self.controlled = type(adapter).control is not Adapter.control
        self._stop_takes_grace = accepts_grace(adapter.stop)
        self.partitions = partitions or load_settings().partitions
        self.recover = recover
        self.recover_timeout_s = recover_timeout_s
        self.poll_timeout_ms = poll_timeout_ms
        self.ready = asyncio.Event()
        self.stats = RunnerStats()
        self.nodes: list[dict[str, Any]] = []
        self._seen: set[str] = set()
        self._runs: set[asyncio.Task] = set()
        self._prewarms: set[asyncio.Task] = set()      # adapter.prewarm calls in progress
        self._inflight: dict[str, _InFlight] = {}      # dispatch id -> its run, while it runs
        self._closing = False
        self._producer: EventProducer | None = None

    # -- lifecycle ---------------------------------------------------------------------
    async def run(self) -> None:
        await ensure_topics(self.bootstrap, [TopicSpec(self.topics.raw_nodes, self.partitions),
                                             TopicSpec(self.topics.raw_status, self.partitions),
                                             TopicSpec(self.topic, self.partitions),
                                             TopicSpec(self.topics.dead_letters, 1),
                                             *([TopicSpec(self.control_topic, 1)] if self.controlled else [])])
        # Registry calls are blocking HTTP: make them once, off the event loop.
        await asyncio.to_thread(lambda: [self.codec.schema_id(k) for k in EMITTED_KINDS])
        try:
            async with EventProducer(self.bootstrap, self.codec, namespace=self.topics.namespace) as producer:
                self._producer = producer
                if self.recover:
                    await self._recover()
                await self._publish_nodes()
                # Auto-commit would commit offsets of records not yet acknowledged (an
                # at-most-once window); commit by hand after each batch instead.
                async with EventConsumer(self.bootstrap, self.codec, [self.topic], group_id=self.group_id,
                                         auto_commit_interval_ms=24 * 3600 * 1000) as consumer:
                    control = await self._control_consumer() if self.controlled else None
                    loops = [asyncio.create_task(self._monitor_loop(), name=f"{self.name}-monitor"),
                             asyncio.create_task(self._heartbeat_loop(), name=f"{self.name}-heartbeats")]
                    if control is not None:
                        loops.append(asyncio.create_task(self._control_loop(control), name=f"{self.name}-control"))
                    try:
                        self.ready.set()
                        await self._consume(consumer)
                    finally:
                        for loop in loops:
                            loop.cancel()
                        await self._stop_runs()
                        await asyncio.gather(*loops, return_exceptions=True)
                        if control is not None:
                            await control.stop()
        finally:
            self._producer = None
            await self.adapter.aclose()

    async def _stop_runs(self) -> None:
        self._closing = True
        runs = list(self._runs) + list(self._prewarms)
        for task in runs:
            task.cancel()
        await asyncio.gather(*runs, return_exceptions=True)

    # -- recovery: the seen set is a fold over our own acks --------------------------------
    async def _recover(self) -> None:
        """Rebuild the seen dispatch ids from raw.status; close dispatches left in flight."""
        started = time.monotonic()
        status_topic = self.topics.raw_status
        ends = {p: e for p, e in (await end_offsets(self.bootstrap, status_topic)).items() if e > 0}
        acks: dict[str, dict[str, Any]] = {}
        cells: dict[str, str] = {}
        finished: set[str] = set()
        if ends:
            async with EventConsumer(self.bootstrap, self.codec, [], group_id=None) as consumer:
                consumer.raw.assign([TopicPartition(status_topic, p) for p in ends])
                await consumer.raw.seek_to_beginning()
                async for batch in consumer.batches(timeout_ms=200, max_records=5000):
                    for r in batch:
                        self._fold_status(r, acks, cells, finished)
                    for p in list(ends):
                        if await consumer.raw.position(TopicPartition(status_topic, p)) >= ends[p]:
                            del ends[p]
                    if not ends:
                        break
                    if time.monotonic() - started > self.recover_timeout_s:
                        raise ConnectorError(f"connector {self.name}: reading {status_topic} to rebuild its seen "
                                             f"dispatch ids took over {self.recover_timeout_s:.0f}s")
        self._seen.update(acks)
        self.stats.recovered_seen = len(acks)
        lost = [a for did, a in acks.items() if a["accepted"] and did not in finished]
        for ack in lost:
            cell = cells.get(ack["dispatch_id"]) or ack.get("cell") or self.adapter.cell  # old acks carry no cell
            command = {"dispatch_id": ack["dispatch_id"], "task_id": ack["task_id"], "node_id": ack["node_id"],
                       "cell": cell}
            reporter = TaskReporter(command, self.adapter.now_ms, self._emit_status)
            await reporter.failed(None, f"connector {self.name} restarted while the task was in flight; "
                                        "its outcome is unknown")
        self.stats.recovered_lost = len(lost)
        log.info("connector %s: recovered %d dispatch id(s), closed %d lost one(s) in %.1fs",
                 self.name, len(acks), len(lost), time.monotonic() - started)

    def _fold_status(self, r: Received, acks: dict, cells: dict, finished: set) -> None:
        if r.error is not None or r.payload is None:
            return
        if r.kind == "DispatchAck":
            if r.payload["connector"] == self.name:
                acks[r.payload["dispatch_id"]] = r.payload
        elif r.kind == "TaskStatusChanged":
            dispatch_id, _, suffix = r.payload["event_id"].rpartition(":")
            if dispatch_id in acks:
                cells[dispatch_id] = r.payload["cell"]
                if suffix in ("completed", "failed"):
                    finished.add(dispatch_id)

    # -- discovery and monitoring ---------------------------------------------------------
    async def _publish_nodes(self) -> None:
        self.nodes = self.adapter.discover()
        await self._send_all(self.topics.raw_nodes, [("NodeRegistered", n) for n in self.nodes])
        self.stats.nodes_published += len(self.nodes)

    async def _send_all(self, topic: str, events: list[tuple[str, dict[str, Any]]]) -> None:
        """Queue every event, then wait once: thousands of nodes go out as a few produce batches."""
        assert self._producer is not None
        futures = [await self._producer.send(topic, kind, payload, key=str(payload["node_id"]))
                   for kind, payload in events]
        await asyncio.gather(*futures)

    async def _monitor_loop(self) -> None:
        """Metrics every ``monitor_interval_s`` (in ``metric_parts`` parts spread over it); with
        heartbeats on their own loop, without them."""
        if not self.heartbeat_interval_s:               # heartbeats off: the old combined sample
            await self._periodic(self.monitor_interval_s, self.adapter.monitor, "monitor")
            return
        parts = max(1, int(getattr(self.adapter, "metric_parts", 1) or 1)) if self.monitor_interval_s else 1
        if parts == 1:
            await self._periodic(self.monitor_interval_s, self.adapter.metrics, "monitor")
            return
        assert self.monitor_interval_s
        step_ms = max(1, int(self.monitor_interval_s * 1000 / parts))
        seqs, turn = [-1] * parts, [0]

        def sample(at: int, _tick: int) -> list[tuple[str, dict[str, Any]]]:
            part = turn[0] % parts                       # in turn: a late step delays a part, never skips it
            turn[0] += 1
            seqs[part] = max(at // (step_ms * parts), seqs[part] + 1)   # per part: +1 every period
            return self.adapter.metrics(at, seqs[part], part, parts)

        await self._periodic(step_ms / 1000, sample, "monitor")

    async def _heartbeat_loop(self) -> None:
        def beat(at: int, seq: int) -> list[tuple[str, dict[str, Any]]]:
            events = self.adapter.heartbeats(at, seq)
            if events is None:
                events = [heartbeat_event(self.name, node, seq, at) for node in self.nodes]
            return batch_heartbeats(events)

        await self._periodic(self.heartbeat_interval_s, beat, "heartbeat")

    async def _periodic(self, interval_s: float | None, sample: Callable[[int, int], list], what: str) -> None:
        if not interval_s:
            return
        interval_ms = max(1, int(interval_s * 1000))
        seq = -1
        while True:
            tick = time.monotonic()
            at = self.adapter.now_ms()
            # Derived from the time so that it keeps increasing across restarts.
            seq = max(at // interval_ms, seq + 1)
            try:
                events = sample(at, seq)
            except Exception:  # noqa: BLE001 - a broken probe must not stop the loop for good
                log.exception("connector %s: %s failed", self.name, what)
                events = []
            await self._send_all(self.topics.raw_nodes, events)
            setattr(self.stats, f"{what}_ticks", getattr(self.stats, f"{what}_ticks") + 1)
            setattr(self.stats, f"{what}_events", getattr(self.stats, f"{what}_events") + len(events))
            await asyncio.sleep(max(0.0, interval_s - (time.monotonic() - tick)))

    # -- control: out-of-band requests (fault injection) --------------------------------------
    async def _control_consumer(self) -> Any:
        """A group-less consumer of the control topic, positioned at its end (requests from now on)."""
        from aiokafka import AIOKafkaConsumer

        ends = await end_offsets(self.bootstrap, self.control_topic)
        consumer = AIOKafkaConsumer(bootstrap_servers=self.bootstrap, **client_options(self.bootstrap), group_id=None, enable_auto_commit=False)
        await consumer.start()
        try:
            tps = [TopicPartition(self.control_topic, p) for p in sorted(ends or {0: 0})]
            consumer.assign(tps)
            for tp in tps:      # requests from now on (never old ones: they were for another run)
                if tp.partition in ends:
                    consumer.seek(tp, ends[tp.partition])
                else:
                    await consumer.seek_to_end(tp)
        except BaseException:
            await consumer.stop()
            raise
        return consumer

    async def _control_loop(self, consumer: Any) -> None:
        assert self._producer is not None
        while True:
            fetched = await consumer.getmany(timeout_ms=self.poll_timeout_ms)
            for tp in sorted(fetched, key=lambda t: t.partition):
                for record in fetched[tp]:
                    reply = self._answer(record.value)
                    if reply is not None:
                        value = json.dumps(reply, sort_keys=True).encode()
                        await (await self._producer.send_raw(self.control_topic, value, key=self.name))

    def _answer(self, value: bytes | None) -> dict[str, Any] | None:
        """The reply to one control record (None for replies and for requests to other cells)."""
        try:
            request = json.loads(value or b"")
        except ValueError:
            log.warning("connector %s: control record is not JSON; skipped", self.name)
            return None
        if not isinstance(request, dict) or request.get("type") == "reply":
            return None
        self.stats.control_requests += 1
        base = {"type": "reply", "request_id": request.get("request_id"), "connector": self.name,
                "cell": self.adapter.cell, "at": self.adapter.now_ms()}
        cell = request.get("cell")
        if cell and cell != self.adapter.cell:
            return {**base, "ok": False, "error": f"connector {self.name} serves cell {self.adapter.cell!r}, "
                                                  f"not {cell!r}"}
        try:
            answer = self.adapter.control(request)
        except Exception as exc:  # noqa: BLE001 - a refused request, not a dead connector
            return {**base, "ok": False, "error": f"{type(exc).__name__}: {exc}"}
        log.warning("connector %s: control %s: %s", self.name, request.get("action"), answer)
        return {**base, "ok": True, **answer}

    # -- dispatch ----------------------------------------------------------------------------
    async def _consume(self, consumer: EventConsumer) -> None:
        async for batch in consumer.batches(timeout_ms=self.poll_timeout_ms):
            if not batch:
                continue
            handling = asyncio.ensure_future(self._handle_batch(batch))
            try:
                await asyncio.shield(handling)
            except asyncio.CancelledError:
                # Finish acknowledging what was consumed, so the offsets committed on close are true.
                with suppress(Exception):
                    await handling
                raise
            try:
                await consumer.raw.commit()
            except KafkaError as exc:  # a rebalance: the batch is redelivered and deduplicated
                log.warning("connector %s: offset commit failed (%s); redelivery will be deduplicated",
                            self.name, exc)

    async def _handle_batch(self, batch: list[Received]) -> None:
        assert self._producer is not None
        futures, admitted = [], []
        for r in batch:
            if r.error is not None or r.kind not in COMMAND_KINDS:
                futures.append(await self._dead_letter(r))
                continue
            if r.kind == "StopCommand":
                await self._stop_command(r.payload)
                continue
            if r.kind == "PrewarmCommand":
                self._start_prewarm(r.payload)
                continue
            command = r.payload
            if command["connector"] != self.name:
                self.stats.foreign += 1
                log.warning("connector %s: skipping dispatch %s addressed to connector %r",
                            self.name, command["dispatch_id"], command["connector"])
                continue
            if command["dispatch_id"] in self._seen:
                self.stats.duplicates += 1
                log.info("connector %s: duplicate dispatch %s ignored", self.name, command["dispatch_id"])
                continue
            self._seen.add(command["dispatch_id"])
            reason = self._admit(command)
            if reason is None:
                self.stats.accepted += 1
                admitted.append(command)
            else:
                self.stats.refused += 1
            ack = ack_event(command, self.name, reason is None, reason or "accepted", self.adapter.now_ms())
            futures.append(await self._producer.send(self.topics.raw_status, "DispatchAck", ack, key=command["task_id"]))
        await asyncio.gather(*futures)  # acks are stored before any task starts
        for command in admitted:
            task = asyncio.create_task(self._run(command), name=f"{self.name}-{command['dispatch_id']}")
            self._runs.add(task)
            task.add_done_callback(self._runs.discard)
        # Let the new tasks enter _run: a task cancelled before its first step never runs its
        # handler, and a shutdown right now would then leave an accepted dispatch unreported.
        await asyncio.sleep(0)

    def _admit(self, command: dict[str, Any]) -> str | None:
        try:
            return self.adapter.admit(command)
        except Exception as exc:  # noqa: BLE001 - a refusal, not a crash
            log.exception("connector %s: admit failed for %s", self.name, command["dispatch_id"])
            return f"connector error while admitting: {type(exc).__name__}: {exc}"

    async def _dead_letter(self, r: Received) -> asyncio.Future:
        self.stats.bad_records += 1
        if r.error is not None:
            reason, schema_id = str(r.error), r.error.schema_id
            kind = "UNKNOWN_SCHEMA" if r.error.reason.startswith("unknown schema id") else "UNDECODABLE"
        else:
            reason, schema_id, kind = (f"expected a {', '.join(COMMAND_KINDS[:-1])} or {COMMAND_KINDS[-1]}, "
                                        f"got {r.kind}", None, "INVALID")
        log.warning("connector %s: skipping bad record %s[%d]@%d: %s", self.name, r.topic, r.partition,
                    r.offset, reason)
        letter = {"event_id": f"deadletter:{r.topic}:{r.partition}:{r.offset}", "source_topic": r.topic,
                  "source_partition": r.partition, "source_offset": r.offset, "key": r.key, "value": r.value,
                  "error_kind": kind, "reason": reason, "schema_id": schema_id, "at": r.timestamp}
        assert self._producer is not None
        return await self._producer.send(self.topics.dead_letters, "DeadLetter", letter, key=r.key)

    def _start_prewarm(self, command: dict[str, Any]) -> None:
        """Hand a PrewarmCommand to ``adapter.prewarm`` in a task of its own (it never blocks dispatches)."""
        if self._closing:
            return
        self.stats.prewarms += 1
        log.info("connector %s: prewarm %s on %s (%s)", self.name, command["model_arch"], command["node_id"],
                 command.get("reason") or "no reason given")
        task = asyncio.create_task(self._prewarm(command), name=f"{self.name}-prewarm-{command['event_id']}")
        self._prewarms.add(task)
        task.add_done_callback(self._prewarms.discard)

    async def _prewarm(self, command: dict[str, Any]) -> None:
        try:
            await self.adapter.prewarm(command)
        except Exception:  # noqa: BLE001 - a failed prewarm costs the next task a copy, nothing more
            self.stats.prewarm_failures += 1
            log.exception("connector %s: prewarm of %s on %s failed", self.name, command["model_arch"],
                          command["node_id"])

    async def _stop_command(self, stop: dict[str, Any]) -> None:
        """Stop the in-flight copies of ``stop['task_id']`` on ``stop['node_id']``."""
        if stop["connector"] != self.name:
            self.stats.foreign += 1
            log.warning("connector %s: skipping stop of %s addressed to connector %r", self.name, stop["task_id"],
                        stop["connector"])
            return
        runs = [r for r in self._inflight.values()
                if r.command["task_id"] == stop["task_id"] and r.command["node_id"] == stop["node_id"]]
        if not runs:
            self.stats.stops_unmatched += 1
            log.info("connector %s: stop of %s on %s: nothing in flight (%s)", self.name, stop["task_id"],
                     stop["node_id"], stop["reason"])
            return
        self.stats.stops += 1
        log.warning("connector %s: stopping %s on %s: %s", self.name, stop["task_id"], stop["node_id"], stop["reason"])
        for run in runs:
            run.stop_reason = stop["reason"]
        grace_ms = stop.get("grace_ms")
        if grace_ms is not None and grace_ms < 0:
            log.warning("connector %s: stop of %s with a negative grace (%s ms): stopping at once", self.name,
                        stop["task_id"], grace_ms)
            grace_ms = 0
        try:
            if self._stop_takes_grace:
                handled = await self.adapter.stop(stop["task_id"], stop["node_id"], stop["reason"], grace_ms=grace_ms)
            else:
                handled = await self.adapter.stop(stop["task_id"], stop["node_id"], stop["reason"])
        except Exception:  # noqa: BLE001 - fall back to cancelling the run
            log.exception("connector %s: adapter stop failed for %s", self.name, stop["task_id"])
            handled = False
        if not handled:
            for run in runs:
                run.task.cancel()

    async def _run(self, command: dict[str, Any]) -> None:
        reporter = TaskReporter(command, self.adapter.now_ms, self._emit_status)
        current = asyncio.current_task()
        assert current is not None
        run = self._inflight[command["dispatch_id"]] = _InFlight(command, current, reporter)
        try:
            await self.adapter.execute(command, reporter)
        except asyncio.CancelledError:
            if run.stop_reason is not None and not self._closing:
                # cancelled by a StopCommand (not by the connector's shutdown): close it and end
                current.uncancel()
                await reporter.failed(None, stopped_message(run.stop_reason))
                return
            with suppress(Exception):
                await asyncio.wait_for(reporter.failed(None, f"connector {self.name} stopped while the task "
                                                             "was running"), 10)
            raise
        except Exception as exc:  # noqa: BLE001 - one task's failure is that task's outcome
            log.exception("connector %s: dispatch %s failed in the adapter", self.name, command["dispatch_id"])
            await reporter.failed(None, f"connector error: {type(exc).__name__}: {exc}")
        finally:
            self._inflight.pop(command["dispatch_id"], None)
        if reporter.outcome is None:
            if run.stop_reason is not None:
                await reporter.failed(None, stopped_message(run.stop_reason))
            else:
                await reporter.failed(None, "the adapter returned without reporting an outcome")

    async def _emit_status(self, payload: dict[str, Any]) -> None:
        assert self._producer is not None
        await (await self._producer.send(self.topics.raw_status, "TaskStatusChanged", payload, key=payload["task_id"]))
        if payload["status"] == "COMPLETED":
            self.stats.completed += 1
        elif payload["status"] == "FAILED":
            self.stats.failed += 1

    def describe(self) -> dict[str, Any]:
        """A summary for start messages and logs."""
        return {"connector": self.name, "cell": self.adapter.cell, "nodes": len(self.nodes),
                "dispatch_topic": self.topic, "group": self.group_id, "kafka": self.bootstrap,
                "control_topic": self.control_topic if self.controlled else None,
                **{k: v for k, v in asdict(self.stats).items() if k.startswith("recovered")}}
