"""``latency``: Latency: the node nearest (network ms) to the task's data or users, named by the task
label ``data-zone`` / ``users-zone`` / ``data-region`` / ``users-region`` / ``data-site``
/ ``users-site`` / ``near``. Distances are shortest paths in a networkx graph built from
the nodes' zone / region / site and the link latencies of the config (``zone_region_ms``,
``region_site_ms``, ``region_backbone_ms``, ``links``). BestFit breaks ties.

Use it for real-time inference and interactive services (label
``workload=realtime-inference``) and for data-heavy jobs that should run by their data.
"""
from __future__ import annotations

from ..framework import REGISTRY, Profile
from ..plugins.basic import FILTERS

NAME = "latency"
VERSION = "1.0.0"


def build(config: dict) -> Profile:
    return Profile.build(REGISTRY, FILTERS, [{"name": "Latency", "args": {k: config[k] for k in ("zone_region_ms", "region_site_ms", "region_backbone_ms", "links", "unreachable_ms") if k in config}}],
                         tie_break=config.get("tie_break", "BestFit"), secondary=[{"name": "BestFit"}],
                         top_k=int(config.get("top_k", 5)), others=["Capacity"])
