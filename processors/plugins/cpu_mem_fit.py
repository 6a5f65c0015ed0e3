"""``CpuMemFit``: analytics best fit over CPU and memory."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..args import arg
from ..framework import REGISTRY, Plugin
from ._shared import after


@dataclass(frozen=True, slots=True)
class CpuMemFitArgs:
    gpu_node_penalty: float = arg(100.0, "points a CPU-only task loses on a GPU node", ge=0)


@REGISTRY.register
class CpuMemFit(Plugin):
    """Analytics: best fit over CPU and memory only; CPU-only tasks keep off GPU nodes
    (``gpu_node_penalty`` points, default 100) so that GPUs are not stranded by CPU work."""
    name = "CpuMemFit"
    Args = CpuMemFitArgs
    args: CpuMemFitArgs

    def score(self, ctx, rows):
        s = ctx.state
        cpu, mem, _ = after(ctx, rows)
        fit = 100.0 * (1.0 - 0.5 * cpu / np.maximum(s.cpu_cap[rows], 1) - 0.5 * mem / np.maximum(s.mem_cap[rows], 1))
        if ctx.req.kind == "cpu":
            fit = fit - self.args.gpu_node_penalty * (s.gpu_count[rows] > 0)
        return np.trunc(fit)
