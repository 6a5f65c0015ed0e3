"""Audit read model: the decision history, indexed for queries, rebuilt from the log.

Source: the decisions topic (TaskPlaced, TaskPending, TaskUnschedulable, TaskReleased,
TaskPreempted, TaskMigrated, each with its provenance). Nothing here reads Kafka, a clock
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
    row  NUL event_id                               -> the decision as JSON (see :func:`entry`)
    ix   NUL task     NUL task_id  NUL tenant NUL TS NUL event_id -> b""
    ix   NUL node     NUL node_id  NUL tenant NUL TS NUL event_id
    ix   NUL strategy NUL name     NUL tenant NUL TS NUL event_id
    ix   NUL kind     NUL kind     NUL tenant NUL TS NUL event_id
    ix   NUL tenant   NUL tenant   NUL TS NUL event_id
    ix   NUL time     NUL TS NUL event_id

Every secondary key carries the tenant, and every row fetched for an answer is checked
against the query's tenant again, so a tenant's query never returns another tenant's rows.

Preemption and migration. A ``TaskPreempted`` is a row about the *victim* (kind
``preemption``, node = the node it was evicted from); its ``detail`` keeps the preemptor
(``preempted_by``), the reason, ``grace_ms``, ``work_lost_ms`` and every victim of the same
decision. A ``TaskMigrated`` (kind ``migration``) is indexed under both nodes, ``to_node`` as
its node and ``from_node`` too; its detail keeps cause, since, elapsed_ms, reserve_first and
the tasks preempted to make room. ``AuditQuery(preempted_by=T)`` lists the tasks T preempted
(a filter over the preemption rows, no index of its own), and :meth:`AuditIndex.why` adds
them to the answer about T.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Iterable, Iterator, NamedTuple

from suanli.errors import AuditError
from suanli.processors import model as m
from suanli.projections.audit_store import Batch, Store

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
}
KIND_ALIASES = {"unschedulable": "rejection", "placed": "placement", "released": "release",
                "preempted": "preemption", "migrated": "migration", **{k.lower(): v for k, v in KINDS.items()}}

SEP = b"\x00"
_POS, _META, _ROW, _IX = b"pos", b"meta", b"row", b"ix"
_COUNT = _META + SEP + b"decisions"


class SourceRecord(NamedTuple):
    """One consumed record of the decisions topic; ``kind`` is None if it did not decode."""

    topic: str
    partition: int
    offset: int
    kind: str | None
    payload: dict[str, Any] | None


@dataclass
class ApplyResult:
    applied: int = 0          # new decisions stored
    duplicates: int = 0       # decision records whose event id was already stored
    skipped: int = 0          # records at or below the stored position (already folded)
    ignored: int = 0          # records that are not decisions (other kinds, undecodable)

    def add(self, other: ApplyResult) -> None:
        self.applied += other.applied
        self.duplicates += other.duplicates
        self.skipped += other.skipped
        self.ignored += other.ignored


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
    detail = {k: v for k, v in payload.items()
              if k not in ("event_id", "decision_id", "task_id", "tenant", "cell", "node_id", "provenance")}
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
    inp = row["input"]
    out["provenance"] = {
        "input": {"topic": inp["topic"], "partition": inp["partition"], "offset": inp["offset"]},
        "strategy": dict(row["strategy"]), "candidates": [dict(c) for c in row["candidates"]],
        "filtered": [dict(f) for f in row["filtered"]], "path": list(row["path"]),
        "decided_at": row["decided_at"], "matched_rule": row.get("matched_rule"),
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
    nodes = {row["node_id"]}
    if row["kind"] == "migration":
        nodes.add((row.get("detail") or {}).get("from_node", ""))
    keys += [_key(_IX, "node", n, tenant, ts, eid) for n in sorted(nodes) if n]
    return keys


def _dumps(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":"), sort_keys=True, default=str).encode()


# ------------------------------------------------------------------------------ the index
class AuditIndex:
    """The fold and the queries over one :class:`Store`."""

    def __init__(self, store: Store):
        self.store = store

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

    # ---------------------------------------------------------------- queries
    def _row(self, event_id: bytes) -> dict[str, Any] | None:
        raw = self.store.get(_ROW + SEP + event_id)
        return json.loads(raw) if raw is not None else None

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
        for _ts_value, eid in reversed(hits):
            row = self._row(eid)
            if row is None or not _matches(row, q, kind):
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

