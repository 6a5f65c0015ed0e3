"""The raw fold (``AuditIndex.apply_raw``, issue 16) against the per-record one it replaced
in the follower (codec decode, then ``AuditIndex.apply``): from the same Kafka-shaped
records, the same positions, counts, index entries and query answers, on both backends.

No services: a dict stands in for the schema registry, the records are encoded with the
real codec, and the odd records the topic may hold (duplicates, garbage, truncated or
trailing bytes, invalid UTF-8, unknown schema ids, older schema versions, non-decisions)
are made by hand.
"""
from __future__ import annotations

import copy
import io
import json
import random
from typing import Any, NamedTuple

import fastavro
import pytest

from suanli.errors import DecodeError
from suanli.processors import model as m
from suanli.projections.audit import (KINDS, AuditIndex, AuditQuery, SourceRecord, entry, index_keys,
                                      raw_index_keys)
from suanli.projections.audit_avro import EXTRACT_ERRORS, compile_extractor, compile_field_reader
from suanli.projections.audit_bench import synthetic_decisions
from suanli.projections.audit_follower import WriterSchemas, same_schema
from suanli.projections.audit_store import Batch, MemoryStore, RocksStore
from suanli.schemas.catalog import catalog
from suanli.schemas.codec import HEADER, Codec, parse_plain

TOPIC = "t.decisions"


class Rec(NamedTuple):
    """What the fold reads of aiokafka's ConsumerRecord."""

    topic: str
    partition: int
    offset: int
    value: bytes | None


class DictRegistry:
    """Just enough of RegistryClient for the codec: ids in registration order."""

    def __init__(self) -> None:
        self.by_id: dict[int, Any] = {}
        self.ids: dict[str, int] = {}

    def register(self, subject: str, schema: Any) -> int:
        key = json.dumps(schema, sort_keys=True)
        if key not in self.ids:
            self.ids[key] = len(self.ids) + 1
            self.by_id[self.ids[key]] = copy.deepcopy(schema)
        return self.ids[key]

    def schema_by_id(self, schema_id: int) -> Any:
        return copy.deepcopy(self.by_id.get(schema_id))


def _strip_nested_namespaces(schema: Any, top: bool = True) -> Any:
    """The schema as a registry may hand it back: named types inherit their namespace."""
    if isinstance(schema, list):
        return [_strip_nested_namespaces(s, False) for s in schema]
    if isinstance(schema, dict):
        return {k: _strip_nested_namespaces(v, False) for k, v in schema.items() if top or k != "namespace"}
    return schema


def _frame(schema_id: int, schema: dict, payload: dict) -> bytes:
    out = io.BytesIO()
    out.write(HEADER.pack(0, schema_id))
    fastavro.schemaless_writer(out, parse_plain(schema), payload)
    return out.getvalue()


@pytest.fixture(scope="module")
def topic_records():
    """(codec, records): ~1,500 decisions over two partitions, plus every odd case."""
    registry = DictRegistry()
    codec = Codec(registry)
    decisions = list(synthetic_decisions(1500, tenants=4, nodes=40, seed=5))
    values = [codec.encode(kind, payload) for kind, payload in decisions]
    rnd = random.Random(7)
    placed = catalog()[m.TaskPlaced.KIND].schema
    # The registry's normal form of TaskPlaced (nested namespaces dropped): the same schema.
    normal_id = registry.register("x", _strip_nested_namespaces(placed))
    # An older TaskPlaced with one more field: resolved by the codec (the field is dropped).
    older = copy.deepcopy(placed)
    older["fields"].insert(6, {"name": "note", "type": ["null", "string"], "default": None})
    older_id = registry.register("y", older)
    placed_payloads = [p for k, p in decisions if k == m.TaskPlaced.KIND]
    odd: list[bytes | None] = [
        values[3],                                                   # redelivered duplicate
        _frame(normal_id, placed, dict(placed_payloads[0], event_id="normal-form/1", task_id="t\\ask\x00x")),
        _frame(older_id, older, dict(placed_payloads[1], event_id="older/1", note="hi")),
        codec.encode("TaskSubmitted", _submitted(codec)),            # not a decision
        b"\x01\x00\x00\x00\x01garbage",                              # not the wire format
        None,                                                        # tombstone
        values[10][:-3],                                             # truncated
        values[11] + b"\x00",                                        # trailing byte
        HEADER.pack(0, 999) + values[12][5:],                        # unknown schema id
        _frame(registry.ids[json.dumps(placed, sort_keys=True)], placed,
               dict(placed_payloads[2], event_id="bad-utf8/1", provenance=dict(
                   placed_payloads[2]["provenance"], path=["ZZZZ"]))).replace(b"ZZZZ", b"\xff\xfe\xfd\xfc"),
        codec.encode(m.TaskPlaced.KIND, dict(placed_payloads[3], event_id="")),   # no event id
    ]
    for value in odd:
        values.insert(rnd.randrange(len(values)), value)
    offsets = [0, 0]
    records = []
    for i, value in enumerate(values):
        part = i % 2
        records.append(Rec(TOPIC, part, offsets[part], value))
        offsets[part] += 1
    return codec, records


