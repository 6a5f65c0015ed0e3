"""The Confluent wire format with fastavro: one codec for Faust agents and plain clients.

A record value is ``0x00`` + a 4-byte big-endian schema id + the Avro binary body.
Timestamps (``timestamp-millis``) are handled as plain ``int`` epoch milliseconds
inside Suanli: the processors must never see wall-clock ``datetime`` objects, and ints
keep replay byte-exact. The binary encoding is the same either way.
"""
from __future__ import annotations

import io
import os
import struct
import threading
from typing import Any, Mapping, Sequence

import fastavro
from fastavro.schema import to_parsing_canonical_form

from suanli.errors import DecodeError, EncodeError, RegistryError
from suanli.schemas.catalog import EventSchema, catalog
from suanli.schemas.registry import RegistryClient

try:  # the compiled fast path (kernels/src/avro.rs); without it fastavro does everything
    from suanli_kernels import AvroProgram
except ImportError:  # pragma: no cover - bin/suanli builds the kernels; their tests fail without them
    AvroProgram = None

MAGIC = 0
HEADER = struct.Struct(">bI")


def strip_logical_types(schema: Any) -> Any:
    """Copy of ``schema`` without ``logicalType`` annotations (same binary encoding)."""
    if isinstance(schema, list):
        return [strip_logical_types(s) for s in schema]
    if isinstance(schema, dict):
        return {k: strip_logical_types(v) for k, v in schema.items() if k != "logicalType"}
    return schema


def parse_plain(schema: dict) -> Any:
    """``schema`` parsed by fastavro with times as plain int milliseconds (see above)."""
    return fastavro.parse_schema(strip_logical_types(schema), named_schemas={})


def compiled_default() -> bool:
    """Whether codecs use the compiled program unless told otherwise: yes, unless the
    environment sets ``SUANLI_CODEC_COMPILED=0`` (every worker the plane starts inherits it;
    ``bench/codec_speed.py`` and the E2E comparison use it to run fastavro alone)."""
    return os.environ.get("SUANLI_CODEC_COMPILED", "1") != "0"


def compile_program(parsed: Any) -> Any:
    """The compiled program of a schema ``parse_plain`` returned (``AvroProgram``), or None
    without the kernels or for a form they do not take (fastavro then does all its work)."""
    if AvroProgram is None:
        return None
    try:
        return AvroProgram(parsed)
    except (ValueError, TypeError):
        return None


def _read_whole(program: Any, data: bytes) -> dict | None:
    """The record a framed ``data`` holds, read by ``program`` when it reads the whole body;
    None without a program, when it declines, or with bytes left over (fastavro then decides)."""
    if program is None:
        return None
    got = program.decode(data, HEADER.size)
    return got[0] if got is not None and got[1] == len(data) else None


def frame(schema_id: int, body: bytes) -> bytes:
    """Prefix an Avro body with the Confluent header."""
    return HEADER.pack(MAGIC, schema_id) + body


def split_frame(data: bytes | None) -> tuple[int, memoryview]:
    """Return ``(schema_id, body)``; raise ``ValueError`` if ``data`` is not framed."""
    if data is None:
        raise ValueError("record has no value (tombstone)")
    if len(data) < HEADER.size:
        raise ValueError(f"record is {len(data)} bytes, shorter than the 5-byte wire-format header")
    magic, schema_id = HEADER.unpack_from(data)
    if magic != MAGIC:
        raise ValueError(f"magic byte is {magic:#04x}, not 0x00: not the Confluent wire format")
    return schema_id, memoryview(data)[HEADER.size:]


def read_long(buf: bytes, pos: int) -> tuple[int, int]:
    """The Avro long (zigzag varint) at ``buf[pos]``: ``(value, next pos)``. Raises
    IndexError past the end, ValueError for a varint beyond 64 bits. For readers that pick
    single fields off a body without decoding it (``projections/audit_avro.py``, replay's
    event-id prefix)."""
    acc = shift = 0
    while True:
        b = buf[pos]
        pos += 1
        acc |= (b & 0x7F) << shift
        if not b & 0x80:
            break
        shift += 7
        if shift > 63:
            raise ValueError("varint longer than 10 bytes")
    if acc >> 64:
        raise ValueError("varint beyond 64 bits")
    return (acc >> 1) ^ -(acc & 1), pos


