"""The scheduler worker's logic, free of Faust: cell-log records in, Kafka records out.

For each cell-log record the runner decodes it, refuses events about unknown nodes
(dead letter), runs the pure core (``processors.core.decide``) on the cell's state,
encodes the decisions for the decisions topic, and turns each placement into a
DispatchCommand for the node's connector (the dispatcher). Everything it emits is a pure
function of the cell log, so replaying the log yields the same records byte for byte.

Durability: the states of all cells on a partition are snapshotted together with the
partition offset they are *as of* (:meth:`snapshot` / :meth:`restore`). After a crash the
worker restores the last snapshot and silently re-applies the cell log from ``as_of + 1``
up to where its consumer resumes (:meth:`catch_up`); decisions are re-derived, not
re-emitted. Records the consumer redelivers are re-decided deterministically, so any duplicate output has
the same event id as the original and consumers drop it.

No Kafka client here: the worker (``streams/scheduler_worker.py``; the Faust fallback,
``streams/app.py``) and replay (``replay/``) both drive
this runner; it produces to the :class:`~suanli.streams.topics.TopicNames` it is given.
"""
from __future__ import annotations

import hashlib
import json
import zlib
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, NamedTuple

from suanli.errors import DecodeError, ModelError, RejectedInput
from suanli.processors import model
from suanli.processors.core import decide
from suanli.processors.model import CELL_INPUT_KINDS, NODE_EVENT_KINDS
from suanli.processors.state import CellState
from suanli.schemas.codec import Codec
from suanli.streams.intake import dead_letter
from suanli.streams.records import OutRecord, RawRecord
from suanli.streams.topics import TopicNames

SNAPSHOT_FORMAT = 4       # 4: cell states with reservation tokens (processors/state.py SNAPSHOT_VERSION 4)


# The core step: processors.core.decide unless a caller times it (bench/replay_speed.py).
Core = Callable[[CellState, Any, tuple[str, int, int]], tuple[CellState, list[Any]]]


class Applied(NamedTuple):
    """A record the core took: its cell, the cell's state after it, the core's outputs."""
    cell: str
    state: CellState
    outputs: list[Any]


class Refused(NamedTuple):
    """A record the runner dead-letters, and why (a DeadLetter's error kind and reason)."""
    error_kind: str
    reason: str
    schema_id: int | None = None


@dataclass
class PartitionState:
    """The cells whose log lives on one partition, and how far they have been applied."""

    as_of: int = -1                      # last cell-log offset applied on this partition
    cells: dict[str, CellState] = field(default_factory=dict)


