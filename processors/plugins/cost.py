"""Cost plugins: ``Cheapest`` and ``SpotMix``, over one price model (:func:`node_price`).

Node prices come from what the nodes registered (``price_per_hour``, ``pricing``) through
:meth:`CellState.meta_array`, else from the arguments' per-model and per-core prices.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..args import DEFAULT, arg
from ..framework import REGISTRY, CycleContext, Plugin
from ..state import GPU_MILLI, CellState
from ._shared import qos

DEFAULT_PRICING = {"SPOT": 1.0, "RESERVED": 1.0, "ON_DEMAND": 1.0}


@dataclass(frozen=True, slots=True)
class PricingArgs:
    price_by_model: dict[str, float] = arg({}, "$/GPU-hour per GPU model, for nodes without price_per_hour",
                                           ge=0, null=DEFAULT)
    price_per_core: float = arg(0.0, "$/core-hour, for nodes without price_per_hour", ge=0)
    pricing_factor: dict[str, float] = arg(DEFAULT_PRICING, "price multiplier per pricing type (the "
                                           "node's pricing; the ones left out keep 1)", ge=0, null=DEFAULT)


@dataclass(frozen=True, slots=True)
class SpotMixArgs(PricingArgs):
    reserved_marginal: float = arg(0.0, "marginal cost of reserved capacity, x price (already paid for)", ge=0)
    risk_gold: float = arg(10.0, "spot risk factor of GOLD (or preemptible=false) tasks", ge=0)
    risk_silver: float = arg(1.0, "spot risk factor of SILVER tasks", ge=0)
    risk_bronze: float = arg(0.0, "spot risk factor of BRONZE (or preemptible=true) tasks", ge=0)


def node_price(s: CellState, a: PricingArgs) -> np.ndarray:
    """Price per hour of each node: its ``price_per_hour``, else
    ``price_by_model[model]`` per GPU (+ ``price_per_core`` per core), times the
    ``pricing_factor[pricing]`` multiplier (SPOT / RESERVED / ON_DEMAND)."""
    price = s.meta_array("price_per_hour", 0.0)
    by_model = a.price_by_model
    if by_model or a.price_per_core:
        # a model without a price costs nothing per GPU
        est = np.array([float(by_model.get(s.models[m], 0.0)) if m >= 0 else 0.0 for m in s.model_idx]) * s.gpu_count
        est = est + a.price_per_core * s.cpu_cap / 1000.0
        price = np.where(price > 0, price, est)
    factors = {**DEFAULT_PRICING, **a.pricing_factor}
    kinds = s.meta_array("pricing", "ON_DEMAND", object)
    return price * np.array([float(factors.get(k, 1.0)) for k in kinds])   # unknown pricing types: x1


def slice_share(ctx: CycleContext, rows: np.ndarray) -> np.ndarray:
    """The largest share of the node (CPU, memory or GPU) the task takes: the part of the
    node's price it is charged for."""
    s, r = ctx.state, ctx.req
    sh = np.maximum(r.cpu / np.maximum(s.cpu_cap[rows], 1), r.mem / np.maximum(s.mem_cap[rows], 1))
    gcap = s.gpu_count[rows] * GPU_MILLI
    return np.maximum(sh, np.where(gcap > 0, r.gpu_total / np.maximum(gcap, 1), 0.0))


@REGISTRY.register
class Cheapest(Plugin):
    """Cheapest feasible: minus the cost per hour of the slice the task takes
    (``node price x largest share``), in milli-currency. Args: :class:`PricingArgs`."""
    name = "Cheapest"
    Args = PricingArgs
    args: PricingArgs

    def score(self, ctx, rows):
        return -np.round(node_price(ctx.state, self.args)[rows] * slice_share(ctx, rows) * 1000.0, 3)


@REGISTRY.register
class SpotMix(Plugin):
    """Spot / reserved / on-demand mix. The marginal cost of a slice is: RESERVED
    capacity ``reserved_marginal`` x price (already paid for: default 0), SPOT price x
    (1 + interruption risk), ON_DEMAND full price. The risk depends on the task: GOLD
    (or label ``preemptible=false``) ``risk_gold`` (default 10: spot only as a last
    resort), SILVER ``risk_silver`` (1.0), BRONZE or ``preemptible=true`` 0.
    Args: :class:`SpotMixArgs`."""
    name = "SpotMix"
    Args = SpotMixArgs
    args: SpotMixArgs

    def score(self, ctx, rows):
        s, a = ctx.state, self.args
        price = node_price(s, a)[rows] * slice_share(ctx, rows)
        kinds = s.meta_array("pricing", "ON_DEMAND", object)[rows]
        tier = qos(ctx)
        pre = str(ctx.labels.get("preemptible", "")).lower()
        if pre == "true" or tier == "BRONZE":
            risk = a.risk_bronze
        elif pre == "false" or tier == "GOLD":
            risk = a.risk_gold
        else:
            risk = a.risk_silver
        mult = np.where(kinds == "RESERVED", a.reserved_marginal,
                        np.where(kinds == "SPOT", 1.0 + risk, 1.0))
        return -np.round(price * mult * 1000.0, 3)
