"""``FirstFit``: registration order."""
from __future__ import annotations

import numpy as np

from ..framework import REGISTRY, Plugin


@REGISTRY.register
class FirstFit(Plugin):
    """The lowest feasible row (registration order) wins."""
    name = "FirstFit"

    def score(self, ctx, rows):
        return -rows.astype(np.float64)
