"""``bestfit``: the FGD paper's BestFit baseline, exactly as its simulator scores it.

score = int((1 - (0.5 (cpu_left - cpu_req)/128000 + 0.5 (gpu_left - gpu_req)/8000)) * 100),
min-max normalised to 0..100 with integer division; ties go to the smallest node id (the
simulator's rule); a shared task goes on the GPU with the least free milli that still fits.
Use it to pack tightly when the workload has few shared-GPU tasks, or as the reference
point of the FGD protocol. Config: ``max_cpu`` / ``max_gpu`` (normalisers).
"""
from __future__ import annotations

from ..framework import REGISTRY, Profile
from ..plugins.basic import FILTERS

NAME = "bestfit"
VERSION = "1.1.0"


def build(config: dict) -> Profile:
    args = {k: config[k] for k in ("max_cpu", "max_gpu") if k in config}
    return Profile.build(REGISTRY, FILTERS, [{"name": "BestFit", "args": args}],
                         tie_break=config.get("tie_break", "name"),
                         top_k=int(config.get("top_k", 5)), others=["Capacity"])
