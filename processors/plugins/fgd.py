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

Results are cached per task shape in ``state._derived``, per *node class* (nodes with the
same free CPU, free GPU vector and model score the same: ``processors/node_classes.py``),
and computed only for classes not scored before (a placement makes at most one new
class), which keeps a decision at O(new classes), not O(nodes x classes x devices). The
cache is a pure function of the state, so results are identical with or without it.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Optional, Union

import numpy as np

from .. import compiled
from ..args import DEFAULT, arg, explicit
from ..frag import (TypicalTasks, frag_after_shared, gap_waste_table, node_frag, shape_key,
                    typical_from_counts)
from ..framework import REGISTRY, CycleContext, Plugin
from ..node_classes import NodeClasses, node_classes, unknown_classes
from ..state import GPU_MILLI, SHAPE_LOG_KEEP, CellState


@dataclass(frozen=True, slots=True)
class TypicalTask:
    """One class of the typical-task histogram (``frag.TypicalTasks.from_list`` item)."""
    cpu_milli: int = arg(0, "CPU milli per task", ge=0)
    gpu_count: int = arg(0, "GPUs per task (0: CPU only)", ge=0, null=DEFAULT)
    gpu_milli: int = arg(0, "milli per GPU (0 with gpu_count > 0: a whole GPU)", ge=0, null=DEFAULT)
    gpu_models: tuple[str, ...] = arg((), "accepted GPU models (empty: any)", null=DEFAULT)
    count: int = arg(1, "weight: how many tasks of this shape", ge=0)


# the workload's typical tasks, or "observed": the cell's own running histogram
Typical = Union[Literal["observed"], tuple[TypicalTask, ...]]


def typical_tasks(typical: Typical) -> Optional[TypicalTasks]:
    """The configured distribution, or None for ``"observed"``."""
    return None if typical == "observed" else TypicalTasks.from_list(explicit(typical))


@dataclass(frozen=True, slots=True)
class TypicalArgs:
    """Where the typical tasks come from (FGD, Scarcity)."""
    typical: Typical = arg("observed", "the typical tasks: a list of {cpu_milli, gpu_count, gpu_milli, "
                           "gpu_models, count}, or \"observed\" (the cell's running histogram)", null=DEFAULT)
    threshold_pct: float = arg(95.0, "popularity cut of the observed shapes, %", ge=0, le=100)
    refresh_every: int = arg(500, "re-read the observed histogram every this many submissions (at most "
                             "the arrivals whose shapes a cell logs, state.SHAPE_LOG_KEEP)", ge=1, le=SHAPE_LOG_KEEP)


@dataclass(frozen=True, slots=True)
class FGDArgs(TypicalArgs):
    mode: Literal["sigmoid", "raw"] = arg("sigmoid", "sigmoid: int(sigmoid(delta/1000) * 100) as in the "
                                          "paper's simulator; raw: delta in milli as a float")
    ignore_noaccess: bool = arg(False, "a class that cannot use the node's GPU model adds no fragment")
    class_weight: Literal["count", "gpu"] = arg("count", "weigh the typical classes by task count or by GPU demand")
    quantum: float = arg(0.0, "raw mode: floor(delta / quantum) when > 0 (coarse buckets)", ge=0, null=0.0)
    device_tie: Literal["first", "bestfit"] = arg("first", "sigmoid mode, shared task: the first device with "
                                                  "the best score, or the one with the least free milli")
    gap_weight: float = arg(0.0, "shared task: weight of the drop in the GPU gap's expected final waste",
                            ge=0, null=0.0)


@dataclass(frozen=True, slots=True)
class ScarcityArgs(TypicalArgs):
    weight_by: Literal["gpu", "count"] = arg("gpu", "the classes' share of future demand: by GPU milli or by count")