class CellRunner:
    """Applies cell-log records to per-cell state; see the module docstring."""

    def __init__(self, codec: Codec, topics: TopicNames):
        self.codec = codec
        self.topics = topics
        self.partitions: dict[int, PartitionState] = {}
        # Called as observer(record, cell, state, decisions) with the core's typed outputs of each
        # input whose outputs are emitted (the worker's metrics, streams/metrics.py); None: nothing.
        self.observer: Callable[[RawRecord, str, CellState, list[Any]], None] | None = None

    # ----------------------------------------------------------------- processing
    def partition(self, partition: int) -> PartitionState:
        return self.partitions.setdefault(partition, PartitionState())

    def step(self, record: RawRecord, decoded: tuple[str, dict] | DecodeError,
             core: Core = decide) -> Applied | Refused | None:
        """Apply one cell-log record to its cell's state, given ``decoded`` (the codec's
        ``decode`` of its value, or the error it raised): the part of :meth:`apply` that
        changes state, shared with replay (``replay/log_replay.py``), which encodes only
        the decisions. None: nothing to do (a redelivery, a kind the core does not take);
        :class:`Refused`: the record is dead-lettered (the state is unchanged). ``core``
        must behave as ``processors.core.decide`` (it is there to be timed)."""
        part = self.partition(record.partition)
        if record.offset <= part.as_of:
            return None                                 # already applied (redelivery)
        part.as_of = record.offset
        if isinstance(decoded, DecodeError):
            # Intake validated it, so this means a registry outage or a foreign writer.
            return Refused("UNDECODABLE", str(decoded), decoded.schema_id)
        kind, payload = decoded
        if kind not in CELL_INPUT_KINDS:
            return None
        try:
            event = model.from_avro(kind, payload)
        except ModelError as exc:
            return Refused("INVALID", str(exc))
        cell = event.cell or (record.key or b"").decode(errors="replace")
        state = part.cells.get(cell)
        if state is None:
            state = part.cells[cell] = CellState(cell)
        # (a batch of heartbeats is taken whoever it names: the core skips unknown nodes)
        if kind in NODE_EVENT_KINDS and event.node_id not in state.node_index and not getattr(event, "nodes", ()):
            return Refused("UNKNOWN_NODE",
                           f"{kind} names node {event.node_id!r}, which is not registered in cell {cell!r}")
        try:
            _, outputs = core(state, event, (record.topic, record.partition, record.offset))
        except RejectedInput as exc:
            return Refused("INVALID", str(exc))
        return Applied(cell, state, outputs)

    def decode(self, record: RawRecord) -> tuple[str, dict] | DecodeError:
        """The codec's ``(kind, payload)`` of a record, or the error (what :meth:`step` takes)."""
        try:
            return self.codec.decode(record.value, topic=record.topic, partition=record.partition,
                                     offset=record.offset)
        except DecodeError as exc:
            return exc

    def apply(self, record: RawRecord, *, emit: bool = True) -> list[OutRecord]:
        """Apply one cell-log record; return what to produce (nothing when ``emit`` is False)."""
        result = self.step(record, self.decode(record))
        if not emit or result is None:
            return []
        if isinstance(result, Refused):
            return [dead_letter(self.codec, record, self.topics, result.error_kind, result.reason, result.schema_id)]
        cell, state, outputs = result
        if self.observer is not None:
            self.observer(record, cell, state, outputs)
        out: list[OutRecord] = []
        key = cell.encode()
        for decision in outputs:
            if isinstance(decision, model.StopCommand):          # a command, not a decision
                out.append(OutRecord(self.topics.dispatch(decision.connector), decision.node_id.encode(),
                                     self.codec.encode(decision.KIND, model.to_avro(decision))))
                continue
            if isinstance(decision, model.PrewarmCommand):       # a command too: to the node's connector
                node = state.nodes.get(decision.node_id)
                connector = (node.connector if node is not None else "") or "sim"
                out.append(OutRecord(self.topics.dispatch(connector), decision.node_id.encode(),
                                     self.codec.encode(decision.KIND, model.to_avro(decision))))
                continue
            out.append(OutRecord(self.topics.decisions, key, self.codec.encode(decision.KIND, model.to_avro(decision))))
            if isinstance(decision, (model.TaskPlaced, model.TaskMigrated)):
                out.append(self._dispatch(state, decision))
        return out

    def _dispatch(self, state: CellState, placed: model.TaskPlaced | model.TaskMigrated) -> OutRecord:
        """The dispatcher: a placement (or a move: its new node) becomes a command on the
        node's connector topic, carrying what the task runs (argv, environment), its
        duration estimate and the model weights it loads first (its profile's model)."""
        task = state.tasks[placed.task_id].task
        node_id = placed.node_id if isinstance(placed, model.TaskPlaced) else placed.to_node
        req = task.request
        connector = state.nodes[node_id].connector or "sim"
        command = model.DispatchCommand(
            event_id=f"{placed.decision_id}/dispatch", dispatch_id=placed.decision_id,
            task_id=placed.task_id, tenant=placed.tenant, cell=placed.cell, node_id=node_id,
            connector=connector, gpu_devices=placed.gpu_devices,
            gpu_milli=req.gpu_milli if placed.gpu_devices else 0,
            accelerators=_assigned_accelerators(state, placed.task_id, node_id),
            cpu_milli=req.cpu, memory_mib=req.mem, command=task.command, env=task.env,
            duration_estimate_ms=task.duration_estimate_ms, issued_at=placed.provenance.decided_at,
            model=task.profile.model if task.profile is not None else None, job_id=task.job_id)
        return OutRecord(self.topics.dispatch(connector), node_id.encode(),
                         self.codec.encode(command.KIND, model.to_avro(command)))

    def catch_up(self, records: Iterable[RawRecord]) -> int:
        """Re-apply records already processed before a crash, emitting nothing."""
        n = 0
        for record in records:
            self.apply(record, emit=False)
            n += 1
        return n

    # ----------------------------------------------------------------- snapshots
    def snapshot(self, partition: int) -> bytes:
        """Compressed snapshot of one partition's cells, with its ``as_of`` offset."""
        part = self.partition(partition)
        doc = {"format": SNAPSHOT_FORMAT, "as_of": part.as_of,
               "cells": {cell: state.to_snapshot() for cell, state in sorted(part.cells.items())}}
        return zlib.compress(json.dumps(doc, sort_keys=True, separators=(",", ":")).encode(), 3)

    def restore(self, partition: int, blob: bytes) -> int:
        """Load a snapshot made by :meth:`snapshot`; returns its ``as_of`` offset.

        A snapshot of another format (written by an older version) is not an error: the
        log is the source of truth, so the partition starts empty and ``-1`` is returned,
        and the caller re-applies the whole cell log."""
        doc = json.loads(zlib.decompress(blob))
        if doc.get("format") != SNAPSHOT_FORMAT:
            self.partitions[partition] = PartitionState()
            return -1
        self.partitions[partition] = PartitionState(
            as_of=int(doc["as_of"]),
            cells={cell: CellState.from_snapshot(snap) for cell, snap in doc["cells"].items()})
        return int(doc["as_of"])

    def digest(self, partition: int) -> str:
        """Stable fingerprint of a partition's state (for tests and the crash check)."""
        return hashlib.sha256(self.snapshot(partition)).hexdigest()


def chunk(blob: bytes, size: int = 512 * 1024) -> list[bytes]:
    """Split a snapshot into pieces below Kafka's default 1 MB record limit."""
    return [blob[i:i + size] for i in range(0, len(blob), size)] or [b""]


def _assigned_accelerators(state: CellState, task_id: str, node_id: str) -> tuple[model.Accelerator, ...]:
    """The non-GPU devices a placed task holds on ``node_id`` (the models the core chose at
    placement, ``TaskState.accels``), each with the memory and attributes the node
    registered for that model, so an adapter knows what it runs on (e.g. a QPU's qubits)."""
    held = state.tasks[task_id].accels
    if not held:
        return ()
    node = state.nodes[node_id]
    registered = {(a.kind, a.model): a for a in node.accelerators}
    out = []
    for kind, mdl, count in held:
        reg = registered.get((kind, mdl))
        out.append(model.Accelerator(kind=kind, model=mdl, count=count,
                                     memory_mib=reg.memory_mib if reg is not None else 0,
                                     attributes=dict(reg.attributes) if reg is not None else {}))
    return tuple(out)
