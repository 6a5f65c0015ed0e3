"""Filters, the capacity pre-filter, and the BestFit / Random scorers.

Each plugin is a few vectorised numpy operations over all node rows; none loops over nodes.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Optional

import numpy as np

from .. import compiled, rng
from ..args import arg
from ..framework import OK, REGISTRY, Code, CycleContext, Plugin, Status
from ..state import GPU_MILLI

TaskKind = Literal["cpu", "shared", "whole"]


@dataclass(frozen=True, slots=True)
class NormaliserArgs:
    """The simulator's normalisers (BestFit, DotProduct): the largest node spec."""
    max_cpu: float = arg(128000.0, "CPU milli of the largest node (normaliser)", gt=0)
    max_gpu: float = arg(8000.0, "GPU milli of the largest node (normaliser)", gt=0)


@dataclass(frozen=True, slots=True)
class BestFitRawArgs(NormaliserArgs):
    kinds: Optional[dict[TaskKind, float]] = arg(
        None, "task kind -> the CPU term's share (the GPU term gets the rest); kinds left out "
        "score 0; null: every kind, share 0.5", ge=0, le=1)


@REGISTRY.register
class Capacity(Plugin):
    """pre_filter: UNRESOLVABLE when no registered node (whatever its status or load)
    could ever host the task: too big for every node, or no node of an accepted model
    with enough GPUs."""
    name = "Capacity"

    def pre_filter(self, ctx: CycleContext) -> Status:
        s, r = ctx.state, ctx.req
        key = ("capacity", r.cpu, r.mem, r.gpu_count if r.kind != "cpu" else 0, r.models, s.n_nodes)
        cache = s._derived.setdefault("capacity", {})
        hit = cache.get(key)
        if hit is None:
            if s.n_nodes == 0:
                hit = OK  # an empty cell may still get nodes: pending, not unschedulable
            else:
                ok = (s.cpu_cap >= r.cpu) & (s.mem_cap >= r.mem)
                reason = "larger than any node (cpu/memory)"
                if r.kind != "cpu":
                    mm = ctx.model_mask()
                    g = s.gpu_count >= r.gpu_count
                    if mm is not None:
                        g &= mm
                    if not g.any():
                        reason = ("no node has the accepted GPU model" if mm is not None and not mm.any()
                                  else f"no node has {r.gpu_count} GPUs" + (f" of {'|'.join(r.models)}" if r.models else ""))
                    ok &= g
                hit = OK if ok.any() else Status(Code.UNRESOLVABLE, reason, self.name)
            cache[key] = hit
        return hit


@REGISTRY.register
class NodeReady(Plugin):
    name = "NodeReady"

    def filter(self, ctx):
        return ctx.state.ready, "node not ready"


@REGISTRY.register
class CpuFit(Plugin):
    name = "CpuFit"

    def filter(self, ctx):
        if ctx.req.cpu <= 0:
            return None
        return ctx.state.cpu_free >= ctx.req.cpu, "insufficient cpu"


@REGISTRY.register
class MemoryFit(Plugin):
    name = "MemoryFit"

    def filter(self, ctx):
        if ctx.req.mem <= 0:
            return None
        return ctx.state.mem_free >= ctx.req.mem, "insufficient memory"


@REGISTRY.register
class GpuModel(Plugin):
    name = "GpuModel"

    def filter(self, ctx):
        r, s = ctx.req, ctx.state
        if r.kind == "cpu":
            return None
        mm = ctx.model_mask()
        # a node's GPU count and model are fixed when it first registers (a re-registration
        # keeps its resources), so a mask per count, models and cell size holds; read-only,
        # as every filter's mask
        if mm is None:
            return s.derived(("gpu-count-mask", r.gpu_count, s.n_nodes), lambda: s.gpu_count >= r.gpu_count), \
                "too few GPUs"
        return s.derived(("gpu-model-mask", r.models, len(s.models), r.gpu_count, s.n_nodes),
                         lambda: mm & (s.gpu_count >= r.gpu_count)), "model mismatch"


@REGISTRY.register
class GpuFit(Plugin):
    """Shared: one device with >= gpu_milli free. Whole: gpu_count fully free devices."""
    name = "GpuFit"

    def filter(self, ctx):
        r, s = ctx.req, ctx.state
        if r.kind == "cpu":
            return None
        if r.kind == "shared":
            return s.gpu_max_free >= r.gpu_milli, "insufficient GPU milli"
        if r.gpu_milli == GPU_MILLI:
            return s.gpu_full_count >= r.gpu_count, "insufficient free GPUs"
        return (s.gpu_free >= r.gpu_milli).sum(axis=1) >= r.gpu_count, "insufficient free GPUs"


