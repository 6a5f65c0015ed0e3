"""The cycle's compiled bookkeeping (``kernels/src/cycle.rs``: the filter pass, the
ranking of scores, the node classes among the feasible rows and the spread of their totals)
against the numpy loop it replaces in ``framework.run_cycle``, and the per-class contract
(``Plugin.per_class``) that scoring one row per class relies on.

A decision's filtered list, tie count and candidates are part of its bytes, so each check
compares the kernel's answer with the reference written here (the loop ``run_cycle`` keeps
for when the kernels are not built) on random masks and scores full of ties; the last check
runs whole cycles with the kernels on and off.
"""
import random

import numpy as np
import pytest

from suanli.processors import compiled, framework
from suanli.processors.framework import REGISTRY, CycleContext, _filter_pass_compiled, _rank_compiled, stable_top
from suanli.processors.node_classes import node_classes
from suanli.processors.state import CellState
from suanli.processors.strategies import get_strategy

from test_score_kernels import REQUESTS, busy_cell, numpy_only


def reference_filter_pass(masks, n):
    """``run_cycle``'s numpy loop: (alive, filtered)."""
    alive, left, filtered = None, n, []
    for mask, reason in masks:
        kept = mask.astype(bool) if alive is None else alive & mask
        now = int(np.count_nonzero(kept))
        if now < left:
            drop = ~kept if alive is None else alive & ~kept
            filtered.append((reason, left - now, drop.nonzero()[0][:3].tolist()))
            alive, left = kept, now
    return (np.ones(n, dtype=bool) if alive is None else alive), filtered


def random_masks(rnd: random.Random, n: int) -> list:
    out = []
    for i in range(rnd.randrange(0, 9)):
        p = rnd.choice((0.0, 0.02, 0.5, 0.97, 1.0))          # none, few, half, most, all kept
        out.append((np.array([rnd.random() < p for _ in range(n)], dtype=bool), f"reason {i}"))
    return out


@pytest.mark.parametrize("seed", range(40))
def test_the_filter_pass_is_the_loops_alive_rows_and_filtered_list(seed):
    rnd = random.Random(seed)
    n = rnd.choice((0, 1, 2, 5, 64, 333))
    masks = random_masks(rnd, n)
    alive, filtered, rows = _filter_pass_compiled(masks, n)
    want_alive, want_filtered = reference_filter_pass(masks, n)
    assert alive is not None and alive.dtype == bool
    assert np.array_equal(alive, want_alive)
    assert rows.tolist() == want_alive.nonzero()[0].tolist()
    assert filtered == want_filtered
    assert all(type(r) is int for _, _, s in filtered for r in s)      # plain ints, as provenance reads them


def test_a_mask_the_kernel_does_not_take_leaves_the_pass_to_the_loop():
    ok = np.ones(4, dtype=bool)
    for bad in (np.ones(4, dtype=np.int64), np.ones(8, dtype=bool)[::2], np.ones(5, dtype=bool)):
        assert _filter_pass_compiled([(ok, "a"), (bad, "b")], 4) == (None, [], None)


def reference_rank(total, k):
    """numpy's tied positions, and stable_top's set (every position when k >= n) in
    (score desc, position asc) order."""
    tied = (total == total.max()).nonzero()[0]
    n = total.size
    idx = np.arange(n) if n <= k else stable_top(total, k, tied)
    return tied, sorted((int(i) for i in idx), key=lambda i: (-total[i], i))[:k]


@pytest.mark.parametrize("seed", range(60))
def test_the_ranking_is_numpys_ties_and_stable_tops_candidates(seed):
    rnd = random.Random(seed)
    n = rnd.choice((1, 2, 3, 5, 6, 40, 700))
    values = rnd.choice(([0.0, -0.0, 1.5], [-np.inf, 2.0, 3.0], [7.0], [float(x) for x in range(20)],
                         [-np.inf]))
    total = np.array([rnd.choice(values) if rnd.random() < 0.7 else rnd.uniform(-50, 50) for _ in range(n)])
    for k in (0, 1, 3, 5, n, n + 2):
        tied, best = _rank_compiled(total, k)
        want_tied, want_best = reference_rank(total, k)
        assert tied.tolist() == want_tied.tolist()
        assert best == want_best, (k, total)


def test_a_nan_score_leaves_the_ranking_to_numpy():
    assert _rank_compiled(np.array([1.0, np.nan, 2.0]), 2) is None


