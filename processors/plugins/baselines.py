"""Scorers of the FGD paper's other baselines, as its simulator defines them.

* ``DotProduct`` (Tetris-style alignment; the artifact's setting: GPU dimensions merged,
  normalised by the largest node spec): node vector ``(cpu_left/128000,
  gpu_left_total/8000)``, task vector ``(cpu_req/128000, gpu_req_total/8000)``;
  score = ``int(100 * (1 - dot/2))`` (the larger the product, the lower the score).
* ``GpuClustering``: keep tasks of one GPU "affinity" (``share`` or ``<n>-gpu``) together.
  Bands of 25: 75..100 the node only holds tasks of the task's affinity, 50..75 it holds
  this one among others, 25..50 it holds no GPU task, 0..25 only other affinities; inside
  a band ``25 * (8000 - gpu_left_total) // 8000`` (fuller is better). CPU-only: 0.
* ``GpuPacking``: 50..100 the task fits on already-shared devices (``100 - sum of the
  used devices' free % // 10``), 33..50 it must take fully free devices of a used node
  (``50 - devices taken``), else an idle node (``max(33 - n_gpus, n_gpus)``). CPU-only: 0.

None of them is min-max normalised (the simulator gives them no NormalizeScore). All
are vectorised over the candidate rows.
"""
from __future__ import annotations

import numpy as np

from ..framework import REGISTRY, CycleContext, Plugin
from ..state import GPU_MILLI
from .basic import NormaliserArgs

MAX_CPU = 128000.0
MAX_GPU = 8000.0


@REGISTRY.register
class DotProduct(Plugin):
    """Args: ``max_cpu``, ``max_gpu`` (normalisers, as BestFit)."""
    name = "DotProduct"
    Args = NormaliserArgs
    args: NormaliserArgs

    def score(self, ctx: CycleContext, rows: np.ndarray) -> np.ndarray:
        s, r = ctx.state, ctx.req
        max_cpu, max_gpu = self.args.max_cpu, self.args.max_gpu
        dot = (s.cpu_free[rows] / max_cpu) * (r.cpu / max_cpu) \
            + (s.gpu_free_total[rows] / max_gpu) * (r.gpu_total / max_gpu)
        return np.trunc(100.0 * (1.0 - dot / 2.0))


@REGISTRY.register
class GpuClustering(Plugin):
    name = "GpuClustering"

    def score(self, ctx: CycleContext, rows: np.ndarray) -> np.ndarray:
        s, r = ctx.state, ctx.req
        if r.kind == "cpu":
            return np.zeros(rows.size)
        tag = s.gpu_tag(r.gpu_count, r.gpu_milli)
        tags = s.gpu_tags()
        base = (25 * (int(MAX_GPU) - s.gpu_free_total[rows])) // int(MAX_GPU)
        band = np.empty(rows.size, dtype=np.int64)
        for i, row in enumerate(rows.tolist()):
            d = tags[row]
            if d.get(tag, 0) > 0:
                band[i] = 75 if len(d) == 1 else 50
            else:
                band[i] = 25 if not d else 0
        return (base + band).astype(np.float64)


@REGISTRY.register
class GpuPacking(Plugin):
    name = "GpuPacking"

    def score(self, ctx: CycleContext, rows: np.ndarray) -> np.ndarray:
        s, r = ctx.state, ctx.req
        if r.kind == "cpu":
            return np.zeros(rows.size)
        g = s.gpu_free[rows]                                     # [k, G], -1 = no device
        n = s.gpu_count[rows]
        full = s.gpu_full_count[rows]
        idle = full == n
        # devices taken: least free milli first (stable), the first gpu_count that fit
        order = np.argsort(np.where(g >= 0, g, np.iinfo(np.int64).max), axis=1, kind="stable")
        gs = np.take_along_axis(g, order, axis=1)
        fit = gs >= r.gpu_milli
        take = fit & (np.cumsum(fit, axis=1) <= r.gpu_count)
        full_taken = (take & (gs == GPU_MILLI)).sum(axis=1)
        ratio = (np.where(take, gs, 0) * 100 // GPU_MILLI).sum(axis=1)
        case1 = np.maximum(100 - ratio // 10, 50)
        case2 = np.maximum(50 - full_taken, 33)
        case3 = np.maximum(33 - full, full)
        out = np.where(idle, case3, np.where(full_taken > 0, case2, case1))
        return out.astype(np.float64)
