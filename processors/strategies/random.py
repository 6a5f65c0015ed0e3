"""``random``: a uniformly random feasible node; a shared task on a random fitting GPU.

Use it as the floor baseline of the FGD protocol (the paper's "Random"), or to spread
load with no preference at all. Never for production packing.
"""
from __future__ import annotations

from ..framework import Profile
from ._baseline import baseline_profile

NAME = "random"
VERSION = "1.0.0"


def build(config: dict) -> Profile:
    return baseline_profile("RandomScore", config, tie_break="random")
