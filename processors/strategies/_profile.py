"""The profile most strategies share: the standard filters, their scorers, ties by the
configured rule (BestFit available as the secondary scorer), ``top_k`` candidates in
provenance, the capacity pre-filter."""
from __future__ import annotations

from typing import Any, Optional

from ..framework import REGISTRY, Profile
from ..plugins.basic import FILTERS
from .args import StrategyArgs


def standard_profile(args: StrategyArgs, scorers: list[Any], filters: Optional[list[Any]] = None) -> Profile:
    """``scorers``: profile entries (``{"name", "args", "weight"}``); ``filters`` replaces
    the standard ones (``plugins.basic.FILTERS``) when given."""
    return Profile.build(REGISTRY, FILTERS if filters is None else filters, scorers,
                         tie_break=args.tie_break, secondary=[{"name": "BestFit"}],
                         top_k=args.top_k, others=["Capacity"])
