"""The scorers' compiled arithmetic (``kernels/src/score.rs``) against the numpy it replaces.

Every value must be the numpy value bit for bit (a strategy version's decisions are a
byte-exact contract), so each check runs the same call twice, once with
``compiled.KERNELS`` switched off, and compares bytes; the last checks compare whole
decisions of several strategies through the core.
"""
import random

import numpy as np
import pytest

from suanli.bench import synthetic
from suanli.processors import compiled
from suanli.processors.core import decide
from suanli.processors.framework import CycleContext
from suanli.processors.model import NodeRegistered, PolicyChanged, Request, TaskSubmitted, from_avro
from suanli.processors.plugins.basic import BestFit, BestFitRaw
from suanli.processors.plugins.fgd import FGD
from suanli.processors.plugins.strand import CpuStrand
from suanli.processors.state import CellState

TYPICAL = [{"cpu_milli": 1000, "gpu_count": 1, "gpu_milli": 250, "count": 5},
           {"cpu_milli": 4000, "gpu_count": 1, "gpu_milli": 1000, "count": 3},
           {"cpu_milli": 8000, "gpu_count": 2, "gpu_milli": 1000, "count": 2},
           {"cpu_milli": 2000, "gpu_count": 0, "gpu_milli": 0, "count": 4},
           {"cpu_milli": 12000, "gpu_count": 1, "gpu_milli": 500, "gpu_models": ["A10"], "count": 2},
           {"cpu_milli": 6000, "gpu_count": 2, "gpu_milli": 400, "gpu_models": ["V100", "T4"], "count": 1}]

REQUESTS = [Request(1000, 1024, 1, 250), Request(2000, 1024, 1, 600), Request(4000, 1024, 2, 1000),
            Request(1000, 1024, 0, 0), Request(1000, 1024, 1, 500, ("A10",)), Request(3000, 512, 2, 450),
            Request(0, 0, 1, 1000), Request(96000, 1024, 8, 1000), Request(500, 64, 1, 10)]


def numpy_only(monkeypatch, call):
    """``call()`` with the kernels switched off: the reference values."""
    with monkeypatch.context() as m:
        m.setattr(compiled, "KERNELS", None)
        return call()


def busy_cell(n: int, seed: int) -> CellState:
    """``n`` nodes (CPU-only ones, 1-8 GPUs of three models) with random work on them."""
    rnd = random.Random(seed)
    s = CellState("k")
    for i in range(n):
        g = rnd.choice((0, 1, 2, 4, 8, 8))
        s.add_node(f"n{i:04d}", rnd.choice((16000, 64000, 96000)), 256000, g,
                   rnd.choice(("A10", "V100", "T4")) if g else None)
    for t in range(n * 3):
        row = rnd.randrange(n)
        r = rnd.choice(REQUESTS)
        if s.cpu_free[row] < r.cpu or s.mem_free[row] < r.mem:
            continue
        fit = np.flatnonzero(s.gpu_free[row] >= r.gpu_milli) if r.kind != "cpu" else np.zeros(0, dtype=np.int64)
        if r.kind != "cpu" and fit.size < r.gpu_count:
            continue
        devs = [int(d) for d in fit[: r.gpu_count]] if r.kind != "cpu" else []
        s.allocate(f"t{t}", s.node_ids[row], devs, r.gpu_milli if devs else 0, r.cpu, r.mem)
    return s


def test_the_kernels_are_built():
    assert compiled.KERNELS is not None, "bin/suanli builds kernels/ into the venv (it needs cargo): run it"


@pytest.mark.parametrize("seed", range(4))
def test_bestfit_and_strand_over_rows_are_the_numpy_values_bit_for_bit(seed, monkeypatch):
    s = busy_cell(300, seed)
    rnd = random.Random(seed)
    plugins = [BestFit(), BestFit(max_cpu=96000.0, max_gpu=3000.0), BestFitRaw(),
               BestFitRaw(kinds={"cpu": 0.0, "shared": 0.25, "whole": 0.9}),
               CpuStrand(typical=TYPICAL), CpuStrand(typical=TYPICAL, slack=1.3, cpu_slack=2.5)]
    for r in REQUESTS:
        ctx = CycleContext(s, r, "x", 0, {})
        picks = [np.arange(s.n_nodes), np.array(sorted(rnd.sample(range(s.n_nodes), 97))),
                 np.array([rnd.randrange(s.n_nodes) for _ in range(40)], dtype=np.int32),   # any order, repeats
                 np.zeros(0, dtype=np.int64)]
        for plugin in plugins:
            for rows in picks:
                got = plugin.score(ctx, rows)
                want = numpy_only(monkeypatch, lambda: plugin.score(ctx, rows))
                assert got.dtype == want.dtype == np.float64
                assert got.tobytes() == want.tobytes(), (plugin.name, r, rows[:5])


