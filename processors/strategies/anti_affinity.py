"""``anti-affinity``: Reliability: label anti-affinity. A task labelled ``anti-affinity: "app=db,tier=x"`` is
never placed on a node holding a task with label ``app=db`` or ``tier=x`` (a hard
filter: the task waits rather than break the rule). Among allowed nodes BestFit decides.

Use it to keep noisy neighbours apart or replicas off shared hardware.
"""
from __future__ import annotations

from ..framework import REGISTRY, Profile
from ..plugins.basic import FILTERS

NAME = "anti-affinity"
VERSION = "1.0.0"


def build(config: dict) -> Profile:
    return Profile.build(REGISTRY, FILTERS + ["AntiAffinity"], [{"name": "BestFit"}],
                         tie_break=config.get("tie_break", "random"), secondary=[{"name": "BestFit"}],
                         top_k=int(config.get("top_k", 5)), others=["Capacity"])
