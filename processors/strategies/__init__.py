"""Scheduling strategies: named, versioned plugin profiles.

A strategy module defines ``NAME``, ``VERSION``, a docstring saying when to use it,
``Args`` (a frozen dataclass deriving from :class:`~.args.StrategyArgs`: its keys, their
defaults and what values they allow) and ``build(args: Args) -> Profile``.
:func:`get_strategy` parses the config into ``Args`` (an unknown key or a bad value raises
:class:`~suanli.errors.StrategyConfigError` naming the strategy, the key, the value and
what is allowed), builds the profile and caches the :class:`Strategy` by config digest.
Common keys (:class:`~.args.StrategyArgs`): ``seed`` (int, default 0: seeds the tie-break
draws together with the input position), ``top_k`` (candidates kept in provenance,
default 5), ``retry_budget`` (pending tasks retried per input after a release, default
32), ``tie_break``, ``rules`` (label-based matching, see ``processors/matching.py``),
``fallback_strategy`` / ``fallback_config`` (what decides when a sandboxed strategy fails).

For the core: ``Strategy.args`` holds the parsed config (``.rules``, ``.seed``,
``.retry_budget`` ...); :func:`strategy_for_rule` and :func:`fallback_of` build the
strategies a rule or a sandbox failure names; :func:`validate_policy` checks a policy
(strategy name and config, with the strategies its rules, blends and fallback name)
without building anything.

Third-party strategies are discovered through the ``suanli.strategies`` entry-point
group (:func:`discover`); each entry point names a module or object with NAME / VERSION /
build (and optionally ``Args``; without one its own keys are passed to ``build(config)``
unchecked, see :class:`~.args.ExternalArgs`). A third-party strategy is *untrusted*
unless its module sets ``TRUSTED = True``: its scoring then runs in a resource-limited
subprocess (``processors/sandbox.py``). Built-in names cannot be overridden.
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Iterator

from suanli.errors import StrategyConfigError

from .. import plugins as _plugins  # noqa: F401  (registers the built-in plugins)
from ..args import arg_infos, explicit, parse_args
from ..model import StrategyRef
from ..framework import Profile
from ..matching import BlendMember, Rule
from . import (analytics, anti_affinity, balanced, batch, bestfit, cost_cheapest, cost_spot, default,
               dotprod, federated, fgd, first_fit, gpu_clustering, gpu_packing, green_carbon, green_pue,
               latency, ppo, random, rules, spread_zones, worst_fit)
from .args import ExternalArgs, StrategyArgs

BUILTIN = (random, dotprod, gpu_clustering, gpu_packing, bestfit, fgd, default, worst_fit, first_fit,
           balanced, analytics, cost_cheapest, cost_spot, spread_zones, anti_affinity, green_carbon,
           green_pue, latency, batch, rules, ppo, federated)
MODULES: dict[str, Any] = {m.NAME: m for m in BUILTIN}
EXTERNAL: dict[str, str] = {}          # name -> entry point value (module:attr) of discovered ones
ENTRY_POINT_GROUP = "suanli.strategies"


class UnknownStrategyError(StrategyConfigError, KeyError):
    """No strategy has this name. Also a KeyError, which is what an unknown name raised
    before configs were typed."""

    def __str__(self) -> str:          # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


def canonical_json(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def config_digest(config: dict[str, Any]) -> str:
    """sha256 hex of the canonical JSON of a strategy config."""
    return hashlib.sha256(canonical_json(config).encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class Strategy:
    """A built strategy. ``config`` is the config as given and ``digest`` its sha256
    (decisions carry it: never computed over the filled-in ``args``); ``args`` is the
    parsed config with every default; ``seed`` and ``retry_budget`` repeat two of its
    fields."""
    name: str
    version: str
    config: dict[str, Any]
    digest: str
    profile: Profile
    seed: int
    retry_budget: int
    args: StrategyArgs

    def ref(self) -> dict[str, str]:
        return {"name": self.name, "version": self.version, "config_digest": self.digest}

    @functools.cached_property
    def decision_ref(self) -> StrategyRef:
        """:meth:`ref` as the ``StrategyRef`` its decisions carry: made once (a placement
        would otherwise build it each time), immutable, so every decision can share it."""
        return StrategyRef(**self.ref())


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


# ------------------------------------------------------------------------------ args
def module(name: Any) -> Any:
    """The strategy module called ``name``; :class:`UnknownStrategyError` (a KeyError and a
    StrategyConfigError) names the known ones otherwise."""
    try:
        return MODULES[name]
    except (KeyError, TypeError):
        raise UnknownStrategyError(f"unknown strategy {name!r}; known: {', '.join(names())}") from None


def args_class(name: str) -> type[StrategyArgs]:
    """The ``Args`` dataclass of strategy ``name`` (:class:`~.args.ExternalArgs` for a
    third-party strategy that declares none)."""
    return getattr(module(name), "Args", ExternalArgs)


def parse_config(name: str, config: dict[str, Any] | None) -> StrategyArgs:
    """``config`` parsed into strategy ``name``'s ``Args`` (every default filled in).
    Raises StrategyConfigError (UnknownStrategyError for an unknown name)."""
    return parse_args(args_class(name), config, f"strategy {name!r}")


def defaults(name: str) -> dict[str, Any]:
    """Every key strategy ``name`` takes, with its default: the explicit form of ``{}``."""
    return explicit(args_class(name)())


def validate_policy(name: str, config: dict[str, Any] | None) -> StrategyArgs:
    """Check a policy without building it: ``config`` against strategy ``name``'s
    ``Args``, and every strategy the config names with the config it would get: each
    rule's strategy (``{"seed": seed, **rule.config}``) or blend members, and ``rules``'
    own ``fallback`` (with ``fallback_config``). ``fallback_strategy`` must name a known
    strategy; its ``fallback_config`` is checked when a sandboxed strategy is involved
    (it is built only when one fails; the ``rules`` strategy shares ``fallback_config``
    between its two fallbacks). Returns the parsed ``Args``; raises
    :class:`~suanli.errors.StrategyConfigError` saying where (``strategy 'rules':
    rules[1].blend[0]: strategy 'x': ...``)."""
    args = parse_config(name, config)
    used = [name]
    seed = args.seed
    for i, rule in enumerate(args.rules):
        if rule.blend is not None:
            for j, m in enumerate(rule.blend):
                _nested(f"strategy {name!r}: rules[{i}].blend[{j}]", m.strategy, {"seed": seed, **m.config})
                used.append(m.strategy)
        else:
            _nested(f"strategy {name!r}: rules[{i}]", rule.strategy, {"seed": seed, **rule.config})
            used.append(rule.strategy)
    fallback = getattr(args, "fallback", None)      # the rules strategy's own fallback
    if fallback is not None:
        _nested(f"strategy {name!r}: fallback", fallback, {"seed": seed, **args.fallback_config})
        used.append(fallback)
    try:
        module(args.fallback_strategy)
    except UnknownStrategyError as exc:
        raise StrategyConfigError(f"strategy {name!r}: bad value for fallback_strategy: {exc}") from None
    sandboxed = any(getattr(MODULES[n], "SANDBOXED", False) for n in used)
    if sandboxed and args.fallback_strategy != name:   # naming itself: the core keeps the strategy
        _nested(f"strategy {name!r}: fallback_strategy", args.fallback_strategy,
                {"seed": seed, **args.fallback_config})
    return args


def _nested(where: str, name: str, config: dict[str, Any]) -> None:
    try:
        validate_policy(name, config)
    except StrategyConfigError as exc:
        raise StrategyConfigError(f"{where}: {exc}") from None


# ------------------------------------------------------------------------------ build
# Versions pinned for configs that do not name one (pinned_versions): name -> version.
_PINS: dict[str, str] = {}


def versions(name: str) -> tuple[str, ...]:
    """The versions strategy ``name`` can still build (its ``VERSIONS``; else its only one)."""
    mod = module(name)
    return tuple(getattr(mod, "VERSIONS", (mod.VERSION,)))


@contextmanager
def pinned_versions(pins: dict[str, str]) -> Iterator[None]:
    """Within the block, a strategy in ``pins`` whose config does not name a ``version``
    builds the pinned one instead of its current one: how ``suanli replay --verify``
    re-runs a log recorded under an older version of a versioned strategy (``default``
    1.2.0 after 1.3.0 landed) and gets its decisions byte for byte. A pin to a version the
    strategy cannot build raises StrategyConfigError. Not for the live scheduler: there a
    policy names the version it wants."""
    for name, version in pins.items():
        if version not in versions(name):
            raise StrategyConfigError(f"strategy {name!r} cannot build version {version!r} "
                                      f"(it builds {', '.join(versions(name))})")
    saved = dict(_PINS)
    _PINS.update(pins)
    try:
        yield
    finally:
        _PINS.clear()
        _PINS.update(saved)


def get_strategy(name: str, config: dict[str, Any] | None = None, digest: str | None = None) -> Strategy:
    """The strategy ``name`` built with ``config`` (``digest``: its config digest, when
    the caller has it). An unknown name raises :class:`UnknownStrategyError` (a
    KeyError); an unknown key or a bad value :class:`~suanli.errors.StrategyConfigError`.
    Blends are built by :func:`get_blend`. A strategy with ``VERSIONS`` builds the
    ``version`` its config names (default: its newest, or the one pinned by
    :func:`pinned_versions`), and that version is the one its decisions name."""
    config = config or {}
    digest = digest or config_digest(config)
    mod = module(name)
    versioned = hasattr(mod, "VERSIONS")          # its Args has a ``version`` key
    pin = _PINS.get(name) if versioned and "version" not in config else None
    key = (name, digest, pin)
    st = _CACHE.get(key)
    if st is None:
        args = parse_config(name, config)
        if pin is not None:
            args = dataclasses.replace(args, version=pin)
        # a third-party strategy without Args gets its config as it came
        profile = mod.build(args) if hasattr(mod, "Args") else mod.build(config)
        st = Strategy(name, args.version if versioned else mod.VERSION, config, digest, profile, args.seed,
                      args.retry_budget, args)
        if len(_CACHE) > 128:
            _CACHE.clear()
        _CACHE[key] = st
    return st


def get_blend(members: list[Any], seed: int = 0) -> Strategy:
    """A weighted blend of strategies: each member's total score is min-max normalised to
    0..100 over the feasible nodes, then ``sum(weight x score)``; a node must pass every
    member's filters. ``members``: :class:`~..matching.BlendMember` or their JSON objects
    ``{"strategy", "weight" (default 1), "config" (default {})}``. Cached by the members'
    canonical JSON."""
    from ..blend import build_blend

    typed = [parse_args(BlendMember, m, "blend member") for m in members]
    spec = [{"strategy": m.strategy, "weight": m.weight, "config": m.config} for m in typed]
    cfg = {"blend": spec, "seed": seed}
    digest = config_digest(cfg)
    key = ("blend", digest)
    st = _CACHE.get(key)
    if st is None:
        subs = [get_strategy(m["strategy"], {"seed": seed, **m["config"]}) for m in spec]
        name = "blend(" + ",".join(f"{m['strategy']}:{m['weight']:g}" for m in spec) + ")"
        first = subs[0].args
        args = StrategyArgs(seed=seed, top_k=first.top_k, retry_budget=first.retry_budget, tie_break="BestFit")
        st = Strategy(name, "1.0.0", cfg, digest, build_blend(subs, [m["weight"] for m in spec]),
                      seed, subs[0].retry_budget, args)
        _CACHE[key] = st
    return st


def strategy_for_rule(rule: Rule, seed: int) -> Strategy:
    """The strategy placing the tasks ``rule`` matches: its blend, or its strategy built
    with ``{"seed": seed, **rule.config}`` (``seed``: the cell strategy's)."""
    if rule.blend is not None:
        return get_blend(list(rule.blend), seed)
    return get_strategy(rule.strategy, {"seed": seed, **rule.config})


def fallback_of(strategy: Strategy) -> Strategy:
    """What decides when ``strategy`` fails in the sandbox: its ``fallback_strategy``
    built with ``{"seed": strategy.seed, **fallback_config}``, or the strategy itself when
    it names itself."""
    a = strategy.args
    if a.fallback_strategy == strategy.name:
        return strategy
    return get_strategy(a.fallback_strategy, {"seed": strategy.seed, **a.fallback_config})


def names() -> list[str]:
    return sorted(MODULES)


def describe(name: str) -> dict[str, str]:
    """NAME, VERSION, the first paragraph of the docstring ("when to use it") and origin."""
    mod = module(name)
    doc = (getattr(mod, "__doc__", "") or "").strip()
    return {"name": name, "version": mod.VERSION, "summary": doc.split("\n\n")[0].replace("\n", " "),
            "origin": EXTERNAL.get(name, "builtin"),
            "sandboxed": str(bool(getattr(mod, "SANDBOXED", False))).lower()}


def describe_args(name: str) -> list[dict[str, Any]]:
    """Strategy ``name``'s keys: ``{"name", "allowed", "default", "doc"}`` each, in
    declaration order (the common keys first)."""
    return [i._asdict() for i in arg_infos(args_class(name))]
