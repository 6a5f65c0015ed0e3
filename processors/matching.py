"""Label-based matching: a rule table in the policy config picks, per task, the strategy
(or weighted blend) that places it. Pure and deterministic: the first matching rule in
table order wins; no rule matching -> the cell's own strategy.

Config (``PolicyChanged.config["rules"]``)::

    [{"name": "realtime", "match": {"workload": "realtime-inference"}, "strategy": "latency",
      "config": {...}},
     {"name": "training", "match": {"workload": "training"},
      "blend": [{"strategy": "gpu-packing", "weight": 1}, {"strategy": "default", "weight": 1}]},
     {"name": "analytics", "match": {"workload": ["analytics", "etl"]}, "strategy": "analytics"},
     {"name": "batch", "match": {"workload": "batch"}, "strategy": "batch"}]

``match``: every key must hold. Keys are task labels; ``@qos``, ``@tenant`` and ``@kind``
(cpu / shared / whole) match the task's QoS tier, tenant and GPU kind. A value may be a
string, a list (any of) or ``"*"`` (the key is present). The decision's provenance
records ``matched_rule`` as ``"rules[i] <name>: k=v,... -> <strategy>"``.

A rule is typed as :class:`Rule` (members of a blend as :class:`BlendMember`); strategies
parse their ``rules`` into them (``strategies/args.py``). The functions here accept the
typed rules or the plain JSON dicts they come from, with the same results.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Mapping, Optional, Union

from .args import DEFAULT, Invalid, arg

# a match value: one string (or number, compared as text), "*" (present), or any of a list
MatchValue = Union[str, bool, int, float, tuple[Union[str, bool, int, float], ...]]


@dataclass(frozen=True, slots=True)
class BlendMember:
    """One member of a weighted blend: a strategy, its weight and its own config (the
    config as given: the member is built with ``{"seed": seed, **config}``)."""
    OMIT_NONE: ClassVar[bool] = True
    strategy: str = arg(doc="the member strategy's name", nonempty=True)
    weight: float = arg(1.0, "weight of the member's min-max normalised score", ge=0)
    config: dict[str, Any] = arg({}, "the member strategy's config", null=DEFAULT)


@dataclass(frozen=True, slots=True)
class Rule:
    """One row of the rule table: conditions, and the strategy (with its config) or the
    blend that places a matching task. Exactly one of ``strategy`` and ``blend``."""
    OMIT_NONE: ClassVar[bool] = True
    name: Optional[str] = arg(None, "label in provenance (default rule<i>)")
    match: dict[str, MatchValue] = arg({}, "label conditions, all must hold", null=DEFAULT)
    strategy: Optional[str] = arg(None, "the strategy placing matching tasks")
    config: dict[str, Any] = arg({}, "that strategy's config", null=DEFAULT)
    blend: Optional[tuple[BlendMember, ...]] = arg(None, "or a weighted blend of strategies")

    def validate(self) -> None:
        if (self.strategy is None) == (self.blend is None):
            raise Invalid("strategy", self.strategy, "exactly one of 'strategy' (a name) and 'blend' (a list)")
        if self.blend is not None and not self.blend:
            raise Invalid("blend", [], "a non-empty list of {strategy, weight, config}")


def _get(rule: Any, key: str) -> Any:
    """A rule's field, typed or from a JSON dict (absent = None)."""
    return getattr(rule, key) if isinstance(rule, Rule) else rule.get(key)


def member_weight(member: Any) -> float:
    """A blend member's weight (default 1.0), typed or from a JSON dict."""
    if isinstance(member, BlendMember):
        return member.weight
    return float(member["weight"]) if "weight" in member else 1.0


def _value(task: Any, kind: str, key: str) -> Optional[str]:
    """``task``: a ``{"qos", "tenant", "labels"}`` dict, or the state's TaskRecord."""
    if key == "@kind":
        return kind
    if not isinstance(task, Mapping):            # a TaskRecord: the submitted task's fields
        t = task.task
        task = {"qos": t.qos_tier, "tenant": t.tenant, "labels": t.labels}
    if key == "@qos":
        return task.get("qos")
    if key == "@tenant":
        return task.get("tenant")
    v = (task.get("labels") or {}).get(key)
    return None if v is None else str(v)


def rule_matches(rule: Rule | dict[str, Any], task: Any, kind: str) -> bool:
    for key, want in (_get(rule, "match") or {}).items():
        have = _value(task, kind, key)
        if want == "*":
            if have is None:
                return False
        elif isinstance(want, (list, tuple)):
            if have not in [str(w) for w in want]:
                return False
        elif have != str(want):
            return False
    return True


def describe(i: int, rule: Rule | dict[str, Any]) -> str:
    cond = ",".join(f"{k}={'|'.join(map(str, v)) if isinstance(v, (list, tuple)) else v}"
                    for k, v in sorted((_get(rule, "match") or {}).items())) or "*"
    blend = _get(rule, "blend")
    if blend is not None:
        target = "blend(" + ",".join(f"{_get_member(m)}:{member_weight(m):g}" for m in blend) + ")"
    else:
        target = _get(rule, "strategy") or "?"
    name = _get(rule, "name") or f"rule{i}"
    return f"rules[{i}] {name}: {cond} -> {target}"


def _get_member(member: Any) -> str:
    return member.strategy if isinstance(member, BlendMember) else member["strategy"]


def match(rules: Any, task: Any, kind: str) -> Optional[tuple[int, Any]]:
    """The first rule (index, rule) whose conditions all hold, or None. ``rules``: typed
    :class:`Rule` values (``Strategy.args.rules``) or their JSON dicts; ``task``: the
    state's TaskRecord or a ``{"qos", "tenant", "labels"}`` dict."""
    for i, rule in enumerate(rules or []):
        if rule_matches(rule, task, kind):
            return i, rule
    return None
