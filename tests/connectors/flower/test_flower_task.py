"""Unit tests of the Flower app's partitioner and int8 codec (connectors/flower/app/fldigits/task.py),
its batch-size control file (fldigits/control.py) and the aggregator's SecAgg+ flags.

task.py imports only numpy at module level, control.py and aggregator.py only the standard
library, so these run in the project's venv; the labels are a synthetic stand-in with
digits' class balance (scikit-learn lives in the Flower venv).
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

FLOWER = Path(__file__).resolve().parents[3] / "connectors" / "flower"
sys.path.insert(0, str(FLOWER / "app"))
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


# --- elastic jobs: the aggregator's SecAgg+ fractions and the batch-size control file -------------
def _aggregator():
    import importlib.util
    spec = importlib.util.spec_from_file_location("fl_aggregator", FLOWER / "aggregator.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)    # stdlib only at import time
    return mod


BASE = ["--fleet-port", "1", "--rounds", "3", "--report", "r.jsonl", "--work-dir", "w"]


def test_secagg_shares_and_threshold_are_counts_or_fractions_of_each_round() -> None:
    agg = _aggregator()
    a = agg.parse_args([*BASE, "--min-clients", "2", "--secagg", "--num-shares", "1.0", "--threshold", "0.6"])
    assert (a.num_shares, a.threshold) == (1.0, 0.6) and isinstance(a.num_shares, float)
    assert agg.parse_args([*BASE, "--min-clients", "2", "--secagg", "--num-shares", "1.0"]).threshold == 0.6
    a = agg.parse_args([*BASE, "--min-clients", "3", "--secagg"])                # counts, as before
    assert (a.num_shares, a.threshold) == (3, 2) and isinstance(a.num_shares, int)
    cfg = agg.make_run_config(agg.parse_args([*BASE, "--min-clients", "2", "--secagg", "--num-shares", "1.0",
                                              "--control", "/tmp/c.json"]), Path("/r.jsonl"))
    assert "num-shares=1.0 threshold=0.6" in cfg and 'control="/tmp/c.json"' in cfg and "batch-size=32" in cfg
    assert 'control=""' in agg.make_run_config(a, Path("/r.jsonl")) and "num-shares=3 threshold=2" in \
        agg.make_run_config(a, Path("/r.jsonl"))


@pytest.mark.parametrize("extra", [
    ["--min-clients", "2", "--secagg", "--num-shares", "1.0", "--threshold", "2"],     # mixed kinds
    ["--min-clients", "3", "--secagg", "--num-shares", "3", "--threshold", "0.6"],
    ["--min-clients", "2", "--secagg", "--num-shares", "1.5"],                        # a fraction above 1
    ["--min-clients", "2", "--secagg", "--num-shares", "many"],
    ["--min-clients", "1", "--secagg", "--num-shares", "1.0"],                        # SecAgg+ needs 2 nodes
    ["--min-clients", "2", "--no-secagg", "--batch-size", "0"],
])
def test_bad_share_flags_are_refused(extra: list[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        _aggregator().parse_args([*BASE, *extra])
    assert exc.value.code == 2


def test_the_batch_size_follows_the_control_file(tmp_path: Path, capsys) -> None:
    from fldigits.control import BatchControl

    assert BatchControl(None, 32).current() == 32 and BatchControl("", 32).current() == 32
    path = tmp_path / "control.json"
    c = BatchControl(path, 32)
    assert c.current() == 32                               # no file yet: the run config's
    path.write_text('{"batch_size": 64}')
    assert c.current() == 64
    for bad in ("{not json", '{"batch_size": 0}', '{"batch_size": true}', '[64]', '{"batch": 8}'):
        path.write_text(bad)
        assert c.current() == 64                           # the last good value
    assert "control file" in capsys.readouterr().err
    path.write_text('{"batch_size": 8}')
    assert c.current() == 8
    path.unlink()
    assert c.current() == 32                               # the file is gone: the default again
