"""bench/hot_path_profile.py produces its figures (no timing is asserted)."""
import pytest

from suanli.bench import hot_path_profile


def test_classes_scored_are_far_fewer_than_rows_asked_for():
    r = hot_path_profile.rows(nodes=300, tasks=200)
    assert r["calls"] >= 200 and 0 < r["classes_scored"] < r["rows_asked_for"]


def test_snapshot_figures_are_all_there():
    s = hot_path_profile.snapshot(nodes=50, tasks=80)
    assert {"to_snapshot_ms_cold", "to_snapshot_ms_warm", "json_ms", "zlib_ms"} <= set(s) and s["json_mb"] > 0


@pytest.mark.stack
def test_metrics_are_skipped_by_intake_and_decoded_by_the_reference(stack):
    m = hot_path_profile.metrics(samples=10)
    assert m["samples"] == 10 and m["bytes_mean"] > 1000 and m["decode_and_validate_us"] > 0
