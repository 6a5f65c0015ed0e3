"""``ZoneSpread``: replicas of one group spread over failure domains."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..args import arg
from ..framework import REGISTRY, Plugin
from ._shared import holders


@dataclass(frozen=True, slots=True)
class ZoneSpreadArgs:
    group_label: str = arg("replica-group", "task label naming the replica group", nonempty=True)


@REGISTRY.register
class ZoneSpread(Plugin):
    """Replicas of one ``replica-group`` (label key in ``group_label``) spread over failure
    domains: minus ``100 x replicas already in the node's zone + 10 x in its region +
    1000 x on the node itself``. Tasks without the label score 0 everywhere."""
    name = "ZoneSpread"
    Args = ZoneSpreadArgs
    args: ZoneSpreadArgs

    def score(self, ctx, rows):
        key = self.args.group_label
        group = ctx.labels.get(key)
        if not group:
            return np.zeros(rows.size)
        s = ctx.state
        zones = s.meta_array("zone", "", object)
        regions = s.meta_array("region", "", object)
        zc: dict[str, int] = {}
        rc: dict[str, int] = {}
        nc = np.zeros(s.n_nodes)
        for t in holders(s, key, group):
            row = s.node_index[t.node]
            nc[row] += 1
            zc[zones[row]] = zc.get(zones[row], 0) + 1
            rc[regions[row]] = rc.get(regions[row], 0) + 1
        z = np.array([zc.get(zones[r], 0) for r in rows.tolist()], dtype=np.float64)
        g = np.array([rc.get(regions[r], 0) for r in rows.tolist()], dtype=np.float64)
        return -(1000.0 * nc[rows] + 100.0 * z + 10.0 * g)
