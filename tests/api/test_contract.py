"""The REST API, the gRPC proto and the Avro contract must not drift apart.

* every REST operation is a gRPC method of the same name, taking the same parameters and
  returning a message with the same name and fields as the REST response model;
* every pydantic model of ``api/models.py`` that has a proto message has exactly its
  fields, with compatible types;
* the proto messages that mirror Avro records have every Avro field with a compatible type;
  every field of the decision events is in ``AuditDecision`` and of ``ReservationBid`` in
  ``BidView``;
* every field of ``TaskSubmitted`` is either fed by a field of the proto ``TaskSpec`` with a
  compatible type, or is explicitly set by the server / not offered by the API (a new Avro
  field fails this test until someone decides which);
* the committed Python stubs are what the proto compiles to today.
"""
from __future__ import annotations

import types
import typing

import pytest
from api_helpers import ListSink, make_service
from fastapi.routing import APIRoute
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from pydantic import BaseModel

from suanli.api import models as api_models
from suanli.api import suanli_pb2 as pb
from suanli.api.auth import TokenStore
from suanli.api.rest import create_app
from suanli.schemas.catalog import catalog, load_named_types

F = FieldDescriptor
SERVICE = pb.DESCRIPTOR.services_by_name["Suanli"]
MESSAGES = pb.DESCRIPTOR.message_types_by_name
AVRO_TYPES = {name.rsplit(".", 1)[1]: schema for name, schema in load_named_types().items()}
# Records of TaskResources (AcceleratorRequest) and the decision events are defined inline.
AVRO_TYPES["AcceleratorRequest"] = next(f["type"]["items"] for f in AVRO_TYPES["TaskResources"]["fields"]
                                        if f["name"] == "accelerators")
INTS = {F.TYPE_INT32, F.TYPE_INT64, F.TYPE_SINT32, F.TYPE_SINT64, F.TYPE_UINT32, F.TYPE_UINT64}


def _repeated(field: FieldDescriptor) -> bool:
    return bool(getattr(field, "is_repeated", field.label == F.LABEL_REPEATED))


def _is_map(field: FieldDescriptor) -> bool:
    return field.message_type is not None and field.message_type.GetOptions().map_entry


def _routes() -> list[APIRoute]:
    app = create_app(make_service(ListSink()), TokenStore({"token-123456": "t"}))
    return [r for r in app.routes if isinstance(r, APIRoute)]


# ------------------------------------------------------------------ Avro <-> proto
def _avro_compatible(avro: typing.Any, field: FieldDescriptor, where: str, element: bool = False) -> None:
    """Assert the proto ``field`` can carry every value of Avro type ``avro``."""
    if isinstance(avro, list):           # ["null", X]: optional X
        others = [t for t in avro if t != "null"]
        assert len(others) == 1, f"{where}: only [null, X] unions are mapped"
        assert "null" not in avro or field.has_presence or _repeated(field) or field.message_type, \
            f"{where}: nullable in Avro, so the proto field needs presence (optional)"
        return _avro_compatible(others[0], field, where, element)
    if isinstance(avro, dict) and avro.get("type") in ("array", "map") and not element:
        if avro["type"] == "map":
            assert _is_map(field), f"{where}: Avro map needs a proto map"
            value = field.message_type.fields_by_name["value"]
            return _avro_compatible(avro["values"], value, where, element=True)
        assert _repeated(field) and not _is_map(field), f"{where}: Avro array needs a repeated field"
        return _avro_compatible(avro["items"], field, where, element=True)
    assert element or not _repeated(field), f"{where}: proto field is repeated, Avro is not an array"
    schema = None
    if isinstance(avro, dict) and avro.get("type") in ("record", "enum"):
        schema = avro                      # defined inline
    elif isinstance(avro, dict):
        avro = avro["type"]                # a primitive with a logicalType
    if isinstance(avro, str) and avro not in ("string", "int", "long", "double", "float", "boolean"):
        schema = AVRO_TYPES[avro.rsplit(".", 1)[-1]]
    if schema is not None:
        name = schema["name"]
        if schema["type"] == "enum":
            if field.type == F.TYPE_ENUM:
                assert {v.name for v in field.enum_type.values} >= set(schema["symbols"]), where
            else:
                assert field.type == F.TYPE_STRING, f"{where}: Avro enum {name} needs a string or an enum"
            return
        assert field.type == F.TYPE_MESSAGE and field.message_type.name == name, \
            f"{where}: Avro record {name} needs the proto message {name}"
        return _mirror(schema, field.message_type, where)
    expected = {"string": {F.TYPE_STRING}, "int": INTS, "long": INTS - {F.TYPE_INT32, F.TYPE_SINT32, F.TYPE_UINT32},
                "double": {F.TYPE_DOUBLE}, "float": {F.TYPE_FLOAT, F.TYPE_DOUBLE}, "boolean": {F.TYPE_BOOL}}[avro]
    assert field.type in expected, f"{where}: Avro {avro} is not compatible with proto type {field.type}"


