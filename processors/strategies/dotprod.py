"""``dotprod``: the FGD paper's DotProduct baseline (Tetris-style alignment packing).

score = ``int(100 * (1 - <free, request> / 2))`` over (CPU / 128 cores, GPU milli / 8 GPUs),
GPU dimensions merged per node, no normalisation; ties to the smallest node id (the simulator's rule);
a shared task goes on the GPU with the least free milli that still fits ("best").
Use it as a reference point of the FGD protocol or for multi-resource packing when the
request mix is balanced. Config: ``max_cpu`` / ``max_gpu``.
"""
from __future__ import annotations

from ..framework import REGISTRY, Profile
from ..plugins.basic import FILTERS

NAME = "dotprod"
VERSION = "1.1.0"


def build(config: dict) -> Profile:
    args = {k: config[k] for k in ("max_cpu", "max_gpu") if k in config}
    return Profile.build(REGISTRY, FILTERS, [{"name": "DotProduct", "args": args}],
                         tie_break=config.get("tie_break", "name"),
                         top_k=int(config.get("top_k", 5)), others=["Capacity"])
