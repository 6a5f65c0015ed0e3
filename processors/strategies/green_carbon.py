"""``green-carbon``: Green: the node where the task emits the least CO2 per hour, ``pue x
carbon_g_per_kwh x task power`` (node_meta; ``watts_per_gpu`` / ``watts_per_gpu_model`` /
``watts_per_core`` in the config). BestFit breaks ties.

Use it for deferrable or location-flexible work across sites with different grids.
"""
from __future__ import annotations

from ..framework import REGISTRY, Profile
from ..plugins.basic import FILTERS

NAME = "green-carbon"
VERSION = "1.0.0"


def build(config: dict) -> Profile:
    return Profile.build(REGISTRY, FILTERS, [{"name": "Carbon", "args": {k: config[k] for k in ("watts_per_gpu", "watts_per_gpu_model", "watts_per_core", "default_pue", "default_carbon") if k in config}}],
                         tie_break=config.get("tie_break", "BestFit"), secondary=[{"name": "BestFit"}],
                         top_k=int(config.get("top_k", 5)), others=["Capacity"])