def test_the_kernels_refuse_bad_arrays_with_nothing_written():
    k = compiled.KERNELS
    tied, best = np.full(3, 7, dtype=np.int64), np.full(2, 7, dtype=np.int64)
    with pytest.raises(BufferError):
        k.rank_scores(np.zeros(3, dtype=np.float32), 2, tied, best)
    with pytest.raises(ValueError, match="no scores"):
        k.rank_scores(np.zeros(0), 2, tied, best)
    with pytest.raises(ValueError, match="at least 3"):
        k.rank_scores(np.zeros(3), 2, tied[:2], best)
    shared = np.zeros(8)                      # float64 scores whose bytes an int64 output reuses
    with pytest.raises(ValueError, match="tied: shares memory with an input"):
        k.rank_scores(shared[:3], 2, shared[1:].view(np.int64), best)
    with pytest.raises(ValueError, match="best: shares memory with an input"):
        k.rank_scores(shared[:3], 2, tied, shared[2:5].view(np.int64))
    assert (shared == 0).all()
    alive, samples, rows = np.ones(3, dtype=bool), np.full((1, 3), 7, dtype=np.int64), np.full(3, 7, dtype=np.int64)
    with pytest.raises(ValueError, match="expected 3"):
        k.filter_pass([np.zeros(4, dtype=bool)], alive, samples, rows)
    with pytest.raises(ValueError, match="rows: 2 elements, at least 3"):
        k.filter_pass([np.zeros(3, dtype=bool)], alive, samples, rows[:2])
    with pytest.raises(ValueError, match="rows: shares memory with an input"):
        k.filter_pass([np.zeros(3, dtype=bool)], alive, rows.reshape(1, 3), rows)
    assert (tied == 7).all() and (best == 7).all() and alive.all() and (samples == 7).all() and (rows == 7).all()


@pytest.mark.parametrize("strategy,config", [("default", {}), ("default", {"version": "1.2.0"}),
                                             ("fgd", {}), ("bestfit", {}), ("worst-fit", {}), ("gpu-clustering", {}),
                                             ("random", {"seed": 3})])
def test_whole_cycles_are_the_same_with_and_without_the_kernels(strategy, config, monkeypatch):
    s = busy_cell(200, 5)
    s.ready[::7] = False                       # a filter that drops rows on every task
    profile = get_strategy(strategy, config).profile

    def cycles():
        out = []
        for i, r in enumerate(REQUESTS):
            res = framework.run_cycle(profile, framework.CycleContext(s, r, "x", i, {}))
            out.append((res.status, res.plan, res.filtered,
                        res.candidates, res.n_feasible, res.path))
        return out
    got = cycles()
    assert sum(res[1] is not None for res in got) >= 5 and any(res[2] for res in got)
    assert got == numpy_only(monkeypatch, cycles)


# ------------------------------------------------------------------ node classes of a cycle
def reference_class_rows(ids, rows):
    """One row per class in order of first appearance, and each row's position among them."""
    first: dict[int, int] = {}
    reps, slot = [], []
    for r in rows.tolist():
        c = int(ids[r])
        if c not in first:
            first[c] = len(reps)
            reps.append(r)
        slot.append(first[c])
    return reps, slot


@pytest.mark.parametrize("seed", range(6))
def test_class_rows_are_each_class_first_row_and_each_rows_class(seed):
    rnd = np.random.default_rng(seed)
    n = int(rnd.integers(1, 3000))
    ids = rnd.integers(0, int(rnd.integers(1, 200)), n).astype(np.int64)
    rows = np.flatnonzero(rnd.random(n) < rnd.random()).astype(np.int64)
    marks = np.full(256, -1, dtype=np.int64)
    reps, slot = np.full(rows.size, 7, dtype=np.int64), np.full(rows.size, 7, dtype=np.int64)
    k = compiled.KERNELS.class_rows(ids, rows, marks, reps, slot)
    want_reps, want_slot = reference_class_rows(ids, rows)
    assert k == len(want_reps)
    assert reps[:k].tolist() == want_reps and slot.tolist() == want_slot
    assert (marks == -1).all()                              # the scratch is left as it came
    assert (np.diff(reps[:k]) > 0).all()                    # ascending rows give ascending reps


