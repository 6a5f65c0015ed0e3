"""``spread-zones``: Reliability: replicas of one ``replica-group`` (task label; key configurable as
``group_label``) spread over zones, then regions, never two on one node while another
node fits; with ``strict_replicas: true`` two replicas never share a node at all. Tasks
without the label are placed by BestFit.

Use it for replicated services and quorum systems that must survive a zone outage.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..args import arg, like, project
from ..framework import Profile
from ..plugins.anti_affinity import AntiAffinityArgs
from ..plugins.basic import FILTERS
from ..plugins.zone_spread import ZoneSpreadArgs
from ._profile import standard_profile
from .args import TIE_BREAK_DOC, StrategyArgs, TieBreak

NAME = "spread-zones"
VERSION = "1.0.0"


@dataclass(frozen=True, slots=True)
class Args(StrategyArgs):
    tie_break: TieBreak = arg("BestFit", TIE_BREAK_DOC)
    strict_replicas: bool = like(AntiAffinityArgs, "strict_replicas")
    group_label: str = like(ZoneSpreadArgs, "group_label")


def build(args: Args) -> Profile:
    return standard_profile(args, [{"name": "ZoneSpread", "args": project(args, ZoneSpreadArgs)}],
                            filters=FILTERS + [{"name": "AntiAffinity", "args": project(args, AntiAffinityArgs)}])
