"""Typed arguments: one frozen dataclass per strategy and per plugin holds its defaults and
their validation in one place (after the Kubernetes scheduler's ``types_pluginargs.go``,
``defaults.go`` and ``validation_pluginargs.go``).

Declaring::

    @dataclass(frozen=True, slots=True)
    class Args:
        threshold_pct: float = arg(95.0, "popularity cut of the typical tasks, %", ge=0, le=100)
        mode: Literal["sigmoid", "raw"] = arg("sigmoid", "score shape")

The annotation is the type; :func:`arg` gives the default, a one-line doc and the
constraints. :func:`parse_args` turns a JSON object into an instance and refuses an unknown
key or a bad value with :class:`~suanli.errors.StrategyConfigError`, whose message names
the owner (``strategy 'fgd'`` / ``plugin 'FGD'``), the key, the value and what is allowed.
:func:`explicit` is the inverse: the JSON object with every field written out (what
``strategy.json`` records).

Types, from the annotations (``typing.get_type_hints``):

* ``bool``; ``int`` (an integral float such as ``5.0`` is taken as 5); ``float`` (an int is
  taken as a float); :data:`Number` (an int or a float, kept as given); ``str``; ``Any``;
* ``Literal[...]`` (an enum); ``X | None``; other unions (the first alternative that takes
  the value wins);
* ``tuple[X, ...]`` (a JSON list, stored as a tuple); ``dict[K, X]`` (a JSON object; ``K``
  is ``str`` or a ``Literal`` of the allowed keys);
* another dataclass (a nested JSON object; an instance is taken as it is).

Constraints (keywords of :func:`arg`): ``ge`` / ``gt`` / ``le`` / ``lt`` bound a number, or
every number of a list or mapping of numbers; ``nonempty`` for strings; ``null`` says what
a JSON ``null`` means where the type has no ``None`` (refused unless given: :data:`DEFAULT`
for the field's default, or a value); ``check(value) -> None | str`` for anything else (the
string says what is allowed). Cross-field rules go in a ``validate(self)`` method that
raises :class:`Invalid`.

Classes may set ``EXTRA = "<field>"`` (a ``dict`` field) to keep unknown keys there
instead of refusing them (strategies from other packages whose keys we cannot know), and
``OMIT_NONE = True`` to leave ``None`` fields out of the explicit form.
"""
from __future__ import annotations

import copy
import math
import types
from dataclasses import MISSING, Field, dataclass, field, fields, is_dataclass
from functools import lru_cache
from typing import (Any, Callable, Literal, Mapping, NamedTuple, Optional, Union, get_args, get_origin,
                    get_type_hints)

from suanli.errors import StrategyConfigError

Number = Union[int, float]
"""An int or a float, kept as given (where the value's own spelling shows up in output)."""


class _DefaultMarker:
    def __repr__(self) -> str:
        return "DEFAULT"


DEFAULT: Any = _DefaultMarker()
"""``arg(null=DEFAULT)``: a JSON ``null`` means the field's default."""


class Invalid(Exception):
    """Raised by a ``validate`` method: ``key`` (relative to the object), the bad value and
    what is allowed."""

    def __init__(self, key: str, value: Any, allowed: str):
        super().__init__(key, value, allowed)
        self.key, self.value, self.allowed = key, value, allowed


class _Bad(Exception):
    """A value refused at ``path`` (internal; :func:`parse_args` turns it into the message)."""

    def __init__(self, path: str, value: Any, allowed: str, kind: str = "value"):
        super().__init__(path, value, allowed, kind)
        self.path, self.value, self.allowed, self.kind = path, value, allowed, kind