def test_class_rows_refuse_rows_and_ids_out_of_range_and_leave_the_marks_clean():
    k = compiled.KERNELS
    ids, marks = np.array([0, 1, 0, -1, 9], dtype=np.int64), np.full(4, -1, dtype=np.int64)
    reps, slot = np.empty(5, dtype=np.int64), np.empty(5, dtype=np.int64)
    with pytest.raises(ValueError, match="row 5 is outside"):
        k.class_rows(ids, np.array([0, 1, 5], dtype=np.int64), marks, reps, slot)
    assert (marks == -1).all()
    with pytest.raises(ValueError, match="row 3 has class -1"):
        k.class_rows(ids, np.array([0, 1, 3], dtype=np.int64), marks, reps, slot)
    assert (marks == -1).all()
    with pytest.raises(ValueError, match="row 4 has class 9"):
        k.class_rows(ids, np.array([1, 4], dtype=np.int64), marks, reps, slot)
    assert (marks == -1).all()
    with pytest.raises(ValueError, match="at least 3"):
        k.class_rows(ids, np.array([0, 1, 2], dtype=np.int64), marks, reps[:2], slot)
    with pytest.raises(BufferError):
        k.class_rows(ids.astype(np.int32), np.array([0], dtype=np.int64), marks, reps, slot)


