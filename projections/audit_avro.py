"""The audit index's fields straight from Avro bodies, without decoding the record.

The audit fold needs ten values of a decision (event id, task, tenant, node, to/from
node, strategy name, decided_at, job id, preemptor) to write its index keys; the stored row can be the
record's own bytes (see ``AuditIndex.apply_raw``). Decoding the whole record with fastavro
(about 35 us here, most of it building dicts for candidates and filters nobody reads
during a fold) was the rebuild's largest cost, so :func:`compile_extractor` turns a writer
schema into straight-line Python that walks the body, skips what the index does not use
and returns those values as bytes (strings) and ints.

Contract: the extractor is *stricter* than fastavro, never laxer. It raises
(:data:`EXTRACT_ERRORS`) for anything fastavro might read differently or refuse: a body
that does not end exactly at the last field, invalid UTF-8 in any string, a union or enum
index out of range, a boolean byte other than 0/1, a varint beyond 64 bits, a negative
length. The caller then decodes that record with the codec, as before; so a record the
extractor accepts is one fastavro decodes, and its values are the ones fastavro would give.
Schemas it cannot compile (recursive types, a captured field that is not a plain string or
long, a provenance that is not a plain record) give None: every record of them goes the
codec way.
"""
from __future__ import annotations

import hashlib
import json
from typing import Any, Callable, NamedTuple

from suanli.schemas.codec import read_long

# What a caller must catch around an extractor: malformed or unusual bodies.
EXTRACT_ERRORS = (IndexError, ValueError, UnicodeDecodeError, OverflowError)

_PRIMITIVES = {"null", "boolean", "int", "long", "float", "double", "bytes", "string"}


class Fields(NamedTuple):
    """The index's view of one decision; strings are UTF-8 bytes exactly as on the wire.
    An extractor returns a plain tuple in this order (no object per record); this names it.

    Absent fields take ``entry()``'s defaults (``b""`` / 0), so keys built from these
    equal ``index_keys(entry(kind, payload, ...))`` of the fully decoded record.
    """

    event_id: bytes
    task_id: bytes
    tenant: bytes
    node_id: bytes       # node_id, else to_node, else b"" (entry()'s rule)
    from_node: bytes     # TaskMigrated's from_node, b"" for every other kind
    strategy: bytes      # provenance.strategy.name
    decided_at: int      # provenance.decided_at
    job_id: bytes        # job_id (issue 22), b"" when null or when the schema has none
    preempted_by: bytes  # TaskPreempted's preemptor, b"" for every other kind


Extractor = Callable[[bytes], tuple]   # -> the values of a Fields, as a plain tuple

# Captured paths -> local variable in the generated code.
_TOP = {"event_id": "f_eid", "task_id": "f_task", "tenant": "f_tenant", "node_id": "f_node",
        "to_node": "f_to", "from_node": "f_from"}


def schema_digest(schema: dict[str, Any]) -> bytes:
    """8 bytes naming a writer schema independently of any registry's ids."""
    return hashlib.sha256(canonical_json(schema)).digest()[:8]


def canonical_json(schema: Any) -> bytes:
    return json.dumps(schema, separators=(",", ":"), sort_keys=True).encode()


class _Unsupported(Exception):
    pass


# ---------------------------------------------------------------- the walk, as data
# A schema is compiled once into a *program*: a tuple of ops, each a tuple whose first item
# names it. The same program drives both walkers, the Python one generated below and the
# compiled one in ``kernels/`` (``suanli_kernels``), so the two accept and capture alike:
#   ("skip_long",)            a long or int, skipped (any length: fastavro reads any)
#   ("long", slot)            a long kept in ``slot`` (validated: at most 64 bits)
#   ("bool",)                 one byte, 0 or 1
#   ("advance", n)            float, double, fixed: n bytes
#   ("bytes",)                length-prefixed bytes, in bounds
#   ("string", slot | None)   length-prefixed valid UTF-8, kept in ``slot`` or skipped
#   ("union", (ops, ...))     a validated branch index, then that branch's ops
#   ("enum", n)               a validated symbol index below n
#   ("array", ops) / ("map", ops)  blocks of items (a map's item is a string key, then ops)
Op = tuple
# Slots an extractor fills, in Fields order (to_node is folded into node_id at the end).
SLOTS = ("f_eid", "f_task", "f_tenant", "f_node", "f_to", "f_from", "f_strategy", "f_at", "f_job", "f_by")


