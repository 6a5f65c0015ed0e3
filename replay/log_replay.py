"""Re-run a recorded cell log through the production core, with no Kafka.

The scheduler worker's :class:`~suanli.streams.cell_runner.CellRunner` applies each record
(decode, core ``decide``, encode); :func:`regenerate` takes the same steps on the same
runner state but keeps only what reaches the decisions topic, so the regenerated decision
records can be compared with the recorded ones byte for byte. It is the decision path of
``CellRunner.apply`` and nothing else (``tests/replay/test_log_replay.py`` holds the two
to the same output), made cheap around the core because a replay runs whole logs:

- dispatch commands and dead letters, which go to other topics and which a replay throws
  away, are never built or encoded;
- decisions become Avro dicts through ``model.to_avro`` (converters cached per class).

Decisions are still encoded, provenance included, when only verifying. Comparing decoded
values instead would need the regenerated decision's Avro dict anyway (``to_avro``, or
``model.from_avro`` of the recorded one, slower still) plus a decode of the recorded record,
and decoding costs more than encoding (on a 10,000-decision log: encode 18 us a decision,
decode 21 us, 32 us for a TaskPlaced); and comparing bytes is exact by construction (map
order, -0.0, union branches), where a comparison of values has to be made so.

A replay produces to no topic: the runner's :class:`~suanli.streams.topics.TopicNames`
(the log's namespace, or :data:`REPLAY_NAMESPACE`) only name the decisions topic.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable

from suanli.errors import DecodeError
from suanli.processors import model
from suanli.processors.core import decide
from suanli.schemas.codec import HEADER, MAGIC, Codec, read_long
from suanli.streams.cell_runner import CellRunner, Core, Refused
from suanli.streams.records import RawRecord
from suanli.streams.topics import TopicNames

# Namespace of a runner made here when the caller gives none (the names reach no broker).
REPLAY_NAMESPACE = "replay"

# Called after each input with the record and the decision records it produced.
Observer = Callable[[RawRecord, list[bytes]], None]


@dataclass(frozen=True)
class Divergence:
    """The first place where regenerated and recorded decisions differ."""

    index: int                 # position in the decision sequence
    recorded: bytes | None
    regenerated: bytes | None


def regenerate(codec: Codec, cell_log: Iterable[RawRecord], *, runner: CellRunner | None = None,
               observer: Observer | None = None, core: Core = decide) -> list[bytes]:
    """The decision records (wire-format values) the core produces for ``cell_log``: the
    values ``runner.apply`` would send to ``runner.topics.decisions``, in order.

    ``runner`` lets the caller start from a rebuilt state or an injected policy (default: a
    fresh runner in :data:`REPLAY_NAMESPACE` with ``codec``); its codec decodes and encodes,
    its ``observer`` (if set) sees the typed outputs as in the worker. ``observer`` sees
    every input with its decisions (progress, metrics). ``core`` must behave as ``decide``
    (it is there to be timed).
    """
    runner = runner or CellRunner(codec, TopicNames(REPLAY_NAMESPACE))
    out: list[bytes] = []
    for record in cell_log:
        produced = decisions_of(runner, record, core)
        out.extend(produced)
        if observer is not None:
            observer(record, produced)
    return out


def decisions_of(runner: CellRunner, record: RawRecord, core: Core = decide) -> list[bytes]:
    """``CellRunner.apply(record)`` reduced to its decisions-topic values: the same
    ``CellRunner.step``, then only the decisions are encoded (where ``apply`` dead-letters
    a record this returns nothing; its dispatch commands and StopCommands go to other
    topics)."""
    result = runner.step(record, runner.decode(record), core)
    if result is None or isinstance(result, Refused):
        return []
    cell, state, outputs = result
    if runner.observer is not None:
        runner.observer(record, cell, state, outputs)
    encode = runner.codec.encode
    return [encode(d.KIND, model.to_avro(d)) for d in outputs
            if not isinstance(d, (model.StopCommand, model.PrewarmCommand))]


# --------------------------------------------------------------------------- comparing
def decided_prefix(cell_log: Iterable[RawRecord], decisions: Iterable[dict]) -> list[RawRecord]:
    """The records of ``cell_log`` up to the last input a decision answered, per partition, in
    log order (as plain :class:`RawRecord`): what the scheduler had read when a run stopped.
    ``decisions``: decoded decision payloads (their ``provenance.input`` names the input).
    Inputs written after the last decision (a connector's last reports) are left out, so the
    replay of the result can be compared with the recorded decisions byte for byte."""
    last: dict[int, int] = {}
    for payload in decisions:
        pos = payload["provenance"]["input"]
        last[pos["partition"]] = max(last.get(pos["partition"], -1), pos["offset"])
    return [RawRecord(r.topic, r.partition, r.offset, r.timestamp, r.key, r.value)
            for r in sorted(cell_log, key=lambda r: (r.partition, r.offset))
            if r.offset <= last.get(r.partition, -1)]


def first_divergence(recorded: list[bytes], regenerated: list[bytes]) -> Divergence | None:
    """None when the two sequences are identical, else where they first differ."""
    if recorded == regenerated:                     # the usual verdict, at C speed
        return None
    for i in range(max(len(recorded), len(regenerated))):
        a = recorded[i] if i < len(recorded) else None
        b = regenerated[i] if i < len(regenerated) else None
        if a != b:
            return Divergence(i, a, b)
    return None


def describe(codec: Codec, value: bytes | None) -> str:
    """A decision record in one line, for a divergence report: its kind, task, node and the
    cell-log input (partition/offset) it answered; "nothing" for ``None``."""
    if value is None:
        return "nothing"
    kind, payload = codec.decode(value)
    where = (payload.get("provenance") or {}).get("input") or {}
    return (f"{kind} {payload.get('task_id')} on {payload.get('node_id')} for input "
            f"{where.get('partition')}/{where.get('offset')}")


def drop_redeliveries(codec: Codec, values: Iterable[bytes]) -> tuple[list[bytes], int]:
    """Decision records without redelivered duplicates: the first record of each event id
    is kept, in order. Returns ``(kept, dropped)``. Undecodable values are kept as they are
    (they can only diverge).

    Usually nothing is dropped, and that is settled without decoding: every event's first
    field is its ``event_id`` string, so its raw bytes are read off the front of the body.
    If every value has such a prefix and no two prefixes are equal, no two decodable values
    can share an event id and nothing is dropped; otherwise every value is decoded
    (:func:`_drop_decoded`, the definition).
    """
    values = list(values)
    ids: set[bytes] = set()
    leads: dict[int, bool] = {}
    for value in values:
        head = _event_id_bytes(codec, value, leads)
        if head is None or head in ids:
            return _drop_decoded(codec, values)
        ids.add(head)
    return values, 0


def _drop_decoded(codec: Codec, values: list[bytes]) -> tuple[list[bytes], int]:
    seen: set[str] = set()
    kept: list[bytes] = []
    dropped = 0
    for value, decoded in zip(values, codec.decode_many(values)):
        event_id = None if isinstance(decoded, DecodeError) else decoded[1].get("event_id")
        if event_id is not None:
            if event_id in seen:
                dropped += 1
                continue
            seen.add(event_id)
        kept.append(value)
    return kept, dropped


def _event_id_bytes(codec: Codec, value: bytes | None, leads: dict[int, bool]) -> bytes | None:
    """The raw UTF-8 of the leading ``event_id`` string of a framed value, or None when the
    value is not framed, its writer schema does not start with ``event_id: string``, or
    the length does not fit the body. ``leads`` caches the schema check per id."""
    if value is None or len(value) < HEADER.size:
        return None
    magic, schema_id = HEADER.unpack_from(value)
    if magic != MAGIC:
        return None
    lead = leads.get(schema_id)
    if lead is None:
        lead = leads[schema_id] = _leads_with_event_id(codec, schema_id)
    if not lead:
        return None
    # Avro string: zig-zag varint length, then the bytes.
    try:
        length, pos = read_long(value, HEADER.size)
    except (IndexError, ValueError):
        return None
    if length < 0 or pos + length > len(value):
        return None
    return value[pos:pos + length]


def _leads_with_event_id(codec: Codec, schema_id: int) -> bool:
    try:
        schema = codec.registry.schema_by_id(schema_id)
    except Exception:  # noqa: BLE001 - no schema: the decoding path decides
        return False
    fields = schema.get("fields") if isinstance(schema, dict) else None
    return bool(fields) and fields[0].get("name") == "event_id" and fields[0].get("type") == "string"