def shaped_cell(n: int, seed: int):
    """``n`` nodes of three shapes with light random work: far fewer node classes than
    rows, so a cycle scores per class (``busy_cell``'s states are mostly distinct)."""
    rnd = random.Random(seed)
    s = CellState("k")
    shapes = [(96000, 8, "V100"), (64000, 4, "A10"), (32000, 0, None)]
    for i in range(n):
        cpu, g, model = shapes[i % 3]
        s.add_node(f"n{i:04d}", cpu, 256000 + 1024 * (i % 5), g, model)
    for t in range(n // 4):
        row = rnd.randrange(n)
        r = rnd.choice(REQUESTS[:4])
        fit = np.flatnonzero(s.gpu_free[row] >= r.gpu_milli) if r.kind != "cpu" else np.zeros(0, dtype=np.int64)
        if s.cpu_free[row] < r.cpu or (r.kind != "cpu" and fit.size < r.gpu_count):
            continue
        devs = [int(d) for d in fit[: r.gpu_count]] if r.kind != "cpu" else []
        s.allocate(f"t{t}", s.node_ids[row], devs, r.gpu_milli if devs else 0, r.cpu, r.mem)
    return s


@pytest.mark.parametrize("strategy,config,classed", [
    ("default", {}, True), ("default", {"version": "1.2.0"}, True), ("fgd", {}, True), ("bestfit", {}, True),
    ("worst-fit", {}, False)])
def test_cycles_scored_per_node_class_are_the_cycles_scored_per_row(strategy, config, classed, monkeypatch):
    """The same statuses, plans, filtered lists, candidates (scores included) and paths
    whether the scorers see one row per class or every row; and the class path was taken
    where every scorer says it may be (worst-fit's does not: every row, every time)."""
    s = shaped_cell(600, 2)
    s.ready[::11] = False
    profile = get_strategy(strategy, config).profile
    taken = []
    real = compiled.KERNELS.class_rows

    def counting(ids, rows, marks, reps, slot):
        k = real(ids, rows, marks, reps, slot)
        taken.append((rows.size, k))
        return k

    def cycles():
        out = []
        for i, r in enumerate(REQUESTS):
            res = framework.run_cycle(profile, framework.CycleContext(s, r, "x", i, {}))
            out.append((res.status, res.plan, res.filtered, res.candidates, res.n_feasible, res.path))
        return out
    with monkeypatch.context() as m:
        m.setattr(compiled.KERNELS, "class_rows", counting)
        got = cycles()
    with monkeypatch.context() as m:
        m.setattr(framework, "CLASS_SCORING_MIN_ROWS", 10 ** 9)
        per_row = cycles()
    assert got == per_row
    assert sum(res[1] is not None for res in got) >= 5
    if classed:
        assert any(2 * k <= n for n, k in taken), taken      # scored per class, not the fallback
    else:
        assert taken == []


@pytest.mark.parametrize("seed", range(40))
def test_rank_classes_is_the_ranking_of_the_values_spread_over_the_rows(seed):
    """Ties within and between classes (-0.0 and 0.0 among them, and -inf), classes no row
    has (one NaN, one above every row's score: neither is a row's), k below and above the
    ties and the rows:
    the same ties and candidates as ranking ``values[slot]`` row by row, and as sorting it."""
    rnd = np.random.default_rng(seed)
    c, n = int(rnd.integers(1, 40)), int(rnd.integers(1, 300 if seed % 2 else 3000))
    values = rnd.choice([-np.inf, -1.5, -0.0, 0.0, 0.25, 1.0, 2.0, 3.0], c)
    slot = rnd.integers(0, c, n).astype(np.int64)
    absent = np.setdiff1d(np.arange(c), slot)
    if absent.size and seed % 3:
        values[absent[0]] = np.nan
    if absent.size > 1 and seed % 4:
        values[absent[1]] = 99.0                                 # the maximum, but no row's
    k = int(rnd.integers(1, 40))
    tied, best = np.full(n, -7, dtype=np.int64), np.full(k, -7, dtype=np.int64)
    nt, nb = compiled.KERNELS.rank_classes(values, slot, k, tied, best)
    per_row = values[slot]
    want_tied, want_best = _rank_compiled(per_row, k)
    assert tied[:nt].tolist() == want_tied.tolist() and best[:nb].tolist() == want_best
    assert want_best == sorted(range(n), key=lambda i: (-per_row[i], i))[:k]


def test_rank_classes_leaves_a_nan_to_the_caller_and_refuses_a_bad_slot():
    k = compiled.KERNELS
    tied, best = np.full(3, -7, dtype=np.int64), np.full(2, -7, dtype=np.int64)
    assert k.rank_classes(np.array([1.0, np.nan]), np.array([0, 1, 0], dtype=np.int64), 2, tied, best) == (0, 0)
    with pytest.raises(ValueError, match="slot: 2 is outside the 2 values"):
        k.rank_classes(np.array([1.0, 2.0]), np.array([0, 2, 1], dtype=np.int64), 2, tied, best)
    with pytest.raises(ValueError, match="slot: -1"):
        k.rank_classes(np.array([1.0, 2.0]), np.array([-1], dtype=np.int64), 1, tied, best)
    with pytest.raises(ValueError, match="no scores"):
        k.rank_classes(np.array([1.0]), np.array([], dtype=np.int64), 1, tied, best)
    assert (tied == -7).all() and (best == -7).all()           # nothing written
    slot = np.array([0, 1, 0, 0, 0, 0], dtype=np.int64)
    with pytest.raises(ValueError, match="tied: shares memory with an input"):
        k.rank_classes(np.array([1.0, 2.0]), slot, 1, slot, best)
    with pytest.raises(ValueError, match="best: shares memory with an input"):
        k.rank_classes(np.array([1.0, 2.0]), slot, 1, np.empty(6, dtype=np.int64), slot[5:])
    out = np.empty(6, dtype=np.int64)
    with pytest.raises(ValueError, match="best: shares memory with an input"):
        k.rank_classes(np.array([1.0, 2.0]), slot, 1, out, out[5:])


TYPICAL_FOR_TWINS = [{"cpu_milli": 1000, "gpu_count": 1, "gpu_milli": 250, "count": 5},
                     {"cpu_milli": 8000, "gpu_count": 2, "gpu_milli": 1000, "count": 2},
                     {"cpu_milli": 12000, "gpu_count": 1, "gpu_milli": 500, "gpu_models": ["A10"], "count": 2}]


def twin_cell():
    """Pairs of nodes in one node class (the same free CPU, free milli per device and model)
    that differ in what a node-class key leaves out: their memory (total and free), names
    and rows."""
    rnd = random.Random(9)
    s = CellState("k")
    shapes = [(96000, 8, "V100"), (64000, 4, "A10"), (32000, 0, None), (48000, 2, "T4")]
    for i in range(24):
        cpu, g, model = shapes[i % 4]
        for twin, mem in (("a", 256000), ("b", 64000 + 512 * i)):
            s.add_node(f"{twin}{i:02d}", cpu, mem, g, model)
    for i in range(24):                                 # the same work on both twins
        r = REQUESTS[rnd.randrange(4)]
        for twin in ("a", "b"):
            row = s.node_index[f"{twin}{i:02d}"]
            fit = np.flatnonzero(s.gpu_free[row] >= r.gpu_milli) if r.kind != "cpu" else np.zeros(0, dtype=np.int64)
            if r.kind != "cpu" and fit.size < r.gpu_count:
                continue
            devs = [int(d) for d in fit[: r.gpu_count]] if r.kind != "cpu" else []
            s.allocate(f"t{i}{twin}", f"{twin}{i:02d}", devs, r.gpu_milli if devs else 0, r.cpu, 1024)
    return s


def test_every_plugin_that_says_it_is_per_class_scores_a_class_alike():
    """The contract ``class_scores`` relies on, checked for every registered plugin whose
    ``per_class`` says yes for a request: twins in one node class get the same score, bit for
    bit. A plugin that starts reading memory or names must not say it."""
    s = twin_cell()
    ids = node_classes(s).ids
    twins = [(s.node_index[f"a{i:02d}"], s.node_index[f"b{i:02d}"]) for i in range(24)]
    assert all(ids[a] == ids[b] for a, b in twins)
    typical_args = {"typical": TYPICAL_FOR_TWINS}
    claimed = set()
    for name in REGISTRY.names():
        for args in (None, typical_args):
            try:
                p = REGISTRY.create(name, args)
            except Exception:                   # noqa: BLE001 - a plugin that takes no typical tasks
                continue
            for i, r in enumerate(REQUESTS):
                ctx = CycleContext(s, r, "x", i, {})
                if not p.per_class(ctx):
                    continue
                claimed.add(name)
                sc = np.asarray(p.score(ctx, np.arange(s.n_nodes)), dtype=np.float64)
                assert all(sc[a].tobytes() == sc[b].tobytes() for a, b in twins), (name, args, r)
    assert {"FGD", "BestFit", "BestFitRaw", "CpuStrand", "Scarcity", "ModelLocality"} <= claimed



def numpy_total(parts, weights, n):
    """``total_score``'s numpy loop over already computed (and normalised) parts."""
    total = np.zeros(n, dtype=np.float64)
    for s, w in zip(parts, weights):
        total += w * s if w != 1.0 else s
    return total


@pytest.mark.parametrize("seed", range(30))
def test_weighted_total_is_numpys_sum_bit_for_bit(seed):
    """Weights of 1.0 (added as they are) and others (multiplied first), int weights, -0.0
    parts (0.0 + -0.0 is 0.0), infinities and NaN: the kernel's bytes are the loop's."""
    rnd = np.random.default_rng(seed)
    n = int(rnd.integers(0, 400))
    pool = np.array([-0.0, 0.0, 1e-300, -3.25, 7.0, 1e300, np.inf, -np.inf, np.nan, 0.1, 1 / 3])
    parts, weights = [], []
    for _ in range(int(rnd.integers(0, 6))):
        parts.append(rnd.choice(pool, n) if seed % 2 else rnd.normal(0, 1e3, n))
        weights.append(rnd.choice([1.0, 1, 2, 0.5, -0.25, 0.0, 1e-3]))
    out = np.full(n, 9.0)
    assert compiled.KERNELS.weighted_total(parts, [float(w) for w in weights], out)
    assert out.tobytes() == numpy_total(parts, weights, n).tobytes()


def test_weighted_total_declines_what_it_does_not_take_and_refuses_aliasing():
    k = compiled.KERNELS
    out = np.full(4, 9.0)
    for bad in (np.arange(4), np.zeros(5), np.zeros(8)[::2], [1.0, 2.0, 3.0, 4.0]):
        assert k.weighted_total([np.zeros(4), bad], [1.0, 1.0], out) is False
        assert out.tolist() == [9.0] * 4                      # nothing written: the loop takes it
    with pytest.raises(ValueError, match="2 parts, 1 weights"):
        k.weighted_total([np.zeros(4), np.zeros(4)], [1.0], out)
    with pytest.raises(ValueError, match="shares memory"):
        k.weighted_total([out], [1.0], out)


def test_total_score_is_the_same_with_and_without_the_kernel(monkeypatch):
    """``total_score`` of the ``default`` scorers on busy cells, for every request: the same
    bytes whether the kernel or the numpy loop sums them (and the kernel did sum them)."""
    calls = []
    real = compiled.KERNELS.weighted_total
    monkeypatch.setattr(compiled.KERNELS, "weighted_total", lambda *a: calls.append(1) or real(*a))
    profile = get_strategy("default").profile
    for seed in range(3):
        s = busy_cell(60, seed)
        rows = np.arange(s.n_nodes)

        def totals():
            return [framework.total_score(profile.scorers, CycleContext(s, r, "x", i, {}), rows).tobytes()
                    for i, r in enumerate(REQUESTS)]
        got = totals()
        assert len(calls) == len(REQUESTS)
        assert got == numpy_only(monkeypatch, totals)
        calls.clear()
