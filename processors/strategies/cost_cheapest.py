"""``cost-cheapest``: Cost: the cheapest feasible node, by the cost per hour of the slice the task takes
(node price x the largest share of CPU, memory or GPU it uses). Prices from node_meta
``price_per_hour``, or ``price_by_model`` ($/GPU-hour) + ``price_per_core`` in the config;
``pricing_factor`` ({SPOT: .., RESERVED: .., ON_DEMAND: ..}) scales them by pricing type.
BestFit breaks ties.

Use it for cost-bound batch work where any node will do and time-to-start matters less.
"""
from __future__ import annotations

from ..framework import REGISTRY, Profile
from ..plugins.basic import FILTERS

NAME = "cost-cheapest"
VERSION = "1.0.0"


def build(config: dict) -> Profile:
    return Profile.build(REGISTRY, FILTERS, [{"name": "Cheapest", "args": {k: config[k] for k in ("price_by_model", "price_per_core", "pricing_factor") if k in config}}],
                         tie_break=config.get("tie_break", "BestFit"), secondary=[{"name": "BestFit"}],
                         top_k=int(config.get("top_k", 5)), others=["Capacity"])
