"""Re-run a recorded cell log through the production core, with no Kafka.

The same :class:`~suanli.streams.cell_runner.CellRunner` the scheduler worker uses
(decode, core ``decide``, encode) runs over the records in log order, so the regenerated
decision records can be compared with the recorded ones byte for byte.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from suanli.schemas.codec import Codec
from suanli.streams.cell_runner import CellRunner
from suanli.streams.intake import RawRecord
from suanli.streams.topics import DECISIONS


@dataclass(frozen=True)
class Divergence:
    """The first place where regenerated and recorded decisions differ."""

    index: int                 # position in the decision sequence
    recorded: bytes | None
    regenerated: bytes | None


def regenerate(codec: Codec, cell_log: Iterable[RawRecord]) -> list[bytes]:
    """The decision records (wire-format values) the core produces for ``cell_log``."""
    runner = CellRunner(codec)
    out: list[bytes] = []
    for record in cell_log:
        out.extend(r.value for r in runner.apply(record) if r.topic == DECISIONS)
    return out


def first_divergence(recorded: list[bytes], regenerated: list[bytes]) -> Divergence | None:
    """None when the two sequences are identical, else where they first differ."""
    for i in range(max(len(recorded), len(regenerated))):
        a = recorded[i] if i < len(recorded) else None
        b = regenerated[i] if i < len(regenerated) else None
        if a != b:
            return Divergence(i, a, b)
    return None
