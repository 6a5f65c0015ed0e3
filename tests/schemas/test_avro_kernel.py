"""The compiled Avro program (``suanli_kernels.AvroProgram``) against fastavro, the reference
codec of ``schemas/codec.py``.

What these tests establish:

* Over every event schema of the current contract and of every released contract version,
  and over hand-written schemas for what the contract lacks (enum, fixed, float, boolean,
  bytes, maps of records, nested arrays, ``[X, null]`` unions, names used twice, enums of
  more than 64 symbols), with random datums full of edge values: the fast encoder returns
  exactly ``prefix`` + fastavro's bytes, and takes the fast path (not None) whenever
  ``.encodes`` is True (save a NaN or a finite double beyond float32's range in a
  ``float`` field, which the kernel leaves to fastavro's C cast); the fast decoder returns exactly fastavro's value (type for type,
  float bits included, dict key order included) and end position, at any start offset and
  with trailing bytes after the datum.
* ``.encodes`` is False exactly for schemas holding a union that is not ``[null, X]``; such
  a program's encoder always says None and its decoder still agrees with fastavro.
* The encoder says None for every datum that is not of the exact types (bool for int,
  float for long, out-of-range ints, tuples, subclasses, missing fields, unknown enum
  symbols, wrong fixed sizes, non-str map keys, lone surrogates); the table records what
  fastavro does with each instead (raises, or writes bytes - sometimes wrong ones).
* Encoding never disagrees with fastavro on odd datums: missing fields with defaults of
  every kind (fastavro writes the default), and random datums with one slot replaced by a
  value of a wrong type, deleted, or a record given a ``-type`` key (which fastavro's union
  branch pick checks against the record's name, and refuses).
* Safety under fuzzing: for every truncation, thousands of single-byte mutations and
  random byte strings, a fast decode that returns a value agrees with fastavro, and one
  that fastavro rejects is None; likewise for inputs where fastavro is lenient (boolean
  bytes > 1, 11-byte varints, union index -1, ints beyond 32 bits, duplicate map keys).
* Huge block counts and lengths are declined quickly, without allocating what they claim
  (run in a child process with a memory limit and a timeout so a runaway kernel fails the
  test instead of hanging or killing the suite).

Every random choice comes from ``random.Random`` seeded with ``SEED`` and the test's label;
assertion messages name both, and the input bytes, so a failure reproduces.

Mutation check (by hand, on a copy of the crate built outside the venv): each of these
kernel changes turns the file red - accepting any union index but the null one as X,
UTF-8 decoded lossily, negative enum indexes taken from the end, float32 -0.0 read as 0.0,
a duplicate map key moved to the end, the end position off by one, an int field's 32-bit
range check dropped, bool or int subclasses taken as int, a fixed shorter than its size
taken, and the block count bound dropped (the child process times out).
"""
from __future__ import annotations

import collections
import copy
import enum
import io
import json
import math
import random
import struct
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any, Callable

import fastavro
import pytest

from suanli.processors import compiled
from suanli.schemas.catalog import catalog, event_schemas, released_versions
from suanli.schemas.codec import parse_plain

SEED = 20250611
DATUMS_PER_SCHEMA = 200
MUTATIONS_PER_SCHEMA = 400
RANDOM_STRINGS_PER_SCHEMA = 120
MAX_DEPTH = 4
REPO = Path(__file__).resolve().parents[2]
PRIMITIVES = {"null", "boolean", "int", "long", "float", "double", "bytes", "string"}


# -- the kernel ------------------------------------------------------------------------

def avro_program_class():
    """``suanli_kernels.AvroProgram``; the test FAILS (never skips) when it is missing."""
    kernels = compiled.KERNELS
    assert kernels is not None, ("suanli_kernels is not importable: build it with "
                                 "`cd kernels && ../.venv/bin/pip install .` (bin/suanli does)")
    assert hasattr(kernels, "AvroProgram"), "suanli_kernels has no AvroProgram: rebuild kernels/"
    return kernels.AvroProgram


def program_for(parsed: Any):
    return avro_program_class()(parsed)


def test_the_kernel_has_an_avro_program():
    cls = avro_program_class()
    program = cls(parse_plain({"type": "record", "name": "t.R", "fields": [{"name": "x", "type": "long"}]}))
    assert program.encodes is True
    assert program.encode({"x": 1}) == b"\x02"
    assert program.decode(b"\x02", 0) == ({"x": 1}, 1)


# -- schemas ---------------------------------------------------------------------------

def contract_schemas() -> list[tuple[str, dict]]:
    """``(label, schema)`` of every event of the current contract and the released ones."""
    out = [(f"current:{name}", event.schema) for name, event in sorted(catalog().items())]
    for folder in released_versions():
        out += [(f"{folder.name}:{name}", event.schema) for name, event in sorted(event_schemas(folder).items())]
    return out


MANY_SYMBOLS = [f"S{i}" for i in range(70)]  # indexes >= 64 take a 2-byte varint

KITCHEN_SINK = {
    "type": "record", "name": "t.Sink", "fields": [
        {"name": "b", "type": "boolean"},
        {"name": "i", "type": "int"},
        {"name": "l", "type": "long"},
        {"name": "f", "type": "float"},
        {"name": "d", "type": "double"},
        {"name": "by", "type": "bytes"},
        {"name": "s", "type": "string"},
        {"name": "n", "type": "null"},
        {"name": "ty", "type": {"type": "string"}},
        {"name": "colour", "type": {"type": "enum", "name": "Colour", "symbols": ["RED", "GREEN", "BLUE"]}},
        {"name": "colour2", "type": "Colour"},
        {"name": "one", "type": {"type": "enum", "name": "One", "symbols": ["ONLY"]}},
        {"name": "many", "type": {"type": "enum", "name": "Many", "symbols": MANY_SYMBOLS}},
        {"name": "hash", "type": {"type": "fixed", "name": "Hash", "size": 16}},
        {"name": "hash2", "type": ["null", "Hash"]},
        {"name": "tiny", "type": {"type": "fixed", "name": "Tiny", "size": 1}},
        {"name": "origin", "type": {"type": "record", "name": "Point", "fields": [
            {"name": "x", "type": "double"}, {"name": "y", "type": "float"}]}},
        {"name": "pts", "type": {"type": "array", "items": "Point"}},
        {"name": "by_name", "type": {"type": "map", "values": "Point"}},
        {"name": "grid", "type": {"type": "array", "items": {"type": "array", "items": "int"}}},
        {"name": "maps", "type": {"type": "array", "items": {"type": "map", "values": ["null", "long"]}}},
        {"name": "late", "type": ["string", "null"]},
        {"name": "opt_f", "type": ["null", "float"]},
        {"name": "opt_b", "type": ["boolean", "null"]},
        {"name": "opt_by", "type": ["bytes", "null"]},
        {"name": "opt_rec", "type": ["null", {"type": "record", "name": "Inner", "fields": [
            {"name": "tags", "type": {"type": "map", "values": "string"}},
            {"name": "nums", "type": {"type": "array", "items": "double"}},
            {"name": "empty", "type": {"type": "record", "name": "Empty", "fields": []}},
        ]}]},
        {"name": "empty2", "type": "Empty"},
        {"name": "colours", "type": {"type": "array", "items": "Colour"}},
        {"name": "opt_arr", "type": [{"type": "array", "items": "long"}, "null"]},
    ]}

