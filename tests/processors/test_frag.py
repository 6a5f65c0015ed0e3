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


def test_the_shape_histogram_at_a_cutoff_is_the_walk_of_the_tasks_up_to_it_live_and_restored():
    """FGD's observed distribution reads the shapes of the tasks with ``seq <= cutoff``. It is
    kept per cutoff and extended from the nearest one below, so that a new epoch (or a new
    GPU model, which clears the derived caches) does not walk the cell's history: the answer
    must still be the walk's, in any order of asking, and on a restored state."""
    import json

    from core_helpers import Feed

    from suanli.processors.frag import shape_key
    from suanli.processors.plugins.fgd import shape_counts_through
    from suanli.processors.state import CellState

    def walk(state: CellState, cutoff: int) -> dict[str, int]:
        out: dict[str, int] = {}
        for t in state.tasks.values():
            if t.seq <= cutoff:
                r = t.task.request
                k = shape_key(r.cpu, r.gpu_count, r.gpu_milli, r.models)
                out[k] = out.get(k, 0) + 1
        return out

    f = Feed(strategy="fgd", config={"seed": 1, "retry_every_ms": 0, "refresh_every": 3})
    f.node("a", cpu=64000, gpus=8)
    for i in range(20):
        f.task(f"t{19 - i:02d}", cpu=1000 * (1 + i % 3), gpus=1 if i % 2 else 0, milli=250 * (1 + i % 4))
        for cutoff in (i + 1, 3 * ((i + 1) // 3), 2, 7):
            assert shape_counts_through(f.state, cutoff) == walk(f.state, cutoff)
    f.node("b", cpu=64000, gpus=8, model="A100")              # a new model clears the derived caches
    f.task("after", gpus=1, milli=500)
    restored = CellState.from_snapshot(json.loads(json.dumps(f.state.to_snapshot(), sort_keys=True)))
    for cutoff in (21, 9, 18, 1, 0):
        assert shape_counts_through(restored, cutoff) == walk(f.state, cutoff) == shape_counts_through(f.state, cutoff)
    assert [t.seq for t in restored.arrived_through(4, 9)] == [5, 6, 7, 8, 9]