class Codec:
    """Encodes Suanli events and decodes any registered Avro record.

    ``encode`` registers (or looks up) each event schema once, lazily.
    ``decode`` fetches unknown writer schemas by id once and caches them; it never
    raises anything but :class:`DecodeError` for bad input.

    Each schema also gets a compiled program (``kernels/src/avro.rs``; ``compiled``: None
    follows :func:`compiled_default`, and the kernels must be built). It encodes the usual
    record about 10x and decodes it about 5x faster than fastavro, with the same bytes and
    values (``bench/codec_speed.py``); whatever it is unsure of (a value of another Python
    type, a malformed body, a record read through schema resolution) it declines, and
    fastavro handles that record exactly as it did without the program.
    """

    def __init__(self, registry: RegistryClient, events: Mapping[str, EventSchema] | None = None,
                 compiled: bool | None = None):
        self.registry = registry
        self.events = dict(events or catalog())
        self.compiled = (compiled_default() if compiled is None else compiled) and AvroProgram is not None
        self._ids: dict[str, int] = {}
        self._writers: dict[str, Any] = {}
        self._fast_writers: dict[str, tuple[Any, bytes]] = {}    # kind -> (program, wire header)
        self._readers: dict[int, tuple[str, Any, Any, Any]] = {}  # id -> (kind, writer, reader, program)
        self._lock = threading.Lock()

    # -- registration ---------------------------------------------------------------
    def schema_id(self, kind: str) -> int:
        """Registry id of the current schema of event ``kind`` (registering it if needed)."""
        schema_id = self._ids.get(kind)
        if schema_id is None:
            event = self._event(kind)
            schema_id = self.registry.register(event.subject, event.schema)
            writer = parse_plain(event.schema)
            program = compile_program(writer) if self.compiled else None
            with self._lock:
                self._ids[kind] = schema_id
                self._writers[kind] = writer
                if program is not None and program.encodes:
                    self._fast_writers[kind] = (program, HEADER.pack(MAGIC, schema_id))
        return schema_id

    def register_all(self) -> dict[str, int]:
        """Register every event schema; returns ``{kind: id}``."""
        return {kind: self.schema_id(kind) for kind in sorted(self.events)}

    def _event(self, kind: str) -> EventSchema:
        try:
            return self.events[kind]
        except KeyError:
            raise EncodeError(f"unknown event kind {kind!r}; known: {', '.join(sorted(self.events))}") from None

    # -- encode ---------------------------------------------------------------------
    def encode(self, kind: str, payload: Mapping[str, Any]) -> bytes:
        """Wire-format bytes of ``payload`` as event ``kind``; :class:`EncodeError` if it does not fit."""
        fast = self._fast_writers.get(kind)
        if fast is not None:
            out = fast[0].encode(payload, fast[1])
            if out is not None:
                return out
        schema_id = self.schema_id(kind)
        buffer = io.BytesIO()
        buffer.write(HEADER.pack(MAGIC, schema_id))
        try:
            fastavro.schemaless_writer(buffer, self._writers[kind], payload)
        except (ValueError, TypeError, KeyError, AttributeError, OverflowError, struct.error) as exc:
            raise EncodeError(f"{kind}: value does not fit the schema: {exc}") from exc
        return buffer.getvalue()

    # -- decode ---------------------------------------------------------------------
    def decode(self, data: bytes | None, *, topic: str | None = None, partition: int | None = None,
               offset: int | None = None) -> tuple[str, dict]:
        """Return ``(kind, payload)`` where kind is the record's short name.

        Raises :class:`DecodeError` (naming topic, partition and offset) for anything
        that is not a complete record of a schema the registry knows.
        """
        # The usual record first, with nothing made that only an error or fastavro needs:
        # framed bytes of a schema seen before, whose program reads the body whole.
        cached = None
        if type(data) is bytes and len(data) >= HEADER.size:
            magic, schema_id = HEADER.unpack_from(data)
            cached = self._readers.get(schema_id)
            if magic == MAGIC and cached is not None:
                payload = _read_whole(cached[3], data)
                if payload is not None:
                    return cached[0], payload
                # declined, or trailing bytes: fastavro below reads it again and says what is wrong
        where = {"topic": topic, "partition": partition, "offset": offset}
        try:
            schema_id, body = split_frame(data)
        except ValueError as exc:
            raise DecodeError(str(exc), **where) from None
        kind, writer, reader, program = self._reader(schema_id, where)
        if cached is None and type(data) is bytes:          # the first record of this schema id
            payload = _read_whole(program, data)
            if payload is not None:
                return kind, payload
        stream = io.BytesIO(body)
        try:
            # Resolve against our current schema of the same name, so records written
            # with an older (compatible) version come out with today's fields and defaults.
            payload = fastavro.schemaless_reader(stream, writer, reader)
        except Exception as exc:  # noqa: BLE001 - the wire is untrusted: any failure is a bad record
            raise DecodeError(f"Avro body does not match schema id {schema_id} ({kind}): "
                              f"{type(exc).__name__}: {exc}", schema_id=schema_id, **where) from None
        if stream.tell() != len(body):
            raise DecodeError(f"{len(body) - stream.tell()} trailing bytes after the {kind} record "
                              f"(schema id {schema_id})", schema_id=schema_id, **where)
        return kind, payload

    def kind_of(self, data: bytes | None) -> str | None:
        """The event kind a record claims by its schema id (the Confluent frame's first 5
        bytes), without decoding its body: None for a bad frame or an id the registry does
        not know. Workers use it to skip kinds they do not handle at next to no cost; it
        does not prove the body is valid (:meth:`decode` does)."""
        try:
            schema_id, _body = split_frame(data)
        except ValueError:
            return None
        cached = self._readers.get(schema_id)
        if cached is not None:
            return cached[0]
        try:
            return self._reader(schema_id, {})[0]
        except DecodeError:
            return None

    def _reader(self, schema_id: int, where: dict) -> tuple[str, Any, Any, Any]:
        cached = self._readers.get(schema_id)
        if cached is not None:
            return cached
        try:
            schema = self.registry.schema_by_id(schema_id)
        except RegistryError as exc:
            raise DecodeError(f"cannot fetch schema id {schema_id}: {exc}", schema_id=schema_id, **where) from None
        if schema is None:
            raise DecodeError(f"unknown schema id {schema_id}", schema_id=schema_id, **where)
        if not isinstance(schema, dict) or schema.get("type") != "record":
            raise DecodeError(f"schema id {schema_id} is not an Avro record", schema_id=schema_id, **where)
        name = schema["name"]
        current = self.events.get(name)
        # Read with the writer schema alone when the two have the same Parsing Canonical
        # Form: same fields, types and order, so resolution would map every field onto
        # itself (no default is ever used) and skipping it changes no value but halves the
        # cost. Schemas fetched from a registry differ from ours in docs, attribute order
        # and explicit namespaces, so plain equality almost never holds.
        same = current is not None and (current.schema == schema or to_parsing_canonical_form(
            strip_logical_types(schema)) == to_parsing_canonical_form(strip_logical_types(current.schema)))
        reader = None if current is None or same else parse_plain(current.schema)
        writer = parse_plain(schema)
        # the program reads with the writer schema alone: only where no resolution is needed
        program = compile_program(writer) if self.compiled and reader is None else None
        entry = (name, writer, reader, program)
        with self._lock:
            self._readers[schema_id] = entry
        return entry

    # -- bulk decode ----------------------------------------------------------------
    def decode_many(self, values: Sequence[bytes | None]) -> list[tuple[str, dict] | DecodeError]:
        """:meth:`decode` of every value, in order, for replays that decode a whole log.

        Item ``i`` is exactly what ``decode(values[i])`` returns, or the :class:`DecodeError`
        it raises (returned, not raised, so one bad record does not stop the batch)."""
        out: list[tuple[str, dict] | DecodeError] = []
        for data in values:
            try:
                out.append(self.decode(data))
            except DecodeError as exc:
                out.append(exc)
        return out
