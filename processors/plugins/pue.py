"""``Pue``: the facility power a placement adds."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..args import arg
from ..framework import REGISTRY, CycleContext, Plugin
from ..state import GPU_MILLI
from ._shared import PowerArgs


@dataclass(frozen=True, slots=True)
class PueArgs(PowerArgs):
    idle_watts: float = arg(200.0, "power of waking an idle node, W", ge=0)


def task_power_w(ctx: CycleContext, a: PowerArgs) -> float:
    """Power the task draws: GPUs x ``watts_per_gpu`` + cores x ``watts_per_core``."""
    r = ctx.req
    return r.gpu_total / GPU_MILLI * a.watts_per_gpu + r.cpu / 1000.0 * a.watts_per_core


@REGISTRY.register
class Pue(Plugin):
    """Green (energy): minus the facility power the placement adds, ``pue x (task power
    + idle power if the node is idle now)``: low-PUE sites first, and busy nodes before
    idle ones so that idle nodes can stay powered down (``idle_watts``, default 200).
    Args: :class:`PueArgs`."""
    name = "Pue"
    Args = PueArgs
    args: PueArgs

    def score(self, ctx, rows):
        s, a = ctx.state, self.args
        pue = s.meta_array("pue", a.default_pue)[rows]
        pue = np.where(pue > 0, pue, a.default_pue)
        idle = (s.cpu_free[rows] == s.cpu_cap[rows]) & (s.gpu_free_total[rows] == s.gpu_count[rows] * GPU_MILLI)
        w = task_power_w(ctx, a) + np.where(idle, a.idle_watts, 0.0)
        return -np.round(pue * w, 3)
