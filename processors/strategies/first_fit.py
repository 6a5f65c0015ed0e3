"""``first-fit``: First fit: the first feasible node in registration order, fully deterministic with no
randomness at all.

Use it for small clusters, tests and reproducible demos, or when nodes are registered in
preference order (e.g. cheapest or closest first).
"""
from __future__ import annotations

from dataclasses import dataclass

from ..args import arg
from ..framework import Profile
from ._profile import standard_profile
from .args import TIE_BREAK_DOC, StrategyArgs, TieBreak

NAME = "first-fit"
VERSION = "1.0.0"


@dataclass(frozen=True, slots=True)
class Args(StrategyArgs):
    tie_break: TieBreak = arg("first", TIE_BREAK_DOC)


def build(args: Args) -> Profile:
    return standard_profile(args, [{"name": "FirstFit"}])
