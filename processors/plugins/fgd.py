"""The FGD scorer: how much a placement *reduces* the node's expected fragmentation.

``delta = F_n(before) - F_n(after)`` in GPU milli (weights = typical-task frequencies).
Modes:

* ``sigmoid`` (the paper's simulator): score = ``int(sigmoid(delta / 1000) * 100)``, no
  normalisation; a shared task goes on the first device reaching the best int score.
* ``raw``: score = delta as a float, or ``floor(delta / quantum)`` when ``quantum`` > 0
  (coarse buckets, so that a secondary score can order near-equal nodes); the device with
  the best score (ties: least free milli, then lowest index).

Per-node results are cached per task shape in ``state._derived`` and recomputed only for
rows whose stamp changed since (a placement changes one row), which keeps a decision at
O(changed rows), not O(nodes x classes x devices). The cache is a pure function of the
state, so results are identical with or without it.
"""
from __future__ import annotations

from typing import Any, Optional

import numpy as np

from ..frag import TypicalTasks, frag_after_shared, node_frag, typical_from_counts
from ..framework import REGISTRY, CycleContext, Plugin
from ..state import CellState


class _Entry:
    __slots__ = ("n", "stamp", "score", "dev")

    def __init__(self, n: int):
        self.n = n
        self.stamp = np.full(n, -1, dtype=np.int64)
        self.score = np.zeros(n, dtype=np.float64)
        self.dev = np.full(n, -1, dtype=np.int64)


def _typical(args: dict[str, Any]) -> TypicalTasks:
    tt = args.get("typical")
    if isinstance(tt, TypicalTasks):
        return tt
    return TypicalTasks.from_list(tt or [])


@REGISTRY.register
class FGD(Plugin):
    name = "FGD"

    def __init__(self, **args: Any):
        super().__init__(**args)
        typ = args.get("typical", "observed")
        self.tt: Optional[TypicalTasks] = None if typ in (None, "observed") else _typical(args)
        self.threshold = float(args.get("threshold_pct", 95.0))
        self.refresh = int(args.get("refresh_every", 500))
        self.mode = args.get("mode", "sigmoid")

    def typical(self, state: CellState) -> TypicalTasks:
        """The configured distribution, or the one observed in the cell's own log
        (the running histogram of submitted shapes, re-read every ``refresh_every``
        submissions so that the per-node caches stay warm in between)."""
        if self.tt is not None:
            return self.tt
        epoch = state.seq // self.refresh
        k = ("fgd-observed", self.threshold, epoch)
        tt = state._derived.get(k)
        if tt is None:
            tt = state._derived[k] = TypicalTasks.from_list(
                typical_from_counts(state.class_counts, self.threshold))
        return tt

    # -- cached node fragmentation (before any placement)
    def _acc(self, state: CellState, tt: TypicalTasks) -> np.ndarray:
        k = ("fgd-acc", tt.digest, len(state.models))
        t = state._derived.get(k)
        if t is None:
            t = state._derived[k] = tt.access_table(state)
        return t

    def _entry(self, ctx: CycleContext, rows: np.ndarray) -> _Entry:
        s, r = ctx.state, ctx.req
        tt = self.typical(s)
        k = ("fgd", tt.digest, self.mode, r.cpu, r.gpu_count, r.gpu_milli, r.models)
        e = s._derived.get(k)
        if e is None or e.n != s.n_nodes:
            e = s._derived[k] = _Entry(s.n_nodes)
        dirty = rows[e.stamp[rows] != s.stamp[rows]]
        if dirty.size:
            self._compute(s, tt, r, e, dirty)
            e.stamp[dirty] = s.stamp[dirty]
        return e

    def _compute(self, s: CellState, tt: TypicalTasks, r, e: _Entry, rows: np.ndarray) -> None:
        cpu = s.cpu_free[rows]
        gpu = s.gpu_free[rows]
        if tt.total == 0:                       # nothing observed yet: neutral scores, best-fit device
            e.score[rows] = 0.0
            if r.kind == "shared":
                e.dev[rows] = np.argmin(np.where(gpu >= r.gpu_milli, gpu, np.iinfo(np.int64).max), axis=1)
            return
        acc = self._acc(s, tt)[:, s.model_idx[rows]].T
        before = node_frag(tt, cpu, gpu, acc)
        if r.kind == "shared":
            after = frag_after_shared(tt, cpu, gpu, acc, r.cpu, r.gpu_milli)      # [k,G]
            delta = (before[:, None] - after) / tt.total                        # milli
            fits = gpu >= r.gpu_milli
            if self.mode == "sigmoid":
                sc = np.trunc(100.0 / (1.0 + np.exp(-delta / 1000.0)))
                sc = np.where(fits, sc, -np.inf)
                if self.args.get("device_tie", "first") == "bestfit":
                    best = sc.max(axis=1, keepdims=True)
                    key = np.where(fits & (sc == best), gpu, np.iinfo(np.int64).max)
                    dev = np.argmin(key, axis=1)
                else:
                    dev = np.argmax(sc, axis=1)                                  # first best
            else:
                sc = np.where(fits, self._quantize(delta), -np.inf)
                best = sc.max(axis=1, keepdims=True)
                # ties: least free milli, then lowest index
                key = np.where(fits & (sc == best), gpu, np.iinfo(np.int64).max)
                dev = np.argmin(key, axis=1)
            e.score[rows] = sc[np.arange(rows.size), dev]
            e.dev[rows] = dev
            return
        g2 = gpu.copy()
        if r.kind == "whole":
            # take the lowest-index devices with >= gpu_milli free (whole devices are alike)
            ok = g2 >= r.gpu_milli
            take = ok & (np.cumsum(ok, axis=1) <= r.gpu_count)
            g2 = np.where(take, g2 - r.gpu_milli, g2)
        after = node_frag(tt, cpu - r.cpu, g2, acc)
        delta = (before - after) / tt.total
        if self.mode == "sigmoid":
            e.score[rows] = np.trunc(100.0 / (1.0 + np.exp(-delta / 1000.0)))
        else:
            e.score[rows] = self._quantize(delta)

    def _quantize(self, delta: np.ndarray) -> np.ndarray:
        q = float(self.args.get("quantum", 0) or 0)
        return np.floor(delta / q) if q > 0 else delta

    def score(self, ctx: CycleContext, rows: np.ndarray) -> np.ndarray:
        return self._entry(ctx, rows).score[rows]

    def select_devices(self, ctx: CycleContext, row: int) -> Optional[list[int]]:
        if ctx.req.kind != "shared":
            return None
        e = self._entry(ctx, np.array([row]))
        return [int(e.dev[row])]