def arg(default: Any = MISSING, doc: str = "", *, ge: Optional[float] = None, gt: Optional[float] = None,
        le: Optional[float] = None, lt: Optional[float] = None, nonempty: bool = False, null: Any = None,
        check: Optional[Callable[[Any], Optional[str]]] = None) -> Any:
    """A dataclass field with its default, doc and constraints (see the module docstring).
    A mutable default (dict, list) is copied for every instance."""
    meta = {"doc": doc, "ge": ge, "gt": gt, "le": le, "lt": lt, "nonempty": nonempty, "null": null,
            "check": check}
    if default is MISSING:
        return field(metadata=meta)
    if isinstance(default, (dict, list)):
        proto = copy.deepcopy(default)
        return field(default_factory=lambda: copy.deepcopy(proto), metadata=meta)
    return field(default=default, metadata=meta)


def like(owner: type, name: str, default: Any = MISSING, doc: Optional[str] = None) -> Any:
    """A field with the same default, doc and constraints as ``owner``'s field ``name``
    (optionally another default or doc): a strategy forwarding a plugin's argument declares
    it once, in the plugin."""
    f = _field_map(owner)[name].f
    meta = dict(f.metadata)
    if doc is not None:
        meta["doc"] = doc
    if default is MISSING:
        default = f.default if f.default is not MISSING else (
            f.default_factory() if f.default_factory is not MISSING else MISSING)
    return arg(default, **meta)


def project(src: Any, cls: type, **values: Any) -> Any:
    """An instance of the Args class ``cls`` whose fields take the values of ``src``'s
    fields of the same name (``values`` gives the ones named differently): how a strategy
    hands its already checked arguments to a plugin."""
    return cls(**{n: getattr(src, n) for n in _field_map(cls) if n not in values}, **values)


@dataclass(frozen=True, slots=True)
class NoArgs:
    """Takes no arguments."""


# ---------------------------------------------------------------------------- fields
class _FieldInfo(NamedTuple):
    name: str
    tp: Any
    meta: Mapping[str, Any]
    f: Field


@lru_cache(maxsize=None)
def _field_map(cls: type) -> dict[str, _FieldInfo]:
    hints = get_type_hints(cls)
    return {f.name: _FieldInfo(f.name, hints[f.name], f.metadata, f) for f in fields(cls)}


def _default_of(info: _FieldInfo) -> Any:
    f = info.f
    if f.default is not MISSING:
        return f.default
    if f.default_factory is not MISSING:
        return f.default_factory()
    return MISSING


def _show(v: Any) -> str:
    r = repr(v)
    return r if len(r) <= 80 else r[:77] + "..."


# ---------------------------------------------------------------------------- describe
def _bounds(meta: Mapping[str, Any]) -> str:
    ge, gt, le, lt = (meta.get(k) for k in ("ge", "gt", "le", "lt"))
    lo = f"{ge:g}" if ge is not None else None
    hi = f"{le:g}" if le is not None else None
    if lo is not None and hi is not None:
        return f" in {lo}..{hi}"
    parts = []
    if ge is not None:
        parts.append(f">= {ge:g}")
    if gt is not None:
        parts.append(f"> {gt:g}")
    if le is not None:
        parts.append(f"<= {le:g}")
    if lt is not None:
        parts.append(f"< {lt:g}")
    return (" " + " and ".join(parts)) if parts else ""


def describe(tp: Any, meta: Mapping[str, Any] = {}) -> str:  # noqa: B006 - read only
    """What a field of type ``tp`` with constraints ``meta`` allows, for people."""
    origin = get_origin(tp)
    if tp is Any:
        return "any JSON value"
    if tp is type(None):
        return "null"
    if tp is bool:
        return "true or false"
    if tp is int:
        return "an integer" + _bounds(meta)
    if tp is float:
        return "a number" + _bounds(meta)
    if tp is str:
        return "a non-empty string" if meta.get("nonempty") else "a string"
    if origin is Literal:
        vals = get_args(tp)
        return repr(vals[0]) if len(vals) == 1 else "one of " + ", ".join(map(repr, vals))
    if origin in (Union, types.UnionType):
        alts = get_args(tp)
        if set(alts) == {int, float}:
            return "a number" + _bounds(meta)
        return " or ".join(describe(a, meta) for a in alts)
    if origin is tuple:
        return f"a list of {describe(get_args(tp)[0], meta)}"
    if origin is dict:
        k, v = get_args(tp)
        return f"an object mapping {describe(k)} to {describe(v, meta)}"
    if is_dataclass(tp):
        return f"an object with keys {', '.join(_field_map(tp))}"
    return repr(tp)


