"""``green-carbon``: Green: the node where the task emits the least CO2 per hour, ``pue x
carbon_g_per_kwh x task power`` (node_meta; ``watts_per_gpu`` / ``watts_per_gpu_model`` /
``watts_per_core`` in the config). BestFit breaks ties.

Use it for deferrable or location-flexible work across sites with different grids.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..args import arg, like, project
from ..framework import Profile
from ..plugins.carbon import CarbonArgs
from ._profile import standard_profile
from .args import TIE_BREAK_DOC, StrategyArgs, TieBreak

NAME = "green-carbon"
VERSION = "1.0.0"


@dataclass(frozen=True, slots=True)
class Args(StrategyArgs):
    tie_break: TieBreak = arg("BestFit", TIE_BREAK_DOC)
    watts_per_gpu: float = like(CarbonArgs, "watts_per_gpu")
    watts_per_gpu_model: dict[str, float] = like(CarbonArgs, "watts_per_gpu_model")
    watts_per_core: float = like(CarbonArgs, "watts_per_core")
    default_pue: float = like(CarbonArgs, "default_pue")
    default_carbon: float = like(CarbonArgs, "default_carbon")


def build(args: Args) -> Profile:
    return standard_profile(args, [{"name": "Carbon", "args": project(args, CarbonArgs)}])