@pytest.mark.parametrize("args", [
    {"mode": "raw"},
    {"mode": "raw", "gap_weight": 0.5, "device_tie": "bestfit"},
    {"mode": "raw", "ignore_noaccess": True, "quantum": 10.0},
    {"mode": "raw", "gap_weight": 0.25, "ignore_noaccess": True, "class_weight": "gpu"},
])
@pytest.mark.parametrize("seed", range(3))
def test_fgd_raw_scores_and_devices_are_the_numpy_values_bit_for_bit(args, seed, monkeypatch):
    s = busy_cell(250, 10 + seed)
    plugin = FGD(typical=TYPICAL, **args)
    tt = plugin.typical(s)
    for r in REQUESTS:
        got, got_dev = plugin._score_states(s, tt, r, s.cpu_free, s.gpu_free, s.model_idx)
        want, want_dev = numpy_only(monkeypatch, lambda: plugin._score_states(s, tt, r, s.cpu_free, s.gpu_free,
                                                                               s.model_idx))
        fits = ((s.gpu_free >= r.gpu_milli).sum(axis=1) >= max(r.gpu_count, 1)) if r.kind != "cpu" else slice(None)
        # a state where no device fits the task is filtered before it is scored: only the
        # feasible ones are compared (both give -inf and device 0 elsewhere anyway)
        assert got[fits].tobytes() == want[fits].tobytes(), r
        assert (got_dev is None) == (want_dev is None) == (r.kind != "shared")
        if got_dev is not None:
            assert np.array_equal(got_dev[fits], want_dev[fits]), r


def test_a_bad_array_is_refused_with_nothing_written():
    k = compiled.KERNELS
    ints, out = np.zeros(4, dtype=np.int64), np.full(4, 7.0)
    with pytest.raises(BufferError):                        # a dtype the kernel does not read
        k.bestfit_rows(ints.astype(np.int32), ints, np.arange(4), 1, 1, 1.0, 1.0, 0.5, 0.5, out)
    with pytest.raises(IndexError, match="row 4 out of range"):
        k.strand_rows(ints, ints, np.array([0, 4]), 1, 1, 2.0, out[:2])
    with pytest.raises(ValueError, match="expected 4"):
        k.strand_rows(ints, ints, np.arange(4), 1, 1, 2.0, np.empty(3))
    assert (out == 7.0).all()


def _decisions(strategy: str, config: dict, nodes: int, tasks: int) -> list[str]:
    state = CellState("bench")
    at = 0
    for node in synthetic.nodes(nodes):
        decide(state, from_avro(NodeRegistered, node), ("log", 0, at))
        at += 1
    decide(state, PolicyChanged.of("bench", strategy, config, event_id="p"), ("log", 0, at))
    out = []
    for t in synthetic.tasks(tasks):
        at += 1
        out.extend(repr(d) for d in decide(state, from_avro(TaskSubmitted, t), ("log", 0, at))[1])
    return out


@pytest.mark.parametrize("strategy,config", [
    ("default", {}), ("default", {"version": "1.2.0"}), ("fgd", {}), ("bestfit", {}),
    ("default", {"typical_tasks": TYPICAL, "gap_weight": 0.0})])
def test_whole_decisions_are_the_same_with_and_without_the_kernels(strategy, config, monkeypatch):
    got = _decisions(strategy, config, 400, 900)
    want = numpy_only(monkeypatch, lambda: _decisions(strategy, config, 400, 900))
    assert len(got) >= 900 and got == want


def test_a_model_index_out_of_range_is_refused_before_any_state_is_scored():
    k, i64 = compiled.KERNELS, np.int64
    tt = np.array([1000], dtype=i64)                             # one typical class
    acc = np.ones((1, 2), dtype=bool).view(np.uint8)               # one model + "no GPU"
    gpu = np.array([[1000, 1000], [1000, 1000]], dtype=i64)
    score, dev = np.full(2, 7.0), np.full(2, 7, dtype=i64)
    with pytest.raises(IndexError, match="model index 2 out of range"):
        k.fgd_raw_states(tt, np.ones(1, i64), tt, np.ones(1, i64), 1, acc, np.full(2, 8000, i64), gpu,
                         np.array([0, 2], dtype=i64), 1, 1000, 500, 1, False, 0.0, np.zeros(0), 0.0, score, dev)
    assert (score == 7.0).all() and (dev == 7).all()


