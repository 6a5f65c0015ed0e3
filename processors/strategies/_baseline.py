"""How the FGD paper's baselines are assembled: one scorer behind the standard filters.

Shared by ``random``, ``dotprod``, ``gpu-clustering``, ``gpu-packing`` and ``bestfit`` so
that the simulator's rules live in one place: ties go to the smallest node name (its
patched kube-scheduler; ``tie_break`` in the config overrides), ``top_k`` candidates kept
in provenance, the capacity check last. No secondary scorer, so no BestFit tie-break.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..args import arg, like
from ..framework import REGISTRY, Profile
from ..plugins.basic import FILTERS, NormaliserArgs
from .args import TIE_BREAK_DOC, BaselineTieBreak, StrategyArgs


@dataclass(frozen=True, slots=True)
class BaselineArgs(StrategyArgs):
    tie_break: BaselineTieBreak = arg("name", TIE_BREAK_DOC)


@dataclass(frozen=True, slots=True)
class NormalisedBaselineArgs(BaselineArgs):
    """A baseline whose scorer takes the simulator's normalisers (BestFit, DotProduct)."""
    max_cpu: float = like(NormaliserArgs, "max_cpu")
    max_gpu: float = like(NormaliserArgs, "max_gpu")


def normalisers(args: NormalisedBaselineArgs) -> NormaliserArgs:
    """The ``max_cpu`` / ``max_gpu`` normalisers a config sets (BestFit, DotProduct)."""
    return NormaliserArgs(max_cpu=args.max_cpu, max_gpu=args.max_gpu)


def baseline_profile(scorer: str, args: BaselineArgs, plugin_args: Any = None) -> Profile:
    return Profile.build(REGISTRY, FILTERS, [{"name": scorer, "args": plugin_args}],
                         tie_break=args.tie_break, top_k=args.top_k, others=["Capacity"])
