"""Audit read model: the decision history, indexed for queries, rebuilt from the log.

Source: the decisions topic (TaskPlaced, TaskPending, TaskUnschedulable, TaskReleased,
TaskPreempted, TaskMigrated, TaskLost, and JobResized, filed under the job's task that carries
its elastic policy; each with its provenance). Nothing here reads Kafka, a clock
or a file: :class:`AuditIndex` folds ``(topic, partition, offset, kind, payload)`` records
into any :class:`~suanli.projections.audit_store.Store` and answers queries from it. The
Kafka edge (catch-up, follower, rebuild) is ``projections/audit_follower.py``.

Idempotence, as in the eventsourcing library's tracking records: each :meth:`AuditIndex.apply`
writes its view rows *and* the next source offset of every partition it consumed in one
atomic batch. A record at or below the stored position is skipped, and a decision whose
event id is already stored is skipped (redelivered duplicates from the at-least-once
scheduler carry the same event id), so re-reading any part of the topic, or rebuilding
from scratch, ends in the same state.

Key layout (bytes, parts joined by NUL; ``TS`` is the decision time as 16 hex digits, so
keys of one prefix sort by time):

    pos  NUL topic NUL partition                    -> next offset to read (decimal)
    meta NUL decisions                              -> count of stored decisions
    meta NUL layout                                 -> LAYOUT: the key families below are all kept
    row  NUL event_id                               -> the decision as JSON (see :func:`entry`),
                                                       or raw: RAW_ROW + header + its wire bytes
    schema NUL digest (hex)                         -> a writer schema raw rows name (JSON)
    ix   NUL task     NUL task_id  NUL tenant NUL TS NUL event_id -> b""
    ix   NUL node     NUL node_id  NUL tenant NUL TS NUL event_id
    ix   NUL strategy NUL name     NUL tenant NUL TS NUL event_id
    ix   NUL kind     NUL kind     NUL tenant NUL TS NUL event_id
    ix   NUL job      NUL job_id   NUL tenant NUL TS NUL event_id   (members of a job only)
    ix   NUL preemptor NUL task_id NUL tenant NUL TS NUL event_id   (TaskPreempted: its preemptor;
                                                                     tenant: the victim's)
    ix   NUL tenant   NUL tenant   NUL TS NUL event_id
    ix   NUL time     NUL TS NUL event_id

Raw rows (issue 16). The follower folds with :meth:`AuditIndex.apply_raw`: a decision is
indexed from a few fields read straight from its Avro bytes (``audit_avro.py``) and its row
is those bytes, decoded only when a query reads it, into exactly the dict a JSON row reads
back as. Rebuilding from Kafka no longer decodes, re-shapes and re-encodes every decision
(the cost the profile showed); the index keys, positions and count are byte for byte what
:meth:`AuditIndex.apply` writes, and every answer is the same (tests/projections/test_audit_raw.py).

The compiled fold. Where ``suanli_kernels`` (``kernels/``, Rust, built by ``bin/suanli``) is
installed, :meth:`AuditIndex.apply_raw` hands a whole batch to it: positions, the walk (the
same program the Python walker is generated from), keys, duplicates, and the writes in key
order. A batch with any record the kernel would leave to the codec (an older writer schema,
an unknown id, a body the walker refuses) is folded by the Python code instead, whole, so
the store is byte for byte what the Python fold leaves (tests/projections/test_audit_kernel.py).
An index opened empty (a rebuild) keeps the row keys it writes in memory, up to
:data:`FRESH_ROWS_KEPT`, and answers "stored before?" from them instead of a multi-get.

Every secondary key carries the tenant, and every row fetched for an answer is checked
against the query's tenant again, so a tenant's query never returns another tenant's rows.

Preemption and migration. A ``TaskPreempted`` is a row about the *victim* (kind
``preemption``, node = the node it was evicted from); its ``detail`` keeps the preemptor
(``preempted_by``), the reason, ``grace_ms``, ``work_lost_ms`` and every victim of the same
decision. A ``TaskMigrated`` (kind ``migration``) is indexed under both nodes, ``to_node`` as
its node and ``from_node`` too; its detail keeps cause, since, elapsed_ms, reserve_first and
the tasks preempted to make room. ``AuditQuery(preempted_by=T)`` lists the tasks T preempted
(from the ``preemptor`` keys), and :meth:`AuditIndex.why` adds them to the answer about T.

Layouts. An index written before the ``preemptor`` keys existed has no ``meta NUL layout``;
opening it writable adds those keys from its preemption rows once (:meth:`AuditIndex.__init__`).
Opened read-only (a follower holds it), it is not changed: a ``preempted_by`` query then
scans the preemption rows, reading each raw row's field undecoded, as before.
"""
from __future__ import annotations

import io
import json
import struct
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator, NamedTuple, Protocol, Sequence

from fastavro import schemaless_reader as _schemaless_reader

from suanli.errors import AuditError
from suanli.processors import model as m
from suanli.processors.explain import profile_summary
from suanli.projections.audit_avro import EXTRACT_ERRORS, Extractor, Fields, canonical_json, extractor_program
from suanli.projections.audit_store import Batch, Store

from suanli.processors.compiled import KERNELS as _kernels   # the compiled fold; None: the Python fold

KERNEL = _kernels is not None
FRESH_ROWS_KEPT = 1_000_000     # row keys an index opened empty keeps in memory (~150 MB at most)

