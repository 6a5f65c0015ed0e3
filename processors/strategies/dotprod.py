"""``dotprod``: the FGD paper's DotProduct baseline (Tetris-style alignment packing).

score = ``int(100 * (1 - <free, request> / 2))`` over (CPU / 128 cores, GPU milli / 8 GPUs),
GPU dimensions merged per node, no normalisation; ties to the smallest node id (the simulator's rule);
a shared task goes on the GPU with the least free milli that still fits ("best").
Use it as a reference point of the FGD protocol or for multi-resource packing when the
request mix is balanced. Config: ``max_cpu`` / ``max_gpu``.
"""
from __future__ import annotations

from ..framework import Profile
from ._baseline import NormalisedBaselineArgs, baseline_profile, normalisers

NAME = "dotprod"
VERSION = "1.1.0"


Args = NormalisedBaselineArgs


def build(args: Args) -> Profile:
    return baseline_profile("DotProduct", args, normalisers(args))
