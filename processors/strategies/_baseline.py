"""How the FGD paper's baselines are assembled: one scorer behind the standard filters.

Shared by ``random``, ``dotprod``, ``gpu-clustering``, ``gpu-packing`` and ``bestfit`` so
that the simulator's rules live in one place: ties go to the smallest node name (its
patched kube-scheduler; ``tie_break`` in the config overrides), ``top_k`` candidates kept
in provenance, the capacity check last.
"""
from __future__ import annotations

from typing import Any, Optional

from ..framework import REGISTRY, Profile
from ..plugins.basic import FILTERS


def normaliser_args(config: dict) -> dict[str, Any]:
    """The ``max_cpu`` / ``max_gpu`` normalisers a config sets (BestFit, DotProduct)."""
    return {k: config[k] for k in ("max_cpu", "max_gpu") if k in config}


def baseline_profile(scorer: str, config: dict, args: Optional[dict[str, Any]] = None,
                     tie_break: str = "name") -> Profile:
    return Profile.build(REGISTRY, FILTERS, [{"name": scorer, "args": args}],
                         tie_break=config.get("tie_break", tie_break),
                         top_k=int(config.get("top_k", 5)), others=["Capacity"])
