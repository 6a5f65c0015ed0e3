"""``first-fit``: First fit: the first feasible node in registration order, fully deterministic with no
randomness at all.

Use it for small clusters, tests and reproducible demos, or when nodes are registered in
preference order (e.g. cheapest or closest first).
"""
from __future__ import annotations

from ..framework import REGISTRY, Profile
from ..plugins.basic import FILTERS

NAME = "first-fit"
VERSION = "1.0.0"


def build(config: dict) -> Profile:
    return Profile.build(REGISTRY, FILTERS, [{"name": "FirstFit"}],
                         tie_break=config.get("tie_break", "first"), secondary=[{"name": "BestFit"}],
                         top_k=int(config.get("top_k", 5)), others=["Capacity"])
