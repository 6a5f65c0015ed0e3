"""``default``: Suanli's GPU-aware strategy, a fragmentation-gradient / best-fit blend.

score(node) = delta_frag(node) + g * gap_gain(node) + w * bestfit(node) - scarcity(node)

* ``delta_frag``: how many GPU milli of expected fragmentation (FGD's measure, w.r.t. the
  typical tasks) the placement removes, as an exact float, not squashed through the
  simulator's sigmoid-and-truncate (which throws away most of the signal);
* ``gap_gain`` (shared tasks; weight ``gap_weight``, default 0.5): how much the expected
  *final* waste of the chosen GPU's gap drops (``frag.gap_waste_table``: a gap is filled by
  random fitting typical shapes until none fits). FGD only asks whether the next task
  could use a gap; this sees that 190 milli left by an 810-milli task stays a sliver;
* ``bestfit``: the simulator's BestFit score (0..100, un-normalised), weight ``w``
  (``bestfit_weight``, default 1.0): one BestFit point trades against one milli-GPU of
  fragmentation, so packing decides between nodes that FGD sees as (nearly) equal. Per
  task kind (``bestfit_kinds``, kind -> share of the CPU term): shared tasks lean on the
  GPU (0.25 CPU, 0.75 GPU: the GPU is what they fragment, and packing their CPU strands
  whole GPUs behind it); CPU-only tasks pack by *GPU* only (0.0), i.e. onto the nodes whose
  GPUs are already taken, so their CPU use strands no free GPU; whole-GPU tasks are left
  to the fragmentation gradient (their devices are interchangeable, and BestFit's CPU half
  would steer them to CPU-tight nodes and strand the GPUs left there);
* ``scarcity`` (weight ``scarcity_weight``, default 1.0; 0 disables): the expected milli of
  *other* tasks' future demand the placement takes away, from how much of each typical
  class's accepted-model pool it uses (plugins/fgd.py ``Scarcity``). It only acts when
  typical tasks carry GPU-model constraints: unconstrained tasks then keep off the models
  the constrained ones depend on (gpuspec workloads);
* exact ties: BestFit order, then lowest row; a shared task goes on the device with the
  largest score, ties to the one with the least free milli.

Use it by default for GPU clusters with mixed shared / whole / CPU-only tasks. On the
openb trace it beats FGD on all five shared workloads (BENCHMARKS.md). Config: as ``fgd``
(``typical_tasks`` or ``"observed"``, ``threshold_pct``, ``ignore_noaccess``) plus
``gap_weight``, ``bestfit_weight``, ``bestfit_kinds``, ``scarcity_weight``.
"""
from __future__ import annotations

from suanli.errors import StrategyError

from ..framework import REGISTRY, Profile
from ..plugins.basic import FILTERS
from .fgd import fgd_args

NAME = "default"
VERSION = "1.2.0"


def build(config: dict) -> Profile:
    args = fgd_args(config, "raw")
    args["mode"] = config.get("mode", "raw")
    args.setdefault("device_tie", "bestfit")
    args.setdefault("gap_weight", 0.5)
    kinds = config.get("bestfit_kinds", {"cpu": 0.0, "shared": 0.25})
    if not isinstance(kinds, dict) or not set(kinds) <= {"cpu", "shared", "whole"} \
            or not all(isinstance(v, (int, float)) and 0 <= v <= 1 for v in kinds.values()):
        raise StrategyError("bestfit_kinds must map task kinds (cpu, shared, whole) to the CPU "
                            f"term's share in 0..1, e.g. {{\"cpu\": 0.0, \"shared\": 0.5}}; got {kinds!r}")
    scorers = [{"name": "FGD", "args": args},
               {"name": "BestFitRaw", "weight": float(config.get("bestfit_weight", 1.0)),
                "args": {"kinds": {k: float(v) for k, v in sorted(kinds.items())}}}]
    if float(config.get("scarcity_weight", 1.0)):
        scorers.append({"name": "Scarcity", "weight": float(config.get("scarcity_weight", 1.0)),
                        "args": {"typical": args["typical"], "threshold_pct": args["threshold_pct"]}})
    return Profile.build(REGISTRY, FILTERS, scorers,
                         tie_break=config.get("tie_break", "BestFit"), secondary=[{"name": "BestFit"}],
                         top_k=int(config.get("top_k", 5)), others=["Capacity"])
