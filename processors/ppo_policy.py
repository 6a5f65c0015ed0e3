"""The ``ppo`` strategy's policy: candidate features and a small MLP, in plain numpy (C7).

The policy chooses among the ``k`` best nodes of the ``default`` blend (its *candidates*,
best first) for one task. Each candidate is described by :data:`FEATURES` (what the node
would look like after the placement, the task, the cell), and scored by

    logit_i = -prior * i / k  +  w2 . tanh(W1 f_i + b1) + b2

``prior`` (fixed, not trained) starts the policy at ``default``'s own choice, so training
only has to learn when to deviate from it. At run time the candidate with the largest
logit wins (ties: the better-ranked one), with no randomness: a ``ppo`` decision is a pure
function of the cell state, so replay is IDENTICAL. Training (``replay/ppo_train.py``)
samples from ``softmax(logits)`` instead and also fits the value head (``V1``, ``c1``,
``V2``, ``c2``) on :func:`global_features`.

Weights are plain arrays in an ``.npz`` file (no pickles); :attr:`Policy.digest` is the
sha256 of their names, shapes and bytes, and goes into every decision's provenance with
the policy's ``version`` (``processors/strategies/ppo.py``). No torch at run time.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Optional

import numpy as np

from suanli.errors import StrategyConfigError

from .model import Request
from .state import GPU_MILLI, CellState

FEATURES = (
    "rank",                 # the candidate's place in default's order, 0 (best) .. 1
    "base_score",           # default's score, min-max scaled over the candidates
    "gpu_free_after",       # the node's free GPU milli after the placement / its GPU milli
    "cpu_free_after",       # the node's free CPU after / its CPU
    "mem_free_after",       # the node's free memory after / its memory
    "node_idle",            # 1 when every GPU of the node is free before the placement
    "gpu_used_before",      # 1 - free GPU milli / GPU milli, before
    "max_gpu_free_after",   # the node's largest free device after / 1000 (what a shared task could still use)
    "full_gpus_after",      # whole free devices after / the node's GPU count
    "price",                # the node's price per hour / the cell's dearest node
    "no_gpu_node",          # 1 for a node without GPUs
)
GLOBAL_FEATURES = (
    "task_gpu",             # the task's GPU milli in total / 8000
    "task_cpu",             # its CPU / 64 cores
    "task_shared",          # 1 for a task sharing one GPU
    "gold", "silver", "bronze",
    "cell_gpu_alloc",       # allocated / registered GPU milli of the cell
    "queue",                # tasks waiting in the cell's queue / 1000 (capped at 1)
    "n_candidates",         # candidates / k
)
TIER_INDEX = {"GOLD": 3, "SILVER": 4, "BRONZE": 5}
ACTOR = ("W1", "b1", "w2", "b2")
CRITIC = ("V1", "c1", "v2", "c2")
DEFAULT_WEIGHTS = Path(__file__).with_name("ppo-policy.npz")


def candidate_features(state: CellState, req: Request, rows: np.ndarray, base: np.ndarray) -> np.ndarray:
    """``(len(rows), len(FEATURES))`` float64: the features of placing ``req`` on each of
    ``rows`` (the candidates, best first), ``base`` their ``default`` scores. Pure."""
    k = rows.size
    f = np.zeros((k, len(FEATURES)), dtype=np.float64)
    if k == 0:
        return f
    f[:, 0] = np.arange(k) / max(k - 1, 1)
    lo, hi = float(base.min()), float(base.max())
    f[:, 1] = (base - lo) / (hi - lo) if hi > lo else 1.0
    gpus = state.gpu_count[rows].astype(np.float64)
    gcap = np.maximum(gpus * GPU_MILLI, 1.0)
    gpu_ask = req.gpu_count * req.gpu_milli if req.kind != "cpu" else 0
    gfree = state.gpu_free_total[rows].astype(np.float64)
    f[:, 2] = np.where(gpus > 0, (gfree - gpu_ask) / gcap, 0.0)
    f[:, 3] = (state.cpu_free[rows] - req.cpu) / np.maximum(state.cpu_cap[rows], 1)
    f[:, 4] = (state.mem_free[rows] - req.mem) / np.maximum(state.mem_cap[rows], 1)
    f[:, 5] = (gpus > 0) & (gfree >= gpus * GPU_MILLI)
    f[:, 6] = np.where(gpus > 0, 1.0 - gfree / gcap, 0.0)
    dev = state.gpu_free[rows].astype(np.float64)             # -1 pads devices a node lacks
    if req.kind == "shared":
        # the best-fitting device takes the slice (what default_devices does for ties)
        fits = np.where(dev >= req.gpu_milli, dev, np.inf)
        j = np.argmin(fits, axis=1)
        has = np.isfinite(fits[np.arange(k), j])
        dev[np.arange(k)[has], j[has]] -= req.gpu_milli
    f[:, 7] = np.maximum(dev.max(axis=1), 0.0) / GPU_MILLI
    full = (dev >= GPU_MILLI).sum(axis=1).astype(np.float64)
    if req.kind == "whole":
        full = full - req.gpu_count
    f[:, 8] = np.where(gpus > 0, np.maximum(full, 0.0) / np.maximum(gpus, 1.0), 0.0)
    prices = _prices(state)
    f[:, 9] = prices[rows]
    f[:, 10] = gpus == 0
    return f


def _prices(state: CellState) -> np.ndarray:
    def compute() -> np.ndarray:
        p = np.array([state.nodes[n].price_per_hour for n in state.node_ids], dtype=np.float64)
        top = p.max() if p.size else 0.0
        return p / top if top > 0 else p
    return state.derived(("ppo-prices", state.n_nodes, state.node_gen), compute)


def global_features(state: CellState, req: Request, tier: str, n_candidates: int, k: int) -> np.ndarray:
    """``(len(GLOBAL_FEATURES),)`` float64: the task and the cell, for the value head. Pure."""
    g = np.zeros(len(GLOBAL_FEATURES), dtype=np.float64)
    g[0] = (req.gpu_count * req.gpu_milli if req.kind != "cpu" else 0) / 8000.0
    g[1] = req.cpu / 64000.0
    g[2] = req.kind == "shared"
    if tier in TIER_INDEX:
        g[TIER_INDEX[tier]] = 1.0
    cap = state.gpu_capacity_milli()
    g[6] = state.gpu_allocated_milli() / cap if cap else 0.0
    g[7] = min(len(state.queue) / 1000.0, 1.0)
    g[8] = n_candidates / max(k, 1)
    return g


@dataclass(frozen=True)
class Policy:
    """An actor (per-candidate MLP) and a critic (MLP over the global features), with the
    fixed ``prior`` on default's ranking. ``arrays``: name -> array (see :data:`ACTOR`,
    :data:`CRITIC`)."""
    arrays: Mapping[str, np.ndarray]
    prior: float
    version: str
    meta: Mapping[str, object] = field(default_factory=dict)

    @property
    def digest(self) -> str:
        """sha256 hex of the weights (names, dtypes, shapes and bytes, in name order) and the prior."""
        h = hashlib.sha256()
        for name in sorted(self.arrays):
            a = np.ascontiguousarray(self.arrays[name], dtype=np.float64)
            h.update(f"{name}:{a.shape}:".encode())
            h.update(a.tobytes())
        h.update(repr(float(self.prior)).encode())
        return h.hexdigest()

    def hidden(self, feats: np.ndarray) -> np.ndarray:
        return np.tanh(feats @ self.arrays["W1"] + self.arrays["b1"])

    def logits(self, feats: np.ndarray) -> np.ndarray:
        """The candidates' logits (``feats`` best first, as :func:`candidate_features`)."""
        k = feats.shape[0]
        prior = -self.prior * np.arange(k) / max(k - 1, 1)
        return prior + self.hidden(feats) @ self.arrays["w2"] + self.arrays["b2"][0]

    def value(self, g: np.ndarray) -> float:
        h = np.tanh(g @ self.arrays["V1"] + self.arrays["c1"])
        return float(h @ self.arrays["v2"] + self.arrays["c2"][0])

    def choose(self, feats: np.ndarray) -> int:
        """The deterministic choice: the largest logit, ties to the better-ranked candidate."""
        return int(np.argmax(self.logits(feats)))

    def save(self, path: Path) -> None:
        meta = {**self.meta, "prior": self.prior, "version": self.version, "features": list(FEATURES),
                "global_features": list(GLOBAL_FEATURES)}
        with open(path, "wb") as fh:
            np.savez(fh, meta=np.array(json.dumps(meta, sort_keys=True)),
                     **{k: np.asarray(v, dtype=np.float64) for k, v in self.arrays.items()})

    @classmethod
    def load(cls, path: Path | str) -> "Policy":
        """Read a policy file. A missing file, a pickle, a missing array or features other
        than this code's raise :class:`StrategyConfigError` naming the file."""
        path = Path(path)
        try:
            with np.load(path, allow_pickle=False) as z:
                meta = json.loads(str(z["meta"]))
                arrays = {k: np.array(z[k], dtype=np.float64) for k in (*ACTOR, *CRITIC)}
        except (OSError, KeyError, ValueError) as exc:
            raise StrategyConfigError(f"ppo: cannot read the policy file {path}: {exc}") from None
        if tuple(meta.get("features", ())) != FEATURES or tuple(meta.get("global_features", ())) != GLOBAL_FEATURES:
            raise StrategyConfigError(f"ppo: {path} was trained on other features than this code computes")
        prior, version = float(meta.pop("prior")), str(meta.pop("version"))
        return cls(arrays, prior, version, meta)


def initial(hidden: int = 32, prior: float = 4.0, seed: int = 0, version: str = "init") -> Policy:
    """A fresh policy: small random actor weights (so it starts as ``default``, through the
    prior) and a zero critic output."""
    r = np.random.default_rng(seed)
    nf, ng = len(FEATURES), len(GLOBAL_FEATURES)
    arrays = {"W1": r.normal(0, 1 / np.sqrt(nf), (nf, hidden)), "b1": np.zeros(hidden),
              "w2": r.normal(0, 0.01, hidden), "b2": np.zeros(1),
              "V1": r.normal(0, 1 / np.sqrt(ng), (ng, hidden)), "c1": np.zeros(hidden),
              "v2": np.zeros(hidden), "c2": np.zeros(1)}
    return Policy(arrays, prior, version)


_LOADED: dict[str, Policy] = {}


def load_cached(path: Optional[str]) -> Policy:
    """:meth:`Policy.load`, once per path (``None``: the committed policy)."""
    key = str(path or DEFAULT_WEIGHTS)
    if key not in _LOADED:
        _LOADED[key] = Policy.load(key)
    return _LOADED[key]
