"""``Balanced``: Kubernetes BalancedAllocation."""
from __future__ import annotations

import numpy as np

from ..framework import REGISTRY, Plugin
from ..state import GPU_MILLI
from ._shared import after


@REGISTRY.register
class Balanced(Plugin):
    """Kubernetes BalancedAllocation: ``100 * (1 - std(cpu, mem, gpu utilisation after))``
    (GPU utilisation only on GPU nodes), so no resource runs out long before the others."""
    name = "Balanced"

    def score(self, ctx, rows):
        s = ctx.state
        cpu, mem, gpu = after(ctx, rows)
        u_cpu = 1.0 - cpu / np.maximum(s.cpu_cap[rows], 1)
        u_mem = 1.0 - mem / np.maximum(s.mem_cap[rows], 1)
        gcap = s.gpu_count[rows] * GPU_MILLI
        u_gpu = np.where(gcap > 0, 1.0 - gpu / np.maximum(gcap, 1), np.nan)
        u = np.stack([u_cpu, u_mem, u_gpu], axis=1)
        return np.trunc(100.0 * (1.0 - np.nanstd(u, axis=1)))
