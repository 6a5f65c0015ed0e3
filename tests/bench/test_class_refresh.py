"""bench/class_refresh.py: the figures are produced (its command line: tests/bench/test_per_size.py;
nothing about speed)."""
from suanli.bench.class_refresh import refresh_us


def test_refresh_figures_are_produced_for_a_small_cell():
    r = refresh_us(30, changes=20)
    assert r["nodes"] == 30 and r["changes"] == 20 and r["allocate_us"] > 0