EMPTY_RECORD = {"type": "record", "name": "t.Nothing", "fields": []}

THREE_BRANCHES = {
    "type": "record", "name": "t.Multi", "fields": [
        {"name": "u", "type": ["null", "string", "long"]},
        {"name": "v", "type": {"type": "array", "items": ["int", "string", "null"]}},
        {"name": "w", "type": ["null", "double"]},
    ]}

NO_NULL_UNION = {
    "type": "record", "name": "t.Either", "fields": [
        {"name": "w", "type": ["long", "string"]},
        {"name": "x", "type": "string"},
    ]}

HAND_SCHEMAS = [
    ("hand:kitchen_sink", KITCHEN_SINK),
    ("hand:empty_record", EMPTY_RECORD),
    ("hand:three_branch_union", THREE_BRANCHES),
    ("hand:union_without_null", NO_NULL_UNION),
]

ALL_SCHEMAS = contract_schemas() + HAND_SCHEMAS
SCHEMA_IDS = [label for label, _ in ALL_SCHEMAS]


def fastavro_named(parsed: Any) -> dict:
    return dict(parsed.get("__named_schemas", {})) if isinstance(parsed, dict) else {}


def walk(parsed: Any) -> list[Any]:
    """Every schema node reachable from ``parsed`` (each named type once)."""
    named, seen, out = fastavro_named(parsed), set(), []

    def visit(node: Any) -> None:
        if isinstance(node, str):
            if node not in PRIMITIVES and node not in seen:
                seen.add(node)
                visit(named[node])
            return
        out.append(node)
        if isinstance(node, list):
            for branch in node:
                visit(branch)
            return
        kind = node["type"]
        if kind in ("record", "enum", "fixed"):
            if node["name"] in seen and node is not named.get(node["name"]):
                return
            seen.add(node["name"])
            named.setdefault(node["name"], node)
        if kind == "record":
            for fld in node["fields"]:
                visit(fld["type"])
        elif kind == "array":
            visit(node["items"])
        elif kind == "map":
            visit(node["values"])
        elif not isinstance(kind, str) or kind not in ("enum", "fixed"):
            visit(kind)

    visit(parsed)
    return out


def is_null(branch: Any) -> bool:
    return branch == "null" or (isinstance(branch, dict) and branch.get("type") == "null")


def expected_encodes(parsed: Any) -> bool:
    """The API: ``.encodes`` is False when some union is not exactly ``[null, X]``."""
    return all(len(node) == 2 and sum(map(is_null, node)) == 1 for node in walk(parsed) if isinstance(node, list))


def zero_size(node: Any, named: dict, seen: frozenset = frozenset()) -> bool:
    """Whether ``node`` can encode in zero bytes (so an array of it costs nothing per item)."""
    if isinstance(node, str):
        if node in PRIMITIVES:
            return node == "null"
        return node not in seen and zero_size(named[node], named, seen | {node})
    if isinstance(node, list):
        return False
    kind = node["type"]
    if kind == "record":
        return all(zero_size(f["type"], named, seen | {node["name"]}) for f in node["fields"])
    if kind == "fixed":
        return node["size"] == 0
    if kind in ("enum", "array", "map"):
        return False
    return zero_size(kind, named, seen)


def repeats_zero_size_items(parsed: Any) -> bool:
    """True when a huge array count costs fastavro time but no input bytes (it would loop)."""
    named = fastavro_named(parsed)
    return any(isinstance(n, dict) and n.get("type") == "array" and zero_size(n["items"], named)
               for n in walk(parsed))


# -- random datums ---------------------------------------------------------------------

def varint(n: int) -> bytes:
    """Avro zigzag varint of a 64-bit ``n``."""
    z = ((n << 1) ^ (n >> 63)) & (2**64 - 1)
    out = bytearray()
    while True:
        if z < 0x80:
            out.append(z)
            return bytes(out)
        out.append((z & 0x7F) | 0x80)
        z >>= 7


def f32(x: float) -> float:
    return struct.unpack("<f", struct.pack("<f", x))[0]


def f64_bits(raw: bytes) -> float:
    return struct.unpack("<d", raw)[0]


def f32_bits(raw: bytes) -> float:
    return struct.unpack("<f", raw)[0]


F32_MAX = 3.4028234663852886e38
INT_EDGES = [0, 1, -1, 63, -64, 64, -65, 8191, -8192, 8192, 2**31 - 1, -2**31, 2**31 - 2, -2**31 + 1, 2**24]
LONG_EDGES = INT_EDGES + [2**63 - 1, -2**63, 2**63 - 2, -2**63 + 1, 2**31, -2**31 - 1, 2**32, -2**32,
                          2**53 + 1, -2**53 - 1, 2**56 - 1, 2**62, -2**62]
DOUBLE_EDGES = [0.0, -0.0, 1.0, -1.5, 0.1, math.inf, -math.inf, math.nan, -math.nan,
                f64_bits(b"\x01\x00\x00\x00\x00\x00\xf8\x7f"),   # quiet NaN with a payload
                f64_bits(b"\x01\x00\x00\x00\x00\x00\xf0\x7f"),   # signalling NaN
                5e-324, -5e-324, 2.2250738585072014e-308, 1.7976931348623157e308, -1.7976931348623157e308,
                1e-300, 1e300, 2.0**53, 1700000000123.0, 3.4028234663852886e38]
FLOAT_EDGES = [0.0, -0.0, 1.0, -2.5, math.inf, -math.inf, math.nan,
               f32_bits(b"\x01\x00\xc0\x7f"),  # float32 quiet NaN with a payload
               f32(1.4e-45), f32(3.4028234663852886e38), f32(-3.4028234663852886e38), f32(1.1754943508222875e-38),
               f32(0.1), 16777217.0,  # not float32: rounds
               0.1, 1e-50, -1e-50, 1e300, -1e300, 3.4028235677973366e38, 3.5e38,  # doubles: underflow/overflow
               5e-324, 1.401298464324817e-45 * 0.5]
STRING_EDGES = ["", "a", "GOLD", "数据中心", "算力", "🚀🔥", "é", "\x00", "a\x00b", "\u007f\u0080\u07ff\u0800\uffff",
                "\U0010ffff", "x" * 63, "y" * 64, "長" * 50, "mixed ascii 中文 and emoji 👩\u200d💻", "\ufeff"]
