"""Re-run a recorded cell log through the production core, with no Kafka.

The same :class:`~suanli.streams.cell_runner.CellRunner` the scheduler worker uses
(decode, core ``decide``, encode) runs over the records in log order, so the regenerated
decision records can be compared with the recorded ones byte for byte.

A replay produces to no topic: the runner's :class:`~suanli.streams.topics.TopicNames`
(the log's namespace, or :data:`REPLAY_NAMESPACE`) only tell its decisions from the
dispatch commands and dead letters it also emits.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable

from suanli.schemas.codec import Codec
from suanli.streams.cell_runner import CellRunner
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
               observer: Observer | None = None) -> list[bytes]:
    """The decision records (wire-format values) the core produces for ``cell_log``.

    ``runner`` lets the caller start from a rebuilt state or an injected policy (default: a
    fresh runner in :data:`REPLAY_NAMESPACE`); ``observer`` sees every input with its
    decisions (progress, metrics).
    """
    runner = runner or CellRunner(codec, TopicNames(REPLAY_NAMESPACE))
    decisions = runner.topics.decisions
    out: list[bytes] = []
    for record in cell_log:
        produced = [r.value for r in runner.apply(record) if r.topic == decisions]
        out.extend(produced)
        if observer is not None:
            observer(record, produced)
    return out


def first_divergence(recorded: list[bytes], regenerated: list[bytes]) -> Divergence | None:
    """None when the two sequences are identical, else where they first differ."""
    for i in range(max(len(recorded), len(regenerated))):
        a = recorded[i] if i < len(recorded) else None
        b = regenerated[i] if i < len(regenerated) else None
        if a != b:
            return Divergence(i, a, b)
    return None


def drop_redeliveries(codec: Codec, values: Iterable[bytes]) -> tuple[list[bytes], int]:
    """Decision records without redelivered duplicates: the first record of each event id
    is kept, in order. Returns ``(kept, dropped)``. Undecodable values are kept as they are
    (they can only diverge)."""
    seen: set[str] = set()
    kept: list[bytes] = []
    dropped = 0
    for value in values:
        try:
            event_id = codec.decode(value)[1].get("event_id")
        except Exception:  # noqa: BLE001 - a bad recorded value is compared, not trusted
            event_id = None
        if event_id is not None:
            if event_id in seen:
                dropped += 1
                continue
            seen.add(event_id)
        kept.append(value)
    return kept, dropped
