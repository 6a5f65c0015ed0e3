"""The records the stream logic reads and writes, free of any Kafka client.

:class:`RawRecord` is a record as it sits in a topic (read from Kafka by the workers and
``kafka_io``, or from a log directory by replay); :class:`OutRecord` is one to produce.
Intake, the cell runner and replay speak only these, so they run with no broker and
without importing aiokafka or Faust.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Sequence

__all__ = ["LANE_HEADER", "OutRecord", "RawRecord", "URGENT_HEADER", "is_urgent"]

# The header intake puts on an urgent task's cell-log record (``scheduling: urgent``), so that
# the scheduler worker can end its micro-batch wait for it without decoding anything
# (streams/batch_wait.py). Decisions never read it: a replay without headers decides the same.
LANE_HEADER = "suanli-lane"
URGENT_HEADER = (LANE_HEADER, b"urgent")


def is_urgent(headers: Optional[Sequence[tuple[str, bytes]]]) -> bool:
    """Whether Kafka record ``headers`` (aiokafka's sequence of ``(key, bytes)``) carry
    :data:`URGENT_HEADER`."""
    return bool(headers) and URGENT_HEADER in headers


@dataclass(frozen=True)
class RawRecord:
    """A record as it sits in Kafka: coordinates, timestamp (ms), key and value bytes."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None

    @classmethod
    def of_kafka(cls, record: Any) -> "RawRecord":
        """An aiokafka ConsumerRecord as a record (its timestamp is in milliseconds already)."""
        return cls(record.topic, record.partition, record.offset, int(record.timestamp or 0),
                   record.key, record.value)


@dataclass(frozen=True)
class OutRecord:
    """A record to produce: topic, key, already-encoded value and Kafka headers."""

    topic: str
    key: bytes | None
    value: bytes
    headers: tuple[tuple[str, bytes], ...] = ()

    def kafka_headers(self) -> list[tuple[str, bytes]] | None:
        """The headers as the producer takes them (None: none)."""
        return list(self.headers) if self.headers else None
