"""``cost-spot-mix``: Cost: a spot / reserved / on-demand mix. Reserved capacity first (already paid for:
marginal cost ``reserved_marginal`` x price, default 0), then spot for tasks that tolerate
interruption (qos BRONZE or label ``preemptible=true``), on-demand for GOLD tasks (spot
carries a risk factor: ``risk_gold`` 10, ``risk_silver`` 1, ``risk_bronze`` 0). Prices as
``cost-cheapest``. BestFit breaks ties.

Use it on clouds that mix commitments with spot and on-demand capacity.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..args import arg, like, project
from ..framework import Profile
from ..plugins.cost import SpotMixArgs
from ._profile import standard_profile
from .args import TIE_BREAK_DOC, StrategyArgs, TieBreak

NAME = "cost-spot-mix"
VERSION = "1.0.0"


@dataclass(frozen=True, slots=True)
class Args(StrategyArgs):
    tie_break: TieBreak = arg("BestFit", TIE_BREAK_DOC)
    price_by_model: dict[str, float] = like(SpotMixArgs, "price_by_model")
    price_per_core: float = like(SpotMixArgs, "price_per_core")
    pricing_factor: dict[str, float] = like(SpotMixArgs, "pricing_factor")
    reserved_marginal: float = like(SpotMixArgs, "reserved_marginal")
    risk_gold: float = like(SpotMixArgs, "risk_gold")
    risk_silver: float = like(SpotMixArgs, "risk_silver")
    risk_bronze: float = like(SpotMixArgs, "risk_bronze")


def build(args: Args) -> Profile:
    return standard_profile(args, [{"name": "SpotMix", "args": project(args, SpotMixArgs)}])
