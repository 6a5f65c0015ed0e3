"""A small client for the Confluent Schema Registry REST API.

It speaks only the calls that common Confluent clients make (see STACK-NOTES.md), so it
works against the embedded registry and any Confluent-compatible one. Errors become
:class:`RegistryError` (or :class:`IncompatibleSchemaError` for HTTP 409) carrying the
registry's own message.
"""
from __future__ import annotations

import json
import threading
from typing import Any

import httpx

from suanli.errors import IncompatibleSchemaError, RegistryError

CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"


class RegistryClient:
    """Thread-safe client with a cache of schemas by id (ids never change meaning)."""

    def __init__(self, base_url: str, *, timeout: float = 10.0):
        self.base_url = base_url.rstrip("/")
        self._http = httpx.Client(timeout=timeout, headers={"Accept": CONTENT_TYPE})
        self._by_id: dict[int, dict] = {}
        self._lock = threading.Lock()

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> RegistryClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- plumbing -------------------------------------------------------------------
    def _call(self, method: str, path: str, body: Any = None, *, ok_404: bool = False) -> Any:
        url = f"{self.base_url}{path}"
        try:
            response = self._http.request(
                method, url,
                content=None if body is None else json.dumps(body),
                headers={"Content-Type": CONTENT_TYPE} if body is not None else None,
            )
        except httpx.HTTPError as exc:
            raise RegistryError(f"schema registry at {self.base_url} unreachable: {exc}") from exc
        if response.status_code == 404 and ok_404:
            return None
        if response.status_code >= 400:
            try:
                detail = response.json()
            except ValueError:
                detail = {"message": response.text[:500]}
            message = detail.get("message") or detail.get("detail") or str(detail)
            code = detail.get("error_code")
            cls = IncompatibleSchemaError if response.status_code == 409 else RegistryError
            raise cls(f"{method} {path} -> HTTP {response.status_code}: {message}",
                      status=response.status_code, error_code=code)
        return response.json() if response.content else None

    # -- API ------------------------------------------------------------------------
    def subjects(self) -> list[str]:
        return list(self._call("GET", "/subjects"))

    def register(self, subject: str, schema: dict | str) -> int:
        """Register ``schema`` under ``subject`` (idempotent) and return its id.

        Raises :class:`IncompatibleSchemaError` when the subject's compatibility rule refuses it.
        """
        text = schema if isinstance(schema, str) else json.dumps(schema, sort_keys=True, separators=(",", ":"))
        result = self._call("POST", f"/subjects/{subject}/versions", {"schema": text, "schemaType": "AVRO"})
        schema_id = int(result["id"])
        with self._lock:
            self._by_id.setdefault(schema_id, json.loads(text))
        return schema_id

    def lookup(self, subject: str, schema: dict | str) -> int | None:
        """The id of ``schema`` if it is registered under ``subject``, else None."""
        text = schema if isinstance(schema, str) else json.dumps(schema, sort_keys=True, separators=(",", ":"))
        result = self._call("POST", f"/subjects/{subject}", {"schema": text, "schemaType": "AVRO"}, ok_404=True)
        return None if result is None else int(result["id"])

    def schema_by_id(self, schema_id: int) -> dict | None:
        """The writer schema with this id, or None if the registry does not know it."""
        with self._lock:
            cached = self._by_id.get(schema_id)
        if cached is not None:
            return cached
        result = self._call("GET", f"/schemas/ids/{schema_id}", ok_404=True)
        if result is None:
            return None
        schema = json.loads(result["schema"])
        with self._lock:
            self._by_id[schema_id] = schema
        return schema

    def latest(self, subject: str) -> dict | None:
        """``{"id", "version", "schema"}`` of the subject's latest version, or None."""
        result = self._call("GET", f"/subjects/{subject}/versions/latest", ok_404=True)
        if result is None:
            return None
        return {"id": int(result["id"]), "version": int(result["version"]), "schema": json.loads(result["schema"])}

    def set_compatibility(self, level: str, subject: str | None = None) -> None:
        path = "/config" if subject is None else f"/config/{subject}"
        self._call("PUT", path, {"compatibility": level})

    def get_compatibility(self, subject: str | None = None) -> str | None:
        path = "/config" if subject is None else f"/config/{subject}"
        result = self._call("GET", path, ok_404=True)
        if result is None:
            return None
        return result.get("compatibilityLevel") or result.get("compatibility")

    def is_compatible(self, subject: str, schema: dict | str) -> bool:
        text = schema if isinstance(schema, str) else json.dumps(schema, sort_keys=True, separators=(",", ":"))
        result = self._call("POST", f"/compatibility/subjects/{subject}/versions/latest",
                            {"schema": text, "schemaType": "AVRO"})
        return bool(result.get("is_compatible"))
