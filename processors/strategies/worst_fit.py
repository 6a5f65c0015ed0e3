"""``worst-fit``: Spread (worst fit / Kubernetes LeastAllocated): the node left with the largest free share
of CPU, memory and GPU after placing wins; ties at random (seeded).

Use it for latency-sensitive services that should not share a node with much else, to
keep headroom for load spikes, or to spread heat and wear. Never for GPU packing: it
fragments GPUs (the opposite of ``bestfit``).
"""
from __future__ import annotations

from ..framework import REGISTRY, Profile
from ..plugins.basic import FILTERS

NAME = "worst-fit"
VERSION = "1.0.0"


def build(config: dict) -> Profile:
    return Profile.build(REGISTRY, FILTERS, [{"name": "WorstFit"}],
                         tie_break=config.get("tie_break", "random"), secondary=[{"name": "BestFit"}],
                         top_k=int(config.get("top_k", 5)), others=["Capacity"])
