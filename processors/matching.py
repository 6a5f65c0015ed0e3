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
"""
from __future__ import annotations

from typing import Any, Optional


def _value(task: dict[str, Any], kind: str, key: str) -> Optional[str]:
    if key == "@qos":
        return task.get("qos")
    if key == "@tenant":
        return task.get("tenant")
    if key == "@kind":
        return kind
    v = (task.get("labels") or {}).get(key)
    return None if v is None else str(v)


def rule_matches(rule: dict[str, Any], task: dict[str, Any], kind: str) -> bool:
    for key, want in (rule.get("match") or {}).items():
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


def describe(i: int, rule: dict[str, Any]) -> str:
    cond = ",".join(f"{k}={'|'.join(map(str, v)) if isinstance(v, (list, tuple)) else v}"
                    for k, v in sorted((rule.get("match") or {}).items())) or "*"
    if "blend" in rule:
        target = "blend(" + ",".join(f"{m['strategy']}:{float(m.get('weight', 1)):g}" for m in rule["blend"]) + ")"
    else:
        target = rule.get("strategy", "?")
    name = rule.get("name") or f"rule{i}"
    return f"rules[{i}] {name}: {cond} -> {target}"


def match(rules: list[dict[str, Any]], task: dict[str, Any], kind: str) -> Optional[tuple[int, dict[str, Any]]]:
    """The first rule (index, rule) whose conditions all hold, or None."""
    for i, rule in enumerate(rules or []):
        if rule_matches(rule, task, kind):
            return i, rule
    return None