BYTES_EDGES = [b"", b"\x00", b"\xff" * 3, bytes(range(256)), b"\x80" * 64, "中".encode()]


def random_text(rng: random.Random) -> str:
    def char() -> str:
        band = rng.random()
        if band < 0.4:
            return chr(rng.randint(0x20, 0x7E))
        if band < 0.55:
            return chr(rng.randint(0x80, 0x7FF))
        if band < 0.75:
            return chr(rng.randint(0x4E00, 0x9FFF))
        if band < 0.9:
            return chr(rng.randint(0x1F300, 0x1FAFF))
        code = rng.randint(0, 0x10FFFF - 0x800)  # any code point but the surrogates
        return chr(code if code < 0xD800 else code + 0x800)
    return "".join(char() for _ in range(rng.choice([0, 1, 3, rng.randint(0, 24)])))


class DatumGen:
    """Random datums of the exact Python types fastavro decodes to, for a parsed schema.

    Half of the primitive values come from the edge pools above, in turn, so every edge
    value shows up; enums cycle through every symbol in the same way."""

    def __init__(self, rng: random.Random, parsed: Any):
        self.rng = rng
        self.named = fastavro_named(parsed)
        self.turn: collections.Counter = collections.Counter()
        # set when a float field got a NaN or a finite double beyond float32's range: the
        # kernel may decline those (it leaves the C cast's rounding of them to fastavro)
        self.float_caveat = False

    def pick(self, key: str, pool: list, fresh: Callable[[], Any]) -> Any:
        if self.rng.random() < 0.5:
            i = self.turn[key]
            self.turn[key] += 1
            return pool[i % len(pool)]
        return fresh()

    def count(self, depth: int) -> int:
        if depth > MAX_DEPTH:
            return 0
        r = self.rng.random()
        if r < 0.03 and depth <= 2:
            return self.rng.randint(64, 70)  # a 2-byte block count
        return self.rng.choice([0, 0, 1, 2, 3, self.rng.randint(0, 6)])

    def primitive(self, name: str) -> Any:
        rng = self.rng
        if name == "null":
            return None
        if name == "boolean":
            return self.pick("boolean", [True, False], lambda: rng.random() < 0.5)
        if name == "int":
            return self.pick("int", INT_EDGES, lambda: rng.choice(
                [rng.randint(-64, 64), rng.randint(-2**31, 2**31 - 1)]))
        if name == "long":
            return self.pick("long", LONG_EDGES, lambda: rng.choice(
                [rng.randint(-64, 64), rng.randint(-2**31, 2**31 - 1), rng.randint(-2**63, 2**63 - 1),
                 rng.randint(1_600_000_000_000, 1_900_000_000_000)]))
        if name == "double":
            return self.pick("double", DOUBLE_EDGES, lambda: rng.choice(
                [f64_bits(rng.randbytes(8)), rng.uniform(-1e6, 1e6), float(rng.randint(-10**6, 10**6))]))
        if name == "float":
            x = self.pick("float", FLOAT_EDGES, lambda: rng.choice(
                [f32_bits(rng.randbytes(4)), f32(rng.uniform(-1e4, 1e4)), f64_bits(rng.randbytes(8)),
                 rng.uniform(-1e4, 1e4)]))
            self.float_caveat |= math.isnan(x) or (math.isfinite(x) and abs(x) > F32_MAX)
            return x
        if name == "bytes":
            return self.pick("bytes", BYTES_EDGES, lambda: rng.randbytes(rng.choice([0, 1, rng.randint(0, 40)])))
        if name == "string":
            return self.pick("string", STRING_EDGES, lambda: random_text(rng))
        raise AssertionError(f"unknown primitive {name!r}")

    def datum(self, node: Any, depth: int = 0) -> Any:
        rng = self.rng
        if isinstance(node, str):
            if node in PRIMITIVES:
                return self.primitive(node)
            return self.datum(self.named[node], depth)
        if isinstance(node, list):
            nulls = [b for b in node if is_null(b)]
            if nulls and (depth > MAX_DEPTH or (len(node) == 2 and rng.random() < 0.5)):
                return None
            return self.datum(rng.choice([b for b in node if not is_null(b)] if len(node) == 2 else node), depth)
        kind = node["type"]
        if kind in ("record", "enum", "fixed"):
            self.named.setdefault(node["name"], node)
        if kind == "record":
            return {f["name"]: self.datum(f["type"], depth + 1) for f in node["fields"]}
        if kind == "enum":
            return self.pick(f"enum:{node['name']}", node["symbols"], lambda: rng.choice(node["symbols"]))
        if kind == "fixed":
            size = node["size"]
            return self.pick(f"fixed:{node['name']}", [bytes(size), b"\xff" * size], lambda: rng.randbytes(size))
        if kind == "array":
            return [self.datum(node["items"], depth + 1) for _ in range(self.count(depth))]
        if kind == "map":
            return {self.primitive("string"): self.datum(node["values"], depth + 1) for _ in range(self.count(depth))}
        return self.datum(kind, depth)


# -- the reference and the comparison ---------------------------------------------------

def fastavro_write(parsed: Any, datum: Any) -> tuple[bytes | None, BaseException | None]:
    buffer = io.BytesIO()
    try:
        fastavro.schemaless_writer(buffer, parsed, datum)
    except Exception as exc:  # noqa: BLE001 - any failure is "fastavro rejects it"
        return None, exc
    return buffer.getvalue(), None


def fastavro_read(parsed: Any, data: bytes, start: int) -> tuple[tuple[Any, int] | None, BaseException | None]:
    """fastavro's ``(value, bytes consumed)`` of the datum at ``data[start:]``, or its exception."""
    stream = io.BytesIO(data[start:])
    try:
        value = fastavro.schemaless_reader(stream, parsed, None)
    except Exception as exc:  # noqa: BLE001
        return None, exc
    return (value, stream.tell()), None


def difference(got: Any, want: Any, path: str = "$") -> str | None:
    """Where ``got`` differs from ``want``, type for type (bool is not int, float bits
    compared so NaN payloads and -0.0 count, dict key order counts); None if identical."""
    if type(got) is not type(want):
        return f"{path}: {type(got).__name__} {got!r} != {type(want).__name__} {want!r}"
    if isinstance(want, float):
        if struct.pack("<d", got) != struct.pack("<d", want):
            return (f"{path}: float {got!r} (bits {struct.pack('<d', got).hex()}) != "
                    f"{want!r} (bits {struct.pack('<d', want).hex()})")
        return None
    if isinstance(want, dict):
        if list(got) != list(want):
            return f"{path}: keys {list(got)!r} != {list(want)!r}"
        for key in want:
            found = difference(got[key], want[key], f"{path}[{key!r}]")
            if found:
                return found
        return None
    if isinstance(want, list):
        if len(got) != len(want):
            return f"{path}: length {len(got)} != {len(want)}"
        for i, (g, w) in enumerate(zip(got, want)):
            found = difference(g, w, f"{path}[{i}]")
            if found:
                return found
        return None
    return None if got == want else f"{path}: {got!r} != {want!r}"


