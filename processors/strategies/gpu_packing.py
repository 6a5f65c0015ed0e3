"""``gpu-packing``: the FGD paper's GpuPacking baseline.

Prefers, in order: GPUs already shared by other tasks (the fuller the better), then fully
free GPUs on a node already in use (the fewer taken the better), then idle nodes (small
nodes first). CPU-only tasks score 0 everywhere. Ties go to the smallest node id (the simulator's rule);
shared tasks on the GPU with the least free milli that fits.
Use it for training-style whole-GPU workloads where keeping idle nodes idle matters
(e.g. to power them down or keep room for large gangs); reference point of the protocol.
"""
from __future__ import annotations

from ..framework import Profile
from ._baseline import BaselineArgs, baseline_profile

NAME = "gpu-packing"
VERSION = "1.1.0"


Args = BaselineArgs


def build(args: Args) -> Profile:
    return baseline_profile("GpuPacking", args)
