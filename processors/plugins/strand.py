"""``CpuStrand``: how many GPU milli a placement strands behind the node's CPU.

A free GPU is only usable with CPU beside it. The typical GPU tasks ask, on average,
``rho`` CPU milli per GPU milli (their count-weighted CPU demand over their GPU demand;
openb default: about 11 cores per GPU). A node with ``c`` CPU milli and ``g`` GPU milli
free can serve about ``c / rho`` GPU milli of future GPU work, so ``max(0, g - c / rho)``
of its free GPU milli are *stranded*: the CPU they need is gone. The score is the drop in
stranded milli (minus its growth), in GPU milli like FGD's delta, so the two add up in one
blend::

    score = stranded(c, g) - stranded(c - req.cpu, g - req.gpu_total)

FGD's per-class fragment sees a node's CPU only when it falls below what *one* task of a
class needs; this sees the CPU that all the node's free GPUs will need together. It keeps
CPU-only work on nodes with CPU to spare (T4 nodes with 52 cores per GPU, nodes whose GPUs
are taken) rather than on G2 nodes with 12 per GPU, and sends GPU tasks that ask for little
CPU to the nodes short of it.

``slack`` scales ``rho`` (more CPU kept per free GPU); ``cpu_slack`` (0: ``slack``) is the
scale used when the task is CPU-only. A larger ``slack`` for GPU tasks makes even empty
8-GPU nodes look stranded and pulls single-GPU tasks onto them (on openb multigpu50,
slack 1.3 strands 108 8-GPU tasks); a larger ``cpu_slack`` only moves CPU-only work.

Args: :class:`StrandArgs` (``typical`` as FGD's, or ``"observed"``).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import compiled
from ..args import arg
from ..framework import REGISTRY, CycleContext
from ..state import CellState
from .fgd import TypicalArgs, TypicalReader


@dataclass(frozen=True, slots=True)
class StrandArgs(TypicalArgs):
    slack: float = arg(1.0, "scale of the CPU per GPU milli kept for each free GPU milli", gt=0)
    cpu_slack: float = arg(0.0, "the same scale for CPU-only tasks (0: slack)", ge=0, null=0.0)


@REGISTRY.register
class CpuStrand(TypicalReader):
    """Args: :class:`StrandArgs`."""
    name = "CpuStrand"
    Args = StrandArgs
    args: StrandArgs

    def rho(self, s: CellState) -> float:
        """CPU milli per GPU milli of the typical GPU tasks, count-weighted (0: none)."""
        tt = self._fgd.typical(s)

        def compute() -> float:
            g = tt.num > 0
            gpu = int((tt.count[g] * tt.num[g] * tt.milli[g]).sum())
            cpu = int((tt.count[g] * tt.cpu[g]).sum())
            return cpu / gpu if gpu > 0 else 0.0
        return s.derived_recent("cpu-strand-rho", tt.digest, compute)

    def per_class(self, ctx: CycleContext) -> bool:
        return True                     # free CPU and free GPU milli: both the class's

    def score(self, ctx: CycleContext, rows: np.ndarray) -> np.ndarray:
        s, r, a = ctx.state, ctx.req, self.args
        rho = self.rho(s) * (a.cpu_slack if r.kind == "cpu" and a.cpu_slack else a.slack)
        if rho <= 0:
            return np.zeros(rows.size)
        if compiled.KERNELS is not None:        # the same arithmetic in one pass (kernels/src/score.rs)
            out = np.empty(rows.size)
            compiled.KERNELS.strand_rows(s.cpu_free, s.gpu_free_total, compiled.int64_rows(rows), r.cpu,
                                         r.gpu_total, rho, out)
            return out
        cpu = s.cpu_free[rows].astype(np.float64)
        gpu = s.gpu_free_total[rows].astype(np.float64)
        before = np.maximum(0.0, gpu - cpu / rho)
        after = np.maximum(0.0, (gpu - r.gpu_total) - (cpu - r.cpu) / rho)
        return before - after
