"""The FGD paper's baselines: each one's defining behaviour on a hand-made cell."""

import numpy as np

from kit import Cell
from suanli.processors import CellState
from suanli.processors.framework import CycleContext, Request
from suanli.processors.model import Request as ModelRequest, Task
from suanli.processors.state import TaskRecord
from suanli.processors.plugins.baselines import DotProduct, GpuClustering, GpuPacking


def test_dotprod_formula_and_prefers_least_aligned_free_vector():
    s = CellState("x")
    s.add_node("a", 64000, 1000, 8, "G2")       # lots free
    s.add_node("b", 16000, 1000, 2, "G2")       # little free
    req = Request(8000, 0, 1, 500)
    sc = DotProduct().score(CycleContext(s, req, "t", 0, {}), np.array([0, 1]))
    # a: 1 - (64000*8000/128000^2 + 8000*500/8000^2)/2 = 1 - (0.03125+0.0625)/2 = 0.953 -> 95
    # b: 1 - (16000*8000/128000^2 + 2000*500/8000^2)/2 = 1 - (0.0078125+0.015625)/2 -> 98
    assert sc.tolist() == [95.0, 98.0]
    c = Cell("dotprod")
    c.node("a", cpu=64000, gpus=8, model="G2")
    c.node("b", cpu=16000, gpus=2, model="G2")
    c.task("t", cpu=8000, gpus=1, milli=500)
    assert c.node_of("t") == "b"


def test_gpu_clustering_keeps_affinities_together():
    c = Cell("gpu-clustering")
    c.node("a", gpus=4, model="T4")
    c.node("b", gpus=4, model="T4")
    c.node("c", gpus=4, model="T4")
    c.task("s1", gpus=1, milli=300)
    n_shared = c.node_of("s1")
    c.task("w1", gpus=1, milli=1000)
    n_whole = c.node_of("w1")
    assert n_whole != n_shared                     # an idle node (25..50) beats a mixed one (0..25)
    c.task("s2", gpus=1, milli=200)
    assert c.node_of("s2") == n_shared              # same affinity only: 75..100
    c.task("w2", gpus=1, milli=1000)
    assert c.node_of("w2") == n_whole


def test_gpu_clustering_bands():
    s = CellState("x")
    for n in "abcd":
        s.add_node(n, 32000, 1000, 8, "G2")
    s.tasks = {}
    s.allocate("x1", "a", [0], 500, 0, 0)          # a: share only
    s.allocate("x2", "b", [0], 500, 0, 0)
    s.allocate("x3", "b", [1, 2], 1000, 0, 0)      # b: share + 2-gpu
    s.allocate("x4", "c", [0, 1], 1000, 0, 0)      # c: 2-gpu only;  d: idle
    s._derived.pop("gpu_tags", None)
    s.tasks = {f"x{i}": TaskRecord(Task(task_id=f"x{i}", tenant="t", request=ModelRequest(0, 0, len(d), m)),
                                   i, "PLACED", n, tuple(d))
               for i, (n, d, m) in enumerate([("a", [0], 500), ("b", [0], 500), ("b", [1, 2], 1000),
                                              ("c", [0, 1], 1000)], start=1)}
    sc = GpuClustering().score(CycleContext(s, Request(0, 0, 1, 300), "t", 0, {}), np.arange(4))
    # base = 25*(8000-left)//8000: a 1, b 7, c 6, d 0
    assert sc.tolist() == [76.0, 57.0, 6.0, 25.0]


def test_gpu_packing_cases():
    s = CellState("x")
    s.add_node("shared", 32000, 1000, 4, "G2")
    s.add_node("used", 32000, 1000, 4, "G2")
    s.add_node("idle", 32000, 1000, 8, "G2")
    s.allocate("a", "shared", [0], 600, 0, 0)      # device 0: 400 free
    s.allocate("b", "used", [0], 1000, 0, 0)       # no shared device
    sc = GpuPacking().score(CycleContext(s, Request(0, 0, 1, 300), "t", 0, {}), np.arange(3))
    # case-1: 100 - (400*100//1000)//10 = 96; case-2: 50 - 1 = 49; case-3: max(33-8, 8) = 25
    assert sc.tolist() == [96.0, 49.0, 25.0]
    c = Cell("gpu-packing")
    c.node("a", gpus=8, model="G2")
    c.node("b", gpus=2, model="G2")
    c.task("w", gpus=1, milli=1000)
    assert c.node_of("w") == "b"                    # idle nodes score max(33 - n, n): small first


def test_gpu_tag_index_stays_equal_to_a_rebuild():
    c = Cell("gpu-clustering")
    for n in "abc":
        c.node(n, gpus=4, model="T4")
    rng = np.random.default_rng(0)
    for i in range(30):
        c.task(f"t{i}", gpus=int(rng.choice([1, 1, 2])), milli=int(rng.choice([200, 500, 1000])))
        if i % 4 == 3 and c.state.tasks[f"t{i - 2}"].status == "PLACED":
            c.done(f"t{i - 2}")
        live = [dict(d) for d in c.state.gpu_tags()]
        c.state._derived.pop("gpu_tags")
        assert c.state.gpu_tags() == live


def test_ties_go_to_the_smallest_node_name_not_the_first_registered():
    # The paper's simulator breaks ties by the lexicographically smallest node name; a
    # CPU-only task scores 0 everywhere under GpuClustering/GpuPacking, so it is all tie.
    for strategy in ("gpu-clustering", "gpu-packing", "bestfit", "dotprod"):
        c = Cell(strategy)
        for n in ("node-c", "node-a", "node-b"):
            c.node(n, cpu=32000, gpus=2)
        c.task("cpu1", cpu=4000)
        assert c.node_of("cpu1") == "node-a", strategy
        path = c.placed("cpu1")["provenance"]["path"]
        assert any(step.endswith("3 tied, tie-break name") for step in path), (strategy, path)


def test_name_tie_break_fills_nodes_in_name_order():
    c = Cell("gpu-packing")
    for n in ("n2", "n1"):
        c.node(n, cpu=8000, gpus=1)
    c.task("a", cpu=6000)
    c.task("b", cpu=6000)          # no longer fits n1
    assert (c.node_of("a"), c.node_of("b")) == ("n1", "n2")


def test_unknown_tie_break_is_refused_with_the_choices():
    import pytest
    from suanli.errors import StrategyError
    from suanli.processors import strategies as S
    with pytest.raises(StrategyError, match="strategy 'bestfit': bad value for tie_break: 'sideways'; "
                                            "allowed: one of 'random', 'name', 'first'$"):
        S.get_strategy("bestfit", {"tie_break": "sideways"})
