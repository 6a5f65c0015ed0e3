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

from dataclasses import dataclass

from ..args import Invalid, arg
from ..framework import Profile
from .args import StrategyArgs

NAME = "rules"
VERSION = "1.0.0"


@dataclass(frozen=True, slots=True)
class Args(StrategyArgs):
    """``top_k`` and ``tie_break`` of this config do not apply: tasks no rule matches are
    placed by the fallback's profile, configured by ``fallback_config``."""
    fallback: str = arg("default", "the strategy placing tasks no rule matches (built with "
                        "fallback_config)", nonempty=True)

    def validate(self) -> None:
        if self.fallback == NAME:
            raise Invalid("fallback", self.fallback, "any strategy but 'rules'")


def build(args: Args) -> Profile:
    from . import get_strategy

    return get_strategy(args.fallback, {"seed": args.seed, **args.fallback_config}).profile
