"""``rules``: label-based routing. Each task is placed by the strategy (or weighted blend)
of the first rule in ``config.rules`` whose label conditions it meets (see
``processors/matching.py``): e.g. ``workload=realtime-inference -> latency``,
``workload=training -> blend(gpu-packing, default)``, ``workload=analytics -> analytics``,
``workload=batch -> batch``. Tasks matching no rule go to ``config.fallback`` (default
``default``, built with ``config.fallback_config``). Each decision records the rule in
``provenance.matched_rule``.

Use it on shared clusters that serve several kinds of workload with different goals.
(Any strategy accepts a ``rules`` table; this one only makes the routing the cell's
declared policy.)
"""
from __future__ import annotations

from ..framework import Profile

NAME = "rules"
VERSION = "1.0.0"


def build(config: dict) -> Profile:
    from . import get_strategy

    fb = config.get("fallback", "default")
    if fb == NAME:
        raise ValueError("rules: fallback cannot be 'rules'")
    return get_strategy(fb, {"seed": config.get("seed", 0), **(config.get("fallback_config") or {})}).profile