class _Walk:
    """Turns a writer schema into a program (see above), resolving named types."""

    def __init__(self) -> None:
        self.names: dict[str, Any] = {}
        self.stack: list[str] = []

    def resolve(self, schema: Any, namespace: str) -> tuple[Any, str]:
        if isinstance(schema, str) and schema not in _PRIMITIVES:
            full = schema if "." in schema else (f"{namespace}.{schema}" if namespace else schema)
            for name in (full, schema):
                if name in self.names:
                    return self.names[name]
            raise _Unsupported(f"unknown named type {schema!r}")
        return schema, namespace

    def define(self, schema: dict[str, Any], namespace: str) -> str:
        name = schema["name"]
        ns = schema.get("namespace", namespace) if "." not in name else name.rsplit(".", 1)[0]
        full = name if "." in name else (f"{ns}.{name}" if ns else name)
        self.names[full] = (schema, ns)
        self.names.setdefault(name.rsplit(".", 1)[-1], (schema, ns))
        return ns

    def skip(self, schema: Any, namespace: str) -> list[Op]:
        """The ops that move past one value of ``schema``, validating it."""
        if isinstance(schema, dict) and schema.get("type") in ("record", "error", "enum", "fixed"):
            namespace = self.define(schema, namespace)
        else:
            schema, namespace = self.resolve(schema, namespace)
        t = schema if isinstance(schema, (str, list)) else schema.get("type")
        if isinstance(schema, dict) and t in _PRIMITIVES:
            schema = t
        if isinstance(schema, list):
            return [("union", tuple(tuple(self.skip(branch, namespace)) for branch in schema))]
        if schema == "null":
            return []
        if schema == "boolean":
            return [("bool",)]
        if schema in ("int", "long"):
            return [("skip_long",)]
        if schema == "float":
            return [("advance", 4)]
        if schema == "double":
            return [("advance", 8)]
        if schema == "bytes":
            return [("bytes",)]
        if schema == "string":
            return [("string", None)]
        if t in ("record", "error"):
            if schema["name"] in self.stack:
                raise _Unsupported("recursive schema")
            self.stack.append(schema["name"])
            ops = [op for field in schema["fields"] for op in self.skip(field["type"], namespace)]
            self.stack.pop()
            return ops
        if t == "enum":
            return [("enum", len(schema["symbols"]))]
        if t == "fixed":
            return [("advance", int(schema["size"]))]
        if t in ("array", "map"):
            return [(t, tuple(self.skip(schema["items"] if t == "array" else schema["values"], namespace)))]
        raise _Unsupported(f"unknown Avro type {t!r}")

    def record_fields(self, schema: dict[str, Any], namespace: str, captures: dict[str, str],
                      nested: dict[str, Callable[[Any, str], list[Op]]]) -> list[Op]:
        """A record's fields: plain-string fields named in ``captures`` are kept in their
        slot, fields named in ``nested`` are handed to their own builder, the rest skipped."""
        namespace = self.define(schema, namespace)
        self.stack.append(schema["name"])
        ops: list[Op] = []
        for field in schema["fields"]:
            name, ftype = field["name"], field["type"]
            resolved, _ = self.resolve(ftype, namespace) if isinstance(ftype, str) else (ftype, namespace)
            if isinstance(resolved, dict) and resolved.get("type") in _PRIMITIVES and len(resolved) == 1:
                resolved = resolved["type"]
            if name in captures:
                if resolved != "string":
                    raise _Unsupported(f"field {name} is not a plain string")
                ops.append(("string", captures[name]))
            elif name in nested:
                ops.extend(nested[name](ftype, namespace))
            else:
                ops.extend(self.skip(ftype, namespace))
        self.stack.pop()
        return ops


def _nullable_string(ftype: Any, slot: str, name: str) -> list[Op]:
    """A string or a ``["null", "string"]`` union kept in ``slot`` (left as it was when null)."""
    t = ftype.get("type") if isinstance(ftype, dict) and len(ftype) == 1 else ftype
    if t == "string":
        return [("string", slot)]
    if isinstance(t, list) and sorted(b for b in t if isinstance(b, str)) == ["null", "string"] and len(t) == 2:
        return [("union", tuple((("string", slot),) if b == "string" else () for b in t))]
    raise _Unsupported(f"field {name} is not a string or a nullable string")