def _submitted(codec: Codec) -> dict:
    """A valid TaskSubmitted payload, whatever its schema holds (defaults filled)."""
    schema = codec.events["TaskSubmitted"].schema
    return _default_record(schema)


def _default_record(schema: dict) -> dict:
    out = {}
    for f in schema["fields"]:
        out[f["name"]] = f["default"] if "default" in f else _default_of(f["type"])
    return out


def _default_of(t: Any) -> Any:
    if isinstance(t, list):
        return None if "null" in t else _default_of(t[0])
    if isinstance(t, dict):
        kind = t["type"]
        if kind == "record":
            return _default_record(t)
        if kind == "enum":
            return t["symbols"][0]
        if kind == "array":
            return []
        if kind == "map":
            return {}
        return _default_of(kind)
    return {"string": "x", "int": 0, "long": 0, "float": 0.0, "double": 0.0, "boolean": False,
            "bytes": b"", "null": None}.get(t, "x")


def _decode(codec: Codec):
    def decode(rec: Rec) -> SourceRecord:
        try:
            kind, payload = codec.decode(rec.value, topic=rec.topic, partition=rec.partition, offset=rec.offset)
        except DecodeError:
            kind, payload = None, None
        return SourceRecord(rec.topic, rec.partition, rec.offset, kind, payload)
    return decode


@pytest.fixture(params=["memory", "rocksdb"])
def backend(request, tmp_path):
    opened = []

    def make(name: str):
        store = MemoryStore() if request.param == "memory" else RocksStore(tmp_path / name)
        opened.append(store)
        return store

    yield make
    for store in opened:
        store.close()


def _fold_both(codec, records, backend, chunk: int = 97):
    """The same records, the same chunks: per-record (reference) and raw."""
    decode = _decode(codec)
    old, new = AuditIndex(backend("old")), AuditIndex(backend("new"))
    schemas = WriterSchemas(codec)
    totals = []
    for index, fold in ((old, lambda rs: old.apply([decode(r) for r in rs])),
                        (new, lambda rs: new.apply_raw(rs, schemas, decode))):
        total = [0, 0, 0, 0]
        for i in range(0, len(records), chunk):
            r = fold(records[i:i + chunk])
            total = [a + b for a, b in zip(total, (r.applied, r.duplicates, r.skipped, r.ignored))]
        totals.append(total)
    return old, new, totals


def _contents(index: AuditIndex) -> dict[bytes, bytes]:
    return dict(index.store.scan(b""))


def _queries(records) -> list[AuditQuery]:
    tasks = sorted({p for p in ("bench-task-0000001", "bench-task-0000042", "bench-task-0000300", "t\\ask\x00x")})
    qs = [AuditQuery(limit=None), AuditQuery(limit=50), AuditQuery(tenant="tenant-1", limit=None),
          AuditQuery(kind="preemption", limit=None), AuditQuery(kind="migration", tenant="tenant-2"),
          AuditQuery(strategy="fgd", limit=None), AuditQuery(node="node-00007", limit=None),
          AuditQuery(node="node-00012", tenant="tenant-3"), AuditQuery(since=1_750_000_100_000, until=1_750_000_900_000),
          AuditQuery(tenant="tenant-0", since=1_750_000_100_000, until=1_750_000_900_000, limit=None)]
    qs += [AuditQuery(task=t, limit=None) for t in tasks]
    qs += [AuditQuery(preempted_by=f"bench-task-{n:07d}", limit=None) for n in range(1, 600, 7)]
    return qs


def test_raw_fold_gives_the_same_index_and_answers_as_the_per_record_fold(topic_records, backend):
    codec, records = topic_records
    old, new, (old_total, new_total) = _fold_both(codec, records, backend)
    assert old_total == new_total
    applied, duplicates, skipped, ignored = new_total
    assert applied == 1500 + 2 and duplicates == 1 and skipped == 0 and ignored == 8
    a, b = _contents(old), _contents(new)
    # Every key but the rows' values and the stored writer schemas is byte for byte the same.
    assert {k for k in a} == {k for k in b if not k.startswith(b"schema\x00")}
    assert {k: v for k, v in a.items() if not k.startswith(b"row\x00")} == \
        {k: v for k, v in b.items() if not k.startswith((b"row\x00", b"schema\x00"))}
    assert any(v.startswith(b"\x01") for k, v in b.items() if k.startswith(b"row\x00"))   # raw rows were used
    for key in (k for k in a if k.startswith(b"row\x00")):
        ra, rb = old._row(key[4:]), new._row(key[4:])
        assert json.dumps(ra) == json.dumps(rb)          # equal, and in the same key order
    for q in _queries(records):
        assert json.dumps(old.query(q)) == json.dumps(new.query(q)), q
    for task in ("bench-task-0000001", "bench-task-0000010", "bench-task-0000333", "t\\ask\x00x"):
        assert old.why(task) == new.why(task)
    preemptions = old.query(AuditQuery(kind="preemption", limit=None))
    preemptors = {r["detail"]["preempted_by"] for r in preemptions}
    assert preemptors
    # The preempted_by filter reads the raw rows' field without decoding them.
    raw = new.store.get(b"row\x00" + preemptions[0]["event_id"].encode())
    assert raw.startswith(b"\x01") and new._raw_field(raw, "preempted_by") == preemptions[0]["detail"]["preempted_by"].encode()
    for task in sorted(preemptors)[:20]:
        got = new.query(AuditQuery(preempted_by=task, limit=None))
        assert got and got == old.query(AuditQuery(preempted_by=task, limit=None))


