"""``random``: a uniformly random feasible node; a shared task on a random fitting GPU.

Use it as the floor baseline of the FGD protocol (the paper's "Random"), or to spread
load with no preference at all. Never for production packing.
"""
from __future__ import annotations

from ..framework import REGISTRY, Profile
from ..plugins.basic import FILTERS

NAME = "random"
VERSION = "1.0.0"


def build(config: dict) -> Profile:
    return Profile.build(REGISTRY, FILTERS, [{"name": "RandomScore"}], tie_break=config.get("tie_break", "random"),
                         top_k=int(config.get("top_k", 5)), others=["Capacity"])
