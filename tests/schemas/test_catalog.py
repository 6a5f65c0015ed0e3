"""The event contract is well-formed: one namespace, documented, typed time, parseable."""
from __future__ import annotations

import json

import avro.schema
import fastavro

from suanli.processors.model import TASK_DECISION_KINDS
from suanli.schemas.catalog import NAMESPACE, catalog, load_named_types

REQUIRED_EVENTS = {
    "NodeRegistered", "NodeHeartbeat", "NodeMetrics", "NodeStatusChanged", "LinkMetrics",
    "TaskSubmitted", "TaskCancelled", "TaskStatusChanged",
    "ReservationBid", "ReservationGranted", "ReservationReleased", "ReservationExpired",
    "TaskPlaced", "TaskPending", "TaskUnschedulable", "TaskPreempted", "TaskMigrated",
    "DispatchCommand", "DispatchAck", "PrewarmCommand", "PolicyChanged", "DeadLetter",
}
DECISIONS = TASK_DECISION_KINDS


def _records(schema):
    if isinstance(schema, dict):
        if schema.get("type") == "record":
            yield schema
            for field in schema["fields"]:
                yield from _records(field["type"])
        for key in ("items", "values"):
            if key in schema:
                yield from _records(schema[key])
        if isinstance(schema.get("type"), (dict, list)):
            yield from _records(schema["type"])
    elif isinstance(schema, list):
        for branch in schema:
            yield from _records(branch)


def test_every_event_family_is_present():
    assert REQUIRED_EVENTS <= set(catalog())


def test_one_namespace_and_a_doc_on_every_record_and_field():
    for name, schema in load_named_types().items():
        assert schema.get("namespace") == NAMESPACE, name
        assert schema.get("doc"), f"{name} has no doc"
        for record in _records(schema):
            for field in record["fields"]:
                assert field.get("doc"), f"{record['name']}.{field['name']} has no doc"


def test_time_fields_use_timestamp_logical_type():
    time_names = {"at", "submitted_at", "registered_at", "decided_at", "issued_at", "start_at", "end_at", "deadline"}
    seen = 0
    for event in catalog().values():
        for record in _records(event.schema):
            for field in record["fields"]:
                if field["name"] in time_names:
                    branches = field["type"] if isinstance(field["type"], list) else [field["type"]]
                    logical = [b for b in branches if isinstance(b, dict) and b.get("logicalType") == "timestamp-millis"]
                    assert logical, f"{record['name']}.{field['name']} is not timestamp-millis"
                    seen += 1
    assert seen > 20


def test_decisions_carry_provenance():
    for name in DECISIONS:
        fields = {f["name"]: f for f in catalog()[name].schema["fields"]}
        assert "provenance" in fields, name
        provenance = {f["name"] for f in fields["provenance"]["type"]["fields"]} if isinstance(
            fields["provenance"]["type"], dict) else None
        if provenance is not None:  # first use in the schema carries the definition
            assert {"input", "strategy", "candidates", "filtered", "path", "decided_at"} <= provenance


def test_dead_letter_keeps_reason_and_original_bytes():
    fields = {f["name"] for f in catalog()["DeadLetter"].schema["fields"]}
    assert {"reason", "value", "key", "source_topic", "source_partition", "source_offset"} <= fields


def test_expanded_schemas_parse_in_fastavro_and_the_avro_reference_library():
    for event in catalog().values():
        fastavro.parse_schema(event.schema, named_schemas={})
        avro.schema.parse(event.canonical_json())
        assert json.loads(event.canonical_json()) == event.schema
