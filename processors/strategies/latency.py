"""``latency``: Latency: the node nearest (network ms) to the task's data or users, named by the task
label ``data-zone`` / ``users-zone`` / ``data-region`` / ``users-region`` / ``data-site``
/ ``users-site`` / ``near``. Distances are shortest paths in a networkx graph built from
the nodes' zone / region / site and the link latencies of the config (``zone_region_ms``,
``region_site_ms``, ``region_backbone_ms``, ``links``). BestFit breaks ties.

Use it for real-time inference and interactive services (label
``workload=realtime-inference``) and for data-heavy jobs that should run by their data.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..args import arg, like, project
from ..framework import Profile
from ..plugins.latency import LatencyArgs, Link
from ._profile import standard_profile
from .args import TIE_BREAK_DOC, StrategyArgs, TieBreak

NAME = "latency"
VERSION = "1.0.0"


@dataclass(frozen=True, slots=True)
class Args(StrategyArgs):
    tie_break: TieBreak = arg("BestFit", TIE_BREAK_DOC)
    zone_region_ms: float = like(LatencyArgs, "zone_region_ms")
    region_site_ms: float = like(LatencyArgs, "region_site_ms")
    region_backbone_ms: float = like(LatencyArgs, "region_backbone_ms")
    links: tuple[Link, ...] = like(LatencyArgs, "links")
    unreachable_ms: float = like(LatencyArgs, "unreachable_ms")


def build(args: Args) -> Profile:
    return standard_profile(args, [{"name": "Latency", "args": project(args, LatencyArgs)}])
