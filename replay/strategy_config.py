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

Effective defaults are read from the strategy itself: its ``Args`` dataclass
(``processors/strategies``) holds every key it takes with its default, and
:func:`defaults` is the explicit form of ``Args()``. Older ``strategy.json`` files (which
spelled out fewer keys) parse to the same ``Args`` and so mean the same.
``tests/replay/test_strategy_config.py`` checks, for every built-in strategy, that the
explicit form decides exactly like ``{}``. A strategy this process does not know (a blend,
an external plugin not discovered) is kept as recorded.
"""
from __future__ import annotations

import json
from typing import Any

from suanli.errors import ReplayError, StrategyConfigError
from suanli.processors import strategies as S
from suanli.processors.args import explicit as explicit_args
from suanli.processors.strategies import MODULES


def defaults(name: str) -> dict[str, Any]:
    """Every configuration key strategy ``name`` takes, and its default."""
    _module(name)
    return dict(sorted(S.defaults(name).items()))


def explicit(policy: dict[str, Any]) -> dict[str, Any]:
    """``{"strategy", "config"}`` with the strategy's defaults filled in (set keys win,
    as written). A strategy unknown here is returned as it is."""
    name = policy.get("strategy")
    config = dict(policy.get("config") or {})
    if name not in MODULES:
        return {"strategy": name, "config": config}
    return {"strategy": name, "config": {**defaults(name), **config}}


def _meaning(policy: dict[str, Any]) -> Any:
    """What a policy means: its parsed config written out, or (for a strategy unknown
    here, or a config it refuses) the explicit form as written."""
    name = policy.get("strategy")
    if name in MODULES:
        try:
            return explicit_args(S.parse_config(name, policy.get("config") or {}))
        except StrategyConfigError:
            pass
    return json.loads(json.dumps(explicit(policy)["config"], sort_keys=True))


def same_meaning(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """True when two policies name the same strategy with the same effective config
    (equal once parsed, e.g. ``{}`` and its explicit form, or ``128000`` and ``128000.0``
    for a float key)."""
    if a.get("strategy") != b.get("strategy"):
        return False
    return _meaning(a) == _meaning(b)


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
    ``(label, {"strategy", "config"})``; the label is the item as written. An unknown
    strategy, an unknown key or a bad value raises :class:`ReplayError` saying which."""
    spec = spec.strip()
    if spec.endswith(".json"):
        try:
            doc = json.loads(open(spec).read())
        except (OSError, json.JSONDecodeError) as exc:
            raise ReplayError(f"policy file {spec}: {exc}") from None
        _module(doc.get("strategy"))
        policy = {"strategy": doc["strategy"], "config": dict(doc.get("config") or {})}
        _validate(spec, policy)
        return spec, policy
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
    policy = {"strategy": name, "config": config}
    _validate(spec, policy)
    return spec, policy


def _validate(spec: str, policy: dict[str, Any]) -> None:
    try:
        S.validate_policy(policy["strategy"], policy["config"])
    except StrategyConfigError as exc:
        raise ReplayError(f"policy {spec!r}: {exc}") from None


def _module(name: Any) -> Any:
    try:
        return MODULES[name]
    except (KeyError, TypeError):
        raise ReplayError(f"unknown strategy {name!r}; known: {', '.join(sorted(MODULES))}") from None
