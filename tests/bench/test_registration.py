"""bench/registration.py: the figures are produced and the restore is checked (its command
line: tests/bench/test_per_size.py; nothing about speed)."""
from suanli.bench.registration import registration_seconds


def test_registration_figures_are_produced_for_a_small_cell():
    r = registration_seconds(40, tasks=30)
    assert r["nodes"] == 40 and r["tasks"] == 30
    assert r["register_seconds"] > 0 and r["restore_seconds"] > 0
    assert r["register_us_per_node"] > 0 and r["restore_us_per_node"] > 0

