"""Intake: decode, validate and route raw records to the cell log, or dead-letter them.

:func:`triage` is pure (given the codec's schema cache): the Faust agent in
``streams/app.py`` only moves its results to Kafka. Valid scheduler inputs are forwarded
*verbatim* (the producer's own bytes, schema id and all), keyed by cell, so the cell log
holds exactly what producers sent; the scheduler resolves old schema versions on read.
The topics it produces to are the ``TopicNames`` it is given; it imports no Kafka client.
"""
from __future__ import annotations

from typing import Any, Iterable, Mapping

from suanli.errors import DecodeError
from suanli.processors.model import CELL_INPUT_KINDS
from suanli.processors.qos import URGENT, lane_of
from suanli.schemas.codec import Codec
from suanli.schemas.models import validate_event
from suanli.streams.records import URGENT_HEADER, OutRecord, RawRecord
from suanli.streams.topics import TopicNames

__all__ = ["OWNED_ELSEWHERE", "dead_letter", "lane_headers", "ticks", "triage"]

# kinds on the raw topics that another worker decodes, validates and dead-letters
OWNED_ELSEWHERE = frozenset({"NodeMetrics"})       # streams/telemetry_app.py


def lane_headers(kind: str, payload: Mapping[str, Any]) -> tuple[tuple[str, bytes], ...]:
    """The Kafka headers a record of ``kind`` with ``payload`` carries: ``URGENT_HEADER`` for
    a task labelled ``scheduling: urgent``, none otherwise.

    Producers put it on the raw record, so intake's micro-batch wait ends as soon as the
    record arrives; intake puts it on the cell-log record, for the scheduler's
    (``streams/batch_wait.py``). It only ever shortens a wait: intake reads urgency from the
    payload, never from a raw record's headers, and no decision reads headers."""
    return (URGENT_HEADER,) if kind == "TaskSubmitted" and lane_of(payload.get("labels")) == URGENT else ()


def dead_letter(codec: Codec, record: RawRecord, topics: TopicNames, error_kind: str, reason: str,
                schema_id: int | None = None) -> OutRecord:
    """The DeadLetter for ``record`` on ``topics.dead_letters``: its reason, coordinates and original bytes."""
    payload = {
        "event_id": f"dlq:{record.topic}:{record.partition}:{record.offset}",
        "source_topic": record.topic, "source_partition": record.partition, "source_offset": record.offset,
        "key": record.key, "value": record.value, "error_kind": error_kind, "reason": reason,
        "schema_id": schema_id, "at": max(0, int(record.timestamp or 0)),
    }
    return OutRecord(topics.dead_letters, record.key, codec.encode("DeadLetter", payload))


TENANT_KINDS = ("TaskSubmitted", "TaskCancelled", "ReservationBid", "JobRound")


def tenant_problem(kind: str, payload: dict, owner: str, topic: str) -> str | None:
    """Why a record on ``owner``'s own raw topic must not pass, or None. On the secure stack
    only ``owner``'s principal may write that topic, so the topic, not the payload, says who
    sent it: a payload naming anyone else is refused, never believed."""
    if kind not in TENANT_KINDS:
        return (f"a tenant's raw topic carries only {', '.join(TENANT_KINDS)}, not {kind} "
                f"(tenant {owner!r}, topic {topic})")
    if payload.get("tenant") != owner:
        return (f"tenant mismatch: the record names tenant {payload.get('tenant')!r} but came on the raw topic of "
                f"tenant {owner!r} ({topic}); a tenant writes only as itself")
    return None


def triage(codec: Codec, record: RawRecord, topics: TopicNames) -> list[OutRecord]:
    """What intake produces for one raw record (possibly nothing), to the topics of ``topics``.

    - undecodable bytes / unknown schema id -> DeadLetter (UNDECODABLE / UNKNOWN_SCHEMA)
    - a value that fails validation -> DeadLetter (INVALID) with pydantic's message
    - on a tenant's own raw topic (``TopicNames.tenant_raw``), a record that names another
      tenant, or is not a task or bid -> DeadLetter (INVALID), see :func:`tenant_problem`
    - a scheduler input (``model.CELL_INPUT_KINDS``: tasks, node registrations, statuses and
      heartbeats, telemetry condition changes, policies, ticks, links of a cell) -> forwarded
      verbatim to the cell log, keyed by its cell (a link with no cell: nothing); an urgent
      task (label ``scheduling: urgent``) with the header ``records.URGENT_HEADER``
    - a DispatchAck -> TaskStatusChanged DISPATCHED (accepted) or FAILED (refused)
    - NodeMetrics -> nothing, and not even decoded (``OWNED_ELSEWHERE``): the telemetry
      worker decodes, validates and dead-letters them, so the scheduler's input stays small
      and intake does not pay ~1 ms a sample for records it drops
    - anything else -> nothing
    """
    if codec.kind_of(record.value) in OWNED_ELSEWHERE:
        return []
    try:
        kind, payload = codec.decode(record.value, topic=record.topic, partition=record.partition,
                                     offset=record.offset)
    except DecodeError as exc:
        error_kind = "UNKNOWN_SCHEMA" if "unknown schema id" in exc.reason else "UNDECODABLE"
        return [dead_letter(codec, record, topics, error_kind, str(exc), exc.schema_id)]
    problem = validate_event(kind, payload)
    if problem is not None:
        return [dead_letter(codec, record, topics, "INVALID", f"{problem} (at {record.topic}[{record.partition}]@{record.offset})")]
    owner = topics.tenant_of(record.topic)
    if owner is not None and (problem := tenant_problem(kind, payload, owner, record.topic)) is not None:
        return [dead_letter(codec, record, topics, "INVALID", problem)]
    if kind in CELL_INPUT_KINDS:
        if not payload.get("cell"):          # a link measured outside any cell: nothing to schedule
            return []
        return [OutRecord(topics.cell_log, payload["cell"].encode(), bytes(record.value),
                          lane_headers(kind, payload))]
    if kind == "DispatchAck":
        if not payload.get("cell"):
            return [dead_letter(codec, record, topics, "INVALID", "invalid DispatchAck: cell: must name the task's cell")]
        status = {
            "event_id": f"{payload['event_id']}:status", "task_id": payload["task_id"], "cell": payload["cell"],
            "node_id": payload["node_id"], "status": "DISPATCHED" if payload["accepted"] else "FAILED",
            "at": payload["at"], "exit_code": None,
            "message": payload.get("message") or ("" if payload["accepted"] else "refused by connector"),
            "usage": None,
        }
        return [OutRecord(topics.cell_log, payload["cell"].encode(), codec.encode("TaskStatusChanged", status))]
    return []


def ticks(codec: Codec, cells: Iterable[str], at: int, period_ms: int, topics: TopicNames) -> list[OutRecord]:
    """A CellTick at ``at`` (the ticker's clock, epoch ms) for each of ``cells``, keyed by
    cell: time entering the cell logs, so that timeouts run on log time, never on the
    scheduler's wall clock (a replay sees the same ticks)."""
    return [OutRecord(topics.cell_log, cell.encode(), codec.encode("CellTick", {
        "event_id": f"tick/{cell}/{at}", "cell": cell, "at": at, "period_ms": period_ms})) for cell in sorted(cells)]