# Event record name -> decision kind of the audit vocabulary: one name for each decision
# about a task (model.TASK_DECISION_KINDS, checked by tests/projections/test_audit.py).
KINDS: dict[str, str] = {
    m.TaskPlaced.KIND: "placement",
    m.TaskPending.KIND: "pending",
    m.TaskPreempted.KIND: "preemption",
    m.TaskMigrated.KIND: "migration",
    m.TaskUnschedulable.KIND: "rejection",
    m.TaskReleased.KIND: "release",
    m.TaskLost.KIND: "lost",
    m.JobResized.KIND: "resize",          # under the job's task that carries its elastic policy
}
KIND_ALIASES = {"unschedulable": "rejection", "placed": "placement", "released": "release",
                "preempted": "preemption", "migrated": "migration", "resized": "resize", **{k.lower(): v for k, v in KINDS.items()}}

SEP = b"\x00"
_POS, _META, _ROW, _IX, _SCHEMA = b"pos", b"meta", b"row", b"ix", b"schema"
_COUNT = _META + SEP + b"decisions"
_LAYOUT = _META + SEP + b"layout"
LAYOUT = b"2"                   # 2: with the preemptor keys
# A row is either JSON (starts with "{", from :meth:`AuditIndex.apply`) or, from
# :meth:`AuditIndex.apply_raw`, RAW_ROW + header + the decision record's own wire bytes.
RAW_ROW = b"\x01"
_RAW_HEADER = struct.Struct(">8sIqH")      # writer-schema digest, partition, offset, len(topic)
_UNREADABLE = object()


class SourceRecord(NamedTuple):
    """One consumed record of the decisions topic; ``kind`` is None if it did not decode."""

    topic: str
    partition: int
    offset: int
    kind: str | None
    payload: dict[str, Any] | None


class RawRecord(Protocol):
    """One consumed record as Kafka gave it (aiokafka's ConsumerRecord fits)."""

    topic: str
    partition: int
    offset: int
    value: bytes | None


class WriterSchema(NamedTuple):
    """A writer schema of the decisions topic, as :meth:`AuditIndex.apply_raw` uses it."""

    name: str                     # the record's name: the event kind
    schema: dict[str, Any]        # as the registry holds it (stored in the index for queries)
    digest: bytes                 # audit_avro.schema_digest(schema): the rows' name for it
    extract: Extractor | None     # None: every record of it goes through the codec


# schema id (Confluent header) -> the writer schema, or None if it cannot be had.
SchemaLookup = Callable[[int], "WriterSchema | None"]
# The codec's full decode of one record, undecodable ones as kind None (the old path).
Decode = Callable[[RawRecord], SourceRecord]


@dataclass
class ApplyResult:
    applied: int = 0          # new decisions stored
    duplicates: int = 0       # decision records whose event id was already stored
    skipped: int = 0          # records at or below the stored position (already folded)
    ignored: int = 0          # records that are not decisions (other kinds, undecodable)
    by_kernel: int = 0        # records of the batches the compiled kernel folded (kernels/)

    def add(self, other: ApplyResult) -> None:
        self.applied += other.applied
        self.duplicates += other.duplicates
        self.skipped += other.skipped
        self.ignored += other.ignored
        self.by_kernel += other.by_kernel


@dataclass(frozen=True)
class AuditQuery:
    """Filters of ``suanli audit list``; None means "any". Times are decided_at, epoch ms,
    ``since`` inclusive and ``until`` exclusive. ``limit`` keeps the newest rows."""

    tenant: str | None = None
    task: str | None = None
    node: str | None = None
    strategy: str | None = None
    kind: str | None = None
    since: int | None = None
    until: int | None = None
    limit: int | None = 1000
    preempted_by: str | None = None     # only preemptions of which this task was the preemptor
    job: str | None = None              # only decisions about members of this job (issue 22)


def normalize_kind(kind: str | None) -> str | None:
    """Accept the audit vocabulary, event names and a few aliases; AuditError otherwise."""
    if kind is None:
        return None
    k = kind.strip().lower()
    if k in KINDS.values():
        return k
    if k in KIND_ALIASES:
        return KIND_ALIASES[k]
    raise AuditError(f"unknown decision kind {kind!r}; use one of: {', '.join(sorted(set(KINDS.values())))} "
                     "(rejection = unschedulable)")


# ------------------------------------------------------------------------------ encoding
def _part(text: str) -> bytes:
    # Ids never contain NUL in practice; escape it anyway so a key can never be forged.
    return text.replace("\\", "\\\\").replace("\x00", "\\0").encode()


def _key(*parts: bytes | str) -> bytes:
    return SEP.join(p if isinstance(p, bytes) else _part(p) for p in parts)


def _ts(ms: int) -> bytes:
    return b"%016x" % max(0, int(ms))


def position_key(topic: str, partition: int) -> bytes:
    return _key(_POS, topic, str(partition))


def row_key(event_id: str) -> bytes:
    return _key(_ROW, event_id)


def _cite(topic: str, partition: int, offset: int) -> str:
    return f"{topic}[{partition}]@{offset}"


