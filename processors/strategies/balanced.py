"""``balanced``: Balanced allocation (Kubernetes NodeResourcesBalancedAllocation): the node whose CPU,
memory and GPU utilisations are closest to each other after placing wins; BestFit breaks
ties.

Use it for mixed CPU/memory/GPU workloads where one resource running out early strands
the others (e.g. memory-heavy inference next to CPU-heavy preprocessing).
"""
from __future__ import annotations

from ..framework import REGISTRY, Profile
from ..plugins.basic import FILTERS

NAME = "balanced"
VERSION = "1.0.0"


def build(config: dict) -> Profile:
    return Profile.build(REGISTRY, FILTERS, [{"name": "Balanced"}],
                         tie_break=config.get("tie_break", "BestFit"), secondary=[{"name": "BestFit"}],
                         top_k=int(config.get("top_k", 5)), others=["Capacity"])
