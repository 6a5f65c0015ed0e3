"""The FGD scorer: how much a placement *reduces* the node's expected fragmentation.

``delta = F_n(before) - F_n(after)`` in GPU milli (weights = typical-task frequencies).
Modes:

* ``sigmoid`` (the paper's simulator): score = ``int(sigmoid(delta / 1000) * 100)``, no
  normalisation; a shared task goes on the first device reaching the best int score.
* ``raw``: score = delta as a float, or ``floor(delta / quantum)`` when ``quantum`` > 0
  (coarse buckets, so that a secondary score can order near-equal nodes); the device with
  the best score (ties: least free milli, then lowest index).

``gap_weight`` (default 0, the paper's FGD) adds, for a shared task, ``gap_weight`` times
the drop in the chosen GPU gap's expected final waste (``frag.gap_waste_table``) to delta.

Per-node results are cached per task shape in ``state._derived`` and recomputed only for
rows whose stamp changed since (a placement changes one row), which keeps a decision at
O(changed rows), not O(nodes x classes x devices). The cache is a pure function of the
state, so results are identical with or without it.
"""
from __future__ import annotations

from typing import Any, Optional

import numpy as np

from ..frag import (TypicalTasks, frag_after_shared, gap_waste_table, node_frag, shape_key,
                    typical_from_counts)
from ..framework import REGISTRY, CycleContext, Plugin
from ..state import GPU_MILLI, CellState


class _Entry:
    __slots__ = ("n", "stamp", "score", "dev")

    def __init__(self, n: int):
        self.n = n
        self.stamp = np.full(n, -1, dtype=np.int64)
        self.score = np.zeros(n, dtype=np.float64)
        self.dev = np.full(n, -1, dtype=np.int64)


def gpu_weighted(tt: TypicalTasks) -> TypicalTasks:
    """The same classes weighted by their GPU demand (count x GPU milli per task) instead
    of their count: the expectation is then over requested GPU milli, the unit of the
    metric that fragmentation costs. CPU-only classes get weight 0 (they see every free
    GPU milli as a fragment on every node, a constant that cannot change a decision)."""
    items = [{"cpu_milli": int(c), "gpu_count": int(n), "gpu_milli": int(m), "gpu_models": list(ms),
              "count": int(k) * int(n) * int(m)}
             for c, n, m, ms, k in zip(tt.cpu, tt.num, tt.milli, tt.models, tt.count) if n > 0 and m > 0]
    return TypicalTasks.from_list(items)


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
        self.ign = bool(args.get("ignore_noaccess", False))
        self.weight = args.get("class_weight", "count")

    def typical(self, state: CellState) -> TypicalTasks:
        """The configured distribution, or the one observed in the cell's own log
        (the running histogram of submitted shapes, re-read every ``refresh_every``
        submissions so that the per-node caches stay warm in between)."""
        tt = self._typical_counts(state)
        if self.weight == "gpu":
            return state.derived(("fgd-gpuw", tt.digest), lambda: gpu_weighted(tt))
        return tt

    def _typical_counts(self, state: CellState) -> TypicalTasks:
        """A pure function of the state: the histogram of the shapes of the tasks with
        arrival ``seq <= cutoff``, where ``cutoff`` is the last multiple of
        ``refresh_every`` (so it is the same for every decision of an epoch, whether the
        state was folded from the log or restored from a snapshot mid-epoch); in the first
        epoch the cutoff is the current ``seq``."""
        if self.tt is not None:
            return self.tt
        epoch = state.seq // self.refresh
        cutoff = epoch * self.refresh if epoch > 0 else state.seq
        k = ("fgd-observed", self.threshold, cutoff)
        tt = state._derived.get(k)
        if tt is None:
            if cutoff == state.seq:
                counts = state.class_counts
            else:
                counts = {}
                for t in state.tasks.values():
                    if t["seq"] <= cutoff:
                        key = shape_key(t["cpu"], t["gpu_count"], t["gpu_milli"], t["models"])
                        counts[key] = counts.get(key, 0) + 1
            for old in [x for x in state._derived if isinstance(x, tuple) and x[:2] == ("fgd-observed", self.threshold)]:
                del state._derived[old]
            tt = state._derived[k] = TypicalTasks.from_list(typical_from_counts(counts, self.threshold))
        return tt

    # -- cached node fragmentation (before any placement)
    def _acc(self, state: CellState, tt: TypicalTasks) -> np.ndarray:
        return state.derived(("fgd-acc", tt.digest, len(state.models)), lambda: tt.access_table(state))

    def _entry(self, ctx: CycleContext, rows: np.ndarray) -> _Entry:
        s, r = ctx.state, ctx.req
        tt = self.typical(s)
        # every argument that changes a score is in the key: plugins with different
        # settings (a blend, a PolicyChanged) may share one state's cache
        k = ("fgd", tt.digest, self.mode, self.ign, self.args.get("quantum", 0),
             self.args.get("device_tie", "first"), float(self.args.get("gap_weight", 0) or 0),
             r.cpu, r.gpu_count, r.gpu_milli, r.models)
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
        before = node_frag(tt, cpu, gpu, acc, self.ign)
        if r.kind == "shared":
            after = frag_after_shared(tt, cpu, gpu, acc, r.cpu, r.gpu_milli, self.ign)      # [k,G]
            delta = (before[:, None] - after) / tt.total                        # milli
            fits = gpu >= r.gpu_milli
            gw = float(self.args.get("gap_weight", 0) or 0)
            if gw:                              # + the drop in the gap's expected final waste
                wt = s.derived(("fgd-waste", tt.digest), lambda: gap_waste_table(tt))
                delta = delta + gw * (wt[np.clip(gpu, 0, GPU_MILLI)]
                                      - wt[np.clip(gpu - r.gpu_milli, 0, GPU_MILLI)])
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
        after = node_frag(tt, cpu - r.cpu, g2, acc, self.ign)
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