def entry(kind: str, payload: dict[str, Any], record: tuple[str, int, int]) -> dict[str, Any]:
    """The stored form of one decision: what every query returns, with both log positions.

    ``decision`` is where the decision record sits in the decisions topic; ``input`` is
    the cell-log position the scheduler decided at (from the provenance).
    """
    prov = payload.get("provenance") or {}
    inp = prov.get("input") or {}
    strategy = prov.get("strategy") or {}
    topic, partition, offset = record
    node = payload.get("node_id") or payload.get("to_node") or ""
    row: dict[str, Any] = {
        "kind": KINDS[kind],
        "event": kind,
        "event_id": payload["event_id"],
        "decision_id": payload.get("decision_id", ""),
        "task_id": payload.get("task_id", ""),
        "tenant": payload.get("tenant", ""),
        "cell": payload.get("cell", ""),
        "node_id": node,
        "decided_at": int(prov.get("decided_at") or 0),
        "strategy": {"name": strategy.get("name", ""), "version": strategy.get("version", ""),
                     "config_digest": strategy.get("config_digest", "")},
        "matched_rule": prov.get("matched_rule"),
        "decision": {"topic": topic, "partition": partition, "offset": offset,
                     "cite": _cite(topic, partition, offset)},
        "input": {"topic": inp.get("topic", ""), "partition": inp.get("partition", -1),
                  "offset": inp.get("offset", -1),
                  "cite": _cite(inp.get("topic", ""), inp.get("partition", -1), inp.get("offset", -1))},
        "path": list(prov.get("path") or []),
        "candidates": [dict(c) for c in prov.get("candidates") or []],
        "filtered": [dict(f) for f in prov.get("filtered") or []],
    }
    # kept only when present: most decisions carry neither, and rows stay as small as before
    if prov.get("notes"):
        row["notes"] = list(prov["notes"])
    if prov.get("profile") is not None:
        row["profile"] = dict(prov["profile"])
    if payload.get("job_id"):
        row["job_id"] = payload["job_id"]       # a member of a job; rows of other tasks are as before
    detail = {k: v for k, v in payload.items()
              if k not in ("event_id", "decision_id", "task_id", "tenant", "cell", "node_id", "provenance", "job_id")}
    if detail:
        row["detail"] = detail
    return row


_HAS_NODE_ID = frozenset(k for k in m.TASK_DECISION_KINDS if "node_id" in m.RECORDS[k].__dataclass_fields__)


def payload_of(row: dict[str, Any]) -> dict[str, Any]:
    """The decision event's payload again, from its stored row (lossless for the schemas'
    fields): for readers that want the Avro shape, e.g. the API's audit source."""
    out: dict[str, Any] = {"event_id": row["event_id"], "decision_id": row["decision_id"], "task_id": row["task_id"],
                           "tenant": row["tenant"], "cell": row["cell"]}
    if row["event"] in _HAS_NODE_ID:
        out["node_id"] = row["node_id"]
    out.update(row.get("detail") or {})
    out["job_id"] = row.get("job_id")           # every task decision has it (null: a task of no job)
    inp = row["input"]
    out["provenance"] = {
        "input": {"topic": inp["topic"], "partition": inp["partition"], "offset": inp["offset"]},
        "strategy": dict(row["strategy"]), "candidates": [dict(c) for c in row["candidates"]],
        "filtered": [dict(f) for f in row["filtered"]], "path": list(row["path"]),
        "decided_at": row["decided_at"], "matched_rule": row.get("matched_rule"),
        "profile": row.get("profile"), "notes": list(row.get("notes") or []),
    }
    return out


def index_keys(row: dict[str, Any]) -> list[bytes]:
    """Secondary index keys of one stored row."""
    eid, tenant, ts = row["event_id"], row["tenant"], _ts(row["decided_at"])
    keys = [
        _key(_IX, "task", row["task_id"], tenant, ts, eid),
        _key(_IX, "strategy", row["strategy"]["name"], tenant, ts, eid),
        _key(_IX, "kind", row["kind"], tenant, ts, eid),
        _key(_IX, "tenant", tenant, ts, eid),
        _key(_IX, "time", ts, eid),
    ]
    if row.get("job_id"):
        keys.append(_key(_IX, "job", row["job_id"], tenant, ts, eid))
    by_key = _preemptor_key(row)
    if by_key:
        keys.append(by_key)
    nodes = {row["node_id"]}
    if row["kind"] == "migration":
        nodes.add((row.get("detail") or {}).get("from_node", ""))
    keys += [_key(_IX, "node", n, tenant, ts, eid) for n in sorted(nodes) if n]
    return keys


def _preemptor_key(row: dict[str, Any]) -> bytes:
    """The ``preemptor`` key of a stored row (b"" unless it is a preemption that names its
    preemptor): what :func:`index_keys` writes and an older index gets on opening."""
    by = (row.get("detail") or {}).get("preempted_by") if row["kind"] == "preemption" else None
    return _key(_IX, "preemptor", by, row["tenant"], _ts(row["decided_at"]), row["event_id"]) if by else b""


def _dumps(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":"), sort_keys=True, default=str).encode()


def _canonical(obj: Any) -> Any:
    """``json.loads(_dumps(obj))`` for decoded Avro values (dicts, lists, str, int, float,
    bool, None, bytes), without the text round trip: what a JSON row reads back as (the
    same values, every dict's keys in sorted order). Scalars are not recursed into: this
    runs for every raw row a query returns."""
    t = type(obj)
    if t is dict:
        return {k: v if type(v) in _SCALARS else _canonical(v) for k, v in sorted(obj.items())}
    if t is list:
        return [v if type(v) in _SCALARS else _canonical(v) for v in obj]
    if t is bytes or t is bytearray:
        return str(obj)           # _dumps' default=str
    return obj


_SCALARS = frozenset((str, int, float, bool, type(None)))


def _esc(part: bytes) -> bytes:
    """:func:`_part` of the UTF-8 bytes of a string (backslash and NUL are single bytes in
    UTF-8, never inside a multi-byte character, so escaping bytes equals escaping text)."""
    if b"\\" in part or SEP in part:
        return part.replace(b"\\", b"\\\\").replace(SEP, b"\\0")
    return part


_KIND_PART = {name: _part(kind) for name, kind in KINDS.items()}