def _fgd_cycles(plugin: FGD, s: CellState, picks: list[np.ndarray]) -> list[tuple]:
    """Each request's score over each set of rows, a row's state changed between requests
    (so every call meets classes its entry has not scored), and the entries' tables after."""
    out = []
    rnd = random.Random(5)
    for r in REQUESTS:
        for rows in picks:
            ctx = CycleContext(s, r, "x", 0, {})
            out.append((r, rows.size, plugin.score(ctx, rows).tobytes(), ctx.scratch.get(plugin) is not None))
        row = rnd.randrange(s.n_nodes)
        if s.cpu_free[row] >= 500:
            s.allocate(f"c{row}-{len(out)}", s.node_ids[row], [], 0, 500, 0)
    for e in s._derived["fgd-scores"].values():
        known = e.known.nonzero()[0]
        out.append((known.tolist(), e.score[known].tobytes(), e.dev[known].tolist()))
    return out


@pytest.mark.parametrize("args", [
    {"mode": "raw"},
    {"mode": "raw", "gap_weight": 0.5, "device_tie": "bestfit"},
    {"mode": "raw", "ignore_noaccess": True, "quantum": 10.0},
])
@pytest.mark.parametrize("seed", range(3))
def test_fgd_class_scores_are_the_entry_path_bit_for_bit(args, seed, monkeypatch):
    """``fgd_class_scores`` (the kernel that reads a cycle's FGD scores through the node
    classes) against ``_entry`` with numpy: the same scores for every row, the same
    classes scored, with the same scores and devices, on rows in any order and repeated."""

    def run() -> list[tuple]:
        s = busy_cell(220, 20 + seed)
        n = s.n_nodes
        picks = [np.arange(n), np.array(sorted(random.Random(seed).sample(range(n), 71))),
                 np.array([random.Random(seed + 1).randrange(n) for _ in range(30)], dtype=np.int32),
                 np.zeros(0, dtype=np.int64)]
        return _fgd_cycles(FGD(typical=TYPICAL, **args), s, picks)
    got = run()
    want = numpy_only(monkeypatch, run)
    assert len(got) > len(REQUESTS) * 4 and got == want


def test_fgd_class_scores_refuse_a_bad_class_id_with_nothing_written():
    k, i64 = compiled.KERNELS, np.int64
    tt = np.array([1000], dtype=i64)
    acc = np.ones((1, 2), dtype=bool).view(np.uint8)
    cpu, gpu, midx = np.full(2, 8000, i64), np.full((2, 2), 1000, i64), np.zeros(2, i64)
    known, score, dev, out = np.zeros(2, dtype=bool), np.full(2, 7.0), np.full(2, 7, i64), np.full(2, 7.0)
    args = (tt, np.ones(1, i64), tt, np.ones(1, i64), 1, acc, cpu, gpu, midx)
    tail = (1, 1000, 500, 1, False, 0.0, np.zeros(0), 0.0)
    with pytest.raises(IndexError, match="class id 2 out of range"):
        k.fgd_class_scores(*args, np.array([0, 2], i64), np.arange(2, dtype=i64), known.view(np.uint8),
                           score, dev, *tail, out)
    with pytest.raises(IndexError, match="row 2 out of range"):
        k.fgd_class_scores(*args, np.zeros(2, i64), np.array([0, 2], i64), known.view(np.uint8),
                           score, dev, *tail, out)
    with pytest.raises(ValueError, match="lengths differ"):
        k.fgd_class_scores(*args, np.zeros(3, i64), np.arange(2, dtype=i64), known.view(np.uint8),
                           score, dev, *tail, out)
    bad_model = (*args[:-1], np.array([0, 2], i64))                 # row 1's model index: 2 of 2 columns
    with pytest.raises(IndexError, match="model index 2 out of range"):
        k.fgd_class_scores(*bad_model, np.zeros(2, i64), np.arange(2, dtype=i64), known.view(np.uint8),
                           score, dev, *tail, out)
    assert not known.any() and (score == 7.0).all() and (dev == 7).all() and (out == 7.0).all()
    # one class for both rows: scored once, read twice
    assert k.fgd_class_scores(*args, np.zeros(2, i64), np.arange(2, dtype=i64), known.view(np.uint8),
                              score, dev, *tail, out) == 1
    assert known.tolist() == [True, False] and out[0] == out[1] == score[0] and dev[0] >= 0
