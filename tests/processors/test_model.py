"""The typed vocabulary mirrors the Avro contract and converts losslessly (no broker)."""
from __future__ import annotations

import dataclasses
import io

import fastavro
import pytest
from fastavro.utils import generate_many

from suanli.errors import ModelError
from suanli.processors import model as m
from suanli.schemas.catalog import catalog, load_named_types
from suanli.schemas.codec import parse_plain, strip_logical_types

EVENTS = catalog()


def _encode(parsed, record) -> bytes:
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, parsed, record)
    return buf.getvalue()


@pytest.mark.parametrize("kind", sorted(EVENTS))
def test_every_event_has_a_type_with_its_kind(kind):
    cls = m.RECORDS[kind]
    assert cls.KIND == kind and kind in m.EVENT_KINDS


@pytest.mark.parametrize("fullname", sorted(n for n, s in load_named_types().items() if s.get("type") == "record"))
def test_fields_mirror_the_schema(fullname):
    """Same field names in the same order; a dataclass default exactly where Avro has one."""
    schema = load_named_types()[fullname]
    cls = m.RECORDS[schema["name"]]
    fields = dataclasses.fields(cls)
    assert [f.name for f in fields] == [f["name"] for f in schema["fields"]]
    for f, a in zip(fields, schema["fields"]):
        has_default = f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING
        assert has_default == ("default" in a), f"{cls.__name__}.{f.name}"
        if has_default:
            d = f.default if f.default is not dataclasses.MISSING else f.default_factory()
            assert m.to_avro(d) == a["default"], f"{cls.__name__}.{f.name}"


@pytest.mark.parametrize("kind", sorted(EVENTS))
def test_avro_to_type_to_avro_is_byte_identical(kind):
    """Random records of every event: bytes -> Avro dict -> type -> Avro dict -> same bytes."""
    parsed = parse_plain(EVENTS[kind].schema)
    plain = strip_logical_types(EVENTS[kind].schema)
    for record in generate_many(plain, 40):
        data = _encode(parsed, record)
        decoded = fastavro.schemaless_reader(io.BytesIO(data), parsed, None)
        value = m.from_avro(kind, decoded)
        assert isinstance(value, m.RECORDS[kind])
        assert _encode(parsed, m.to_avro(value)) == data


def test_values_are_frozen_and_nested_types_are_built():
    e = m.from_avro("TaskSubmitted", {
        "event_id": "e", "task_id": "t", "tenant": "a", "cell": "c", "submitted_at": 5,
        "resources": {"cpu_milli": 100, "memory_mib": 10, "gpu_count": 1, "gpu_models": ["V100", "T4", "T4"]},
        "command": ["python", "-c", "pass"], "env": {"K": "V"}})
    assert isinstance(e.resources, m.TaskResources) and e.command == ("python", "-c", "pass")
    with pytest.raises(dataclasses.FrozenInstanceError):
        e.task_id = "x"
    task = m.Task.of(e)
    assert task.request == m.Request(100, 10, 1, 1000, ("T4", "V100"))    # milli defaults to a whole GPU
    assert task.request.kind == "whole" and task.env == {"K": "V"}
    assert m.Task.from_json(task.to_json()) == task


@pytest.mark.parametrize("payload, message", [
    ({"task_id": "t"}, "required field 'event_id' is missing"),
    ({"event_id": "e", "task_id": "t", "tenant": "a", "cell": "c", "submitted_at": 1, "resources": {"cpu_milli": 1}},
     "TaskResources: required field 'memory_mib' is missing"),
    ({"event_id": "e", "task_id": "t", "tenant": "a", "cell": "c", "submitted_at": 1, "resources": 7},
     "TaskSubmitted.resources"),
])
def test_missing_or_misshapen_fields_are_named(payload, message):
    with pytest.raises(ModelError, match=message):
        m.from_avro("TaskSubmitted", payload)


def test_policy_changed_carries_canonical_json():
    p = m.PolicyChanged.of("c", "bestfit", {"seed": 3, "b": [1, 2]})
    assert p.config_json == '{"b":[1,2],"seed":3}' and p.config() == {"b": [1, 2], "seed": 3}
    with pytest.raises(ModelError, match="JSON object"):
        m.PolicyChanged.of("c", "bestfit").__class__(event_id="", cell="c", strategy="x", config_json="[1]",
                                                      at=0).config()


def test_kind_sets_are_disjoint_and_named_once():
    assert not (m.CELL_INPUT_KINDS & m.DECISION_KINDS)
    assert m.NODE_EVENT_KINDS <= m.CELL_INPUT_KINDS
    assert m.TASK_DECISION_KINDS <= m.DECISION_KINDS
    assert (m.CELL_INPUT_KINDS | m.DECISION_KINDS) <= m.EVENT_KINDS == set(EVENTS)


def test_node_of_a_registration():
    e = m.from_avro("NodeRegistered", {
        "event_id": "e", "node_id": "n", "cell": "c", "site": "s", "region": "r", "zone": "z", "tier": "edge",
        "arch": "arm64", "cpu_milli": 8000, "memory_mib": 1024, "registered_at": 0,
        "accelerators": [{"kind": "GPU", "model": "T4", "count": 2, "memory_mib": 16384},
                         {"kind": "NPU", "model": "Ascend", "count": 4}]})
    node = m.Node.of(e)
    assert (node.gpu_count, node.gpu_model, node.gpu_memory_mib, node.zone) == (2, "T4", 16384, "z")
    assert [d.index for d in node.devices] == [0, 1] and node.devices[1].model == "T4"
    assert m.Node.from_json(node.to_json()) == node


@pytest.mark.parametrize("kind", sorted(m.CELL_INPUT_KINDS))
def test_every_cell_input_carries_its_time_in_the_field_the_table_names(kind):
    """``model.time_field`` is where both the core (typed records) and readers of raw
    records (``input_time``) find an input's time: a new kind that keeps its time elsewhere
    must say so in ``TIME_FIELDS``, or the cell clock would silently skip it."""
    cls = m.RECORDS[kind]
    field = m.time_field(kind)
    assert field in {f.name for f in dataclasses.fields(cls)}, f"{kind} has no {field!r}"
    assert m.input_time(kind, {field: 1234}) == 1234
    assert m.input_time(kind, {}) == 0


def test_a_job_round_is_the_one_input_off_the_cell_clock():
    assert m.OFF_CLOCK_KINDS == {m.JobRound.KIND}
    assert m.OFF_CLOCK_KINDS <= m.CELL_INPUT_KINDS
