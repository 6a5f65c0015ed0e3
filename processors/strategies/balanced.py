"""``balanced``: Balanced allocation (Kubernetes NodeResourcesBalancedAllocation): the node whose CPU,
memory and GPU utilisations are closest to each other after placing wins; BestFit breaks
ties.

Use it for mixed CPU/memory/GPU workloads where one resource running out early strands
the others (e.g. memory-heavy inference next to CPU-heavy preprocessing).
"""
from __future__ import annotations

from dataclasses import dataclass

from ..args import arg
from ..framework import Profile
from ._profile import standard_profile
from .args import TIE_BREAK_DOC, StrategyArgs, TieBreak

NAME = "balanced"
VERSION = "1.0.0"


@dataclass(frozen=True, slots=True)
class Args(StrategyArgs):
    tie_break: TieBreak = arg("BestFit", TIE_BREAK_DOC)


def build(args: Args) -> Profile:
    return standard_profile(args, [{"name": "Balanced"}])