def short(value: Any, limit: int = 400) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


def check_encode(program, parsed: Any, datum: Any, prefix: bytes, where: str) -> tuple[bytes | None, bytes | None]:
    """The encoder's safety property; returns ``(fast, fastavro)`` bytes."""
    fast = program.encode(datum, prefix=prefix)
    ref, exc = fastavro_write(parsed, datum)
    assert fast is None or type(fast) is bytes, f"{where}: encode returned {type(fast).__name__}"
    if exc is not None:
        assert fast is None, (f"{where}: fastavro raises {short(exc, 300)} on {short(datum)} but the fast encoder "
                              f"wrote {short(fast.hex())}")
    elif fast is not None:
        assert fast == prefix + ref, (f"{where}: fast encode of {short(datum)} is {short(fast.hex(), 2000)}, "
                                      f"fastavro's (with the prefix) is {short((prefix + ref).hex(), 2000)}")
    return fast, ref


def check_decode(program, parsed: Any, data: bytes, start: int, where: str) -> tuple[Any, Any]:
    """The decoder's safety property; returns ``(fast, (value, consumed) or None)``."""
    fast = program.decode(data, start)
    ref, exc = fastavro_read(parsed, data, start)
    context = f"{where}: data={data.hex()} start={start}"
    if exc is not None:
        assert fast is None, f"{context}: fastavro raises {short(exc, 300)} but the fast decoder returned {short(fast)}"
        return fast, None
    if fast is not None:
        assert type(fast) is tuple and len(fast) == 2, f"{context}: decode returned {short(fast)}"
        value, end = fast
        found = difference(value, ref[0])
        assert found is None, f"{context}: fast decode differs from fastavro at {found}"
        assert type(end) is int and end - start == ref[1], (
            f"{context}: fast decode ends at {end}, fastavro consumed {ref[1]} bytes from {start}")
    return fast, ref


# -- 2/3: round trips over the contract and the hand-written schemas --------------------

@pytest.mark.parametrize("label, schema", ALL_SCHEMAS, ids=SCHEMA_IDS)
def test_round_trip_matches_fastavro_byte_for_byte(label, schema):
    parsed = parse_plain(schema)
    program = program_for(parsed)
    where = f"[seed {SEED}] {label}"
    assert program.encodes is expected_encodes(parsed), (
        f"{where}: .encodes is {program.encodes}, the schema's unions say {expected_encodes(parsed)}")
    rng = random.Random(f"{SEED}:{label}:round-trip")
    gen = DatumGen(rng, parsed)
    taken = 0
    for n in range(DATUMS_PER_SCHEMA):
        gen.float_caveat = False
        datum = gen.datum(parsed)
        at = f"{where} datum #{n}"
        ref, exc = fastavro_write(parsed, datum)
        assert exc is None, f"{at}: the generator made a datum fastavro rejects ({exc!r}): {short(datum)}"
        prefix = rng.choice([b"", b"\x00\x00\x00\x00\x2a", rng.randbytes(rng.randint(1, 9))])
        fast, _ = check_encode(program, parsed, datum, prefix, at)
        if not program.encodes:
            assert fast is None, f"{at}: .encodes is False but encode returned {fast!r}"
        elif not gen.float_caveat:
            assert fast is not None, f"{at}: the fast encoder declined a well-typed datum: {short(datum)}"
        taken += fast is not None
        assert program.encode(datum) in (None, ref), f"{at}: encode without a prefix is not fastavro's bytes"

        want, _ = fastavro_read(parsed, ref, 0)
        junk, tail = rng.randbytes(rng.randint(1, 12)), rng.randbytes(rng.randint(1, 12))
        for data, start in ((ref, 0), (junk + ref, len(junk)), (ref + tail, 0), (junk + ref + tail, len(junk))):
            fast_value, checked = check_decode(program, parsed, data, start, at)
            assert fast_value is not None, (f"{at}: the fast decoder declined fastavro's own encoding "
                                            f"{data.hex()} at start {start}")
            assert checked[1] == len(ref) and fast_value[1] == start + len(ref)
        assert difference(fast_value[0], want[0]) is None
    if program.encodes:  # the float caveat must not hollow the check out
        assert taken >= DATUMS_PER_SCHEMA // 4, f"{where}: the fast encoder took only {taken} datums"


def test_float_fields_decline_only_nan_and_beyond_float32():
    """The kernel declines a NaN or a finite double beyond float32's range for a float
    field (fastavro's C cast decides those); every other float, infinities included, takes
    the fast path and gives fastavro's bytes."""
    parsed = parse_plain(rec("float"))
    program = program_for(parsed)
    for x in FLOAT_EDGES + [math.inf, -math.inf, F32_MAX, -F32_MAX, 1e-46, -0.0]:
        fast, ref = check_encode(program, parsed, {"f": x}, b"", f"float {x!r}")
        if not (math.isnan(x) or (math.isfinite(x) and abs(x) > F32_MAX)):
            assert fast == ref, f"float field {x!r}: declined"


def test_prefix_is_prepended_and_the_encoding_is_fastavros():
    schema = {"type": "record", "name": "t.P", "fields": [
        {"name": "id", "type": "string"}, {"name": "n", "type": "long"}, {"name": "o", "type": ["null", "int"]}]}
    parsed = parse_plain(schema)
    program = program_for(parsed)
    datum = {"id": "算力", "n": -3, "o": 7}
    body = fastavro_write(parsed, datum)[0]
    assert body == b"\x0c" + "算力".encode() + b"\x05\x02\x0e"
    for prefix in (b"", b"\x00", b"\x00\x00\x00\x01\x07", bytes(range(200))):
        assert program.encode(datum, prefix=prefix) == prefix + body
    assert program.encode(datum) == body
    assert program.decode(b"\x00\x00\x00\x01\x07" + body + b"\xff", 5) == (datum, 5 + len(body))


def test_an_empty_record_is_zero_bytes():
    parsed = parse_plain(EMPTY_RECORD)
    program = program_for(parsed)
    assert program.encode({}) == b""
    assert program.encode({}, prefix=b"ab") == b"ab"
    assert program.decode(b"", 0) == ({}, 0)
    assert program.decode(b"xyz", 2) == ({}, 2)


