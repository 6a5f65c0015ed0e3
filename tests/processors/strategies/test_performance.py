"""Performance family: random, bestfit, fgd, default, worst-fit, first-fit, balanced, analytics."""


from kit import Cell
from suanli.processors.plugins.fgd import Scarcity


def _three(strategy, config=None):
    c = Cell(strategy, config)
    c.node("a", cpu=32000, gpus=4, model="T4")
    c.node("b", cpu=32000, gpus=4, model="T4")
    c.node("c", cpu=32000, gpus=4, model="T4")
    return c


def test_random_is_seeded_and_spreads():
    def run(seed):
        c = _three("random", {"seed": seed})
        for i in range(12):
            c.task(f"t{i}", cpu=100)
        return [c.node_of(f"t{i}") for i in range(12)]
    assert run(3) == run(3)
    assert len(set(run(3))) == 3


def test_bestfit_packs_onto_fullest_node():
    c = _three("bestfit")
    c.task("x", cpu=8000, gpus=2, milli=1000)
    first = c.node_of("x")
    c.task("y", cpu=1000, gpus=1, milli=1000)
    assert c.node_of("y") == first


def test_fgd_and_default_fill_partial_gpu_before_opening_new_one():
    typical = [{"cpu_milli": 1000, "gpu_count": 1, "gpu_milli": 500, "count": 1},
               {"cpu_milli": 1000, "gpu_count": 1, "gpu_milli": 1000, "count": 1}]
    for strat in ("fgd", "default"):
        c = _three(strat, {"typical_tasks": typical})
        c.task("h1", gpus=1, milli=500)
        c.task("h2", gpus=1, milli=500)
        p1, p2 = c.placed("h1"), c.placed("h2")
        # the second half-GPU task completes the first one's GPU: no fragment left for 1-GPU tasks
        assert (p1["node_id"], p1["gpu_devices"]) == (p2["node_id"], p2["gpu_devices"]), strat


def test_default_scarcity_keeps_unconstrained_off_the_scarce_model():
    typical = [{"cpu_milli": 1000, "gpu_count": 1, "gpu_milli": 1000, "gpu_models": ["V100"], "count": 3},
               {"cpu_milli": 1000, "gpu_count": 1, "gpu_milli": 1000, "count": 1}]
    c = Cell("default", {"typical_tasks": typical})
    c.node("v", cpu=32000, gpus=2, model="V100")
    c.node("g", cpu=32000, gpus=8, model="G2")
    c.task("any", gpus=1, milli=1000)
    assert c.node_of("any") == "g"
    s = c.state
    p = Scarcity(typical=typical).pressure(s)
    assert p[s.models.index("V100")] > p[s.models.index("G2")]


def test_worst_fit_spreads():
    c = _three("worst-fit")
    for i in range(3):
        c.task(f"t{i}", cpu=4000, gpus=1, milli=1000)
    assert {c.node_of(f"t{i}") for i in range(3)} == {"a", "b", "c"}


def test_first_fit_takes_lowest_row():
    c = _three("first-fit")
    for i in range(3):
        c.task(f"t{i}", cpu=1000)
    assert [c.node_of(f"t{i}") for i in range(3)] == ["a", "a", "a"]


def test_balanced_evens_out_utilisation():
    c = Cell("balanced")
    c.node("cpuheavy", cpu=32000, mem=65536)
    c.node("memheavy", cpu=32000, mem=65536)
    c.task("m", cpu=1000, mem=49152)         # memory-heavy -> memheavy? both equal: tie-break
    first = c.node_of("m")
    other = "memheavy" if first == "cpuheavy" else "cpuheavy"
    c.task("c", cpu=24000, mem=1024)         # CPU-heavy goes where it balances the memory-heavy one
    assert c.node_of("c") == first
    assert c.state.cpu_free[c.state.node_index[other]] == 32000


def test_analytics_keeps_cpu_work_off_gpu_nodes():
    c = Cell("analytics")
    c.node("gpu", cpu=64000, gpus=8, model="G2")
    c.node("cpu1", cpu=16000)
    c.task("etl", cpu=4000, mem=8192, labels={"workload": "analytics"})
    assert c.node_of("etl") == "cpu1"
    c.task("train", cpu=4000, gpus=1, milli=1000)
    assert c.node_of("train") == "gpu"


def test_gap_weight_adds_the_drop_in_the_gaps_expected_final_waste():
    import numpy as np
    from suanli.processors.frag import TypicalTasks, gap_waste_table
    from suanli.processors.framework import CycleContext, Request
    from suanli.processors.plugins.fgd import FGD
    typical = [{"cpu_milli": 1000, "gpu_count": 1, "gpu_milli": 810, "count": 5},
               {"cpu_milli": 1000, "gpu_count": 1, "gpu_milli": 470, "count": 5},
               {"cpu_milli": 1000, "gpu_count": 1, "gpu_milli": 160, "count": 1}]
    c = Cell("default", {"typical_tasks": typical})
    c.node("a", cpu=32000, gpus=1, model="T4")
    c.node("b", cpu=32000, gpus=1, model="T4")
    c.task("x", gpus=1, milli=470)                 # one node now has a 530-milli gap
    s, rows = c.state, np.array([0, 1])
    req = Request(1000, 0, 1, 470)
    plain = FGD(typical=typical, mode="raw").score(CycleContext(s, req, "t", 0, {}), rows)
    gapped = FGD(typical=typical, mode="raw", gap_weight=0.5).score(CycleContext(s, req, "t", 0, {}), rows)
    w = gap_waste_table(TypicalTasks.from_list(typical))
    free = s.gpu_free[rows, 0]
    assert np.allclose(gapped - plain, 0.5 * (w[free] - w[free - 470]))
    assert sorted(free.tolist()) == [530, 1000] and not np.allclose(gapped, plain)

def test_default_leaves_whole_gpu_tasks_to_the_gradient_and_checks_its_config():
    import pytest
    from suanli.errors import StrategyError
    from suanli.processors import strategies as S
    prof = S.get_strategy("default", {}).profile
    bf = next(p for p, _ in prof.scorers if p.name == "BestFitRaw")
    assert bf.args.kinds == {"cpu": 0.0, "shared": 0.25}
    for bad in (["cpu"], {"gpu": 0.5}, {"cpu": 2}):
        with pytest.raises(StrategyError, match="strategy .default.: bad value for bestfit_kinds"):
            S.get_strategy("default", {"bestfit_kinds": bad})


def test_default_puts_cpu_only_tasks_where_the_gpus_are_already_taken():
    typical = [{"cpu_milli": 1000, "gpu_count": 1, "gpu_milli": 1000, "count": 1}]
    placed = {}
    for strategy in ("default", "bestfit"):
        c = Cell(strategy, {"typical_tasks": typical} if strategy == "default" else {})
        c.node("taken", cpu=64000, gpus=2, model="T4")
        c.task("g1", cpu=4000, gpus=1, milli=1000)
        c.task("g2", cpu=4000, gpus=1, milli=1000)          # both GPUs of "taken" in use
        c.node("free", cpu=10000, gpus=2, model="T4")       # GPUs free, little CPU
        c.task("cpu", cpu=8000)
        placed[strategy] = c.node_of("cpu")
    # plain BestFit packs CPU ("free" has less left) and leaves its GPUs 2 cores;
    # default puts the CPU-only task where no free GPU is stranded by it
    assert placed == {"default": "taken", "bestfit": "free"}