# ---------------------------------------------------------------------------- coerce
def _check_bounds(v: float, meta: Mapping[str, Any]) -> bool:
    ge, gt, le, lt = (meta.get(k) for k in ("ge", "gt", "le", "lt"))
    return not ((ge is not None and v < ge) or (gt is not None and v <= gt)
                or (le is not None and v > le) or (lt is not None and v >= lt))


def _number(v: Any, tp: Any, meta: Mapping[str, Any], path: str) -> Any:
    if type(v) not in (int, float) or not math.isfinite(v) or (tp is int and not float(v).is_integer()):
        raise _Bad(path, v, describe(tp, meta))
    if not _check_bounds(v, meta):
        raise _Bad(path, v, describe(tp, meta))
    return int(v) if tp is int else float(v) if tp is float else v


def _coerce(tp: Any, v: Any, meta: Mapping[str, Any], path: str) -> Any:
    origin = get_origin(tp)
    if tp is Any:
        return v
    if tp is type(None):
        if v is None:
            return None
        raise _Bad(path, v, "null")
    if origin in (Union, types.UnionType):
        alts = get_args(tp)
        if int in alts and float in alts and type(v) in (int, float):
            return _number(v, Number, meta, path)      # a number stays as given (2.0 is not 2)
        deep = None
        for a in alts:
            try:
                return _coerce(a, v, meta, path)
            except _Bad as exc:
                if exc.path != path and deep is None:
                    deep = exc            # the value had this alternative's shape: its error is the useful one
        if deep is not None:
            raise deep
        raise _Bad(path, v, describe(tp, meta))
    if origin is Literal:
        for a in get_args(tp):
            if type(v) is type(a) and v == a:
                return a
        raise _Bad(path, v, describe(tp, meta))
    if tp is bool:
        if type(v) is bool:
            return v
        raise _Bad(path, v, describe(tp, meta))
    if tp in (int, float):
        return _number(v, tp, meta, path)
    if tp is str:
        if isinstance(v, str) and (v or not meta.get("nonempty")):
            return v
        raise _Bad(path, v, describe(tp, meta))
    if origin is tuple:
        if not isinstance(v, (list, tuple)):
            raise _Bad(path, v, describe(tp, meta))
        item = get_args(tp)[0]
        return tuple(_coerce(item, x, meta, f"{path}[{i}]") for i, x in enumerate(v))
    if origin is dict:
        if not isinstance(v, Mapping):
            raise _Bad(path, v, describe(tp, meta))
        kt, vt = get_args(tp)
        out = {}
        for k, x in v.items():
            try:
                key = _coerce(kt, k, {}, path)
            except _Bad:
                raise _Bad(path, v, f"{describe(tp, meta)} (bad key {k!r})") from None
            out[key] = _coerce(vt, x, meta, f"{path}.{k}")
        return out
    if is_dataclass(tp):
        if isinstance(v, tp):
            return v
        if not isinstance(v, Mapping):
            raise _Bad(path, v, describe(tp, meta))
        return _parse(tp, v, path + ".")
    raise TypeError(f"unsupported argument type {tp!r} at {path}")


