"""Unit tests of the Flower app's partitioner and int8 codec (connectors/flower/app/fldigits/task.py).

task.py imports only numpy at module level, so these run in the project's venv; the labels
are a synthetic stand-in with digits' class balance (scikit-learn lives in the Flower venv).
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "connectors" / "flower" / "app"))
from fldigits.task import dequantise_update, dirichlet_partition, quantise_update  # noqa: E402

LABELS = np.random.default_rng(7).permutation(np.repeat(np.arange(10), 135))   # 1350 ~ the train split


def test_partition_is_deterministic_disjoint_and_complete() -> None:
    a = dirichlet_partition(LABELS, 5)
    b = dirichlet_partition(LABELS, 5)
    assert all(np.array_equal(x, y) for x, y in zip(a, b))
    everything = np.concatenate(a)
    assert len(everything) == len(LABELS)                           # disjoint ...
    assert np.array_equal(np.sort(everything), np.arange(len(LABELS)))   # ... and covering
    assert min(len(p) for p in a) >= 10
    assert not all(np.array_equal(x, y) for x, y in zip(a, dirichlet_partition(LABELS, 5, seed=1)))


def test_partition_is_non_iid() -> None:
    """Dirichlet(0.5): each part's label mix is far from uniform (total variation from the
    global mix well above what an IID split of this size would show, ~0.05)."""
    parts = dirichlet_partition(LABELS, 3)
    for p in parts:
        mix = np.bincount(LABELS[p], minlength=10) / len(p)
        assert 0.5 * np.abs(mix - 0.1).sum() > 0.15


def test_partition_rejects_impossible_requests() -> None:
    with pytest.raises(ValueError):
        dirichlet_partition(LABELS[:20], 5)
    with pytest.raises(ValueError):
        dirichlet_partition(LABELS, 0)


def test_int8_round_trip_error_is_at_most_half_a_step() -> None:
    rng = np.random.default_rng(0)
    old = [rng.normal(size=(64, 10)).astype(np.float32), rng.normal(size=10).astype(np.float32)]
    new = [o + rng.normal(scale=0.3, size=o.shape).astype(np.float32) for o in old]
    enc = quantise_update(new, old)
    assert [e.dtype for e in enc] == [np.int8, np.int8, np.float32]
    assert enc[-1].shape == (2,)
    dec = dequantise_update(enc, old)
    for d, n, s in zip(dec, new, enc[-1]):
        assert d.dtype == np.float32
        assert np.abs(d - n).max() <= s / 2 + 1e-6
    # the payload: 1 byte per weight plus one float32 scale per tensor (vs 4 bytes per weight)
    assert sum(e.nbytes for e in enc) == 650 + 8


def test_int8_zero_update_and_shape_mismatch() -> None:
    old = [np.ones((3, 2), np.float32)]
    enc = quantise_update(old, old)
    assert np.array_equal(dequantise_update(enc, old)[0], old[0])
    with pytest.raises(ValueError):
        dequantise_update(enc, old + old)