def raw_index_keys(event: str, fields: tuple) -> list[bytes]:
    """:func:`index_keys` from an extractor's values (see :class:`Fields`): equal to
    ``index_keys(entry(event, payload, ...))`` of the same record decoded (checked by
    tests/projections/test_audit_raw.py). Runs for every record: escaping is inlined for
    the common case (no backslash, no NUL) and each key is one concatenation."""
    eid, task, tenant, node, from_node, strategy, decided_at, job, by = fields
    if b"\\" in eid or SEP in eid:
        eid = _esc(eid)
    if b"\\" in tenant or SEP in tenant:
        tenant = _esc(tenant)
    if b"\\" in task or SEP in task:
        task = _esc(task)
    if b"\\" in strategy or SEP in strategy:
        strategy = _esc(strategy)
    ts_eid = (b"%016x\x00" % decided_at if decided_at > 0 else _ts(0) + SEP) + eid
    tail = SEP + tenant + SEP + ts_eid
    keys = [b"ix\x00task\x00" + task + tail, b"ix\x00strategy\x00" + strategy + tail,
            b"ix\x00kind\x00" + _KIND_PART[event] + tail, b"ix\x00tenant\x00" + tenant + SEP + ts_eid,
            b"ix\x00time\x00" + ts_eid]
    if job:
        keys.append(b"ix\x00job\x00" + _esc(job) + tail)
    if by and event == _PREEMPTED:
        keys.append(b"ix\x00preemptor\x00" + _esc(by) + tail)
    if node:
        keys.append(b"ix\x00node\x00" + _esc(node) + tail)
    if from_node and from_node != node and event == _MIGRATED:
        keys.append(b"ix\x00node\x00" + _esc(from_node) + tail)
    return keys


_MIGRATED = m.TaskMigrated.KIND
_PREEMPTED = m.TaskPreempted.KIND


def schema_key(digest: bytes) -> bytes:
    return _key(_SCHEMA, digest.hex())