class _Entry:
    """Scores of one task shape under one typical distribution and one set of plugin
    arguments, per node class (``processors/node_classes.py``) of one id generation."""
    __slots__ = ("generation", "digest", "known", "score", "dev", "kernel_tables")

    def __init__(self, generation: int, digest: str):
        self.generation = generation
        self.digest = digest               # the typical tasks' (the rest of the key is the plugin's and the task's)
        self.known = np.zeros(0, dtype=bool)
        self.score = np.zeros(0, dtype=np.float64)
        self.dev = np.zeros(0, dtype=np.int64)
        # (access table as bytes, waste table) the kernel reads, once per entry: both are
        # functions of its key's typical tasks and of the cell's GPU models, and a new model
        # clears the state's derived cache, entries included
        self.kernel_tables: Optional[tuple[np.ndarray, np.ndarray]] = None

    def grow(self, count: int) -> None:
        extra = count - self.known.size
        if extra > 0:
            extra = max(extra, self.known.size)         # amortised doubling
            self.known = np.concatenate([self.known, np.zeros(extra, dtype=bool)])
            self.score = np.concatenate([self.score, np.zeros(extra, dtype=np.float64)])
            self.dev = np.concatenate([self.dev, np.full(extra, -1, dtype=np.int64)])


# the kernel's task kinds (kernels/src/score.rs fgd_raw_states), and its empty waste table
_KIND_CODE = {"cpu": 0, "shared": 1, "whole": 2}
_NO_TABLE = np.zeros(0, dtype=np.float64)

# per-shape entries kept at most (old typical distributions' entries are dead weight)
_MAX_ENTRIES = 256


def gpu_weighted(tt: TypicalTasks) -> TypicalTasks:
    """The same classes weighted by their GPU demand (count x GPU milli per task) instead
    of their count: the expectation is then over requested GPU milli, the unit of the
    metric that fragmentation costs. CPU-only classes get weight 0 (they see every free
    GPU milli as a fragment on every node, a constant that cannot change a decision)."""
    items = [{"cpu_milli": int(c), "gpu_count": int(n), "gpu_milli": int(m), "gpu_models": list(ms),
              "count": int(k) * int(n) * int(m)}
             for c, n, m, ms, k in zip(tt.cpu, tt.num, tt.milli, tt.models, tt.count) if n > 0 and m > 0]
    return TypicalTasks.from_list(items)


def shape_counts_through(state: CellState, cutoff: int) -> dict[str, int]:
    """The histogram of the shapes of the tasks with ``seq <= cutoff``: the running counts
    less the shapes that arrived after ``cutoff`` (``CellState.shape_counts_after``, which
    counts the tasks the cell has forgotten too), so an epoch costs its own arrivals, not
    the cell's history. A state without a shape log (a gang's scratch cell, a state built
    by hand) walks its tasks instead, from the nearest cutoff below. Kept for the last few
    cutoffs in ``state.task_cache``; only a cutoff the cell has reached (``<= state.seq``)
    is kept: later arrivals would change a later one. Callers must not change the dict."""
    memo = state.task_cache.setdefault("shape-counts", {})
    counts = memo.get(cutoff)
    if counts is None:
        counts = state.shape_counts_after(cutoff)
        if counts is None:
            prev = max((c for c in memo if c <= cutoff), default=0)
            counts = dict(memo[prev]) if prev else {}
            for t in state.arrived_through(prev, cutoff):
                r = t.task.request
                key = shape_key(r.cpu, r.gpu_count, r.gpu_milli, r.models)
                counts[key] = counts.get(key, 0) + 1
        if cutoff <= state.seq:
            memo[cutoff] = counts
            for old in sorted(memo)[:-4]:
                del memo[old]
    return counts


