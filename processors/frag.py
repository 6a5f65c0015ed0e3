"""GPU fragmentation as the FGD paper (Weng et al., ATC'23) and its simulator define it.

For a node and one *typical task* class m, the fragment F_n(m) is the free GPU milli that
m cannot use on n:

* m requests no GPU: every free GPU milli on n is a fragment;
* n cannot host m (model not accepted, too few devices with >= m.gpu_milli free, or not
  enough free CPU): every free GPU milli on n is a fragment;
* otherwise (the simulator's "Q3"): the free milli of the devices that hold less than
  m.gpu_milli are fragments.

The node's fragmentation is the expectation over the typical-task distribution,
``F_n = sum_m p_m F_n(m)``. Here the weights are integer *counts* (p_m = count_m / total)
and all sums are exact int64, so the value of a node never depends on which other rows
were computed in the same batch (a requirement of the per-node caches).

All functions are vectorised over k node states ``cpu[k]``, ``gpu[k, G]`` (-1 = no
device), ``acc[k, C]`` (model accepted by class c).
"""
from __future__ import annotations

import functools
import hashlib
import math
import json
from dataclasses import dataclass
from typing import Any, Iterable

import numpy as np

from .state import GPU_MILLI, CellState


@dataclass(frozen=True)
class TypicalTasks:
    """The typical-task distribution: C classes with integer weights."""
    cpu: np.ndarray      # [C] int64
    num: np.ndarray      # [C] gpu count
    milli: np.ndarray    # [C] per-GPU milli (0 = CPU only)
    models: tuple[tuple[str, ...], ...]
    count: np.ndarray    # [C] int64 weights
    digest: str

    @functools.cached_property
    def total(self) -> int:
        """The weights' sum (computed once: a scorer reads it on every new node class)."""
        return int(self.count.sum())

    @classmethod
    def from_list(cls, items: Iterable[dict[str, Any]]) -> "TypicalTasks":
        """``items``: dicts with cpu_milli, gpu_count, gpu_milli, gpu_models, count."""
        rows = []
        for it in items:
            num = int(it.get("gpu_count", 0) or 0)
            milli = int(it.get("gpu_milli", 0) or 0) if num > 0 else 0
            if num > 0 and milli <= 0:
                milli = 1000
            rows.append((int(it.get("cpu_milli", 0)), num if milli else 0, milli,
                         tuple(sorted(it.get("gpu_models") or ())), int(it.get("count", 1))))
        rows.sort(key=lambda r: (-r[4], r[:4]))
        canon = json.dumps([list(r[:3]) + [list(r[3]), r[4]] for r in rows], separators=(",", ":"))
        return cls(np.array([r[0] for r in rows], dtype=np.int64),
                   np.array([r[1] for r in rows], dtype=np.int64),
                   np.array([r[2] for r in rows], dtype=np.int64),
                   tuple(r[3] for r in rows),
                   np.array([r[4] for r in rows], dtype=np.int64),
                   hashlib.sha256(canon.encode()).hexdigest()[:16])

    def access_table(self, state: CellState) -> np.ndarray:
        """[C, M+1] bool: class c accepts model m; column M stands for "no GPU" (-1)."""
        M = len(state.models)
        t = np.ones((len(self.models), M + 1), dtype=bool)
        for c, ms in enumerate(self.models):
            if ms:
                t[c, :] = False
                for m, name in enumerate(state.models):
                    t[c, m] = name in ms
        return t


def shape_key(cpu: int, gpu_count: int, gpu_milli: int, models: Iterable[str] = ()) -> str:
    """Canonical string for a task shape (used by the running histogram)."""
    if gpu_count <= 0 or gpu_milli <= 0:
        gpu_count, gpu_milli = 0, 0
    return f"{cpu}/{gpu_count}/{gpu_milli}/{'|'.join(sorted(models))}"


def typical_from_counts(counts: dict[str, int], threshold_pct: float = 95.0) -> list[dict[str, Any]]:
    """The simulator's popularity walk: most frequent shapes first (ties: key order) until
    they cover ``threshold_pct`` % of all tasks. Returns ``from_list`` items."""
    items = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    total = sum(counts.values())
    need = threshold_pct * total / 100.0
    out, cum = [], 0
    for key, c in items:
        if cum >= need:
            break
        cpu, num, milli, models = key.split("/", 3)
        out.append({"cpu_milli": int(cpu), "gpu_count": int(num), "gpu_milli": int(milli),
                    "gpu_models": [m for m in models.split("|") if m], "count": int(c)})
        cum += c
    return out


def _parts(tt: TypicalTasks, gpu: np.ndarray):
    gp = np.maximum(gpu, 0)
    ge = gpu[:, :, None] >= tt.milli[None, None, :]          # [k,G,C]
    cnt = ge.sum(axis=1)                                        # [k,C]
    part = (gp[:, :, None] * ~ge).sum(axis=1)                   # [k,C]
    return gp, ge, cnt, part, gp.sum(axis=1)


