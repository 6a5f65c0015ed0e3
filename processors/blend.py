"""Weighted blends of strategies (used by label rules such as ``training -> packing``).

Each member strategy scores the feasible nodes with its own enabled scorers (its total,
as in ``run_cycle``); the blend min-max normalises each member's totals to 0..100 (float,
so that members on different scales weigh what their weights say) and sums
``weight x normalised``. A node must pass every member's filters; GPU devices are chosen
by the first member that chooses them.
"""
from __future__ import annotations

from typing import Any, Optional

import numpy as np

from .framework import REGISTRY, CycleContext, Plugin, Profile, _normalize


def member_total(profile: Profile, ctx: CycleContext, rows: np.ndarray) -> np.ndarray:
    total = np.zeros(rows.size)
    for p, w in profile.scorers:
        s = p.score(ctx, rows)
        if p.normalize:
            s = _normalize(s)
        total += w * s
    return total


class BlendScore(Plugin):
    name = "Blend"

    def __init__(self, members: list[Any], weights: list[float]):
        super().__init__()
        self.members = members
        self.weights = weights

    def score(self, ctx: CycleContext, rows: np.ndarray) -> np.ndarray:
        out = np.zeros(rows.size)
        for st, w in zip(self.members, self.weights):
            t = member_total(st.profile, ctx, rows)
            lo, hi = float(t.min()), float(t.max())
            out += w * (np.zeros_like(t) if hi == lo else (t - lo) * 100.0 / (hi - lo))
        return np.round(out, 9)

    def select_devices(self, ctx: CycleContext, row: int) -> Optional[list[int]]:
        for st in self.members:
            for p in st.profile.by_point["select_devices"]:
                d = p.select_devices(ctx, row)
                if d is not None:
                    return d
        return None


def build_blend(members: list[Any], weights: list[float]) -> Profile:
    filters, seen = [], set()
    for st in members:
        for f in st.profile.filters:
            if f.name not in seen:
                seen.add(f.name)
                filters.append(f)
    return Profile(filters, [(BlendScore(members, weights), 1.0)], [REGISTRY.create("Capacity")],
                   tie_break="BestFit", top_k=members[0].profile.top_k,
                   secondary={"BestFit": REGISTRY.create("BestFit")})
