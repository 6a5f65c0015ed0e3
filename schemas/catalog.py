"""The event contract: loads the Avro schemas kept in ``schemas/avro/``.

Each ``.avsc`` file holds one named type, named by its full name
(``io.suanli.events.TaskSubmitted.avsc``). Shared types (``Provenance``, ``TaskResources``
and so on) live in files of their own and are referenced by full name. :func:`expand`
inlines those references, so every *event* schema that goes to the registry is
self-contained: clients in other languages fetch one schema and need nothing else.

An *event* is a record whose first field is ``event_id``; only events get a registry
subject (RecordNameStrategy: the subject is the record's full name).
"""
from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from suanli.errors import SchemaError

NAMESPACE = "io.suanli.events"
AVRO_DIR = Path(__file__).resolve().parent / "avro"
RELEASED_DIR = Path(__file__).resolve().parent / "released"

_PRIMITIVES = {"null", "boolean", "int", "long", "float", "double", "bytes", "string"}


@dataclass(frozen=True)
class EventSchema:
    """One event type of the contract."""

    name: str          # short name, e.g. "TaskSubmitted"
    fullname: str      # "io.suanli.events.TaskSubmitted"; also the registry subject
    schema: dict       # self-contained (expanded) schema, as registered

    @property
    def subject(self) -> str:
        return self.fullname

    def canonical_json(self) -> str:
        """The schema as compact JSON with sorted keys: what is sent to the registry."""
        return json.dumps(self.schema, sort_keys=True, separators=(",", ":"))


def load_named_types(directory: Path = AVRO_DIR) -> dict[str, dict]:
    """Read every ``.avsc`` in ``directory`` into ``{fullname: schema}``.

    Raises :class:`SchemaError` if a file is not JSON or is not named after its type.
    """
    types: dict[str, dict] = {}
    for path in sorted(directory.glob("*.avsc")):
        try:
            schema = json.loads(path.read_text())
        except json.JSONDecodeError as exc:
            raise SchemaError(f"{path}: not valid JSON: {exc}") from exc
        fullname = f"{schema.get('namespace', NAMESPACE)}.{schema['name']}"
        if path.name != f"{fullname}.avsc":
            raise SchemaError(f"{path}: file must be named {fullname}.avsc")
        types[fullname] = schema
    if not types:
        raise SchemaError(f"no .avsc files in {directory}")
    return types


def expand(schema: Any, types: dict[str, dict], defined: set[str] | None = None) -> Any:
    """Inline named-type references: the first use gets the full definition, later uses
    keep the name (Avro forbids redefining a name within one schema)."""
    defined = set() if defined is None else defined
    if isinstance(schema, str):
        if schema in _PRIMITIVES:
            return schema
        fullname = schema if "." in schema else f"{NAMESPACE}.{schema}"
        if fullname in defined:
            return fullname
        if fullname not in types:
            raise SchemaError(f"unknown type {schema!r}")
        return expand(copy.deepcopy(types[fullname]), types, defined)
    if isinstance(schema, list):
        return [expand(s, types, defined) for s in schema]
    if isinstance(schema, dict):
        kind = schema.get("type")
        if kind in ("record", "enum", "fixed"):
            defined.add(f"{schema.get('namespace', NAMESPACE)}.{schema['name']}")
        if kind == "record":
            out = dict(schema)
            out["fields"] = [dict(fld, type=expand(fld["type"], types, defined)) for fld in schema["fields"]]
            return out
        if kind == "array":
            return dict(schema, items=expand(schema["items"], types, defined))
        if kind == "map":
            return dict(schema, values=expand(schema["values"], types, defined))
        if isinstance(kind, (dict, list)) or (isinstance(kind, str) and kind not in _PRIMITIVES
                                              and kind not in ("enum", "fixed")):
            return dict(schema, type=expand(kind, types, defined))
        return schema
    raise SchemaError(f"unexpected schema fragment {schema!r}")


def event_schemas(directory: Path = AVRO_DIR) -> dict[str, EventSchema]:
    """All event types in ``directory``, by short name, expanded and self-contained."""
    types = load_named_types(directory)
    events: dict[str, EventSchema] = {}
    for fullname, schema in types.items():
        if schema.get("type") == "record" and schema["fields"] and schema["fields"][0]["name"] == "event_id":
            events[schema["name"]] = EventSchema(schema["name"], fullname, expand(fullname, types))
    return events


@cache
def catalog() -> dict[str, EventSchema]:
    """The current contract (cached): every event schema of ``schemas/avro``."""
    return event_schemas(AVRO_DIR)


def released_versions() -> list[Path]:
    """Folders of released contract versions (``schemas/released/v1``...), oldest first."""
    return sorted((p for p in RELEASED_DIR.glob("v*") if p.is_dir()), key=lambda p: int(p.name[1:]))
