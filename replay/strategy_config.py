"""Strategy configurations made explicit, and the policy a replay starts from.

A live cell starts with ``{"strategy": "default", "config": {}}`` (``CellState``); every
key it does not set takes the strategy's default. Decisions carry the config's *digest*
(sha256 of its canonical JSON) in their provenance, so ``{}`` and the same defaults
written out are different bytes although they decide alike.

Rule (documented in ``replay/README.md``):

* ``strategy.json`` holds the policy with every effective default written out
  (:func:`explicit`), so that editing one value, e.g. ``bestfit_weight`` 1.0 -> 2.0, is
  a real change.
* ``cell.json`` keeps the policy exactly as the cell held it (``initial_policy``).
* :func:`initial_policy` gives the policy a replay injects: when ``strategy.json`` means
  the same as the recorded policy (same strategy, same effective config) it is the
  recorded policy *literally*, so a replay of an unchanged directory is byte-identical;
  otherwise it is ``strategy.json`` as written, and the decisions say so in their digest.

Effective defaults are read from the strategy itself, not from a copy of its table:
:func:`defaults` builds the strategy with a probing config that records every
``config.get(key, default)`` the builder makes. Keys a builder only forwards to a plugin
when present (``if key in config``) have their default inside the plugin; the ones of the
reference strategies are listed in :data:`PLUGIN_DEFAULTS`, the others stay implicit
(absent = the plugin's default). ``tests/replay/test_strategy_config.py`` checks, for
every built-in strategy, that the explicit form decides exactly like ``{}``. A strategy
this process does not know (a blend, an external plugin) is kept as recorded.
"""
from __future__ import annotations

import json
from typing import Any

from suanli.errors import ReplayError
from suanli.processors.strategies import MODULES, get_strategy

# Keys a strategy builder forwards to a plugin only when present; the plugin's default.
PLUGIN_DEFAULTS: dict[str, dict[str, Any]] = {
    "bestfit": {"max_cpu": 128000, "max_gpu": 8000},       # plugins/basic.py BestFit
    "fgd": {"quantum": 0, "device_tie": "first", "gap_weight": 0,          # plugins/fgd.py FGD
            "ignore_noaccess": False, "class_weight": "count"},
    "default": {"quantum": 0, "device_tie": "bestfit", "gap_weight": 0.5,  # strategies/default.py
                "ignore_noaccess": False, "class_weight": "count"},
}
# Keys read by get_strategy itself (strategies/__init__.py): their values come from a
# Strategy built with {} (seed, retry_budget).
STRATEGY_KEYS = ("seed", "retry_budget")


class _Probe(dict):
    """A config that records the defaults a builder asks for and the keys it tests."""

    def __init__(self) -> None:
        super().__init__()
        self.defaults: dict[str, Any] = {}
        self.tested: set[str] = set()

    def get(self, key: str, default: Any = None) -> Any:
        self.defaults.setdefault(key, default)
        return default

    def __contains__(self, key: object) -> bool:
        self.tested.add(str(key))
        return False


def probe(name: str) -> _Probe:
    """Build strategy ``name`` with an empty probing config; return the probe."""
    module = _module(name)
    p = _Probe()
    module.build(p)
    return p


def defaults(name: str) -> dict[str, Any]:
    """Every configuration key strategy ``name`` reads with a default, and that default."""
    p = probe(name)
    out = {k: v for k, v in PLUGIN_DEFAULTS.get(name, {}).items() if k in p.tested}
    out.update(p.defaults)
    base = get_strategy(name, {})
    out["seed"] = base.seed
    out["retry_budget"] = base.retry_budget
    return dict(sorted(out.items()))


def explicit(policy: dict[str, Any]) -> dict[str, Any]:
    """``{"strategy", "config"}`` with the strategy's defaults filled in (set keys win).
    A strategy unknown here is returned as it is."""
    name = policy.get("strategy")
    config = dict(policy.get("config") or {})
    if name not in MODULES:
        return {"strategy": name, "config": config}
    return {"strategy": name, "config": {**defaults(name), **config}}


def same_meaning(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """True when two policies name the same strategy with the same effective config."""
    if a.get("strategy") != b.get("strategy"):
        return False
    ea, eb = explicit(a)["config"], explicit(b)["config"]
    return json.loads(json.dumps(ea, sort_keys=True)) == json.loads(json.dumps(eb, sort_keys=True))


def initial_policy(strategy_json: dict[str, Any], recorded: dict[str, Any]) -> dict[str, Any]:
    """The policy a replay injects first (see the module docstring)."""
    if strategy_json.get("strategy") not in MODULES and strategy_json != recorded:
        _module(strategy_json.get("strategy"))      # an edit naming an unknown strategy: refuse
    if same_meaning(strategy_json, recorded):
        return {"strategy": recorded["strategy"], "config": recorded.get("config") or {}}
    return {"strategy": strategy_json["strategy"], "config": strategy_json.get("config") or {}}


def parse_policy(spec: str) -> tuple[str, dict[str, Any]]:
    """A ``--policy`` item: ``NAME`` or ``NAME:key=value[:key=value...]`` (values as JSON
    when they parse, else strings), or a path to a ``strategy.json``. Returns
    ``(label, {"strategy", "config"})``; the label is the item as written."""
    spec = spec.strip()
    if spec.endswith(".json"):
        try:
            doc = json.loads(open(spec).read())
        except (OSError, json.JSONDecodeError) as exc:
            raise ReplayError(f"policy file {spec}: {exc}") from None
        _module(doc.get("strategy"))
        return spec, {"strategy": doc["strategy"], "config": dict(doc.get("config") or {})}
    name, *pairs = spec.split(":")
    _module(name)
    config: dict[str, Any] = {}
    for pair in pairs:
        if "=" not in pair:
            raise ReplayError(f"policy {spec!r}: {pair!r} is not key=value")
        key, raw = pair.split("=", 1)
        try:
            config[key] = json.loads(raw)
        except json.JSONDecodeError:
            config[key] = raw
    return spec, {"strategy": name, "config": config}


def _module(name: Any) -> Any:
    try:
        return MODULES[name]
    except (KeyError, TypeError):
        raise ReplayError(f"unknown strategy {name!r}; known: {', '.join(sorted(MODULES))}") from None
