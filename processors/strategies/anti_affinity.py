"""``anti-affinity``: Reliability: label anti-affinity. A task labelled ``anti-affinity: "app=db,tier=x"`` is
never placed on a node holding a task with label ``app=db`` or ``tier=x`` (a hard
filter: the task waits rather than break the rule). Among allowed nodes BestFit decides.

Use it to keep noisy neighbours apart or replicas off shared hardware.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..args import arg
from ..framework import Profile
from ..plugins.basic import FILTERS
from ._profile import standard_profile
from .args import TIE_BREAK_DOC, StrategyArgs, TieBreak

NAME = "anti-affinity"
VERSION = "1.0.0"


@dataclass(frozen=True, slots=True)
class Args(StrategyArgs):
    tie_break: TieBreak = arg("random", TIE_BREAK_DOC)


def build(args: Args) -> Profile:
    return standard_profile(args, [{"name": "BestFit"}], filters=FILTERS + ["AntiAffinity"])