@pytest.mark.parametrize("label, schema", [("three_branch", THREE_BRANCHES), ("no_null", NO_NULL_UNION)])
def test_unions_not_null_x_never_encode_but_decode(label, schema):
    parsed = parse_plain(schema)
    program = program_for(parsed)
    assert program.encodes is False
    rng = random.Random(f"{SEED}:{label}:unions")
    gen = DatumGen(rng, parsed)
    for n in range(100):
        datum = gen.datum(parsed)
        body = fastavro_write(parsed, datum)[0]
        assert program.encode(datum) is None and program.encode(datum, prefix=b"\x00") is None
        fast, _ = check_decode(program, parsed, body, 0, f"[seed {SEED}] {label} #{n}")
        assert fast is not None, f"[seed {SEED}] {label} #{n}: decode declined {body.hex()}"


RECURSIVE = {
    "type": "record", "name": "t.Node", "fields": [
        {"name": "v", "type": "long"},
        {"name": "next", "type": ["null", "t.Node"]},
        {"name": "kids", "type": {"type": "array", "items": "t.Node"}},
    ]}


def test_a_recursive_type_is_refused_or_agrees():
    parsed = parse_plain(RECURSIVE)
    try:
        program = program_for(parsed)
    except ValueError:
        return  # the documented refusal
    rng = random.Random(f"{SEED}:recursive")
    gen = DatumGen(rng, parsed)
    for n in range(100):
        datum = gen.datum(parsed)
        body = fastavro_write(parsed, datum)[0]
        where = f"[seed {SEED}] recursive #{n}"
        check_encode(program, parsed, datum, b"", where)
        check_decode(program, parsed, body, 0, where)
        for cut in range(len(body)):
            check_decode(program, parsed, body[:cut], 0, where)


@pytest.mark.parametrize("schema", [
    {"type": "array", "items": "long"},
    {"type": "map", "values": ["null", "string"]},
    {"type": "enum", "name": "t.Top", "symbols": ["A", "B"]},
    {"type": "fixed", "name": "t.Top", "size": 3},
    {"type": "string"},
], ids=["array", "map", "enum", "fixed", "string"])
def test_a_top_level_non_record_is_refused_or_agrees(schema):
    parsed = parse_plain(schema)
    try:
        program = program_for(parsed)
    except ValueError:
        return
    rng = random.Random(f"{SEED}:top:{schema['type']}")
    gen = DatumGen(rng, parsed)
    for n in range(100):
        datum = gen.datum(parsed)
        body = fastavro_write(parsed, datum)[0]
        where = f"[seed {SEED}] top-level {schema['type']} #{n}"
        check_encode(program, parsed, datum, b"\x01", where)
        check_decode(program, parsed, body + b"\x00", 0, where)


def test_the_contract_is_covered():
    """The round trip above walks every event of the current and released contracts."""
    labels = {label for label, _ in contract_schemas()}
    assert {f"current:{name}" for name in catalog()} <= labels
    assert released_versions(), "no released contract version found"
    for folder in released_versions():
        assert {f"{folder.name}:{name}" for name in event_schemas(folder)} <= labels


# -- 4: the encoder declines what is not of the exact types -----------------------------

DECLINE_SCHEMA = {
    "type": "record", "name": "t.Decl", "fields": [
        {"name": "i", "type": "int"},
        {"name": "l", "type": "long"},
        {"name": "d", "type": "double"},
        {"name": "f", "type": "float"},
        {"name": "b", "type": "boolean"},
        {"name": "a", "type": {"type": "array", "items": "long"}},
        {"name": "s", "type": "string"},
        {"name": "by", "type": "bytes"},
        {"name": "e", "type": {"type": "enum", "name": "E", "symbols": ["A", "B"]}},
        {"name": "fx", "type": {"type": "fixed", "name": "F", "size": 4}},
        {"name": "m", "type": {"type": "map", "values": "long"}},
        {"name": "withdefault", "type": "long", "default": 7},
        {"name": "o", "type": ["null", "string"]},
        {"name": "r", "type": {"type": "record", "name": "Sub", "fields": [{"name": "x", "type": "int"}]}},
        {"name": "orec", "type": ["null", "Sub"]},
        {"name": "oarr", "type": ["null", {"type": "array", "items": "Sub"}]},
    ]}
DECLINE_BASE = {"i": 1, "l": 2, "d": 0.5, "f": 1.5, "b": True, "a": [1, 2], "s": "s", "by": b"b", "e": "A",
                "fx": b"abcd", "m": {"k": 1}, "withdefault": 3, "o": None, "r": {"x": 1},
                "orec": {"x": 2}, "oarr": [{"x": 3}]}


class Text(str):
    pass


class Whole(int):
    pass


class Real(float):
    pass


class Items(list):
    pass


class Level(enum.IntEnum):
    HIGH = 3


MISSING = object()

# (id, dotted field path, value or MISSING to delete the key, what fastavro does instead)
DECLINES = [
    ("bool-for-int", "i", True, "bytes"),
    ("bool-for-long", "l", False, "bytes"),
    ("int-for-double", "d", 3, "bytes"),
    ("int-for-float", "f", 3, "bytes"),
    ("bool-for-double", "d", True, "bytes"),
    ("float-for-long", "l", 1.5, "bytes"),         # fastavro truncates it to 1: the fast path must not
    ("float-for-int", "i", 2.0, "bytes"),
    ("int-for-boolean", "b", 1, "bytes"),
    ("int-2**31", "i", 2**31, "bytes"),            # fastavro writes a long into an int field
    ("int-below-2**31", "i", -2**31 - 1, "bytes"),
    ("long-2**63", "l", 2**63, "raises"),
    ("long-below-2**63", "l", -2**63 - 1, "raises"),
    ("long-2**64", "l", 2**64, "raises"),
    ("tuple-for-array", "a", (1, 2), "bytes"),
    ("list-subclass", "a", Items([1, 2]), "raises"),
    ("bool-in-array", "a", [1, True], "bytes"),
    ("str-subclass", "s", Text("s"), "bytes"),
    ("int-subclass", "l", Whole(5), "bytes"),
    ("intenum", "l", Level.HIGH, "bytes"),
    ("float-subclass", "d", Real(0.5), "bytes"),
    ("missing-field", "s", MISSING, "raises"),
    ("missing-nested-field", "r.x", MISSING, "raises"),
    ("missing-field-in-union-record", "orec.x", MISSING, "raises"),
    ("tuple-notation-in-union", "orec", ("t.Sub", {"x": 1}), "bytes"),  # fastavro's (name, value) branch pick
    ("enum-symbol-not-in-symbols", "e", "C", "raises"),
    ("fixed-too-short", "fx", b"abc", "raises"),
    ("fixed-too-long", "fx", b"abcde", "raises"),
    ("bytearray-for-fixed", "fx", bytearray(b"abcd"), "bytes"),
    ("bytearray-for-bytes", "by", bytearray(b"b"), "bytes"),
    ("non-str-map-key", "m", {1: 2}, "raises"),
    ("lone-surrogate", "s", "\ud800", "raises"),
    ("lone-surrogate-in-map-key", "m", {"\udfff": 1}, "raises"),
    ("lone-surrogate-in-union", "o", "a\ud800", "raises"),
    ("none-for-string", "s", None, "raises"),
    ("int-for-nullable-string", "o", 5, "raises"),
    ("str-for-int", "i", "1", "raises"),
    ("list-for-map", "m", [("k", 1)], "raises"),
    ("list-for-record", "r", [1], "raises"),
]