@REGISTRY.register
class GpuMemory(Plugin):
    """A task asking ``gpu_memory_mib`` per GPU (C1): nodes whose GPUs have at least that
    much memory (``Node.gpu_memory_mib``; a node that reports none counts as 0). No opinion
    (None) on any other task, so their decisions carry no trace of it."""
    name = "GpuMemory"

    def filter(self, ctx):
        r = ctx.req
        if not r.gpu_mem:
            return None
        return ctx.state.gpu_memory_mask(r.gpu_mem), f"GPU memory below {r.gpu_mem} MiB"


def describe_accels(asks) -> str:
    """``2 FPGA 'xilinx-u250', 1 NPU (any model) with 32768 MiB``: accelerator asks for
    reasons and paths (the memory only when asked, so older decisions read as before)."""
    return ", ".join(f"{c} {k} " + (f"{m!r}" if m else "(any model)") + (f" with {mem} MiB" if mem else "")
                     for k, m, c, mem in asks)


@REGISTRY.register
class AcceleratorFit(Plugin):
    """A task asking non-GPU accelerators (NPU, FPGA, ASIC, QPU, OTHER; C1): nodes with
    that many free devices of each kind, of the model it names (any model: all of one
    model; ``CellState.accel_choice``). No opinion (None) on any other task, so their
    decisions carry no trace of it."""
    name = "AcceleratorFit"

    def filter(self, ctx):
        asks = ctx.req.accels
        if not asks:
            return None
        return ctx.state.accel_mask(asks), f"insufficient free accelerators ({describe_accels(asks)})"


# GpuMemory and AcceleratorFit answer None for a task without accelerators or GPU memory:
# for those tasks the list acts, and reads in every decision, as it did without them
FILTERS = ["NodeReady", "GpuModel", "GpuMemory", "CpuFit", "MemoryFit", "GpuFit", "AcceleratorFit"]


@REGISTRY.register
class BestFit(Plugin):
    """The simulator's BestFit: ``int((1 - (0.5*(cpu_left-cpu_req)/max_cpu
    + 0.5*(gpu_left-gpu_req)/max_gpu)) * 100)``, gpu_left = free GPU milli on the node.
    Normalised min-max 0..100 (integer division) by the framework. Args: ``max_cpu``,
    ``max_gpu``."""
    name = "BestFit"
    normalize = True
    Args = NormaliserArgs
    args: NormaliserArgs

    def score(self, ctx, rows):
        return self._score(ctx, rows, 0.5)

    def per_class(self, ctx) -> bool:
        return True                     # free CPU and free GPU milli: both the class's

    def _score(self, ctx, rows, cpu_share: float):
        """``cpu_share`` weighs the CPU term, ``1 - cpu_share`` the GPU term."""
        s, r, a = ctx.state, ctx.req, self.args
        if compiled.KERNELS is not None:        # the same arithmetic in one pass (kernels/src/score.rs)
            out = np.empty(rows.size)
            compiled.KERNELS.bestfit_rows(s.cpu_free, s.gpu_free_total, compiled.int64_rows(rows), r.cpu,
                                          r.gpu_total, a.max_cpu, a.max_gpu, cpu_share, 1.0 - cpu_share, out)
            return out
        cpu = (s.cpu_free[rows] - r.cpu) / a.max_cpu * cpu_share
        gpu = (s.gpu_free_total[rows] - r.gpu_total) / a.max_gpu * (1.0 - cpu_share)
        return np.trunc((1.0 - (cpu + gpu)) * 100.0)


@REGISTRY.register
class RandomScore(Plugin):
    """All feasible nodes score equal; with ``tie_break: random`` the pick is uniform.
    Shared tasks go on a random fitting device."""
    name = "RandomScore"

    def score(self, ctx, rows):
        return np.zeros(rows.size)

    def select_devices(self, ctx, row) -> Optional[list[int]]:
        r = ctx.req
        if r.kind != "shared":
            return None
        fit = np.flatnonzero(ctx.state.gpu_free[row] >= r.gpu_milli)
        return [int(fit[rng.draw(int(fit.size), ctx.seed, 0xD1CE)])]



@REGISTRY.register
class BestFitRaw(BestFit):
    """BestFit's raw 0..100 score without min-max normalisation (for weighted blends).

    ``kinds`` (default: every kind, CPU share 0.5) maps the task kinds it scores (``cpu``,
    ``shared``, ``whole``) to the CPU term's share (the GPU term gets the rest); for the
    other kinds it scores 0, i.e. it stays out of the decision."""
    name = "BestFitRaw"
    normalize = False
    Args = BestFitRawArgs
    args: BestFitRawArgs

    def score(self, ctx, rows):
        kinds = self.args.kinds
        if kinds is None:
            return self._score(ctx, rows, 0.5)
        if ctx.req.kind not in kinds:
            return np.zeros(rows.size)
        return self._score(ctx, rows, kinds[ctx.req.kind])
