"""``worst-fit``: Spread (worst fit / Kubernetes LeastAllocated): the node left with the largest free share
of CPU, memory and GPU after placing wins; ties at random (seeded).

Use it for latency-sensitive services that should not share a node with much else, to
keep headroom for load spikes, or to spread heat and wear. Never for GPU packing: it
fragments GPUs (the opposite of ``bestfit``).
"""
from __future__ import annotations

from dataclasses import dataclass

from ..args import arg
from ..framework import Profile
from ._profile import standard_profile
from .args import TIE_BREAK_DOC, StrategyArgs, TieBreak

NAME = "worst-fit"
VERSION = "1.0.0"


@dataclass(frozen=True, slots=True)
class Args(StrategyArgs):
    tie_break: TieBreak = arg("random", TIE_BREAK_DOC)


def build(args: Args) -> Profile:
    return standard_profile(args, [{"name": "WorstFit"}])