# ------------------------------------------------------------------------------ the index
class AuditIndex:
    """The fold and the queries over one :class:`Store`."""

    def __init__(self, store: Store):
        """Opens the index in ``store``; a writable store of an older layout is brought
        up to :data:`LAYOUT` first (see the module's "Layouts")."""
        self.store = store
        self._schemas_stored: set[bytes] = set()          # digests known to be in the store
        # digest -> (name, fastavro schema, the codec's compiled program of it or None)
        self._parsed: dict[bytes, tuple[str, Any, Any]] = {}
        self._field_readers: dict[tuple[bytes, str], Any] = {}
        self._plans: dict[bytes, tuple] = {}                # digest -> the kernel's plan
        self._writers: dict[bytes, WriterSchema] = {}       # digest -> writer, for the kernel's schema rows
        self.kernel = True                                  # fold with the compiled kernel when it is built
        # Row keys this writer stored, while that is all the rows there are: an index opened
        # empty (a rebuild) answers "stored before?" from here instead of a multi-get. None
        # once that cannot be vouched for (a Python-path write, or too many to keep).
        self._fresh: set[bytes] | None = set() if not getattr(store, "read_only", False) and self.count() == 0 else None
        self._by_preemptor = self._upgrade()              # whether the preemptor keys are there

    def _upgrade(self) -> bool:
        """Write the keys an index of an older layout lacks, and the layout mark, in one
        atomic batch. False if the store is read-only and lacks them."""
        if self.store.get(_LAYOUT) == LAYOUT:
            return True
        if getattr(self.store, "read_only", False):
            return False
        batch = Batch()
        for _at, eid in self._scan_ids(_key(_IX, "kind", "preemption") + SEP, False, None, None):
            row = self._row(eid)
            key = _preemptor_key(row) if row is not None else b""
            if key:
                batch.set(key, b"")
        batch.set(_LAYOUT, LAYOUT)
        self.store.write(batch)
        return True

    # ---------------------------------------------------------------- fold
    def positions(self) -> dict[tuple[str, int], int]:
        """``{(topic, partition): next offset to read}`` as stored with the rows."""
        out = {}
        for key, value in self.store.scan(_POS + SEP):
            _, topic, partition = key.split(SEP)
            out[(topic.decode(), int(partition))] = int(value)
        return out

    def count(self) -> int:
        value = self.store.get(_COUNT)
        return int(value) if value else 0

    def apply(self, records: Iterable[SourceRecord]) -> ApplyResult:
        """Fold records in log order (per partition); one atomic write for all of them."""
        self._fresh = None
        result = ApplyResult()
        batch = Batch()
        next_offsets: dict[tuple[str, int], int] = {}
        added = 0
        for rec in records:
            tp = (rec.topic, rec.partition)
            if tp not in next_offsets:
                stored = self.store.get(position_key(*tp))
                next_offsets[tp] = int(stored) if stored else 0
            if rec.offset < next_offsets[tp]:
                result.skipped += 1
                continue
            next_offsets[tp] = rec.offset + 1
            if rec.kind not in KINDS or not rec.payload or not rec.payload.get("event_id"):
                result.ignored += 1
                continue
            rkey = row_key(rec.payload["event_id"])
            in_batch = batch.get(rkey)
            if in_batch not in (False, None) or (in_batch is False and self.store.get(rkey) is not None):
                result.duplicates += 1
                continue
            row = entry(rec.kind, rec.payload, (rec.topic, rec.partition, rec.offset))
            batch.set(rkey, _dumps(row))
            for k in index_keys(row):
                batch.set(k, b"")
            added += 1
        for tp, offset in next_offsets.items():
            batch.set(position_key(*tp), str(offset).encode())
        if added:
            batch.set(_COUNT, str(self.count() + added).encode())
        if len(batch):
            self.store.write(batch)
        result.applied = added
        return result

    def apply_raw(self, records: Sequence[RawRecord], schemas: SchemaLookup, decode: Decode) -> ApplyResult:
        """:meth:`apply` for records as Kafka gave them: the same positions, skips,
        duplicates and counts, one atomic write; the same query answers afterwards.

        A decision whose writer schema has an extractor (``WriterSchema.extract``) is not
        decoded: its index keys come from the extracted fields and its row is the record's
        own bytes behind a small header (decoded when a query reads it). Every other record
        (no extractor, the extractor refuses it, an unknown schema id) goes through
        ``decode`` and is stored as :meth:`apply` stores it.
        """
        if self.kernel and KERNEL:
            folded = self._apply_kernel(records, schemas)
            if folded is not None:
                return folded
        self._fresh = None
        result = ApplyResult()
        store = self.store
        next_offsets: dict[tuple[str, int], int] = {}
        # (row key, what to store): (writer, fields, record), or a decoded SourceRecord.
        pending: list[tuple[bytes, Any]] = []
        writers: dict[bytes, WriterSchema | None] = {}     # Confluent header -> writer, this batch
        tp: tuple[str, int] | None = None
        expected = 0
        for rec in records:
            if tp is None or rec.partition != tp[1] or rec.topic != tp[0]:
                if tp is not None:
                    next_offsets[tp] = expected
                tp = (rec.topic, rec.partition)
                expected = next_offsets.get(tp, -1)
                if expected < 0:
                    stored = store.get(position_key(*tp))
                    expected = int(stored) if stored else 0
            if rec.offset < expected:
                result.skipped += 1
                continue
            expected = rec.offset + 1
            value = rec.value
            writer = None
            if value is not None and len(value) >= 5 and value[0] == 0:
                header = value[:5]
                if header in writers:
                    writer = writers[header]
                else:
                    writer = writers[header] = schemas(int.from_bytes(value[1:5], "big"))
            if writer is not None and writer.name not in KINDS:
                result.ignored += 1      # not a decision: apply() ignores it decoded or not
                continue
            fields = None
            if writer is not None and writer.extract is not None:
                try:
                    fields = writer.extract(value)
                except EXTRACT_ERRORS:
                    fields = None    # unusual or malformed: the codec decides
            if fields is None:
                src = decode(rec)
                if src.kind not in KINDS or not src.payload or not src.payload.get("event_id"):
                    result.ignored += 1
                    continue
                pending.append((row_key(src.payload["event_id"]), src))
            elif not fields[0]:
                result.ignored += 1
            else:
                eid = fields[0]
                pending.append((_ROW + SEP + (_esc(eid) if b"\\" in eid or SEP in eid else eid),
                                (writer, fields, rec)))
        if tp is not None:
            next_offsets[tp] = expected
        # Duplicates: stored before (one multi-get for the batch) or earlier in this batch.
        unique = list(dict.fromkeys(k for k, _ in pending))
        stored_rows = {k for k, v in zip(unique, store.get_many(unique)) if v is not None}
        batch = Batch()
        ops = batch.ops
        seen: set[bytes] = set()
        topics: dict[str, bytes] = {}
        empty: list[bytes] = []
        added = 0
        for rkey, item in pending:
            if rkey in seen or rkey in stored_rows:
                result.duplicates += 1
                continue
            seen.add(rkey)
            if isinstance(item, SourceRecord):
                row = entry(item.kind, item.payload, (item.topic, item.partition, item.offset))
                ops[rkey] = _dumps(row)
                keys = index_keys(row)
            else:
                writer, fields, rec = item
                self._schema_row(ops, writer)
                topic = topics.get(rec.topic)
                if topic is None:
                    topic = topics[rec.topic] = rec.topic.encode()
                ops[rkey] = RAW_ROW + _RAW_HEADER.pack(writer.digest, rec.partition, rec.offset, len(topic)) \
                    + topic + rec.value
                keys = raw_index_keys(writer.name, fields)
            empty.extend(keys)
            added += 1
        ops.update(dict.fromkeys(empty, b""))   # index entries: the key is the content
        self._commit(batch, next_offsets, added)
        result.applied = added
        return result

    def _schema_row(self, ops: dict[bytes, bytes | None], writer: WriterSchema) -> None:
        """The row of ``writer``'s schema, once per index (raw rows name it by digest)."""
        if writer.digest not in self._schemas_stored:
            skey = schema_key(writer.digest)
            if self.store.get(skey) is None:
                ops[skey] = canonical_json(writer.schema)
            self._schemas_stored.add(writer.digest)

    def _commit(self, batch: Batch, next_offsets: dict[tuple[str, int], int], added: int) -> None:
        """Write ``batch`` with the positions and the count, atomically."""
        ops = batch.ops
        for tp, offset in next_offsets.items():
            ops[position_key(*tp)] = str(offset).encode()
        if added:
            ops[_COUNT] = str(self.count() + added).encode()
        if len(batch):
            try:
                self.store.write(batch)
            except BaseException:
                # The schemas may not have been written after all: look again next time;
                # and the rows this writer kept in memory may not be stored.
                self._schemas_stored.clear()
                self._fresh = None
                raise

    def _plan(self, writer: WriterSchema) -> tuple:
        """The kernel's plan for one writer schema (see ``kernels/src/lib.rs`` ``fold``)."""
        plan = self._plans.get(writer.digest)
        if plan is None:
            if writer.name not in KINDS:
                plan = (None, False, b"", writer.digest, False, False)
            else:
                program = extractor_program(writer.schema) if writer.extract is not None else None
                plan = (_kernels.Walker(program) if program is not None else None, True, _KIND_PART[writer.name],
                        writer.digest, writer.name == _MIGRATED, writer.name == _PREEMPTED)
            self._plans[writer.digest] = plan
            self._writers[writer.digest] = writer
        return plan

    def _plans_for(self, headers: Iterable[bytes], schemas: SchemaLookup) -> dict[bytes, tuple | None]:
        """The kernel's plans for the Confluent headers of a batch (None: unknown writer)."""
        plans: dict[bytes, tuple | None] = {}
        for header in headers:
            writer = schemas(int.from_bytes(header[1:5], "big"))
            plans[header] = None if writer is None else self._plan(writer)
        return plans

    def _apply_kernel(self, records: Sequence[RawRecord], schemas: SchemaLookup) -> ApplyResult | None:
        """:meth:`apply_raw` by the compiled kernel: the same writes, or None (nothing
        written) if the batch has a record the kernel leaves to the codec."""
        headers = {v[:5] for r in records if (v := r.value) is not None and len(v) >= 5 and v[0] == 0}
        folded = _kernels.fold(records, self.positions(), self._plans_for(headers, schemas))
        return None if folded is None else self._write_folded(folded)

    def scan_chunks(self, chunks: Sequence[Any]) -> tuple[set[bytes], list[int]] | None:
        """For fetched record sets (``chunks``: see ``projections/audit_fetch.py`` ``Chunk``):
        the Confluent headers of their records and each chunk's next fetch offset, parsed
        by the compiled kernel. None without the kernel, or if a record set is one it does
        not parse (compressed, an older format, a bad CRC): the caller parses it with aiokafka."""
        if not (self.kernel and KERNEL):
            return None
        return _kernels.chunk_headers(chunks)

    def apply_chunks(self, chunks: Sequence[Any], headers: set[bytes], schemas: SchemaLookup) -> ApplyResult | None:
        """:meth:`apply_raw` of the data records of ``chunks`` (which :meth:`scan_chunks`
        parsed: ``headers`` is what it found), by the compiled kernel. None (nothing written)
        if a record is one the kernel leaves to the codec: the caller then parses the chunks
        with aiokafka and calls :meth:`apply_raw`, which folds such batches in Python."""
        folded = _kernels.fold_chunks(chunks, self.positions(), self._plans_for(headers, schemas))
        return None if folded is None else self._write_folded(folded)

    def _write_folded(self, folded: Any) -> ApplyResult:
        """Write what the kernel folded, in one atomic batch: its rows and keys (already in
        key order), the writer schemas its rows name, positions and count."""
        store = self.store
        row_keys = folded.row_keys()
        fresh = self._fresh
        if fresh is not None:
            stored = [k in fresh for k in row_keys]
        else:
            stored = [v is not None for v in store.get_many(row_keys)]
        applied, duplicates, keys, values, digests = folded.writes(stored)
        batch = Batch()
        batch.puts = (keys, values)
        for digest in digests:
            self._schema_row(batch.ops, self._writers[digest])
        self._commit(batch, folded.next_offsets, applied)
        if fresh is not None:
            fresh.update(row_keys)    # each is stored now: by this batch, or before it
            if len(fresh) > FRESH_ROWS_KEPT:
                self._fresh = None
        return ApplyResult(applied=applied, duplicates=duplicates, skipped=folded.skipped, ignored=folded.ignored,
                           by_kernel=folded.records)

    # ---------------------------------------------------------------- queries
    def _row(self, event_id: bytes) -> dict[str, Any] | None:
        raw = self.store.get(_ROW + SEP + event_id)
        if raw is None:
            return None
        if raw[:1] == RAW_ROW:
            return self._raw_row(raw)
        return json.loads(raw)

    def _raw_row(self, raw: bytes) -> dict[str, Any]:
        """A row stored by :meth:`apply_raw`, as :meth:`apply` would have stored it."""
        digest, partition, offset, size = _RAW_HEADER.unpack_from(raw, 1)
        start = 1 + _RAW_HEADER.size
        topic = raw[start:start + size].decode()
        name, parsed, program = self._writer(digest)
        # Offset 5: past the Confluent header. The body was checked when it was folded. The
        # codec's compiled program reads it when it can (the same value as fastavro's).
        got = program.decode(raw, start + size + 5) if program is not None and type(raw) is bytes else None
        payload = got[0] if got is not None else \
            _schemaless_reader(io.BytesIO(memoryview(raw)[start + size + 5:]), parsed, None)
        return _canonical(entry(name, payload, (topic, partition, offset)))

    def _raw_field(self, raw: bytes, name: str) -> bytes | None | object:
        """A top-level string field of a raw row, undecoded (None: the schema has no such
        field), or ``_UNREADABLE`` if the walker cannot tell (then decode the row)."""
        digest, _partition, _offset, size = _RAW_HEADER.unpack_from(raw, 1)
        key = (digest, name)
        if key not in self._field_readers:
            from suanli.projections.audit_avro import compile_field_reader

            text = self.store.get(schema_key(digest))
            self._field_readers[key] = compile_field_reader(json.loads(text), name) if text is not None else None
        read = self._field_readers[key]
        if read is None:
            return _UNREADABLE
        try:
            return read(raw[1 + _RAW_HEADER.size + size:])
        except EXTRACT_ERRORS:
            return _UNREADABLE

    def _writer(self, digest: bytes) -> tuple[str, Any, Any]:
        cached = self._parsed.get(digest)
        if cached is None:
            from suanli.schemas.codec import compile_program, compiled_default, parse_plain

            text = self.store.get(schema_key(digest))
            if text is None:
                raise AuditError(f"the audit index lacks writer schema {digest.hex()}: run `suanli audit rebuild`")
            schema = json.loads(text)
            parsed = parse_plain(schema)
            cached = self._parsed[digest] = (schema["name"], parsed,
                                             compile_program(parsed) if compiled_default() else None)
        return cached

    def _scan_ids(self, prefix: bytes, tenant_in_key: bool, since: int | None,
                  until: int | None) -> Iterator[tuple[int, bytes]]:
        """``(decided_at, event_id)`` of the index entries under ``prefix``.

        When the prefix ends just before the timestamp part, the scan seeks straight to
        ``since`` and stops at ``until``; otherwise each key's timestamp is filtered.
        """
        start = prefix + _ts(since) if (tenant_in_key and since is not None) else None
        for key, _ in self.store.scan(prefix, start):
            parts = key[len(prefix):].split(SEP)
            ts, eid = int(parts[-2], 16), parts[-1]
            if until is not None and ts >= until:
                if tenant_in_key:
                    return
                continue
            if since is not None and ts < since:
                continue
            yield ts, eid

    def query(self, q: AuditQuery) -> list[dict[str, Any]]:
        """Rows matching every filter of ``q``, oldest first (the newest ``q.limit`` of them)."""
        kind = normalize_kind(q.kind)
        if q.preempted_by is not None:
            if kind not in (None, "preemption"):
                raise AuditError(f"--preempted-by lists preemptions; it cannot be combined with kind {kind!r}")
            kind = "preemption"
        # The most selective index that the query names; its tenant part narrows it further.
        if q.task is not None:
            dim, value = "task", q.task
        elif q.preempted_by is not None and self._by_preemptor:
            dim, value = "preemptor", q.preempted_by
        elif q.job is not None:
            dim, value = "job", q.job
        elif q.node is not None:
            dim, value = "node", q.node
        elif q.strategy is not None:
            dim, value = "strategy", q.strategy
        elif kind is not None:
            dim, value = "kind", kind
        else:
            dim, value = None, None
        if dim is not None:
            prefix = _key(_IX, dim, value) + SEP
            if q.tenant is not None:
                prefix += _part(q.tenant) + SEP
        elif q.tenant is not None:
            prefix = _key(_IX, "tenant", q.tenant) + SEP
        else:
            prefix = _key(_IX, "time") + SEP
        ts_follows = dim is None or q.tenant is not None
        hits = sorted(set(self._scan_ids(prefix, ts_follows, q.since, q.until)))
        rows: list[dict[str, Any]] = []
        # Newest first while filtering, so a limit stops the scan early; returned oldest first.
        by = q.preempted_by.encode() if q.preempted_by is not None else None
        for _ts_value, eid in reversed(hits):
            raw = self.store.get(_ROW + SEP + eid)
            if raw is None:
                continue
            if raw[:1] == RAW_ROW:
                # Scanning without the preemptor keys: pass over other preemptors' rows undecoded.
                if by is not None and dim != "preemptor" \
                        and self._raw_field(raw, "preempted_by") not in (by, _UNREADABLE):
                    continue
                row = self._raw_row(raw)
            else:
                row = json.loads(raw)
            if not _matches(row, q, kind):
                continue
            rows.append(row)
            if q.limit is not None and len(rows) >= q.limit:
                break
        rows.sort(key=_order)
        return rows

    def why(self, task_id: str, tenant: str | None = None) -> dict[str, Any]:
        """Every decision about ``task_id`` (of ``tenant``, if given), in decision order.

        Raises :class:`AuditError` if there is none: a task of another tenant looks exactly
        like an unknown task.
        """
        rows = self.query(AuditQuery(tenant=tenant, task=task_id, limit=None))
        if not rows:
            who = f" for tenant {tenant!r}" if tenant is not None else ""
            raise AuditError(f"no decisions about task {task_id!r}{who} in the audit index")
        tenants = sorted({r["tenant"] for r in rows})
        last = rows[-1]
        caused = self.query(AuditQuery(tenant=tenant, preempted_by=task_id, limit=None))
        return {
            "task_id": task_id,
            "tenant": tenants[0] if len(tenants) == 1 else tenants,
            "cell": last["cell"],
            "outcome": last["kind"],
            "node_id": last["node_id"],
            "decisions": rows,
            "cites": [{"decision": r["decision"]["cite"], "input": r["input"]["cite"]} for r in rows],
            "preempted": [{"task_id": r["task_id"], "tenant": r["tenant"], "node_id": r["node_id"],
                           "decided_at": r["decided_at"], "decision_id": r["decision_id"],
                           "reason": (r.get("detail") or {}).get("reason", ""), "cite": r["decision"]["cite"]}
                          for r in caused],
        }


