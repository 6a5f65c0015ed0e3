"""``analytics``: CPU / memory analytics: best fit over CPU and memory only, CPU-only tasks kept off GPU
nodes (``gpu_node_penalty`` points, default 100) so GPUs are not stranded behind CPU work.

Use it for Spark/Flink/SQL style jobs (label ``workload=analytics``) on clusters that
mix CPU-only and GPU nodes.
"""
from __future__ import annotations

from ..framework import REGISTRY, Profile
from ..plugins.basic import FILTERS

NAME = "analytics"
VERSION = "1.0.0"


def build(config: dict) -> Profile:
    return Profile.build(REGISTRY, FILTERS, [{"name": "CpuMemFit", "args": {k: config[k] for k in ("gpu_node_penalty",) if k in config}}],
                         tie_break=config.get("tie_break", "BestFit"), secondary=[{"name": "BestFit"}],
                         top_k=int(config.get("top_k", 5)), others=["Capacity"])
