"""``WorstFit``: spread (Kubernetes LeastAllocated)."""
from __future__ import annotations

import numpy as np

from ..framework import REGISTRY, Plugin
from ..state import GPU_MILLI
from ._shared import after


@REGISTRY.register
class WorstFit(Plugin):
    """Spread (Kubernetes LeastAllocated): the share of the node left free after placing,
    averaged over CPU, memory and GPU (GPU only on GPU nodes). Normalised 0..100."""
    name = "WorstFit"
    normalize = True

    def score(self, ctx, rows):
        s = ctx.state
        cpu, mem, gpu = after(ctx, rows)
        gcap = s.gpu_count[rows] * GPU_MILLI
        parts = [cpu / np.maximum(s.cpu_cap[rows], 1), mem / np.maximum(s.mem_cap[rows], 1)]
        g = np.where(gcap > 0, gpu / np.maximum(gcap, 1), 1.0)
        return np.trunc((parts[0] + parts[1] + g) / 3.0 * 1000.0)