def _mirror(record: dict, message: Descriptor, where: str, skip: tuple[str, ...] = ()) -> None:
    """Every field of Avro ``record`` (bar ``skip``) is a compatible field of ``message``."""
    for f in record["fields"]:
        if f["name"] in skip:
            continue
        assert f["name"] in message.fields_by_name, f"{where}.{f['name']}: missing in proto {message.name}"
        _avro_compatible(f["type"], message.fields_by_name[f["name"]], f"{where}.{f['name']}")


@pytest.mark.parametrize("name", ["LogPosition", "PendingReason", "AcceleratorRequest", "TaskResources",
                                  "StrategyRef", "Candidate", "FilterOutcome", "Provenance"])
def test_proto_mirrors_of_avro_records_have_every_field(name):
    record, message = AVRO_TYPES[name], MESSAGES[name]
    _mirror(record, message, name)
    assert set(message.fields_by_name) == {f["name"] for f in record["fields"]}, f"{name}: extra proto fields"


@pytest.mark.parametrize("kind", ["TaskPlaced", "TaskPending", "TaskUnschedulable", "TaskReleased"])
def test_every_decision_field_is_in_the_audit_message(kind):
    _mirror(catalog()[kind].schema, MESSAGES["AuditDecision"], kind)


def test_every_bid_field_is_in_the_bid_view():
    _mirror(catalog()["ReservationBid"].schema, MESSAGES["BidView"], "ReservationBid", skip=("event_id",))


# Avro TaskSubmitted field -> the proto TaskSpec fields that feed it (api/service.py ->
# schemas/task_spec.TaskSpec.to_event), or why no request field does.
FED_BY = {
    "task_id": ["id"],
    "cell": ["cell"],
    "resources.cpu_milli": ["resources.cpu_milli", "resources.cpu"],
    "resources.memory_mib": ["resources.memory_mib", "resources.memory"],
    "resources.gpu_count": ["resources.gpu"],
    "resources.gpu_milli": ["resources.gpu"],
    "resources.gpu_models": ["resources.gpu_models"],
    "qos_tier": ["qos"],
    "priority": ["priority"],
    "labels": ["labels"],
    "deadline": ["deadline_ms"],
    "duration_estimate_ms": ["duration_ms", "duration"],
    "command": ["command"],
    "env": ["env"],
    "resources.gpu_memory_mib": ["resources.gpu_memory_mib", "resources.gpu_memory"],
    "resources.accelerators": ["resources.accelerators"],
    "profile": ["model", "parallelism"],
    "job_id": ["job"],
}
SET_BY_SERVER = {"event_id", "submitted_at", "tenant"}         # tenant: always the token's
NOT_OFFERED: set[str] = set()                                 # every field is in the task form
# Derived fields are fed by a differently typed form field (cores -> millicores, "12Gi" ->
# MiB, a GPU share -> count and milli, "2h" -> ms, "gold" -> GOLD): those carry this type.
DERIVED = {("resources.cpu_milli", "resources.cpu"): F.TYPE_DOUBLE,
           ("resources.memory_mib", "resources.memory"): F.TYPE_STRING,
           ("resources.gpu_count", "resources.gpu"): F.TYPE_DOUBLE,
           ("resources.gpu_milli", "resources.gpu"): F.TYPE_DOUBLE,
           ("duration_estimate_ms", "duration"): F.TYPE_STRING,
           ("resources.gpu_memory_mib", "resources.gpu_memory"): F.TYPE_STRING,
           # the form's shapes: {kind, model, count} (kind checked), {arch, uri, size} and a count
           ("resources.accelerators", "resources.accelerators"): F.TYPE_MESSAGE,
           ("profile", "model"): F.TYPE_MESSAGE,
           ("profile", "parallelism"): F.TYPE_INT32}


def _avro_leaves(record: dict, prefix: str = "") -> dict[str, typing.Any]:
    out = {}
    for f in record["fields"]:
        t = f["type"]
        if f["name"] == "resources":
            out.update(_avro_leaves(AVRO_TYPES["TaskResources"], "resources."))
        else:
            out[prefix + f["name"]] = t
    return out


