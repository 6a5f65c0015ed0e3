"""API tokens: one bearer token per tenant, from a file named by ``SUANLI_API_TOKENS``.

The file is TOML (``*.toml``) or JSON (anything else), either a flat mapping or a
``tokens`` table/object, token -> tenant::

    operators = ["ops"]          # optional, before the tables: who may drain nodes, set policies
    [tokens]
    "s3cr3t-vision" = "vision"
    "s3cr3t-speech" = "speech"
    "s3cr3t-ops" = "ops"

A key may be the token's SHA-256 digest instead of the token, ``"sha256:<64 hex>"``
(``suanli api hash-token`` prints it), so that the file holds no usable secret; the store
keeps only digests either way. Tokens are long random strings, so a fast digest is enough
(no salt or stretching: there is nothing to guess from). A plaintext key still works; the
server warns once at start, naming its tenants.

Contract: :meth:`TokenStore.tenant` returns the tenant of a token or raises
:class:`~suanli.errors.AuthError` (missing, malformed or unknown token); it never says
which of those it was beyond a short reason, and compares tokens in constant time.

Operators: nodes and cells are shared by every tenant, so changing one (``POST
/v1/nodes/{id}/drain``, ``/uncordon``, ``PUT /v1/cells/{cell}/policy``) is open only to the
tenants listed in ``operators`` (a list next to ``tokens``, only with the ``tokens`` form;
each must own a token). None by default.
"""
from __future__ import annotations

import hashlib
import hmac
import json
import logging
import os
import re
import tomllib
from pathlib import Path

from suanli.errors import AuthError, ConfigError

ENV_VAR = "SUANLI_API_TOKENS"
_TENANT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")
_HASHED = re.compile(r"^sha256:[0-9a-f]{64}$")
log = logging.getLogger(__name__)


def hash_token(token: str) -> str:
    """The stored form of a token: ``sha256:<hex digest>``."""
    return "sha256:" + hashlib.sha256(token.encode()).hexdigest()


class TokenStore:
    """An immutable token -> tenant mapping, kept as digests. Keys are tokens or their
    stored form (:func:`hash_token`)."""

    def __init__(self, tokens: dict[str, str], operators: frozenset[str] | set[str] = frozenset()):
        for token, tenant in tokens.items():
            if not isinstance(token, str) or len(token) < 8:
                raise ConfigError("API tokens must be strings of at least 8 characters")
            if token.startswith("sha256:") and not _HASHED.match(token):
                raise ConfigError(f"API token for tenant {tenant!r}: a hashed token is 'sha256:' and 64 lowercase "
                                  "hex digits (suanli api hash-token prints it)")
            if not isinstance(tenant, str) or not _TENANT.match(tenant):
                raise ConfigError(f"API token for tenant {tenant!r}: tenant must match {_TENANT.pattern}")
        self.plaintext_tenants = sorted({tenant for token, tenant in tokens.items() if not _HASHED.match(token)})
        self._tokens = {bytes.fromhex((token if _HASHED.match(token) else hash_token(token))[7:]): tenant
                        for token, tenant in tokens.items()}
        unknown = sorted(set(operators) - set(self._tokens.values()))
        if unknown:
            raise ConfigError(f"API operators {unknown} own no token: list tenants of the tokens table")
        self.operators = frozenset(operators)

    @property
    def tenants(self) -> set[str]:
        return set(self._tokens.values())

    def tenant(self, token: str | None) -> str:
        """The tenant owning ``token``; :class:`AuthError` if there is none."""
        if not token:
            raise AuthError("missing API token: send 'Authorization: Bearer <token>'")
        digest = hashlib.sha256(token.encode()).digest()
        found = None
        for known, tenant in self._tokens.items():   # no early exit: constant time over the table
            if hmac.compare_digest(known, digest):
                found = tenant
        if found is None:
            raise AuthError("unknown API token")
        return found

    def tenant_from_header(self, value: str | None) -> str:
        """The tenant of an ``Authorization`` header value (``Bearer <token>``)."""
        if not value:
            raise AuthError("missing API token: send 'Authorization: Bearer <token>'")
        scheme, _, token = value.strip().partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise AuthError("malformed Authorization header: use 'Bearer <token>'")
        return self.tenant(token.strip())

    def tenant_or_none(self, header: str | None) -> str | None:
        """The tenant of an ``Authorization`` header value, or None (for the rate limiter)."""
        try:
            return self.tenant_from_header(header)
        except AuthError:
            return None

    @classmethod
    def from_file(cls, path: str | Path) -> TokenStore:
        """Load a TOML or JSON token file (see the module docstring); :class:`ConfigError` if unusable."""
        path = Path(path)
        try:
            text = path.read_text()
            data = tomllib.loads(text) if path.suffix == ".toml" else json.loads(text)
        except (OSError, ValueError) as exc:
            raise ConfigError(f"cannot read API tokens from {path}: {exc}") from exc
        operators: list = []
        if isinstance(data, dict) and isinstance(data.get("tokens"), dict):
            operators = data.get("operators", [])
            if not isinstance(operators, list) or not all(isinstance(o, str) for o in operators):
                raise ConfigError(f"{path}: operators must be a list of tenant names")
            data = data["tokens"]
        if not isinstance(data, dict) or not data:
            raise ConfigError(f"{path}: expected a non-empty mapping of token -> tenant")
        return cls(data, frozenset(operators))

    @classmethod
    def from_env(cls, path: str | Path | None = None) -> TokenStore:
        """The store named by ``path`` or ``$SUANLI_API_TOKENS``; :class:`ConfigError` if neither is set."""
        path = path or os.environ.get(ENV_VAR)
        if not path:
            raise ConfigError(f"no API tokens: set {ENV_VAR} to a TOML or JSON file mapping token -> tenant")
        return cls.from_file(path)
