"""Scheduling strategies: named, versioned plugin profiles.

A strategy module defines ``NAME``, ``VERSION``, a docstring saying when to use it, and
``build(config) -> Profile``. :func:`get_strategy` builds (and caches, by config digest)
a :class:`Strategy`. Common config keys: ``seed`` (int, default 0: seeds the tie-break
draws together with the input position), ``top_k`` (candidates kept in provenance,
default 5), ``retry_budget`` (pending tasks retried per input after a release, default 32),
``rules`` (label-based matching, see ``processors/matching.py``).

Third-party strategies are discovered through the ``suanli.strategies`` entry-point
group (:func:`discover`); each entry point names a module or object with NAME / VERSION /
build. A third-party strategy is *untrusted* unless its module sets ``TRUSTED = True``:
its scoring then runs in a resource-limited subprocess (``processors/sandbox.py``).
Built-in names cannot be overridden.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from .. import plugins as _plugins  # noqa: F401  (registers the built-in plugins)
from ..framework import Profile
from . import (analytics, anti_affinity, balanced, batch, bestfit, cost_cheapest, cost_spot, default,
               dotprod, fgd, first_fit, gpu_clustering, gpu_packing, green_carbon, green_pue, latency,
               random, rules, spread_zones, worst_fit)

BUILTIN = (random, dotprod, gpu_clustering, gpu_packing, bestfit, fgd, default, worst_fit, first_fit,
           balanced, analytics, cost_cheapest, cost_spot, spread_zones, anti_affinity, green_carbon,
           green_pue, latency, batch, rules)
MODULES: dict[str, Any] = {m.NAME: m for m in BUILTIN}
EXTERNAL: dict[str, str] = {}          # name -> entry point value (module:attr) of discovered ones
ENTRY_POINT_GROUP = "suanli.strategies"


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


def register(module: Any, *, external: str | None = None) -> None:
    """Add a strategy module (or object with NAME / VERSION / build). Built-in names and
    a second registration of a name raise ValueError."""
    name = getattr(module, "NAME", None)
    if not name or not hasattr(module, "build") or not hasattr(module, "VERSION"):
        raise ValueError(f"{module!r} is not a strategy (needs NAME, VERSION, build)")
    if name in MODULES:
        raise ValueError(f"strategy {name!r} is already registered")
    if external is not None and not getattr(module, "TRUSTED", False):
        from ..sandbox import sandboxed_module
        module = sandboxed_module(module, external)
    MODULES[name] = module
    if external is not None:
        EXTERNAL[name] = external


def discover() -> list[str]:
    """Load the strategies advertised in the ``suanli.strategies`` entry-point group.
    Returns the names added; entry points that fail to load or clash are skipped (their
    error is in ``DISCOVERY_ERRORS``). Call it at startup, not from the pure core."""
    from importlib.metadata import entry_points

    added = []
    for ep in sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name):
        if ep.name in MODULES:
            if EXTERNAL.get(ep.name) != ep.value:
                DISCOVERY_ERRORS[ep.name] = "name already registered"
            continue
        try:
            mod = ep.load()
            if getattr(mod, "NAME", ep.name) != ep.name:
                raise ValueError(f"entry point {ep.name!r} loads strategy {getattr(mod, 'NAME', None)!r}")
            register(mod, external=ep.value)
            added.append(ep.name)
        except Exception as exc:  # noqa: BLE001 - a broken plugin must not stop the others
            DISCOVERY_ERRORS[ep.name] = f"{type(exc).__name__}: {exc}"
    return added


DISCOVERY_ERRORS: dict[str, str] = {}


def get_strategy(name: str, config: dict[str, Any] | None = None, digest: str | None = None) -> Strategy:
    """The strategy ``name`` built with ``config``. Unknown names raise KeyError.
    ``name`` may also be a blend, ``{"blend": [{"strategy": .., "weight": .., "config": ..}]}``
    serialised by :func:`blend_name`."""
    config = config or {}
    digest = digest or config_digest(config)
    key = (name, digest)
    st = _CACHE.get(key)
    if st is None:
        mod = MODULES[name]
        st = Strategy(name, mod.VERSION, config, digest, mod.build(config),
                      int(config.get("seed", 0)), int(config.get("retry_budget", 32)))
        if len(_CACHE) > 128:
            _CACHE.clear()
        _CACHE[key] = st
    return st


def get_blend(members: list[dict[str, Any]], seed: int = 0) -> Strategy:
    """A weighted blend of strategies: each member's total score is min-max normalised to
    0..100 over the feasible nodes, then ``sum(weight x score)``; a node must pass every
    member's filters. Cached by the members' canonical JSON."""
    from ..blend import build_blend

    spec = [{"strategy": m["strategy"], "weight": float(m.get("weight", 1.0)), "config": m.get("config") or {}}
            for m in members]
    cfg = {"blend": spec, "seed": seed}
    digest = config_digest(cfg)
    key = ("blend", digest)
    st = _CACHE.get(key)
    if st is None:
        subs = [get_strategy(m["strategy"], {"seed": seed, **m["config"]}) for m in spec]
        name = "blend(" + ",".join(f"{m['strategy']}:{m['weight']:g}" for m in spec) + ")"
        st = Strategy(name, "1.0.0", cfg, digest, build_blend(subs, [m["weight"] for m in spec]),
                      seed, subs[0].retry_budget)
        _CACHE[key] = st
    return st


def names() -> list[str]:
    return sorted(MODULES)


def describe(name: str) -> dict[str, str]:
    """NAME, VERSION, the first paragraph of the docstring ("when to use it") and origin."""
    mod = MODULES[name]
    doc = (getattr(mod, "__doc__", "") or "").strip()
    return {"name": name, "version": mod.VERSION, "summary": doc.split("\n\n")[0].replace("\n", " "),
            "origin": EXTERNAL.get(name, "builtin"),
            "sandboxed": str(bool(getattr(mod, "SANDBOXED", False))).lower()}
