"""The records the stream logic reads and writes, free of any Kafka client.

:class:`RawRecord` is a record as it sits in a topic (read from Kafka by the workers and
``kafka_io``, or from a log directory by replay); :class:`OutRecord` is one to produce.
Intake, the cell runner and replay speak only these, so they run with no broker and
without importing aiokafka or Faust.
"""
from __future__ import annotations

from dataclasses import dataclass

__all__ = ["OutRecord", "RawRecord"]


@dataclass(frozen=True)
class RawRecord:
    """A record as it sits in Kafka: coordinates, timestamp (ms), key and value bytes."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None


@dataclass(frozen=True)
class OutRecord:
    """A record to produce: topic, key and already-encoded value."""

    topic: str
    key: bytes | None
    value: bytes
