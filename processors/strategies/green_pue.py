"""``green-pue``: Green (energy): the least added facility power, ``pue x (task power + idle power of
waking an idle node)``: efficient sites first, busy nodes before idle ones so idle nodes
can stay powered down. BestFit breaks ties.

Use it where energy is billed or capped per site, or nodes power down when idle.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..args import arg, like, project
from ..framework import Profile
from ..plugins.pue import PueArgs
from ._profile import standard_profile
from .args import TIE_BREAK_DOC, StrategyArgs, TieBreak

NAME = "green-pue"
VERSION = "1.0.0"


@dataclass(frozen=True, slots=True)
class Args(StrategyArgs):
    tie_break: TieBreak = arg("BestFit", TIE_BREAK_DOC)
    watts_per_gpu: float = like(PueArgs, "watts_per_gpu")
    watts_per_core: float = like(PueArgs, "watts_per_core")
    idle_watts: float = like(PueArgs, "idle_watts")
    default_pue: float = like(PueArgs, "default_pue")


def build(args: Args) -> Profile:
    return standard_profile(args, [{"name": "Pue", "args": project(args, PueArgs)}])
