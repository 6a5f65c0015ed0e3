"""``random``: a uniformly random feasible node; a shared task on a random fitting GPU.

Use it as the floor baseline of the FGD protocol (the paper's "Random"), or to spread
load with no preference at all. Never for production packing.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..args import arg
from ..framework import Profile
from ._baseline import BaselineArgs, baseline_profile
from .args import TIE_BREAK_DOC, BaselineTieBreak

NAME = "random"
VERSION = "1.0.0"


@dataclass(frozen=True, slots=True)
class Args(BaselineArgs):
    tie_break: BaselineTieBreak = arg("random", TIE_BREAK_DOC)


def build(args: Args) -> Profile:
    return baseline_profile("RandomScore", args)
