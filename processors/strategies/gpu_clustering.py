"""``gpu-clustering``: the FGD paper's GpuClustering baseline.

Keeps GPU tasks of the same kind ("affinity": shared, 1-GPU, 2-GPU, ...) together: a
node holding only tasks of the task's kind scores highest, then mixed nodes holding it,
then idle nodes, then nodes holding only other kinds; fuller nodes first inside a band.
CPU-only tasks score 0 everywhere. Ties go to the lexicographically smallest node id,
as in the paper's simulator (so CPU-only tasks fill nodes in name order).
Use it when tasks of one shape should share nodes (homogeneous islands, simpler
capacity planning); as a reference point of the FGD protocol.
"""
from __future__ import annotations

from ..framework import Profile
from ._baseline import BaselineArgs, baseline_profile

NAME = "gpu-clustering"
VERSION = "1.1.0"


Args = BaselineArgs


def build(args: Args) -> Profile:
    return baseline_profile("GpuClustering", args)