def with_change(path: str, value: Any) -> dict:
    """A deep copy of ``DECLINE_BASE`` with the field at dotted ``path`` set (or deleted)."""
    datum = copy.deepcopy(DECLINE_BASE)
    *parents, leaf = path.split(".")
    target = datum
    for key in parents:
        target = target[int(key) if isinstance(target, list) else key]
    if value is MISSING:
        del target[leaf]
    else:
        target[leaf] = value
    return datum


def test_the_decline_schema_base_datum_takes_the_fast_path():
    parsed = parse_plain(DECLINE_SCHEMA)
    program = program_for(parsed)
    datum = with_change("s", "s")
    assert program.encode(datum) == fastavro_write(parsed, datum)[0]


@pytest.mark.parametrize("path, value, fallback", [c[1:] for c in DECLINES], ids=[c[0] for c in DECLINES])
def test_the_encoder_declines_what_is_not_exactly_typed(path, value, fallback):
    parsed = parse_plain(DECLINE_SCHEMA)
    program = program_for(parsed)
    datum = with_change(path, value)
    assert program.encode(datum) is None, f"the fast encoder took {path}={value!r}"
    assert program.encode(datum, prefix=b"\x00\x00\x00\x00\x01") is None
    _, exc = fastavro_write(parsed, datum)
    got = "raises" if exc is not None else "bytes"
    assert got == fallback, (f"fastavro's own handling of {path}={value!r} changed: it now {got} "
                             f"({exc!r}); update the table")


def test_the_encoder_declines_a_record_that_is_not_a_dict():
    parsed = parse_plain(DECLINE_SCHEMA)
    program = program_for(parsed)
    base = with_change("s", "s")
    assert program.encode(collections.OrderedDict(base)) is None  # fastavro writes it
    assert fastavro_write(parsed, collections.OrderedDict(base))[1] is None
    assert program.encode(list(base.items())) is None
    assert program.encode(None) is None
    assert program.encode("s") is None


ODD_DATUMS: list[tuple[str, str, Any]] = [
    ("extra-key", "zzz", 1),
    ("enum-str-subclass", "e", Text("A")),
    ("str-subclass-map-key", "m", {Text("k"): 2}),
    ("extra-key-nested", "r.y", 2),
    ("dict-for-array", "a", {"x": 1}),
    ("set-for-array", "a", {1}),
    ("str-for-bytes", "by", "b"),
    ("bytes-for-string", "s", b"s"),
    ("memoryview-for-bytes", "by", memoryview(b"b")),
    ("nan-for-int", "i", math.nan),
    ("inf-for-long", "l", math.inf),
    ("huge-int-for-double", "d", 10**400),
    ("int-for-union-of-string", "o", 0),
    ("bytes-for-union-of-string", "o", b"x"),
    ("str-for-enum-int-like", "e", 0),
    ("none-for-array", "a", None),
    ("none-for-record", "r", None),
    ("none-map-value", "m", {"k": None}),
    ("missing-field-with-default", "withdefault", MISSING),  # fastavro writes the default
    # fastavro's union branch pick validates a record dict: a "-type" key naming another
    # record makes it refuse the branch (and raise); outside a union it is ignored
    ("-type-other-in-union-record", "orec.-type", "t.Other"),
    ("-type-same-in-union-record", "orec.-type", "t.Sub"),
    ("-type-other-in-union-array-record", "oarr.0.-type", "t.Other"),
    ("-type-other-in-plain-record", "r.-type", "t.Other"),
]


@pytest.mark.parametrize("path, value", [c[1:] for c in ODD_DATUMS], ids=[c[0] for c in ODD_DATUMS])
def test_encoding_odd_datums_never_disagrees_with_fastavro(path, value):
    parsed = parse_plain(DECLINE_SCHEMA)
    program = program_for(parsed)
    datum = with_change(path, value)
    for prefix in (b"", b"\x07"):
        check_encode(program, parsed, datum, prefix, f"odd datum {path}={value!r}")


# A missing field with a default: fastavro writes the default (as ``float()`` of it for a
# float or double field); the kernel may write it too, or decline.
DEFAULTS = [
    ("boolean", True), ("int", -5), ("long", 2**40), ("float", 1), ("float", 0.1), ("float", 16777217),
    ("double", 2), ("double", 1.5), ("double", -0.0), ("float", "NaN"), ("double", "Infinity"),
    ("bytes", "\u00ff\u0001"), ("string", "中"), ({"type": "enum", "name": "E", "symbols": ["A", "B"]}, "B"),
    ({"type": "fixed", "name": "FX", "size": 2}, "ab"), ({"type": "array", "items": "long"}, [1, 2]),
    ({"type": "map", "values": "double"}, {"k": 1}), ({"type": "array", "items": "double"}, [1]),
    ({"type": "record", "name": "Q", "fields": [{"name": "z", "type": "float"},
                                               {"name": "y", "type": "long", "default": 3}]}, {"z": 1}),
    ({"type": "record", "name": "Q2", "fields": [{"name": "z", "type": "double"}]}, {"z": 1.5}),
    (["null", "long"], None), (["long", "null"], 7), (["null", "double"], None), (["double", "null"], 1),
    (["string", "null"], "x"), ("null", None), ({"type": "long"}, 9), ({"type": "double"}, 9.5),
]


@pytest.mark.parametrize("field_type, default", DEFAULTS, ids=[f"{i}-{json.dumps(d)[:20]}" for i, (_, d) in
                                                                enumerate(DEFAULTS)])
def test_missing_fields_with_defaults_never_disagree_with_fastavro(field_type, default):
    schema = {"type": "record", "name": "t.D", "fields": [
        {"name": "k", "type": "long"}, {"name": "x", "type": field_type, "default": default}]}
    parsed = parse_plain(schema)
    program = program_for(parsed)
    check_encode(program, parsed, {"k": 1}, b"", f"default {default!r} of {field_type!r}")
    check_encode(program, parsed, {"k": 1}, b"\x00", f"default {default!r} of {field_type!r}")
    # inside a [null, record] union fastavro validates the default when it picks the branch
    outer = {"type": "record", "name": "t.O", "fields": [{"name": "o", "type": ["null", schema]}]}
    parsed = parse_plain(outer)
    check_encode(program_for(parsed), parsed, {"o": {"k": 1}}, b"", f"default {default!r} in a union")


ODD_VALUES = [True, False, 0, 1, -1, 1.5, math.nan, 2**31, -2**31 - 1, 2**63, -2**63 - 1, "", "x", "\ud800",
              b"", b"x" * 16, bytearray(b"x"), None, (), (1,), [], [None], {}, {1: 2}, {"-type": "t.Other"},
              Text("x"), Whole(1), Real(1.0), Items(), collections.OrderedDict(), "RED", "S0", "GOLD"]


