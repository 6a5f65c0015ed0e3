"""Scheduling strategies: named, versioned plugin profiles.

A strategy module defines ``NAME``, ``VERSION``, a docstring saying when to use it, and
``build(config) -> Profile``. :func:`get_strategy` builds (and caches, by config digest)
a :class:`Strategy`. Common config keys: ``seed`` (int, default 0: seeds the tie-break
draws together with the input position), ``top_k`` (candidates kept in provenance,
default 5), ``retry_budget`` (pending tasks retried per input after a release, default 32).
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from .. import plugins as _plugins  # noqa: F401  (registers the built-in plugins)
from ..framework import Profile
from . import bestfit, default, dotprod, fgd, gpu_clustering, gpu_packing, random

MODULES = {m.NAME: m for m in (random, dotprod, gpu_clustering, gpu_packing, bestfit, fgd, default)}


def canonical_json(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def config_digest(config: dict[str, Any]) -> str:
    """sha256 hex of the canonical JSON of a strategy config."""
    return hashlib.sha256(canonical_json(config).encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class Strategy:
    name: str
    version: str
    config: dict[str, Any]
    digest: str
    profile: Profile
    seed: int
    retry_budget: int

    def ref(self) -> dict[str, str]:
        return {"name": self.name, "version": self.version, "config_digest": self.digest}


_CACHE: dict[tuple[str, str], Strategy] = {}


def get_strategy(name: str, config: dict[str, Any] | None = None, digest: str | None = None) -> Strategy:
    """The strategy ``name`` built with ``config``. Unknown names raise KeyError."""
    config = config or {}
    digest = digest or config_digest(config)
    key = (name, digest)
    st = _CACHE.get(key)
    if st is None:
        mod = MODULES[name]
        st = Strategy(name, mod.VERSION, config, digest, mod.build(config),
                      int(config.get("seed", 0)), int(config.get("retry_budget", 32)))
        if len(_CACHE) > 64:
            _CACHE.clear()
        _CACHE[key] = st
    return st


def names() -> list[str]:
    return sorted(MODULES)
