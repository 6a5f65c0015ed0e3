"""processors/frag.py: the expected final waste of a GPU gap."""
import numpy as np

from suanli.processors.frag import TypicalTasks, gap_waste_table


def _tt(*shapes):
    return TypicalTasks.from_list([{"cpu_milli": 1000, "gpu_count": n, "gpu_milli": m, "count": c}
                                   for n, m, c in shapes])


def test_a_gap_no_shape_fits_is_wasted_whole():
    w = gap_waste_table(_tt((1, 500, 1)))
    assert w[0] == 0 and w[499] == 499 and w[190] == 190


def test_a_gap_is_filled_by_fitting_shapes_until_none_fits():
    w = gap_waste_table(_tt((1, 810, 3), (1, 160, 1)))
    assert w[190] == 30                  # 190 -> a 160-milli task -> 30 left for ever
    assert w[160] == 0
    # 1000 free: an 810 (weight 3) leaves 190 -> 30; a 160 (weight 1) leaves 840 -> ...
    assert w[1000] == (3 * w[190] + 1 * w[840]) / 4


def test_whole_gpu_shapes_fit_only_a_free_gpu_and_cpu_only_shapes_are_ignored():
    w = gap_waste_table(_tt((2, 1000, 5), (0, 0, 50)))
    assert w[1000] == 0 and w[999] == 999
    assert np.array_equal(gap_waste_table(_tt((0, 0, 7))), np.arange(1001))
