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
* ``strand`` (1.3.0; weight ``strand_weight``, default 1.5; 0 disables): how many GPU milli
  the placement strands behind the node's CPU (plugins/strand.py ``CpuStrand``): a node's
  free GPUs need about ``rho`` CPU milli per GPU milli (the typical GPU tasks' ratio, ~11
  cores per GPU on openb); free GPU milli beyond what its free CPU can serve are stranded.
  CPU-only tasks count with ``rho`` scaled by ``strand_cpu_slack`` (default 2.5), so they
  keep CPU beside free GPUs more jealously than GPU tasks do;
* topology (``plugins/topology.py`` ``TopologyNear``, last filter): a task labelled
  ``data-site`` / ``user-site`` with a place (site, zone, rack or node) keeps only the
  feasible nodes nearest to it on the cell's topology graph (measured links and node
  conditions included), and the scores above choose among them. Without the label it does
  nothing (and leaves no trace in the decision).

Use it by default for GPU clusters with mixed shared / whole / CPU-only tasks. On the
openb trace it beats FGD on the five shared workloads and the eight held-out variants
(BENCHMARKS.md). Config: as ``fgd`` (``typical_tasks`` or ``"observed"``,
``threshold_pct``, ``ignore_noaccess``) plus ``gap_weight``, ``bestfit_weight``,
``bestfit_kinds``, ``scarcity_weight``, ``strand_weight``, ``strand_cpu_slack`` and
``version``.

Versions (``version``; decisions are byte-identical for a given version, so a log recorded
under one version verifies under it): ``1.2.0`` is the blend without the strand term
(``strand_weight`` and ``strand_cpu_slack`` are ignored); ``1.3.0`` (default) adds it, and
picks its provenance candidates among equal scores by lowest row (``Profile.stable_candidates``:
1.2.0's choice among ties depends on the CPU's SIMD); ``1.4.0`` adds ``ModelLocality``
(``plugins/model_locality.py``: seconds of model load a node saves, for tasks that carry
model weights; 0 for all others, whose placements are 1.3.0's); ``1.5.0`` (default) gives
ModelLocality's ``local_points`` (1,000) to a node holding the model itself, so a task reads
it from its own disk rather than copying it from a site peer (1.4.0 runs it with 0; tasks
without a model place as before). ``suanli replay --verify`` pins the
version a log's decisions name. On
the openb workloads most of what 1.2.0 left unallocated was whole GPUs on nodes whose CPU
was gone (default workload, seed 42: 203 one-GPU tasks refused for CPU beside free GPUs),
which no per-class fragment measure sees.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

from ..args import arg, like
from ..framework import Profile
from ..plugins.basic import FILTERS, BestFitRawArgs, TaskKind
from ..plugins.fgd import FGDArgs, ScarcityArgs
from ..plugins.model_locality import ModelLocalityArgs
from ..plugins.strand import StrandArgs
from ._profile import standard_profile
from .args import TIE_BREAK_DOC, TieBreak
from .fgd import FgdFamilyArgs, fgd_args

NAME = "default"
VERSION = "1.5.0"
VERSIONS = ("1.2.0", "1.3.0", "1.4.0", "1.5.0")


@dataclass(frozen=True, slots=True)
class Args(FgdFamilyArgs):
    tie_break: TieBreak = arg("BestFit", TIE_BREAK_DOC)
    mode: Literal["sigmoid", "raw"] = like(FGDArgs, "mode", "raw")
    device_tie: Literal["first", "bestfit"] = like(FGDArgs, "device_tie", "bestfit")
    gap_weight: float = like(FGDArgs, "gap_weight", 0.5)
    bestfit_weight: float = arg(1.0, "weight of the BestFit points (one point trades against one "
                                "milli-GPU of fragmentation)", ge=0)
    bestfit_kinds: dict[TaskKind, float] = arg(
        {"cpu": 0.0, "shared": 0.25}, "task kind -> the CPU term's share of its BestFit points (the GPU "
        "term gets the rest); kinds left out get no BestFit points", ge=0, le=1)
    scarcity_weight: float = arg(1.0, "weight of the model-scarcity cost (0: off)", ge=0)
    strand_weight: float = arg(1.5, "1.3.0: weight of the GPU milli stranded behind the node's CPU "
                               "(CpuStrand; 0: off)", ge=0)
    strand_cpu_slack: float = arg(2.5, "1.3.0: CpuStrand's scale of the CPU kept per free GPU milli "
                                  "when the task is CPU-only (GPU tasks: 1)", gt=0)
    model_locality: ModelLocalityArgs = arg(ModelLocalityArgs(), "1.4.0: the model-locality score (nodes "
                                            "holding the task's model weights; 0 for tasks without a model)")
    version: Literal["1.2.0", "1.3.0", "1.4.0", "1.5.0"] = arg(
        "1.5.0", "the blend's version: 1.2.0 (FGD + gap + BestFit + scarcity), 1.3.0 (+ CpuStrand), 1.4.0 "
        "(+ ModelLocality), 1.5.0 (ModelLocality's local_points)")


def build(args: Args) -> Profile:
    scorers = [{"name": "FGD", "args": fgd_args(args)},
               {"name": "BestFitRaw", "weight": args.bestfit_weight,
                "args": BestFitRawArgs(kinds=args.bestfit_kinds)}]
    if args.scarcity_weight:
        # Scarcity reads the typical tasks like FGD but keeps its own refresh cadence (500)
        scorers.append({"name": "Scarcity", "weight": args.scarcity_weight,
                        "args": ScarcityArgs(typical=args.typical_tasks, threshold_pct=args.threshold_pct)})
    if args.version != "1.2.0" and args.strand_weight:
        scorers.append({"name": "CpuStrand", "weight": args.strand_weight,
                        "args": StrandArgs(typical=args.typical_tasks, threshold_pct=args.threshold_pct,
                                           cpu_slack=args.strand_cpu_slack)})
    if args.version not in ("1.2.0", "1.3.0"):
        # 1.4.0: scores 0 everywhere for a task without a model, so only the version and the
        # scorer list in the path tell its decisions from 1.3.0's
        ml = args.model_locality
        if args.version == "1.4.0":
            ml = replace(ml, local_points=0.0)     # 1.4.0 had no local term: its logs replay unchanged
        scorers.append({"name": "ModelLocality", "args": ml})
    # TopologyNear acts only on tasks with a place label: no trace on any other decision
    profile = standard_profile(args, scorers, filters=[*FILTERS, "TopologyNear"])
    # 1.3.0 on: provenance candidates the same on every CPU (framework.stable_top)
    profile.stable_candidates = args.version != "1.2.0"
    return profile
