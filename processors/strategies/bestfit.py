"""``bestfit``: the FGD paper's BestFit baseline, exactly as its simulator scores it.

score = int((1 - (0.5 (cpu_left - cpu_req)/128000 + 0.5 (gpu_left - gpu_req)/8000)) * 100),
min-max normalised to 0..100 with integer division; ties go to the smallest node id (the
simulator's rule); a shared task goes on the GPU with the least free milli that still fits.
Use it to pack tightly when the workload has few shared-GPU tasks, or as the reference
point of the FGD protocol. Config: ``max_cpu`` / ``max_gpu`` (normalisers).
"""
from __future__ import annotations

from ..framework import Profile
from ._baseline import NormalisedBaselineArgs, baseline_profile, normalisers

NAME = "bestfit"
VERSION = "1.1.0"


Args = NormalisedBaselineArgs


def build(args: Args) -> Profile:
    return baseline_profile("BestFit", args, normalisers(args))
