"""Encoding regenerated decisions in the schema the log was recorded with.

When the event contract gains a field after a log was recorded (a decision's provenance
gains ``profile`` and ``notes``, say), a replay's decisions, encoded in today's schema,
would differ from the recorded bytes by the new fields' defaults alone, and every old log
would stop verifying although no decision changed. :class:`RecordedCodec` encodes each
event kind in the newest schema of its subject that the log directory holds, *when that
loses nothing*: the record read back through today's schema must equal the record as
today's schema writes it (the new fields hold their defaults). Otherwise, a decision that
says more than the old contract could hold, it is encoded in today's schema under a local
id (``DirRegistry.local``), and the byte comparison shows the difference.
"""
from __future__ import annotations

import io
from typing import Any, Mapping

import fastavro

from suanli.schemas.codec import HEADER, MAGIC, Codec, parse_plain

from .dir_registry import DirRegistry, subject_of


class RecordedCodec(Codec):
    """A :class:`Codec` over a :class:`DirRegistry` that prefers the recorded writer schemas
    (see the module docstring). Decoding is the codec's own."""

    def __init__(self, registry: DirRegistry):
        super().__init__(registry)  # type: ignore[arg-type]  # duck-typed RegistryClient
        self._recorded: dict[str, tuple[int, Any] | None] = {}

    def _recorded_writer(self, kind: str) -> tuple[int, Any] | None:
        """``(id, parsed schema)`` of the newest recorded schema of ``kind``'s subject when
        today's schema is not among the recorded ones; None when it is, or none is recorded."""
        if kind not in self._recorded:
            current = self.schema_id(kind)
            found = None
            if current in self.registry.local.values():
                subject = self._event(kind).subject
                ids = [i for i, s in self.registry.schemas().items()
                       if subject_of(s) == subject and i not in self.registry.local.values()]
                if ids:
                    found = (max(ids), parse_plain(self.registry.schema_by_id(max(ids))))
            self._recorded[kind] = found
        return self._recorded[kind]

    def encode(self, kind: str, payload: Mapping[str, Any]) -> bytes:
        recorded = self._recorded_writer(kind)
        if recorded is None:
            return super().encode(kind, payload)
        schema_id, old = recorded
        current = super().encode(kind, payload)
        writer = self._writers[kind]
        body = io.BytesIO()
        fastavro.schemaless_writer(body, old, payload)
        as_old = fastavro.schemaless_reader(io.BytesIO(body.getvalue()), old, writer)
        as_new = fastavro.schemaless_reader(io.BytesIO(current[HEADER.size:]), writer, writer)
        if as_old != as_new:
            return current
        return HEADER.pack(MAGIC, schema_id) + body.getvalue()
