"""``batch``: joint placement of a window of queued tasks with an OR-Tools CP-SAT model.

Each decision solves for the arriving task together with up to ``window - 1`` tasks
waiting in the queue (``window``, default 8; ``candidates`` nodes per task, default 16),
maximising placed work (priority first, then GPU milli), then tight fits, and keeping
idle nodes idle (``open_penalty``). Queued tasks the plan places are placed in the same
decision. Deterministic: single worker, fixed seed, ``max_deterministic_time`` (default
0.2 deterministic seconds) rather than wall time; fallback BestFit when the solver has no
plan for the task.

Use it for batch queues (label ``workload=batch``) where throughput of the whole queue
matters more than each task's own best node, e.g. after a large release of capacity.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from ..args import arg, like, project
from ..framework import Profile
from ..plugins.batch import CpSatBatchArgs
from ._profile import standard_profile
from .args import StrategyArgs

NAME = "batch"
VERSION = "1.0.0"


@dataclass(frozen=True, slots=True)
class Args(StrategyArgs):
    tie_break: Literal["BestFit"] = arg("BestFit", "equal scores: by BestFit (the solver's plan "
                                        "decides; fixed)")
    window: int = like(CpSatBatchArgs, "window")
    candidates: int = like(CpSatBatchArgs, "candidates")
    open_penalty: int = like(CpSatBatchArgs, "open_penalty")
    max_deterministic_time: float = like(CpSatBatchArgs, "max_deterministic_time")
    solver_seed: int = like(CpSatBatchArgs, "solver_seed")


def build(args: Args) -> Profile:
    return standard_profile(args, [{"name": "CpSatBatch", "args": project(args, CpSatBatchArgs)}])
