"""The codec with its compiled Avro program against the codec with fastavro alone.

Unit tests, no services: the registry is in memory (``DirRegistry``). They establish that
the program is really taken on the usual records (fastavro made to fail shows it), that a
record the program declines still comes out as fastavro writes it, that errors read the
same either way, and that ``SUANLI_CODEC_COMPILED=0`` turns the program off. The kernel's
own agreement with fastavro, schema by schema, is ``test_avro_kernel.py``'s.
"""
from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from suanli.bench import synthetic
from suanli.errors import DecodeError, EncodeError
from suanli.replay.dir_registry import DirRegistry
from suanli.schemas import codec as codec_module
from suanli.schemas.codec import Codec

VECTORS = Path(codec_module.__file__).parent / "vectors"


def _pair() -> tuple[Codec, Codec]:
    registry = DirRegistry({})
    fast, slow = Codec(registry, compiled=True), Codec(registry, compiled=False)
    assert fast.compiled and not slow.compiled, "the kernels are not built (./bin/suanli builds them)"
    return fast, slow


def _vectors() -> list[tuple[str, dict]]:
    """(kind, event) of every committed cross-language test vector (``schemas/vectors``):
    integer edges, optional fields left null, enums."""
    out = []
    for path in sorted(VECTORS.glob("*.json")):
        doc = json.loads(path.read_text())
        out.append((doc["subject"].rsplit(".", 1)[1], doc["event"]))
    return out


def _synthetic() -> list[tuple[str, dict]]:
    return [("NodeRegistered", n) for n in synthetic.nodes(20)] + [("TaskSubmitted", t) for t in synthetic.tasks(50)]


def test_both_codecs_write_and_read_the_same_records():
    fast, slow = _pair()
    records = _synthetic() + _vectors()
    assert len(records) > 70
    for kind, payload in records:
        data = fast.encode(kind, payload)
        assert data == slow.encode(kind, payload), kind
        assert fast.decode(data) == slow.decode(data), kind


def test_the_program_is_taken_on_usual_records(monkeypatch):
    fast, slow = _pair()
    kind, payload = _synthetic()[-1]
    expected = slow.encode(kind, payload)
    value = slow.decode(expected)
    fast.encode(kind, payload)             # registers the schema (a fastavro parse, not a write)
    fast.decode(expected)                  # and compiles its reader

    def refuse(*_a, **_k):
        raise AssertionError("fastavro was called")

    monkeypatch.setattr(codec_module.fastavro, "schemaless_writer", refuse)
    monkeypatch.setattr(codec_module.fastavro, "schemaless_reader", refuse)
    assert fast.encode(kind, payload) == expected
    assert fast.decode(expected) == value


def test_a_declined_value_is_written_by_fastavro_as_before():
    fast, slow = _pair()
    kind, payload = "TaskSubmitted", dict(_synthetic()[-1][1])
    payload["labels"] = dict(payload.get("labels") or {})
    payload["resources"] = {**payload["resources"], "gpu_models": ("V100M16",)}   # a tuple, not a list
    assert fast.encode(kind, payload) == slow.encode(kind, payload)


def test_an_encode_error_reads_the_same_either_way():
    fast, slow = _pair()
    payload = dict(_synthetic()[-1][1])
    payload["resources"] = {**payload["resources"], "cpu_milli": "six"}
    messages = []
    for c in (fast, slow):
        with pytest.raises(EncodeError, match="TaskSubmitted: value does not fit") as exc:
            c.encode("TaskSubmitted", payload)
        messages.append(str(exc.value))
    assert messages[0] == messages[1]


@pytest.mark.parametrize("damage", ["truncate", "pad", "negative-length"])
def test_a_bad_body_is_the_same_decode_error_either_way(damage):
    fast, slow = _pair()
    data = fast.encode("TaskSubmitted", _synthetic()[-1][1])
    if damage == "truncate":
        data = data[:-3]
    elif damage == "pad":
        data = data + b"\x00\x00"
    else:
        data = data[:5] + b"\x7d" + data[6:]     # the first field is a string: its length, now -63
    messages = []
    for c in (fast, slow):
        with pytest.raises(DecodeError) as exc:
            c.decode(data, topic="t", partition=0, offset=7)
        messages.append(str(exc.value))
    assert messages[0] == messages[1]
    assert "offset" in messages[0] or "7" in messages[0]


def test_a_memoryview_or_bytearray_value_is_read_by_fastavro():
    fast, slow = _pair()
    data = fast.encode("TaskSubmitted", _synthetic()[-1][1])
    assert fast.decode(bytearray(data)) == slow.decode(data)


def test_the_environment_turns_the_program_off(monkeypatch):
    monkeypatch.setenv("SUANLI_CODEC_COMPILED", "0")
    assert not Codec(DirRegistry({})).compiled
    monkeypatch.setenv("SUANLI_CODEC_COMPILED", "1")
    assert Codec(DirRegistry({})).compiled
    monkeypatch.delenv("SUANLI_CODEC_COMPILED")
    assert Codec(DirRegistry({})).compiled


def test_a_schema_the_program_cannot_compile_leaves_fastavro_in_charge():
    recursive = {"type": "record", "name": "Tree", "fields": [
        {"name": "label", "type": "string"}, {"name": "kids", "type": {"type": "array", "items": "Tree"}}]}
    assert codec_module.compile_program(codec_module.parse_plain(recursive)) is None


def test_header_is_prepended_by_the_program():
    fast, _slow = _pair()
    data = fast.encode("TaskSubmitted", _synthetic()[-1][1])
    magic, schema_id = struct.unpack(">bI", data[:5])
    assert magic == 0 and schema_id == fast.schema_id("TaskSubmitted")