def node_frag(tt: TypicalTasks, cpu: np.ndarray, gpu: np.ndarray, acc: np.ndarray,
              ignore_noaccess: bool = False) -> np.ndarray:
    """Count-weighted fragmentation of k node states (int64 [k]; divide by tt.total).

    ``ignore_noaccess``: a class that does not accept the node's GPU model contributes
    nothing (instead of all the node's free GPU): capacity a class may never use is not
    *its* fragment. Without it, placing any task on a rarely accepted model looks like a
    fragmentation *reduction*, which steers unconstrained tasks onto the GPUs the
    constrained ones need."""
    _, _, cnt, part, total = _parts(tt, gpu)
    q3 = (tt.milli > 0)[None, :] & acc & (cnt >= tt.num[None, :]) & (cpu[:, None] >= tt.cpu[None, :])
    f = np.where(q3, part, total[:, None])
    if ignore_noaccess:
        f = np.where(acc, f, 0)
    return (f * tt.count[None, :]).sum(axis=1)


def frag_after_shared(tt: TypicalTasks, cpu: np.ndarray, gpu: np.ndarray, acc: np.ndarray,
                      req_cpu: int, req_milli: int, ignore_noaccess: bool = False) -> np.ndarray:
    """Fragmentation after putting a shared task (req_milli on one device) on device j of
    each node: int64 [k, G]; entries for devices that cannot take it are undefined."""
    gp, ge, cnt, part, total = _parts(tt, gpu)
    v2 = gpu - req_milli                                        # [k,G]
    ge2 = v2[:, :, None] >= tt.milli[None, None, :]             # [k,G,C]
    cnt2 = cnt[:, None, :] - ge + ge2
    part2 = part[:, None, :] - gp[:, :, None] * ~ge + np.maximum(v2, 0)[:, :, None] * ~ge2
    total2 = (total - req_milli)[:, None, None]
    q3 = ((tt.milli > 0)[None, None, :] & acc[:, None, :] & (cnt2 >= tt.num[None, None, :])
          & ((cpu - req_cpu)[:, None, None] >= tt.cpu[None, None, :]))
    f = np.where(q3, part2, total2)
    if ignore_noaccess:
        f = np.where(acc[:, None, :], f, 0)
    return (f * tt.count[None, None, :]).sum(axis=2)


def cluster_frag_milli(tt: TypicalTasks, state: CellState) -> float:
    """Expected fragmented GPU milli of the whole cell (the paper's fragmentation)."""
    if state.n_nodes == 0:
        return 0.0
    acc = tt.access_table(state)[:, state.model_idx].T
    return float(node_frag(tt, state.cpu_free, state.gpu_free, acc).sum()) / tt.total


def gap_waste_table(tt: TypicalTasks) -> np.ndarray:
    """``W[f]`` for f = 0..1000: the expected milli of a GPU gap of ``f`` free milli that is
    never used, if future tasks are drawn from the typical distribution and a gap is
    filled by a random task that fits it, again and again, until none fits.

    ``W[f] = f`` when no GPU class fits ``f``; otherwise the weighted mean of
    ``W[f - s_m]`` over the classes m with per-GPU milli ``s_m <= f`` (weights: class
    counts; a whole-GPU class fits only a free GPU, f = 1000). FGD's fragment measure asks
    whether the *next* task could use a gap; this asks how much of it will be left when
    the gap has been filled as far as the workload's shapes allow (e.g. 190 milli left by
    an 810-milli task is only ever filled by the rare 160/110/50 shapes).

    Computed on multiples of the sizes' greatest common divisor ``g`` (openb: 10 milli): a
    gap of ``F*g + r`` milli (``r < g``) fits exactly the shapes ``F*g`` fits, and its ``r``
    milli are never used, so ``W[F*g + r] = W[F*g] + r``.
    """
    classes = [(int(m), float(c)) for n, m, c in zip(tt.num, tt.milli, tt.count) if n > 0 and m > 0]
    if not classes:
        return np.arange(GPU_MILLI + 1, dtype=np.float64)
    g = GPU_MILLI
    for m, _ in classes:
        g = math.gcd(g, m)
    steps = [(m // g, q) for m, q in sorted(classes)]
    coarse = [0.0] * (GPU_MILLI // g + 1)
    for f in range(1, len(coarse)):
        num = den = 0.0
        for size, q in steps:
            if size > f:
                break
            num += q * coarse[f - size]
            den += q
        coarse[f] = num / den if den else float(f * g)
    f = np.arange(GPU_MILLI + 1)
    return np.asarray(coarse, dtype=np.float64)[f // g] + (f % g)