@REGISTRY.register
class FGD(Plugin):
    """Args: :class:`FGDArgs`."""
    name = "FGD"
    Args = FGDArgs
    args: FGDArgs

    def __init__(self, args: Any = None, /, **kwargs: Any):
        super().__init__(args, **kwargs)
        a = self.args
        self.tt: Optional[TypicalTasks] = typical_tasks(a.typical)
        self.threshold = a.threshold_pct
        self.refresh = a.refresh_every
        self.mode = a.mode
        self.ign = a.ignore_noaccess
        self.weight = a.class_weight

    def typical(self, state: CellState) -> TypicalTasks:
        """The configured distribution, or the one observed in the cell's own log
        (the running histogram of submitted shapes, re-read every ``refresh_every``
        submissions so that the per-node caches stay warm in between)."""
        tt = self._typical_counts(state)
        if self.weight == "gpu":
            return state.derived_recent("fgd-gpuw", tt.digest, lambda: gpu_weighted(tt))
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
        cache = state.task_cache            # a function of the tasks alone: a new GPU model keeps it
        tt = cache.get(k)
        if tt is None:
            if cutoff == state.seq:
                counts = state.class_counts
            else:
                counts = shape_counts_through(state, cutoff)
            for old in [x for x in cache if isinstance(x, tuple) and x[:2] == ("fgd-observed", self.threshold)]:
                del cache[old]
            tt = cache[k] = TypicalTasks.from_list(typical_from_counts(counts, self.threshold))
        return tt

    # -- cached node fragmentation (before any placement)
    def _acc(self, state: CellState, tt: TypicalTasks) -> np.ndarray:
        return state.derived_recent("fgd-acc", (tt.digest, len(state.models)), lambda: tt.access_table(state))

    def _entry_of(self, s: CellState, r, tt: TypicalTasks) -> tuple[_Entry, NodeClasses]:
        """This plugin's entry for the task shape ``r`` under ``tt``, of the current class
        ids' generation and grown to their count; and the classes."""
        # every argument that changes a score is in the key: plugins with different
        # settings (a blend, a PolicyChanged) may share one state's cache
        a = self.args
        k = (tt.digest, self.mode, self.ign, a.quantum, a.device_tie, a.gap_weight,
             r.cpu, r.gpu_count, r.gpu_milli, r.models)
        nc = node_classes(s)
        cache: dict = s._derived.setdefault("fgd-scores", {})
        e = cache.get(k)
        if e is None or e.generation != nc.generation:
            if len(cache) >= _MAX_ENTRIES:
                for old in list(cache)[: _MAX_ENTRIES // 2]:
                    del cache[old]
            e = cache[k] = _Entry(nc.generation, tt.digest)
        e.grow(nc.count)
        return e, nc

    def _entry(self, ctx: CycleContext, rows: np.ndarray) -> tuple[_Entry, np.ndarray]:
        """(entry, class ids of ``rows``): the entry has a score for every class among
        ``rows``; classes not seen before are scored now, once each."""
        tt = self.typical(ctx.state)
        e, nc = self._entry_of(ctx.state, ctx.req, tt)
        return e, self._fill(ctx, rows, tt, e, nc)

    def _fill(self, ctx: CycleContext, rows: np.ndarray, tt: TypicalTasks, e: _Entry, nc: NodeClasses) -> np.ndarray:
        """``_entry``'s work once the entry is at hand: scores the classes among ``rows``
        that ``e`` does not know yet, and returns the rows' class ids."""
        s, r = ctx.state, ctx.req
        cids = nc.ids[rows]
        classes, reps = unknown_classes(cids, rows, e.known)
        if classes.size:
            score, dev = self._score_states(s, tt, r, s.cpu_free[reps], s.gpu_free[reps], s.model_idx[reps])
            e.score[classes] = score
            if dev is not None:
                e.dev[classes] = dev
            e.known[classes] = True
        return cids

    def _scores_compiled(self, ctx: CycleContext, rows: np.ndarray, tt: TypicalTasks, e: _Entry,
                         nc: NodeClasses) -> Optional[np.ndarray]:
        """The scores of ``rows`` as ``_fill`` and ``e.score[cids]`` give them (``e``:
        ``_entry_of``'s entry for ``tt``), in one kernel pass (``kernels/src/score.rs``
        ``fgd_class_scores``: the rows' class ids, the unknown classes scored from their
        rows' states, the gather). None where the kernel does not apply (not raw mode, no
        typical tasks yet, an array it does not take: nothing is written then): the caller
        takes the numpy path."""
        if self.mode != "raw" or tt.total == 0:
            return None
        s, r = ctx.state, ctx.req
        kind, gw = _KIND_CODE[r.kind], self.args.gap_weight
        tables = e.kernel_tables
        if tables is None:
            wt = s.derived_recent("fgd-waste", tt.digest, lambda: gap_waste_table(tt)) if gw and kind == 1 else _NO_TABLE
            tables = e.kernel_tables = (self._acc(s, tt).view(np.uint8), wt)
        out = np.empty(rows.size)
        try:
            compiled.KERNELS.fgd_class_scores(
                tt.cpu, tt.num, tt.milli, tt.count, tt.total, tables[0],
                s.cpu_free, s.gpu_free, s.model_idx, nc.ids, compiled.int64_rows(rows), e.known.view(np.uint8),
                e.score, e.dev, kind, r.cpu, r.gpu_milli, r.gpu_count, self.ign, float(gw), tables[1],
                float(self.args.quantum), out)
        except (BufferError, ValueError):
            return None
        return out

    def _score_states(self, s: CellState, tt: TypicalTasks, r, cpu: np.ndarray, gpu: np.ndarray,
                      midx: np.ndarray) -> tuple[np.ndarray, Optional[np.ndarray]]:
        """(score, device or None) of placing ``r`` on k node states (free CPU [k], free
        GPU [k, G], model index [k]); the device only for a shared task."""
        k = cpu.size
        if tt.total == 0:                       # nothing observed yet: neutral scores, best-fit device
            dev = None
            if r.kind == "shared":
                dev = np.argmin(np.where(gpu >= r.gpu_milli, gpu, np.iinfo(np.int64).max), axis=1)
            return np.zeros(k), dev
        if self.mode == "raw" and compiled.KERNELS is not None:
            return self._score_states_compiled(s, tt, r, cpu, gpu, midx)
        acc = self._acc(s, tt)[:, midx].T
        before = node_frag(tt, cpu, gpu, acc, self.ign)
        if r.kind == "shared":
            after = frag_after_shared(tt, cpu, gpu, acc, r.cpu, r.gpu_milli, self.ign)      # [k,G]
            delta = (before[:, None] - after) / tt.total                        # milli
            fits = gpu >= r.gpu_milli
            gw = self.args.gap_weight
            if gw:                              # + the drop in the gap's expected final waste
                wt = s.derived_recent("fgd-waste", tt.digest, lambda: gap_waste_table(tt))
                delta = delta + gw * (wt[np.clip(gpu, 0, GPU_MILLI)]
                                      - wt[np.clip(gpu - r.gpu_milli, 0, GPU_MILLI)])
            if self.mode == "sigmoid":
                sc = np.trunc(100.0 / (1.0 + np.exp(-delta / 1000.0)))
                sc = np.where(fits, sc, -np.inf)
                if self.args.device_tie == "bestfit":
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
            return sc[np.arange(k), dev], dev
        g2 = gpu.copy()
        if r.kind == "whole":
            # take the lowest-index devices with >= gpu_milli free (whole devices are alike)
            ok = g2 >= r.gpu_milli
            take = ok & (np.cumsum(ok, axis=1) <= r.gpu_count)
            g2 = np.where(take, g2 - r.gpu_milli, g2)
        after = node_frag(tt, cpu - r.cpu, g2, acc, self.ign)
        delta = (before - after) / tt.total
        if self.mode == "sigmoid":
            return np.trunc(100.0 / (1.0 + np.exp(-delta / 1000.0))), None
        return self._quantize(delta), None

    def _score_states_compiled(self, s: CellState, tt: TypicalTasks, r, cpu: np.ndarray, gpu: np.ndarray,
                               midx: np.ndarray) -> tuple[np.ndarray, Optional[np.ndarray]]:
        """``_score_states`` in raw mode by the kernel (``kernels/src/score.rs``
        ``fgd_raw_states``): the same integer fragments and the same float steps, per state
        in one pass instead of [k, G, C] temporaries."""
        k, kind, gw = cpu.size, _KIND_CODE[r.kind], self.args.gap_weight
        wt = s.derived_recent("fgd-waste", tt.digest, lambda: gap_waste_table(tt)) if gw and kind == 1 else _NO_TABLE
        score, dev = np.empty(k), np.empty(k, dtype=np.int64)
        compiled.KERNELS.fgd_raw_states(
            tt.cpu, tt.num, tt.milli, tt.count, tt.total, self._acc(s, tt).view(np.uint8),
            np.ascontiguousarray(cpu, dtype=np.int64), np.ascontiguousarray(gpu, dtype=np.int64),
            np.ascontiguousarray(midx, dtype=np.int64), kind, r.cpu, r.gpu_milli, r.gpu_count, self.ign,
            float(gw), wt, float(self.args.quantum), score, dev)
        return score, (dev if kind == 1 else None)

    def _quantize(self, delta: np.ndarray) -> np.ndarray:
        q = self.args.quantum
        return np.floor(delta / q) if q > 0 else delta

    def per_class(self, ctx: CycleContext) -> bool:
        return True                     # scored per class by construction (_entry)

    def score(self, ctx: CycleContext, rows: np.ndarray) -> np.ndarray:
        tt = self.typical(ctx.state)
        e, nc = self._entry_of(ctx.state, ctx.req, tt)
        out = self._scores_compiled(ctx, rows, tt, e, nc) if compiled.KERNELS is not None else None
        if out is None:
            out = e.score[self._fill(ctx, rows, tt, e, nc)]
        if ctx.req.kind == "shared":
            ctx.scratch[self] = e          # select_devices of the same cycle reads the chosen row's device here
        return out

    def select_devices(self, ctx: CycleContext, row: int) -> Optional[list[int]]:
        if ctx.req.kind != "shared":
            return None
        s = ctx.state
        e = ctx.scratch.get(self)
        if e is not None:
            # an entry is a pure function of its key: this plugin's arguments and this task's
            # shape (both fixed for the context), the typical tasks, and the class ids'
            # generation. With those the same and the row's class scored, _entry would
            # return this very device.
            nc = node_classes(s)
            cid = int(nc.ids[row])
            if (e.generation == nc.generation and cid < e.known.size and e.known[cid]
                    and e.digest == self.typical(s).digest):
                return [int(e.dev[cid])]
        e, cids = self._entry(ctx, np.array([row]))
        return [int(e.dev[cids[0]])]


class TypicalReader(Plugin):
    """Base of the scorers that read the typical tasks as FGD does (``TypicalArgs``):
    ``self._fgd`` is an FGD with the same typical-task settings, whose ``typical`` and
    ``_acc`` they share (and whose caches in the state)."""
    args: TypicalArgs

    def __init__(self, args: Any = None, /, **kwargs: Any):
        super().__init__(args, **kwargs)
        a = self.args
        self._fgd = FGD(FGDArgs(typical=a.typical, threshold_pct=a.threshold_pct, refresh_every=a.refresh_every))


@REGISTRY.register
class Scarcity(TypicalReader):
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
    Args: :class:`ScarcityArgs` (``typical`` as FGD or ``"observed"``; ``weight_by``
    ``"gpu"`` (default) or ``"count"``).
    """
    name = "Scarcity"
    Args = ScarcityArgs
    args: ScarcityArgs

    def pressure(self, s: CellState) -> np.ndarray:
        """[M + 1] expected lost milli per milli taken, per model (last: no GPU)."""
        tt = self._fgd.typical(s)
        k = (tt.digest, len(s.models), s.clock, self.args.weight_by)
        hit = s._derived.get("scarcity")
        if hit is not None and hit[0] == k:
            return hit[1]
        M = len(s.models)
        acc = self._fgd._acc(s, tt)[:, :M]                         # [C, M]
        gpu_w = tt.count * np.maximum(tt.num, 0) * tt.milli
        w = gpu_w if self.args.weight_by == "gpu" else tt.count
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

    def per_class(self, ctx: CycleContext) -> bool:
        return True                     # the model's pressure: the model index is the class's

    def score(self, ctx: CycleContext, rows: np.ndarray) -> np.ndarray:
        r = ctx.req
        if r.kind == "cpu" or not any(self._fgd.typical(ctx.state).models):
            return np.zeros(rows.size)       # no model constraints: every node costs the same
        p = self.pressure(ctx.state)
        return -float(r.gpu_total) * p[ctx.state.model_idx[rows]]