def mutate(rng: random.Random, datum: Any) -> Any:
    """A deep copy of ``datum`` with one slot replaced by an odd value, deleted, or a
    record given a ``-type`` key."""
    datum = copy.deepcopy(datum)
    slots: list[tuple[Any, Any]] = []

    def collect(node: Any) -> None:
        if type(node) is dict:
            slots.extend((node, k) for k in node)
            for v in node.values():
                collect(v)
        elif type(node) is list:
            slots.extend((node, i) for i in range(len(node)))
            for v in node:
                collect(v)

    collect(datum)
    if not slots:
        return rng.choice(ODD_VALUES)
    container, key = rng.choice(slots)
    action = rng.random()
    if action < 0.15 and type(container) is dict:
        del container[key]
    elif action < 0.3 and type(container) is dict:
        container["-type"] = rng.choice(["t.Other", "io.suanli.events.Nope", ""])
    else:
        container[key] = rng.choice(ODD_VALUES)
    return datum


@pytest.mark.parametrize("label, schema", ALL_SCHEMAS, ids=SCHEMA_IDS)
def test_encoding_mutated_datums_never_disagrees_with_fastavro(label, schema):
    parsed = parse_plain(schema)
    program = program_for(parsed)
    rng = random.Random(f"{SEED}:{label}:encode-fuzz")
    gen = DatumGen(rng, parsed)
    for n in range(150):
        datum = mutate(rng, gen.datum(parsed))
        check_encode(program, parsed, datum, rng.choice([b"", b"\x00\x00\x00\x00\x01"]),
                     f"[seed {SEED}] {label} mutated datum #{n}")


# -- 5: decode safety under truncation, mutation and random bytes -----------------------

@pytest.mark.parametrize("label, schema", ALL_SCHEMAS, ids=SCHEMA_IDS)
def test_decoding_corrupt_input_declines_or_agrees(label, schema):
    parsed = parse_plain(schema)
    assert not repeats_zero_size_items(parsed), f"{label}: fastavro could loop on a fuzzed array count"
    program = program_for(parsed)
    rng = random.Random(f"{SEED}:{label}:fuzz")
    gen = DatumGen(rng, parsed)
    where = f"[seed {SEED}] {label}"
    bodies = [fastavro_write(parsed, gen.datum(parsed))[0] for _ in range(6)]
    for body in bodies[:2]:  # every truncation, at offset 0 and behind a prefix
        for cut in range(len(body)):
            check_decode(program, parsed, body[:cut], 0, f"{where} truncated")
            check_decode(program, parsed, b"\x00\xff" + body[:cut], 2, f"{where} truncated")
    for n in range(MUTATIONS_PER_SCHEMA):
        body = bytearray(rng.choice(bodies))
        if not body:
            continue
        for _ in range(rng.choice([1, 1, 1, 2])):
            i = rng.randrange(len(body))
            body[i] = rng.randrange(256) if rng.random() < 0.5 else body[i] ^ (1 << rng.randrange(8))
        data, start = bytes(body), 0
        if rng.random() < 0.3:
            junk = rng.randbytes(rng.randint(1, 6))
            data, start = junk + data, len(junk)
        check_decode(program, parsed, data, start, f"{where} mutation #{n}")
    for n in range(RANDOM_STRINGS_PER_SCHEMA):
        data = rng.randbytes(rng.choice([0, 1, 2, rng.randint(0, 16), rng.randint(0, 200)]))
        start = rng.randint(0, len(data))
        check_decode(program, parsed, data, start, f"{where} random bytes #{n}")


def rec(field_type: Any, name: str = "t.F") -> dict:
    return {"type": "record", "name": name, "fields": [{"name": "f", "type": field_type}]}


# Inputs where fastavro is lenient or strict in ways a fast decoder might not copy: each
# must give None or exactly fastavro's answer (what fastavro does is noted).
TRICKY_DECODES = [
    ("boolean-byte-2", rec("boolean"), b"\x02"),                        # fastavro: True
    ("boolean-byte-ff", rec("boolean"), b"\xff"),                       # fastavro: True
    ("int-beyond-32-bits", rec("int"), b"\xff\xff\xff\xff\x7f"),        # fastavro: -17179869184
    ("int-2**31", rec("int"), varint(2**31)),                           # fastavro: 2147483648
    ("int-min-padded", rec("int"), b"\xff\xff\xff\xff\x0f"),            # fastavro: -2**31
    ("varint-11-bytes", rec("long"), b"\xff" * 10 + b"\x01"),           # fastavro: reads 11 bytes
    ("varint-10-bytes-high-bits", rec("long"), b"\xff" * 9 + b"\x7f"),  # beyond 64 bits
    ("varint-padded-zero", rec("long"), b"\x80\x80\x00"),               # fastavro: 0 in 3 bytes
    ("long-max", rec("long"), varint(2**63 - 1)),
    ("long-min", rec("long"), varint(-2**63)),
    ("union-index-minus-1", rec(["null", "long"]), b"\x01\x02"),        # fastavro: last branch
    ("union-index-2", rec(["null", "long"]), b"\x04\x02"),              # fastavro: IndexError
    ("union-index-huge", rec(["null", "long"]), varint(2**40) + b"\x02"),
    ("enum-index-minus-1", rec({"type": "enum", "name": "E", "symbols": ["A", "B"]}), b"\x01"),  # fastavro: "B"
    ("enum-index-2", rec({"type": "enum", "name": "E", "symbols": ["A", "B"]}), b"\x04"),
    ("string-negative-length", rec("string"), b"\x03ab"),               # fastavro: EOFError
    ("string-negative-length-with-bytes", rec("string"), b"\x01" + b"a" * 8),
    ("bytes-negative-length", rec("bytes"), b"\x01ab"),
    ("string-invalid-utf8", rec("string"), b"\x04\xff\xfe"),            # fastavro: UnicodeDecodeError
    ("string-surrogate-utf8", rec("string"), b"\x06\xed\xa0\x80"),      # CESU surrogate: invalid UTF-8
    ("string-overlong-utf8", rec("string"), b"\x04\xc0\x80"),
    ("string-truncated-utf8", rec("string"), b"\x04\xe4\xb8"),
    ("string-nul", rec("string"), b"\x02\x00"),
    ("map-key-invalid-utf8", rec({"type": "map", "values": "long"}), b"\x02\x02\xff\x02\x00"),
    ("map-duplicate-keys", rec({"type": "map", "values": "long"}), b"\x04\x02a\x02\x02a\x04\x00"),  # last wins
    # the last value, at the first key's place: {"a": 3, "b": 2}
    ("map-duplicate-keys-order", rec({"type": "map", "values": "long"}), b"\x06\x02a\x02\x02b\x04\x02a\x06\x00"),
    ("array-negative-count", rec({"type": "array", "items": "long"}), b"\x03\x04\x02\x04\x00"),
    ("array-negative-count-wrong-size", rec({"type": "array", "items": "long"}), b"\x03\x09\x02\x04\x00"),
    ("array-two-blocks", rec({"type": "array", "items": "long"}), b"\x02\x02\x02\x04\x00"),
    ("array-min-count", rec({"type": "array", "items": "long"}), varint(-2**63) + b"\x00"),
    ("map-negative-count", rec({"type": "map", "values": "long"}), b"\x01\x06\x02a\x02\x00"),
    ("array-missing-terminator", rec({"type": "array", "items": "long"}), b"\x02\x02"),
    ("fixed-short", rec({"type": "fixed", "name": "X", "size": 4}), b"ab"),
    ("float-short", rec("float"), b"\x00\x00\x80"),
    ("float-snan", rec("float"), b"\x01\x00\x80\x7f"),
    ("float-nan-payload", rec("float"), b"\x01\x00\xc0\xff"),
    ("double-snan", rec("double"), b"\x01\x00\x00\x00\x00\x00\xf0\x7f"),
    ("double-short", rec("double"), b"\x00" * 7),
    ("array-of-null-small", rec({"type": "array", "items": "null"}), b"\x10\x00"),  # fastavro: 8 Nones
    ("array-of-empty-records", rec({"type": "array", "items": {"type": "record", "name": "Z", "fields": []}}),
     b"\x06\x00"),
    ("empty-input", rec("long"), b""),
]