def extractor_program(schema: dict[str, Any]) -> tuple[Op, ...] | None:
    """The program that fills :data:`SLOTS` from a record of ``schema``, or None if this
    schema is not one the walker handles."""
    if not isinstance(schema, dict) or schema.get("type") != "record":
        return None
    walk = _Walk()

    def strategy(ftype: Any, namespace: str) -> list[Op]:
        resolved, ns = walk.resolve(ftype, namespace) if isinstance(ftype, str) else (ftype, namespace)
        if not isinstance(resolved, dict) or resolved.get("type") != "record":
            raise _Unsupported("provenance.strategy is not a plain record")
        return walk.record_fields(resolved, ns, {"name": "f_strategy"}, {})

    def decided_at(ftype: Any, namespace: str) -> list[Op]:
        t = ftype.get("type") if isinstance(ftype, dict) else ftype
        if t != "long":
            raise _Unsupported("provenance.decided_at is not a long")
        return [("long", "f_at")]

    def provenance(ftype: Any, namespace: str) -> list[Op]:
        resolved, ns = walk.resolve(ftype, namespace) if isinstance(ftype, str) else (ftype, namespace)
        if not isinstance(resolved, dict) or resolved.get("type") != "record":
            raise _Unsupported("provenance is not a plain record")
        return walk.record_fields(resolved, ns, {}, {"strategy": strategy, "decided_at": decided_at})

    try:
        return tuple(walk.record_fields(schema, "", dict(_TOP), {
            "provenance": provenance,
            "job_id": lambda ftype, _ns: _nullable_string(ftype, "f_job", "job_id"),
            "preempted_by": lambda ftype, _ns: _nullable_string(ftype, "f_by", "preempted_by")}))
    except (_Unsupported, KeyError, TypeError):
        return None


