"""``green-pue``: Green (energy): the least added facility power, ``pue x (task power + idle power of
waking an idle node)``: efficient sites first, busy nodes before idle ones so idle nodes
can stay powered down. BestFit breaks ties.

Use it where energy is billed or capped per site, or nodes power down when idle.
"""
from __future__ import annotations

from ..framework import REGISTRY, Profile
from ..plugins.basic import FILTERS

NAME = "green-pue"
VERSION = "1.0.0"


def build(config: dict) -> Profile:
    return Profile.build(REGISTRY, FILTERS, [{"name": "Pue", "args": {k: config[k] for k in ("watts_per_gpu", "watts_per_core", "idle_watts", "default_pue") if k in config}}],
                         tie_break=config.get("tie_break", "BestFit"), secondary=[{"name": "BestFit"}],
                         top_k=int(config.get("top_k", 5)), others=["Capacity"])
