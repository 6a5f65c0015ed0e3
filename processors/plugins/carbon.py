"""``Carbon``: the grams of CO2 per hour a placement causes."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..args import DEFAULT, arg
from ..framework import REGISTRY, Plugin
from ..state import GPU_MILLI
from ._shared import PowerArgs


@dataclass(frozen=True, slots=True)
class CarbonArgs(PowerArgs):
    watts_per_gpu_model: dict[str, float] = arg({}, "power of one busy GPU per model, W (others: watts_per_gpu)",
                                                ge=0, null=DEFAULT)
    default_carbon: float = arg(400.0, "grid intensity of nodes without carbon_g_per_kwh, g/kWh", ge=0)


@REGISTRY.register
class Carbon(Plugin):
    """Green: minus the grams of CO2 per hour the task causes on the node,
    ``pue x carbon_g_per_kwh x power_kw`` (GPU power per model from
    ``watts_per_gpu_model``). Nodes without carbon data count ``default_carbon`` (400).
    Args: :class:`CarbonArgs`."""
    name = "Carbon"
    Args = CarbonArgs
    args: CarbonArgs

    def score(self, ctx, rows):
        s, a = ctx.state, self.args
        pue = s.meta_array("pue", a.default_pue)[rows]
        pue = np.where(pue > 0, pue, a.default_pue)
        ci = s.meta_array("carbon_g_per_kwh", a.default_carbon)[rows]
        ci = np.where(ci > 0, ci, a.default_carbon)
        per_model = a.watts_per_gpu_model
        r = ctx.req
        # a model without its own figure draws watts_per_gpu
        gpu_w = np.array([float(per_model.get(s.models[m], a.watts_per_gpu)) if m >= 0 else 0.0
                          for m in s.model_idx[rows]])
        kw = (r.gpu_total / GPU_MILLI * gpu_w + r.cpu / 1000.0 * a.watts_per_core) / 1000.0
        return -np.round(pue * ci * kw, 4)
