"""``cost-cheapest``: Cost: the cheapest feasible node, by the cost per hour of the slice the task takes
(node price x the largest share of CPU, memory or GPU it uses). Prices from node_meta
``price_per_hour``, or ``price_by_model`` ($/GPU-hour) + ``price_per_core`` in the config;
``pricing_factor`` ({SPOT: .., RESERVED: .., ON_DEMAND: ..}) scales them by pricing type.
BestFit breaks ties.

Use it for cost-bound batch work where any node will do and time-to-start matters less.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..args import arg, like, project
from ..framework import Profile
from ..plugins.cost import PricingArgs
from ._profile import standard_profile
from .args import TIE_BREAK_DOC, StrategyArgs, TieBreak

NAME = "cost-cheapest"
VERSION = "1.0.0"


@dataclass(frozen=True, slots=True)
class Args(StrategyArgs):
    tie_break: TieBreak = arg("BestFit", TIE_BREAK_DOC)
    price_by_model: dict[str, float] = like(PricingArgs, "price_by_model")
    price_per_core: float = like(PricingArgs, "price_per_core")
    pricing_factor: dict[str, float] = like(PricingArgs, "pricing_factor")


def build(args: Args) -> Profile:
    return standard_profile(args, [{"name": "Cheapest", "args": project(args, PricingArgs)}])