class _Source:
    """Python source of a program: straight-line code over ``buf`` and ``pos``."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.n = 0

    def var(self, stem: str) -> str:
        self.n += 1
        return f"{stem}{self.n}"

    def emit(self, depth: int, line: str) -> None:
        self.lines.append("    " * depth + line)

    def long(self, depth: int, target: str) -> None:
        self.emit(depth, "b = buf[pos]")
        self.emit(depth, "if b < 128:")
        self.emit(depth + 1, f"{target} = (b >> 1) ^ -(b & 1); pos += 1")
        self.emit(depth, "else:")
        self.emit(depth + 1, f"{target}, pos = _long_slow(buf, pos)")

    def skip_long(self, depth: int) -> None:
        # A skipped number's value does not matter, only where it ends (fastavro reads
        # varints of any length too); running off the end raises IndexError.
        self.emit(depth, "if buf[pos] < 128: pos += 1")
        self.emit(depth, "else:")
        self.emit(depth + 1, "pos += 1")
        self.emit(depth + 1, "while buf[pos] > 127: pos += 1")
        self.emit(depth + 1, "pos += 1")

    def string(self, depth: int, target: str | None) -> None:
        """A string: length, bounds, UTF-8 validity (fastavro refuses invalid UTF-8)."""
        # One byte, even (zigzag: non-negative), is every length below 64: the common case.
        # No bounds check: a string running past the end leaves pos > end, and pos only
        # grows, so the next read raises IndexError or the final pos == end check fails.
        self.emit(depth, "n = buf[pos]")
        self.emit(depth, "if n < 128 and not n & 1: pos += 1; e = pos + (n >> 1)")
        self.emit(depth, "else: n, pos = _long_slow(buf, pos); e = pos + n if n >= 0 else end + 1")
        if target is None:
            self.emit(depth, "str(buf[pos:e], 'utf-8'); pos = e")
        else:
            self.emit(depth, f"{target} = buf[pos:e]; str({target}, 'utf-8'); pos = e")

    def ops(self, depth: int, ops: tuple[Op, ...] | list[Op]) -> None:
        for op in ops:
            self.op(depth, op)

    def op(self, depth: int, op: Op) -> None:
        code = op[0]
        if code == "skip_long":
            self.skip_long(depth)
        elif code == "long":
            self.long(depth, op[1])
        elif code == "bool":
            self.emit(depth, "if buf[pos] > 1: raise ValueError('boolean byte')")
            self.emit(depth, "pos += 1")
        elif code == "advance":
            self.emit(depth, f"pos += {op[1]}")
        elif code == "bytes":
            self.long(depth, "n")
            self.emit(depth, "e = pos + n")
            self.emit(depth, "if n < 0 or e > end: raise ValueError('bytes out of bounds')")
            self.emit(depth, "pos = e")
        elif code == "string":
            self.string(depth, op[1])
        elif code == "union":
            idx = self.var("u")
            self.long(depth, idx)
            for i, branch in enumerate(op[1]):
                self.emit(depth, f"{'if' if i == 0 else 'elif'} {idx} == {i}:")
                self.ops(depth + 1, branch) if branch else self.emit(depth + 1, "pass")
            self.emit(depth, "else: raise ValueError('union index out of range')")
        elif code == "enum":
            idx = self.var("x")
            self.long(depth, idx)
            self.emit(depth, f"if not 0 <= {idx} < {op[1]}: raise ValueError('enum index')")
        elif code in ("array", "map"):
            count = self.var("c")
            self.long(depth, count)
            self.emit(depth, f"while {count}:")
            self.emit(depth + 1, f"if {count} < 0:")
            self.emit(depth + 2, f"{count} = -{count}")
            self.skip_long(depth + 2)
            self.emit(depth + 1, f"for _i in range({count}):")
            before = len(self.lines)
            if code == "map":
                self.string(depth + 2, None)
            self.ops(depth + 2, op[1])
            if len(self.lines) == before:
                self.emit(depth + 2, "pass")
            self.long(depth + 1, count)
        else:
            raise ValueError(f"unknown op {code!r}")


def _compile(program: tuple[Op, ...], head: list[str], tail: list[str], name: str) -> Callable[[bytes], Any]:
    src = _Source()
    src.ops(1, program)
    source = "\n".join(head + src.lines + tail)
    namespace: dict[str, Any] = {"_long_slow": read_long}
    exec(compile(source, name, "exec"), namespace)  # noqa: S102 - our own code
    fn = namespace[head[0][4:head[0].index("(")]]
    fn.source = source  # for debugging: what the walker does
    return fn


def compile_extractor(schema: dict[str, Any]) -> Extractor | None:
    """A function ``extract(value) -> Fields`` for Confluent-framed records of ``schema``
    (the body starts at byte 5), or None if this schema is not one the walker handles."""
    program = extractor_program(schema)
    if program is None:
        return None
    head = ["def extract(buf):", "    pos = 5", "    end = len(buf)",
            "    f_eid = f_task = f_tenant = f_node = f_to = f_from = f_strategy = f_job = f_by = b''",
            "    f_at = 0"]
    tail = ["    if pos != end: raise ValueError('trailing or missing bytes')",
            "    return (f_eid, f_task, f_tenant, f_node or f_to, f_from, f_strategy, f_at, f_job, f_by)"]
    return _compile(program, head, tail, f"<audit extractor {schema.get('name')}>")


def compile_field_reader(schema: dict[str, Any], name: str) -> Callable[[bytes], bytes | None] | None:
    """A function ``read(value) -> bytes | None``: the UTF-8 bytes of the top-level string
    field ``name`` of a Confluent-framed record of ``schema`` (None if the field is null or
    the schema has no such field), walking the body as :func:`compile_extractor` does
    (same errors). None if the field is not a string or a nullable string, or the schema
    is not one the walker handles.

    For a filter on a field the keys of the index at hand do not hold (``preempted_by`` on
    an index of the older layout opened read-only): a row that does not match is passed
    over without being decoded."""
    if not isinstance(schema, dict) or schema.get("type") != "record":
        return None
    walk = _Walk()
    try:
        program = tuple(walk.record_fields(schema, "", {}, {
            name: lambda ftype, _ns: _nullable_string(ftype, "f_value", name)}))
    except (_Unsupported, KeyError, TypeError):
        return None
    head = ["def read(buf):", "    pos = 5", "    end = len(buf)", "    f_value = None"]
    tail = ["    if pos != end: raise ValueError('trailing or missing bytes')", "    return f_value"]
    return _compile(program, head, tail, f"<audit field reader {name}>")
