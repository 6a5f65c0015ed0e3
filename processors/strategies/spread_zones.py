"""``spread-zones``: Reliability: replicas of one ``replica-group`` (task label; key configurable as
``group_label``) spread over zones, then regions, never two on one node while another
node fits; with ``strict_replicas: true`` two replicas never share a node at all. Tasks
without the label are placed by BestFit.

Use it for replicated services and quorum systems that must survive a zone outage.
"""
from __future__ import annotations

from ..framework import REGISTRY, Profile
from ..plugins.basic import FILTERS

NAME = "spread-zones"
VERSION = "1.0.0"


def build(config: dict) -> Profile:
    return Profile.build(REGISTRY, FILTERS + [{"name": "AntiAffinity", "args": {"strict_replicas": bool(config.get("strict_replicas", False))}}], [{"name": "ZoneSpread", "args": {k: config[k] for k in ("group_label",) if k in config}}],
                         tie_break=config.get("tie_break", "BestFit"), secondary=[{"name": "BestFit"}],
                         top_k=int(config.get("top_k", 5)), others=["Capacity"])