@REGISTRY.register
class Scarcity(Plugin):
    """How many milli of *other* tasks' future demand a placement is expected to take away
    (raw milli, negated: higher is better), for clusters with GPU-model constraints.

    For each typical class m, its share of future GPU demand is ``p_m`` (by GPU milli) and
    its pool is ``S_m``, the free GPU milli on ready nodes of the models it accepts. If
    future demand fills the cluster, m is expected to ask for ``p_m * S_all`` of its pool,
    so each milli taken from a node of model M is lost to m with probability about
    ``p_m * S_all / S_m``. The cost of placing ``x`` milli on a node of model M is
    ``x * sum_{m accepts M} p_m * S_all / S_m``. Without model constraints every node
    costs the same (no effect); with them, unconstrained tasks keep off the models that
    constrained tasks depend on. CPU-only tasks cost nothing.
    Args: ``typical`` (as FGD) or ``"observed"``; ``weight_by`` ``"gpu"`` (default) or
    ``"count"``.
    """
    name = "Scarcity"

    def __init__(self, **args: Any):
        super().__init__(**args)
        self._fgd = FGD(typical=args.get("typical", "observed"),
                        threshold_pct=args.get("threshold_pct", 95.0),
                        refresh_every=args.get("refresh_every", 500))

    def pressure(self, s: CellState) -> np.ndarray:
        """[M + 1] expected lost milli per milli taken, per model (last: no GPU)."""
        tt = self._fgd.typical(s)
        k = (tt.digest, len(s.models), s.clock, self.args.get("weight_by", "gpu"))
        hit = s._derived.get("scarcity")
        if hit is not None and hit[0] == k:
            return hit[1]
        M = len(s.models)
        acc = self._fgd._acc(s, tt)[:, :M]                         # [C, M]
        gpu_w = tt.count * np.maximum(tt.num, 0) * tt.milli
        w = gpu_w if self.args.get("weight_by", "gpu") == "gpu" else tt.count
        out = np.zeros(M + 1)
        if w.sum() > 0 and M:
            pm = w / w.sum()
            has = (s.model_idx >= 0) & s.ready
            free = np.bincount(s.model_idx[has], weights=s.gpu_free_total[has], minlength=M)
            s_all = free.sum()
            pool = acc.astype(np.float64) @ free                       # [C]
            ratio = np.where(pool > 0, pm * s_all / np.maximum(pool, 1.0), 0.0)
            out[:M] = ratio @ acc                                      # [M]
        s._derived["scarcity"] = (k, out)
        return out

    def score(self, ctx: CycleContext, rows: np.ndarray) -> np.ndarray:
        r = ctx.req
        if r.kind == "cpu" or not any(self._fgd.typical(ctx.state).models):
            return np.zeros(rows.size)       # no model constraints: every node costs the same
        p = self.pressure(ctx.state)
        return -float(r.gpu_total) * p[ctx.state.model_idx[rows]]
