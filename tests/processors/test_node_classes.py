"""processors/node_classes.py, and the FGD scorer's per-class cache against a direct
per-row computation."""
import random

import numpy as np
import pytest

from suanli.processors.framework import CycleContext
from suanli.processors.model import Request
from suanli.processors.frag import TypicalTasks
from suanli.processors.node_classes import node_classes, unknown_classes
from suanli.processors.plugins.fgd import FGD
from suanli.processors.state import CellState


def _cell(n: int = 40, seed: int = 0) -> CellState:
    rnd = random.Random(seed)
    s = CellState("t")
    for i in range(n):
        g = rnd.choice((0, 2, 4, 8))
        s.add_node(f"n{i:03d}", rnd.choice((32000, 64000)), 256000, g, rnd.choice(("A10", "V100")) if g else None)
    return s


def _same_state(s: CellState, a: int, b: int) -> bool:
    return (s.cpu_free[a] == s.cpu_free[b] and s.model_idx[a] == s.model_idx[b]
            and np.array_equal(s.gpu_free[a], s.gpu_free[b]))


def test_rows_share_a_class_exactly_when_their_states_are_equal():
    s = _cell()
    s.allocate("t1", "n003", [0] if s.gpu_count[3] else [], 250 if s.gpu_count[3] else 0, 1000, 1024)
    ids = node_classes(s).ids
    for a in range(s.n_nodes):
        for b in range(s.n_nodes):
            assert (ids[a] == ids[b]) == _same_state(s, a, b)


@pytest.mark.parametrize("keep", [4096, 3])
def test_classes_follow_every_change_through_the_touched_rows_and_after_a_cut(keep, monkeypatch):
    """``node_classes`` refreshes the rows the state touched since its last call; when the
    list was cut meanwhile (here every few touches) it scans the stamps. Either way, after
    any run of changes, rows share a class exactly when their states are equal."""
    from suanli.processors import state as state_module
    monkeypatch.setattr(state_module, "TOUCHED_KEEP", keep)
    rnd = random.Random(keep)
    s = _cell(30, seed=2)
    live = []
    for step in range(150):
        for _ in range(rnd.randrange(0, 4)):     # 0-3 changes between two reads
            if live and rnd.random() < 0.4:
                s.free(*live.pop(rnd.randrange(len(live))))
                continue
            row = rnd.randrange(s.n_nodes)
            fit = np.flatnonzero(s.gpu_free[row] >= 500)
            devs = [int(fit[0])] if fit.size else []
            if s.cpu_free[row] >= 1000:
                s.allocate(f"t{step}-{row}", s.node_ids[row], devs, 500 if devs else 0, 1000, 1024)
                live.append((s.node_ids[row], devs, 500 if devs else 0, 1000, 1024))
        ids = node_classes(s).ids
        for a in range(s.n_nodes):
            for b in range(a, s.n_nodes):
                assert (ids[a] == ids[b]) == _same_state(s, a, b), step
    assert (s.touched_cuts > 0) == (keep == 3)


def test_a_changed_row_gets_a_new_class_and_returns_to_its_old_one_when_freed():
    s = _cell()
    row = int(np.flatnonzero(s.gpu_count > 0)[0])
    before = int(node_classes(s).ids[row])
    others = node_classes(s).ids.copy()
    s.allocate("t1", s.node_ids[row], [0], 300, 1000, 1024)
    nc = node_classes(s)
    assert nc.ids[row] != before
    assert np.array_equal(np.delete(nc.ids, row), np.delete(others, row))
    s.free(s.node_ids[row], [0], 300, 1000, 1024)
    assert node_classes(s).ids[row] == before


def test_ids_are_renumbered_when_nodes_are_added():
    s = _cell(5)
    g0 = node_classes(s).generation
    s.add_node("extra", 1000, 1000, 0, None)
    nc = node_classes(s)
    assert nc.generation == g0 + 1 and nc.ids.size == 6 and (nc.ids >= 0).all()


def test_unknown_classes_and_a_row_of_each():
    s = _cell()
    nc = node_classes(s)
    rows = np.arange(0, s.n_nodes, 3)
    cids = nc.ids[rows]
    known = np.zeros(nc.count, dtype=bool)
    known[cids[::2]] = True                       # some of the classes present are known
    classes, reps = unknown_classes(cids, rows, known)
    assert classes.tolist() == sorted(set(cids.tolist()) - set(np.flatnonzero(known).tolist()))
    assert nc.ids[reps].tolist() == classes.tolist() and set(reps.tolist()) <= set(rows.tolist())
    one = np.flatnonzero(~known[cids])[:1]        # the usual case: one row of one new class
    assert unknown_classes(cids[one], rows[one], known)[0].tolist() == cids[one].tolist()
    assert unknown_classes(cids, rows, np.ones(nc.count, dtype=bool))[0].size == 0


TYPICAL = [{"cpu_milli": 1000, "gpu_count": 1, "gpu_milli": 250, "count": 5},
           {"cpu_milli": 4000, "gpu_count": 1, "gpu_milli": 1000, "count": 3},
           {"cpu_milli": 8000, "gpu_count": 2, "gpu_milli": 1000, "count": 2},
           {"cpu_milli": 2000, "gpu_count": 0, "gpu_milli": 0, "count": 4},
           {"cpu_milli": 1000, "gpu_count": 1, "gpu_milli": 500, "gpu_models": ["A10"], "count": 2}]


