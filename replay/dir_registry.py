"""An offline schema source for :class:`~suanli.schemas.codec.Codec`, backed by files.

It answers the :class:`~suanli.schemas.registry.RegistryClient` calls the codec makes
(``schema_by_id`` to decode, ``register`` to encode) from a fixed ``{id: schema}`` map,
normally a log directory's ``schemas/ID.avsc`` files. ``register`` does not register
anything: it returns the id of the stored schema with the same Avro meaning (same
canonical JSON, or failing that the same Parsing Canonical Form, which fixes the binary
encoding). A schema the map does not hold (the event contract changed since the log was
recorded) gets a *local* id from :data:`LOCAL_ID_BASE` up, listed in :attr:`local`, so a
replay still runs and a byte comparison shows the difference instead of crashing.
"""
from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

from fastavro.schema import parse_schema, to_parsing_canonical_form

from suanli.errors import ReplayError

LOCAL_ID_BASE = 0x7F000000


def _canonical(schema: Any) -> str:
    return json.dumps(schema, sort_keys=True, separators=(",", ":"))


def _pcf(schema: Any) -> str | None:
    try:
        return to_parsing_canonical_form(parse_schema(schema, named_schemas={}))
    except Exception:  # noqa: BLE001 - a schema fastavro cannot parse simply never matches
        return None


def subject_of(schema: Any) -> str | None:
    """The full name (registry subject) of a record schema; None for anything else."""
    if isinstance(schema, dict) and "name" in schema:
        ns = schema.get("namespace")
        return f"{ns}.{schema['name']}" if ns and "." not in schema["name"] else schema["name"]
    return None


class DirRegistry:
    """Read-only, in-memory registry over ``{schema_id: schema}`` (see module docstring)."""

    def __init__(self, schemas: dict[int, Any]):
        self._by_id: dict[int, Any] = {int(k): v for k, v in schemas.items()}
        self._by_canonical = {_canonical(s): i for i, s in sorted(self._by_id.items())}
        self._by_pcf: dict[str, int] = {}
        for i, s in sorted(self._by_id.items()):
            pcf = _pcf(s)
            if pcf is not None:
                self._by_pcf.setdefault(pcf, i)
        self.local: dict[str, int] = {}      # subject -> local id of schemas not in the map
        self._lock = threading.Lock()

    @classmethod
    def from_dir(cls, path: Path) -> "DirRegistry":
        """Load ``path/ID.avsc`` files."""
        if not path.is_dir():
            raise ReplayError(f"{path} is missing: the log directory carries no writer schemas")
        schemas = {}
        for f in sorted(path.glob("*.avsc")):
            try:
                schemas[int(f.stem)] = json.loads(f.read_text())
            except ValueError as exc:
                raise ReplayError(f"{f}: not a schema file named by its id ({exc})") from None
        return cls(schemas)

    # ---- the RegistryClient surface the codec and tools use ----------------------
    def schema_by_id(self, schema_id: int) -> Any | None:
        return self._by_id.get(int(schema_id))

    def lookup(self, subject: str, schema: dict | str) -> int | None:
        obj = json.loads(schema) if isinstance(schema, str) else schema
        hit = self._by_canonical.get(_canonical(obj))
        if hit is None:
            pcf = _pcf(obj)
            hit = self._by_pcf.get(pcf) if pcf is not None else None
        return hit

    def register(self, subject: str, schema: dict | str) -> int:
        hit = self.lookup(subject, schema)
        if hit is not None:
            return hit
        obj = json.loads(schema) if isinstance(schema, str) else schema
        with self._lock:
            sid = LOCAL_ID_BASE + len(self.local)
            self.local[subject] = sid
            self._by_id[sid] = obj
            self._by_canonical[_canonical(obj)] = sid
        return sid

    def subjects(self) -> list[str]:
        return sorted({s for s in map(subject_of, self._by_id.values()) if s})

    def schemas(self) -> dict[int, Any]:
        return dict(self._by_id)

    def close(self) -> None:
        return None

    def __enter__(self) -> "DirRegistry":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