def test_an_older_raw_index_gets_the_preemptor_keys_from_its_raw_rows_on_opening(topic_records, backend):
    codec, records = topic_records
    _old, new, _totals = _fold_both(codec, records, backend)
    contents = _contents(new)
    assert any(k.startswith(b"ix\x00preemptor\x00") for k in contents)
    older = Batch()                     # the index as the code before the preemptor keys left it
    for key in [k for k in contents if k.startswith(b"ix\x00preemptor\x00")] + [b"meta\x00layout"]:
        older.delete(key)
    new.store.write(older)
    AuditIndex(new.store)               # opened writable: brought up to the layout
    assert _contents(new) == contents


def test_raw_refold_is_idempotent_and_chunking_does_not_matter(topic_records, backend):
    codec, records = topic_records
    decode = _decode(codec)
    schemas = WriterSchemas(codec)
    one = AuditIndex(backend("one"))
    for i in range(0, len(records), 1000):
        one.apply_raw(records[i:i + 1000], schemas, decode)
    before = _contents(one)
    again = one.apply_raw(records, schemas, decode)
    assert (again.applied, again.skipped) == (0, len(records))
    assert _contents(one) == before
    other = AuditIndex(backend("other"))
    for i in range(0, len(records), 13):
        other.apply_raw(records[i:i + 13], schemas, decode)
    assert _contents(other) == before


def test_raw_keys_equal_the_keys_of_the_decoded_row():
    codec = Codec(DictRegistry())
    rnd = random.Random(3)
    for kind, payload in synthetic_decisions(600, tenants=3, nodes=20, seed=9):
        if rnd.random() < 0.2:      # ids that need escaping
            payload = dict(payload, task_id=payload["task_id"] + "\\\x00", tenant="t\x00" + payload["tenant"])
        value = codec.encode(kind, payload)
        fields = compile_extractor(codec.events[kind].schema)(value)
        row = entry(kind, payload, (TOPIC, 0, 1))
        assert sorted(raw_index_keys(kind, fields)) == sorted(index_keys(row))


def test_every_decision_schema_compiles_and_the_registry_form_is_the_same_schema():
    for kind in KINDS:
        schema = catalog()[kind].schema
        assert compile_extractor(schema) is not None, kind
        assert compile_extractor(_strip_nested_namespaces(schema)) is not None, kind
        assert same_schema(schema, _strip_nested_namespaces(schema))
    placed = catalog()[m.TaskPlaced.KIND].schema
    changed = copy.deepcopy(placed)
    changed["fields"][0]["name"] = "id"
    assert not same_schema(placed, changed)
    assert compile_field_reader(catalog()[m.TaskPreempted.KIND].schema, "preempted_by") is not None


def mutated(rnd: random.Random, record: bytes) -> bytes:
    """``record`` with one random change past its header: a byte set, bytes cut, bytes
    inserted, or a bit flipped."""
    value = bytearray(record)
    how, at = rnd.randrange(4), rnd.randrange(5, len(value))
    if how == 0:
        value[at] = rnd.randrange(256)
    elif how == 1:
        del value[at:at + rnd.randrange(1, 4)]
    elif how == 2:
        value[at:at] = bytes(rnd.randrange(256) for _ in range(rnd.randrange(1, 3)))
    else:
        value[at] ^= 1 << rnd.randrange(8)
    return bytes(value)


def test_the_extractor_never_accepts_what_fastavro_reads_differently():
    """Mutated records: whenever the extractor accepts one, the codec decodes it to the
    same index fields (the contract that lets the fold skip decoding)."""
    codec = Codec(DictRegistry())
    rnd = random.Random(11)
    decisions = list(synthetic_decisions(300, seed=4))
    accepted = 0
    for _ in range(3000):
        kind, payload = rnd.choice(decisions)
        value = mutated(rnd, codec.encode(kind, payload))
        try:
            fields = compile_extractor(codec.events[kind].schema)(value)
        except EXTRACT_ERRORS:
            continue
        accepted += 1
        got_kind, decoded = codec.decode(value)      # raises DecodeError if the contract broke
        assert got_kind == kind
        assert sorted(raw_index_keys(kind, fields)) == sorted(index_keys(entry(kind, decoded, (TOPIC, 0, 0))))
    assert accepted > 100     # the mutations do not all break the record