@pytest.mark.parametrize("args", [
    {"mode": "sigmoid"},
    {"mode": "sigmoid", "device_tie": "bestfit"},
    {"mode": "raw", "gap_weight": 0.5},
    {"mode": "raw", "ignore_noaccess": True, "quantum": 10.0},
])
def test_fgd_scores_through_classes_equal_scores_computed_row_by_row(args):
    rnd = random.Random(7)
    s = _cell(60, seed=3)
    plugin = FGD(typical=TYPICAL, **args)
    reqs = [Request(1000, 1024, 1, 250, ()), Request(2000, 1024, 1, 600, ()), Request(4000, 1024, 2, 1000, ()),
            Request(1000, 1024, 0, 0, ()), Request(1000, 1024, 1, 500, ("A10",))]
    live: list[tuple] = []
    for step in range(120):
        if live and rnd.random() < 0.3:
            s.free(*live.pop(rnd.randrange(len(live))))
        else:
            r = reqs[rnd.randrange(len(reqs))]
            fit = [i for i in range(s.n_nodes) if s.cpu_free[i] >= r.cpu
                   and (r.kind == "cpu" or (s.gpu_free[i] >= r.gpu_milli).sum() >= r.gpu_count)]
            if fit:
                row = rnd.choice(fit)
                devs = [] if r.kind == "cpu" else [int(d) for d in np.flatnonzero(s.gpu_free[row] >= r.gpu_milli)[: r.gpu_count]]
                s.allocate(f"t{step}", s.node_ids[row], devs, r.gpu_milli if devs else 0, r.cpu, r.mem)
                live.append((s.node_ids[row], devs, r.gpu_milli if devs else 0, r.cpu, r.mem))
        r = reqs[step % len(reqs)]
        rows = np.arange(s.n_nodes)
        ctx = CycleContext(s, r, "x", 0, {})
        got = plugin.score(ctx, rows)
        want, dev = plugin._score_states(s, plugin.typical(s), r, s.cpu_free, s.gpu_free, s.model_idx)
        assert np.array_equal(got, want), step
        if dev is not None:
            for row in range(0, s.n_nodes, 7):
                assert plugin.select_devices(ctx, row) == [int(dev[row])]


def test_fgd_devices_read_from_the_cycles_scores_only_while_their_key_holds():
    """``select_devices`` reuses the entry its cycle's ``score`` left in ``ctx.scratch``
    while that entry's key holds: the same typical tasks (an observed histogram moves with
    arrivals), the same class ids, the row's class scored. Otherwise it computes afresh, as
    a new cycle would."""
    s = _cell(40, seed=5)
    rnd = random.Random(5)
    for t in range(60):                        # partly used GPUs, so that the device choice matters
        row = rnd.randrange(s.n_nodes)
        fit = np.flatnonzero(s.gpu_free[row] >= 300)
        if fit.size and s.cpu_free[row] >= 1000:
            s.allocate(f"t{t}", s.node_ids[row], [int(rnd.choice(fit))], rnd.choice((100, 300, 200)), 1000, 1024)
    plugin = FGD(typical=TYPICAL, mode="raw", gap_weight=0.5)
    r = Request(1000, 1024, 1, 250, ())
    ctx = CycleContext(s, r, "x", 0, {})
    plugin.score(ctx, np.arange(s.n_nodes))
    shared = [i for i in range(s.n_nodes) if (s.gpu_free[i] >= 250).any()]
    before = {row: plugin.select_devices(ctx, row) for row in shared}
    assert ctx.scratch[plugin].known.any()
    assert before == {row: plugin.select_devices(CycleContext(s, r, "y", 0, {}), row) for row in shared}
    # other typical tasks (as a refresh of the observed histogram would bring)
    plugin.tt = TypicalTasks.from_list([{"cpu_milli": 0, "gpu_count": 1, "gpu_milli": 750, "count": 1}])
    after = {row: plugin.select_devices(ctx, row) for row in shared}
    assert after == {row: plugin.select_devices(CycleContext(s, r, "z", 0, {}), row) for row in shared}
    assert after != before                    # the check can tell a stale entry
    row = shared[0]
    s.allocate("t-moved", s.node_ids[row], after[row], 700, 1000, 1024)   # a new class for the row
    assert plugin.select_devices(ctx, row) == plugin.select_devices(CycleContext(s, r, "w", 0, {}), row)


def test_one_rows_key_is_its_row_of_the_keys_array():
    """The one-row path of ``node_classes`` names a state by the same key as the
    many-row path, so a state gets one class whichever path saw it first."""
    from suanli.processors.node_classes import _state_key, _state_keys
    s = _cell()
    s.allocate("t1", "n003", [0] if s.gpu_count[3] else [], 250 if s.gpu_count[3] else 0, 1000, 1024)
    rows = np.arange(s.n_nodes)
    keys = _state_keys(s, rows)
    assert [_state_key(s, r) for r in rows.tolist()] == keys
    assert all(type(v) is int for k in keys for v in k)      # equal keys hash equal, whichever path made them
