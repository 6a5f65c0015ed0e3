"""``AntiAffinity``: a filter keeping a task off nodes that hold the labels it avoids."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..args import arg
from ..framework import REGISTRY, Plugin
from ._shared import holders


@dataclass(frozen=True, slots=True)
class AntiAffinityArgs:
    strict_replicas: bool = arg(False, "also keep a task off nodes holding a replica of its own replica-group")


@REGISTRY.register
class AntiAffinity(Plugin):
    """Filter: the task's label ``anti-affinity: "k=v[,k2=v2]"`` keeps it off nodes that
    hold a task labelled ``k=v``; with ``strict_replicas`` also off nodes holding a replica
    of its own ``replica-group``."""
    name = "AntiAffinity"
    Args = AntiAffinityArgs
    args: AntiAffinityArgs

    def filter(self, ctx):
        rules = []
        spec = ctx.labels.get("anti-affinity", "")
        for part in spec.split(","):
            if "=" in part:
                k, v = part.split("=", 1)
                rules.append((k.strip(), v.strip()))
        group = ctx.labels.get("replica-group")
        if self.args.strict_replicas and group:
            rules.append(("replica-group", group))
        if not rules:
            return None
        s = ctx.state
        bad = np.zeros(s.n_nodes, dtype=bool)
        for k, v in rules:
            for t in holders(s, k, v):
                if t.node is not None and t is not ctx.task:
                    bad[s.node_index[t.node]] = True
        return ~bad, "anti-affinity"