def _proto_field(path: str) -> FieldDescriptor:
    message = MESSAGES["TaskSpec"]
    *parents, leaf = path.split(".")
    for p in parents:
        message = message.fields_by_name[p].message_type
    assert leaf in message.fields_by_name, f"TaskSpec.{path} missing in the proto"
    return message.fields_by_name[leaf]


def test_every_task_submitted_field_is_fed_by_the_proto_task_spec():
    leaves = _avro_leaves(catalog()["TaskSubmitted"].schema)
    unmapped = set(leaves) - set(FED_BY) - SET_BY_SERVER - NOT_OFFERED
    assert not unmapped, f"TaskSubmitted fields the API does not account for: {sorted(unmapped)}"
    for avro_path, sources in FED_BY.items():
        for source in sources:
            field = _proto_field(source)
            derived = DERIVED.get((avro_path, source))
            if derived is not None:
                assert field.type == derived, f"TaskSpec.{source}: expected proto type {derived}"
                continue
            avro = leaves[avro_path]
            if avro_path == "qos_tier":
                assert field.type == F.TYPE_STRING, "qos is the lower-case tier name"
                continue
            _avro_compatible(avro, field, f"TaskSubmitted.{avro_path} <- TaskSpec.{source}")


# ------------------------------------------------------------------ pydantic <-> proto
def _py_compatible(annotation: typing.Any, field: FieldDescriptor, where: str, element: bool = False) -> None:
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        others = [a for a in args if a is not type(None)]
        if type(None) in args:
            assert field.has_presence or _repeated(field), f"{where}: optional in pydantic, needs presence in proto"
        if str in others:          # e.g. memory: str | int (a size or a number): a string carries both
            assert field.type == F.TYPE_STRING, f"{where}: a str union needs a proto string"
            return
        assert len(others) == 1, f"{where}: unmapped union {annotation}"
        return _py_compatible(others[0], field, where, element)
    if origin is list and not element:
        assert _repeated(field) and not _is_map(field), f"{where}: list needs a repeated field"
        return _py_compatible(args[0], field, where, element=True)
    if origin is dict:
        assert _is_map(field), f"{where}: dict needs a proto map"
        return _py_compatible(args[1], field.message_type.fields_by_name["value"], where, element=True)
    assert element or not _repeated(field), f"{where}: proto is repeated, pydantic is not a list"
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        assert field.type == F.TYPE_MESSAGE and field.message_type.name == annotation.__name__, \
            f"{where}: needs the proto message {annotation.__name__}"
        return
    expected = {str: {F.TYPE_STRING}, int: INTS, float: {F.TYPE_DOUBLE, F.TYPE_FLOAT}, bool: {F.TYPE_BOOL}}
    assert field.type in expected[annotation], f"{where}: {annotation} vs proto type {field.type}"


def _models() -> list[type[BaseModel]]:
    return [getattr(api_models, name) for name in api_models.__all__
            if isinstance(getattr(api_models, name), type) and issubclass(getattr(api_models, name), BaseModel)]


def test_every_api_model_is_a_proto_message_with_the_same_fields():
    for model in _models():
        assert model.__name__ in MESSAGES, f"api/models.py {model.__name__} has no proto message"
        message = MESSAGES[model.__name__]
        assert set(model.model_fields) == set(message.fields_by_name), \
            f"{model.__name__}: pydantic {sorted(model.model_fields)} != proto {sorted(message.fields_by_name)}"
        for name, info in model.model_fields.items():
            _py_compatible(info.annotation, message.fields_by_name[name], f"{model.__name__}.{name}")


# ------------------------------------------------------------------ REST <-> gRPC
def test_every_rest_operation_is_a_grpc_method_with_the_same_shape():
    routes = _routes()
    assert {r.operation_id for r in routes} == set(SERVICE.methods_by_name), "REST and gRPC operations differ"
    for route in routes:
        method = SERVICE.methods_by_name[route.operation_id]
        assert method.output_type.name == route.response_model.__name__, route.operation_id
        fields = method.input_type.fields_by_name
        for param in [*route.dependant.path_params, *route.dependant.query_params]:
            assert param.name in fields, f"{route.operation_id}: REST parameter {param.name} missing in gRPC"
        if route.body_field is not None:
            body = [a for a in typing.get_args(route.body_field.field_info.annotation) if a is not type(None)] \
                or [route.body_field.field_info.annotation]
            model = body[0]
            nested = [f for f in fields.values() if f.message_type is not None and f.message_type.name == model.__name__]
            assert nested or set(model.model_fields) <= set(fields), \
                f"{route.operation_id}: the body {model.__name__} is not in {method.input_type.name}"


def test_committed_grpc_stubs_are_current():
    from suanli.api.protogen import stale

    assert stale() == [], "run: python -m suanli.api.protogen"
