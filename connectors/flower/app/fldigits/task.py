"""Data, partitioner, model and int8 codec shared by the ServerApp, the ClientApp and
``connectors/flower/centralised.py``.

Only numpy is imported at module level (scikit-learn lazily, in :func:`load_data`), so the
project's own test venv can unit-test the partitioner and the codec without Flower.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

NUM_FEATURES = 64      # 8x8 pixels
NUM_CLASSES = 10
SPLIT_SEED = 0         # the train/test split; fixed so every process sees the same sets
PARTITION_SEED = 42    # the Dirichlet draw; fixed so every SuperNode agrees on the split
ALPHA = 0.5            # Dirichlet concentration: 0.5 gives clearly skewed label mixes
TEST_FRACTION = 0.25
MIN_PARTITION = 10     # re-draw until every partition has at least this many samples

Params = list[np.ndarray]   # [W (64x10 float32), b (10 float32)]


@dataclass(frozen=True)
class Dataset:
    x_train: np.ndarray   # (n, 64) float32 in [0, 1]
    y_train: np.ndarray   # (n,) int64
    x_test: np.ndarray
    y_test: np.ndarray


def load_data() -> Dataset:
    """The digits data, pixels scaled to [0, 1], split 75/25 stratified with a fixed seed.
    Every process (server, clients, centralised baseline) gets the identical split."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    x, y = load_digits(return_X_y=True)
    x = (x / 16.0).astype(np.float32)
    x_tr, x_te, y_tr, y_te = train_test_split(x, y, test_size=TEST_FRACTION, random_state=SPLIT_SEED,
                                              stratify=y)
    return Dataset(x_tr, y_tr.astype(np.int64), x_te, y_te.astype(np.int64))


def dirichlet_partition(labels: np.ndarray, num_partitions: int, alpha: float = ALPHA,
                        seed: int = PARTITION_SEED, min_size: int = MIN_PARTITION) -> list[np.ndarray]:
    """Split sample indices into ``num_partitions`` label-skewed parts.

    For each class, the class's (seed-shuffled) indices are cut by proportions drawn from
    Dirichlet(alpha, ..., alpha); the whole draw is repeated (same generator, so still
    deterministic) until every part has ``min_size`` samples. Contract: the parts are
    disjoint, sorted, their union is ``range(len(labels))``, and the result depends only on
    the arguments.
    """
    if num_partitions < 1:
        raise ValueError("num_partitions must be >= 1")
    if num_partitions * min_size > len(labels):
        raise ValueError(f"{len(labels)} samples cannot give {num_partitions} partitions of {min_size}")
    rng = np.random.default_rng(seed)
    classes = np.unique(labels)
    for _ in range(1000):
        parts: list[list[int]] = [[] for _ in range(num_partitions)]
        for c in classes:
            idx = np.flatnonzero(labels == c)
            rng.shuffle(idx)
            cuts = (np.cumsum(rng.dirichlet([alpha] * num_partitions)) * len(idx)).astype(int)[:-1]
            for part, chunk in zip(parts, np.split(idx, cuts)):
                part.extend(chunk.tolist())
        if min(len(p) for p in parts) >= min_size:
            return [np.sort(np.asarray(p, dtype=np.int64)) for p in parts]
    raise ValueError(f"no Dirichlet({alpha}) draw gave {num_partitions} partitions of >= {min_size}")


# --- the model: multinomial logistic regression trained by minibatch SGD -------------------

def init_params() -> Params:
    """Zero weights: deterministic, and the same starting point for federated and central runs."""
    return [np.zeros((NUM_FEATURES, NUM_CLASSES), np.float32), np.zeros(NUM_CLASSES, np.float32)]


def _softmax(z: np.ndarray) -> np.ndarray:
    z = z - z.max(axis=1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=1, keepdims=True)


def train(params: Params, x: np.ndarray, y: np.ndarray, *, epochs: int, batch_size: int, lr: float,
          seed: int) -> Params:
    """``epochs`` passes of minibatch SGD on the cross-entropy (plus a small L2 term that keeps
    the weights well inside SecAgg+'s clipping range). Returns new float32 arrays."""
    w, b = params[0].astype(np.float64), params[1].astype(np.float64)
    rng = np.random.default_rng(seed)
    onehot = np.eye(NUM_CLASSES)[y]
    for _ in range(epochs):
        order = rng.permutation(len(y))
        for start in range(0, len(y), batch_size):
            i = order[start:start + batch_size]
            grad = (_softmax(x[i] @ w + b) - onehot[i]) / len(i)
            w -= lr * (x[i].T @ grad + 1e-4 * w)
            b -= lr * grad.sum(axis=0)
    return [w.astype(np.float32), b.astype(np.float32)]


def evaluate(params: Params, x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """(mean cross-entropy loss, accuracy) of ``params`` on (x, y)."""
    p = _softmax(x.astype(np.float64) @ params[0] + params[1])
    loss = float(-np.log(np.clip(p[np.arange(len(y)), y], 1e-12, None)).mean())
    return loss, float((p.argmax(axis=1) == y).mean())


# --- the int8 codec for plaintext uploads -------------------------------------------------------

def quantise_update(new: Params, old: Params) -> Params:
    """Encode the update ``new - old`` as int8 with one float32 scale per tensor.

    Returns ``[q_0, ..., q_k, scales]``: ``q_i = round((new_i - old_i) / s_i)`` clipped to
    [-127, 127] (int8), ``s_i = max|new_i - old_i| / 127`` (1.0 for an all-zero update), and
    ``scales`` the float32 vector of the ``s_i``. The error per element is at most ``s_i / 2``.
    """
    qs, scales = [], []
    for n, o in zip(new, old):
        delta = n.astype(np.float32) - o.astype(np.float32)
        peak = float(np.abs(delta).max()) if delta.size else 0.0
        s = peak / 127.0 if peak > 0 else 1.0
        qs.append(np.clip(np.rint(delta / s), -127, 127).astype(np.int8))
        scales.append(s)
    return qs + [np.asarray(scales, np.float32)]


def dequantise_update(encoded: Params, old: Params) -> Params:
    """Inverse of :func:`quantise_update`: ``old_i + q_i * s_i`` as float32."""
    *qs, scales = encoded
    if len(qs) != len(old) or len(scales) != len(old):
        raise ValueError(f"an int8 update has {len(qs)} tensors and {len(scales)} scales for {len(old)} tensors")
    return [(o.astype(np.float32) + q.astype(np.float32) * np.float32(s)) for q, s, o in zip(qs, scales, old)]