@pytest.mark.parametrize("schema, data", [c[1:] for c in TRICKY_DECODES], ids=[c[0] for c in TRICKY_DECODES])
def test_tricky_inputs_decline_or_agree(schema, data):
    parsed = parse_plain(schema)
    program = program_for(parsed)
    for junk, tail in ((b"", b""), (b"\x00\x01\x02", b""), (b"\x09", b"\xff\xff")):
        check_decode(program, parsed, junk + data + tail, len(junk), f"tricky {data.hex()}")


def test_fastavro_is_lenient_where_the_api_says_decline():
    """Documents fastavro's leniency the table above guards against (the fast decoder must
    give None or the same answer; the API says None)."""
    assert fastavro_read(parse_plain(rec("boolean")), b"\x02", 0)[0] == ({"f": True}, 1)
    assert fastavro_read(parse_plain(rec("int")), b"\xff\xff\xff\xff\x7f", 0)[0] == ({"f": -17179869184}, 5)
    assert fastavro_read(parse_plain(rec(["null", "long"])), b"\x01\x02", 0)[0] == ({"f": 1}, 2)


# Huge counts and lengths, run in a child process: a decoder that believes them loops
# forever or allocates without bound. fastavro itself would loop on the zero-size ones.
HUGE = [
    ("array-null-2**40", rec({"type": "array", "items": "null"}), varint(2**40) + b"\x00"),
    ("array-null-2**62", rec({"type": "array", "items": "null"}), varint(2**62) + b"\x00"),
    ("array-null-max", rec({"type": "array", "items": "null"}), varint(2**63 - 1) + b"\x00"),
    ("array-null-neg-2**40", rec({"type": "array", "items": "null"}), varint(-2**40) + b"\x00\x00"),
    ("array-null-min", rec({"type": "array", "items": "null"}), varint(-2**63) + b"\x00\x00"),
    ("array-empty-record-2**40", rec({"type": "array", "items": {"type": "record", "name": "Z", "fields": []}}),
     varint(2**40) + b"\x00"),
    ("array-array-null", rec({"type": "array", "items": {"type": "array", "items": "null"}}),
     varint(2**30) + varint(2**30) + b"\x00"),
    ("array-long-2**62", rec({"type": "array", "items": "long"}), varint(2**62) + b"\x02\x02"),
    ("array-long-max", rec({"type": "array", "items": "long"}), varint(2**63 - 1) + b"\x02"),
    ("array-long-min", rec({"type": "array", "items": "long"}), varint(-2**63) + b"\x02\x02"),
    ("array-string-2**62", rec({"type": "array", "items": "string"}), varint(2**62) + b"\x00"),
    ("map-null-2**62", rec({"type": "map", "values": "null"}), varint(2**62) + b"\x02a"),
    ("map-string-2**40", rec({"type": "map", "values": "string"}), varint(2**40)),
    ("string-2**62", rec("string"), varint(2**62) + b"abc"),
    ("string-max", rec("string"), varint(2**63 - 1) + b"abc"),
    ("bytes-2**40", rec("bytes"), varint(2**40) + b"abc"),
    ("bytes-2**31", rec("bytes"), varint(2**31)),
]

CHILD = textwrap.dedent("""
    import json, resource, sys, time
    resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))
    import suanli_kernels
    from suanli.schemas.codec import parse_plain
    for label, schema, hexdata in json.load(sys.stdin):
        print("begin", label, flush=True)
        program = suanli_kernels.AvroProgram(parse_plain(schema))
        data = bytes.fromhex(hexdata)
        began = time.perf_counter()
        out = program.decode(data, 0)
        took = time.perf_counter() - began
        shape = None if out is None else [type(out[0]).__name__, out[1]]
        print("done", json.dumps([label, shape, took]), flush=True)
""")


def test_huge_counts_and_lengths_are_declined_quickly():
    cases = [[label, schema, data.hex()] for label, schema, data in HUGE]
    try:
        run = subprocess.run([sys.executable, "-c", CHILD], input=json.dumps(cases), capture_output=True,
                             text=True, timeout=30, cwd=REPO)
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        begun = [line.split()[1] for line in out.splitlines() if line.startswith("begin")]
        pytest.fail(f"the fast decoder did not return within 30 s on {begun[-1] if begun else '?'}")
    begun = [line.split()[1] for line in run.stdout.splitlines() if line.startswith("begin")]
    assert run.returncode == 0, (f"the child died (rc {run.returncode}) decoding {begun[-1] if begun else '?'}: "
                                 f"{run.stderr[-2000:]}")
    results = {label: (shape, took) for label, shape, took in
               (json.loads(line[5:]) for line in run.stdout.splitlines() if line.startswith("done"))}
    assert set(results) == {label for label, _, _ in HUGE}
    for label, (shape, took) in results.items():
        assert shape is None, f"{label}: the fast decoder returned {shape} for a count it cannot hold"
        assert took < 1.0, f"{label}: the fast decoder took {took:.2f} s to decline"
    # Where each item costs input bytes fastavro stops at the end of the input: compare.
    for label, schema, data in HUGE:
        parsed = parse_plain(schema)
        if not repeats_zero_size_items(parsed):
            check_decode(program_for(parsed), parsed, data, 0, f"huge {label}")
