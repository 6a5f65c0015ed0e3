"""``analytics``: CPU / memory analytics: best fit over CPU and memory only, CPU-only tasks kept off GPU
nodes (``gpu_node_penalty`` points, default 100) so GPUs are not stranded behind CPU work.

Use it for Spark/Flink/SQL style jobs (label ``workload=analytics``) on clusters that
mix CPU-only and GPU nodes.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..args import arg, like, project
from ..framework import Profile
from ..plugins.cpu_mem_fit import CpuMemFitArgs
from ._profile import standard_profile
from .args import TIE_BREAK_DOC, StrategyArgs, TieBreak

NAME = "analytics"
VERSION = "1.0.0"


@dataclass(frozen=True, slots=True)
class Args(StrategyArgs):
    tie_break: TieBreak = arg("BestFit", TIE_BREAK_DOC)
    gpu_node_penalty: float = like(CpuMemFitArgs, "gpu_node_penalty")


def build(args: Args) -> Profile:
    return standard_profile(args, [{"name": "CpuMemFit", "args": project(args, CpuMemFitArgs)}])
