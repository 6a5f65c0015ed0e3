"""``cost-spot-mix``: Cost: a spot / reserved / on-demand mix. Reserved capacity first (already paid for:
marginal cost ``reserved_marginal`` x price, default 0), then spot for tasks that tolerate
interruption (qos BRONZE or label ``preemptible=true``), on-demand for GOLD tasks (spot
carries a risk factor: ``risk_gold`` 10, ``risk_silver`` 1, ``risk_bronze`` 0). Prices as
``cost-cheapest``. BestFit breaks ties.

Use it on clouds that mix commitments with spot and on-demand capacity.
"""
from __future__ import annotations

from ..framework import REGISTRY, Profile
from ..plugins.basic import FILTERS

NAME = "cost-spot-mix"
VERSION = "1.0.0"


def build(config: dict) -> Profile:
    return Profile.build(REGISTRY, FILTERS, [{"name": "SpotMix", "args": {k: config[k] for k in ("price_by_model", "price_per_core", "pricing_factor", "reserved_marginal", "risk_gold", "risk_silver", "risk_bronze") if k in config}}],
                         tie_break=config.get("tie_break", "BestFit"), secondary=[{"name": "BestFit"}],
                         top_k=int(config.get("top_k", 5)), others=["Capacity"])