def _order(row: dict[str, Any]) -> tuple:
    d = row["decision"]
    return (row["decided_at"], row["input"]["partition"], row["input"]["offset"], _seq(row["decision_id"]),
            d["topic"], d["partition"], d["offset"])


def _seq(decision_id: str) -> int:
    tail = decision_id.rsplit("/", 1)[-1]
    return int(tail) if tail.isdigit() else 0


def _matches(row: dict[str, Any], q: AuditQuery, kind: str | None) -> bool:
    if q.tenant is not None and row["tenant"] != q.tenant:
        return False
    if q.task is not None and row["task_id"] != q.task:
        return False
    if q.job is not None and row.get("job_id") != q.job:
        return False
    if q.node is not None and q.node != row["node_id"] and q.node != (row.get("detail") or {}).get("from_node"):
        return False
    if q.strategy is not None and row["strategy"]["name"] != q.strategy:
        return False
    if kind is not None and row["kind"] != kind:
        return False
    if q.preempted_by is not None and (row.get("detail") or {}).get("preempted_by") != q.preempted_by:
        return False
    if q.since is not None and row["decided_at"] < q.since:
        return False
    if q.until is not None and row["decided_at"] >= q.until:
        return False
    return True


# ------------------------------------------------------------------------------ rendering
def utc_text(ms: int) -> str:
    """Epoch milliseconds as ``YYYY-MM-DD HH:MM:SS.mmmZ`` (UTC), as every audit answer shows times."""
    import datetime as dt

    return dt.datetime.fromtimestamp(ms / 1000, dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + "Z"


_when = utc_text


def render_why(answer: dict[str, Any], *, candidates: int = 5) -> str:
    """``suanli audit why`` as text: one block per decision, each citing its log positions."""
    lines = [f"task {answer['task_id']} (tenant {answer['tenant']}, cell {answer['cell']}): "
             f"{len(answer['decisions'])} decision(s), last: {answer['outcome']}"
             + (f" on {answer['node_id']}" if answer["node_id"] else "")]
    for i, r in enumerate(answer["decisions"], 1):
        s = r["strategy"]
        lines.append("")
        lines.append(f"{i}. {r['kind']} ({r['event']}) at {_when(r['decided_at'])}"
                     + (f" -> {r['node_id']}" if r["node_id"] else ""))
        lines.append(f"   decision {r['decision_id']}  record {r['decision']['cite']}  "
                     f"decided at cell-log {r['input']['cite']}")
        lines.append(f"   strategy {s['name']} {s['version']} (config {s['config_digest'][:12] or '-'})"
                     + (f", rule {r['matched_rule']}" if r.get("matched_rule") else ""))
        if r["path"]:
            lines.append(f"   path: {' -> '.join(r['path'])}")
        for note in r.get("notes") or []:
            lines.append(f"   note: {note}")
        if r.get("profile"):
            lines.append(f"   profile: {profile_summary(r['profile'])}")
        detail = r.get("detail") or {}
        if detail.get("reasons"):
            lines.append("   reasons: " + "; ".join(f"{x['reason']} ({x['nodes']} nodes)" for x in detail["reasons"]))
        if "queue_position" in detail:
            lines.append(f"   queue position: {detail['queue_position']}")
        if r["kind"] == "preemption":
            lines += _preemption_lines(r, detail)
        elif r["kind"] == "migration":
            lines += _migration_lines(detail)
        else:
            for key in ("cause", "reason", "preempted_by", "from_node"):
                if detail.get(key):
                    lines.append(f"   {key.replace('_', ' ')}: {detail[key]}")
        if r["candidates"]:
            shown = r["candidates"][:candidates]
            more = len(r["candidates"]) - len(shown)
            lines.append("   candidates: " + ", ".join(f"#{c['rank']} {c['node_id']} {c['score']:.4g}" for c in shown)
                         + (f" (+{more} more)" if more > 0 else ""))
        for f in r["filtered"]:
            sample = f", e.g. {', '.join(f['sample'][:3])}" if f.get("sample") else ""
            lines.append(f"   rejected {f['nodes']} node(s): {f['reason']}{sample}")
    if answer.get("preempted"):
        lines.append("")
        lines.append(f"it preempted {len(answer['preempted'])} task(s):")
        for v in answer["preempted"]:
            lines.append(f"   {v['task_id']} (tenant {v['tenant']}) on {v['node_id']} at {_when(v['decided_at'])}: "
                         f"{v['reason'] or '-'}  record {v['cite']}")
    return "\n".join(lines)


def _seconds(ms: int) -> str:
    return f"{ms / 1000:g} s"


def _preemption_lines(row: dict[str, Any], detail: dict[str, Any]) -> list[str]:
    """Who was preempted (this task), by whom, why, and when it is queued again."""
    by = detail.get("preempted_by") or "(no task named)"
    grace = int(detail.get("grace_ms") or 0)
    out = [f"   preempted by {by} on {row['node_id'] or '-'}: {detail.get('reason') or '-'}",
           f"   grace {_seconds(grace)}: queued again at {_when(row['decided_at'] + grace)}; "
           f"work lost {_seconds(int(detail.get('work_lost_ms') or 0))}"]
    others = [v for v in detail.get("victims") or [] if v != row["task_id"]]
    if others:
        out.append(f"   preempted with it by the same decision: {', '.join(others)}")
    return out


def _migration_lines(detail: dict[str, Any]) -> list[str]:
    """From -> to, the cause and the times of a move."""
    cause = detail.get("cause") or "-"
    since = int(detail.get("since") or 0)
    when = f" since {_when(since)}" if since else ""
    how = "reserve-first: the old copy runs until the new one does" if detail.get("reserve_first") else \
        "the old place is given up at once"
    out = [f"   moved {detail.get('from_node', '?')} -> {detail.get('to_node', '?')}: {cause}{when}, "
           f"decided {_seconds(int(detail.get('elapsed_ms') or 0))} later ({how})"]
    if detail.get("reason"):
        out.append(f"   reason: {detail['reason']}")
    if detail.get("preempted"):
        out.append(f"   preempted to make room: {', '.join(detail['preempted'])}")
    return out


def _note(row: dict[str, Any]) -> str:
    """The one-line gist of a preemption or a migration, for ``audit list``."""
    detail = row.get("detail") or {}
    if row["kind"] == "preemption":
        return f"by {detail.get('preempted_by') or '-'}: {detail.get('reason') or '-'}"
    if row["kind"] == "migration":
        return (f"{detail.get('from_node', '?')} -> {detail.get('to_node', '?')} {detail.get('cause') or '-'} "
                f"+{_seconds(int(detail.get('elapsed_ms') or 0))}")
    return ""


def render_rows(rows: list[dict[str, Any]]) -> str:
    """``suanli audit list`` as a table; each row cites its decision record and input."""
    if not rows:
        return "no decisions match"
    header = f"{'decided at':<24} {'kind':<10} {'task':<28} {'tenant':<12} {'node':<20} {'strategy':<14} citation"
    out = [header]
    for r in rows:
        note = _note(r)
        out.append(f"{_when(r['decided_at']):<24} {r['kind']:<10} {r['task_id'][:28]:<28} {r['tenant'][:12]:<12} "
                   f"{r['node_id'][:20]:<20} {r['strategy']['name'][:14]:<14} "
                   f"{r['decision']['cite']} <- {r['input']['cite']}" + (f"  {note}" if note else ""))
    out.append(f"{len(rows)} decision(s)")
    return "\n".join(out)