def _parse(cls: type, config: Mapping[str, Any], prefix: str) -> Any:
    fmap = _field_map(cls)
    extra_name = getattr(cls, "EXTRA", None)
    extra: dict[str, Any] = {}
    for k in config:
        if k not in fmap or k == extra_name:
            if extra_name is not None and isinstance(k, str):
                extra[k] = config[k]
                continue
            allowed = ", ".join(n for n in sorted(fmap) if n != extra_name) or "none"
            raise _Bad(f"{prefix}{k}", config[k], allowed, kind="key")
    values: dict[str, Any] = {}
    for name, info in fmap.items():
        if name == extra_name:
            continue
        path = prefix + name
        if name not in config:
            if _default_of(info) is MISSING:
                raise _Bad(path, None, describe(info.tp, info.meta), kind="missing")
            continue
        v = config[name]
        null = info.meta.get("null")
        if v is None and null is not None:
            if null is DEFAULT:
                continue
            v = null
        v = _coerce(info.tp, v, info.meta, path)
        check = info.meta.get("check")
        if check is not None:
            allowed = check(v)
            if allowed:
                raise _Bad(path, config[name], allowed)
        values[name] = v
    if extra_name is not None:
        values[extra_name] = extra
    obj = cls(**values)
    validate = getattr(obj, "validate", None)
    if validate is not None:
        try:
            validate()
        except Invalid as exc:
            raise _Bad(prefix + exc.key, exc.value, exc.allowed) from None
    return obj


def parse_args(cls: type, config: Any, where: str) -> Any:
    """``config`` (a JSON object; None = empty) as an instance of the Args dataclass
    ``cls``; an instance of ``cls`` is returned as it is. ``where`` names the owner in
    messages (``"strategy 'fgd'"``). Raises :class:`StrategyConfigError`."""
    if isinstance(config, cls):
        return config
    if config is None:
        config = {}
    if not isinstance(config, Mapping):
        raise StrategyConfigError(f"{where}: the arguments must be a JSON object, not {_show(config)}")
    try:
        return _parse(cls, config, "")
    except _Bad as exc:
        if exc.kind == "key":
            raise StrategyConfigError(f"{where}: unknown argument {exc.path!r}; allowed: {exc.allowed}") from None
        if exc.kind == "missing":
            raise StrategyConfigError(f"{where}: missing argument {exc.path!r} ({exc.allowed})") from None
        raise StrategyConfigError(f"{where}: bad value for {exc.path}: {_show(exc.value)}; "
                                  f"allowed: {exc.allowed}") from None


# ---------------------------------------------------------------------------- explicit
def explicit(obj: Any) -> Any:
    """The JSON form of an Args instance with every field written out (tuples as lists,
    nested dataclasses as objects, ``EXTRA`` keys merged in, ``None`` left out where the
    class sets ``OMIT_NONE``); parsing it back gives an equal instance."""
    if is_dataclass(obj) and not isinstance(obj, type):
        cls = type(obj)
        extra_name = getattr(cls, "EXTRA", None)
        omit_none = getattr(cls, "OMIT_NONE", False)
        out: dict[str, Any] = {}
        for name in _field_map(cls):
            v = getattr(obj, name)
            if name == extra_name:
                out.update({k: explicit(x) for k, x in v.items()})
            elif not (omit_none and v is None):
                out[name] = explicit(v)
        return out
    if isinstance(obj, (list, tuple)):
        return [explicit(x) for x in obj]
    if isinstance(obj, dict):
        return {k: explicit(v) for k, v in obj.items()}
    return obj


class ArgInfo(NamedTuple):
    """One argument, for listings (``suanli strategy show``)."""
    name: str
    allowed: str
    default: Any
    doc: str


def arg_infos(cls: type) -> list[ArgInfo]:
    """Every argument of ``cls``: name, what is allowed, default (JSON form) and doc."""
    extra_name = getattr(cls, "EXTRA", None)
    out = []
    for name, info in _field_map(cls).items():
        if name == extra_name:
            continue
        d = _default_of(info)
        out.append(ArgInfo(name, describe(info.tp, info.meta), None if d is MISSING else explicit(d),
                           info.meta.get("doc", "")))
    return out
