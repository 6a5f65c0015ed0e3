"""Typed plugin arguments: every registered plugin declares a frozen ``Args``; the registry
builds it from the JSON object and refuses unknown keys and bad values, naming the
plugin and the key."""
import dataclasses

import numpy as np
import pytest

from suanli.errors import StrategyConfigError
from suanli.processors import CellState, framework
from suanli.processors.args import NoArgs, explicit
from suanli.processors.framework import REGISTRY, CycleContext, Plugin, PluginRegistry, Profile, Request, class_scores
from suanli.processors.plugins.basic import FILTERS, NormaliserArgs
from suanli.processors.plugins.fgd import FGD, FGDArgs
from suanli.processors.plugins.latency import LatencyArgs, Link

import suanli.processors.strategies  # noqa: F401  (registers the built-in plugins)

PLUGINS = REGISTRY.names()


def test_the_built_in_plugins_are_registered_under_their_names():
    assert set(PLUGINS) >= {
        "Capacity", "NodeReady", "CpuFit", "MemoryFit", "GpuModel", "GpuFit", "BestFit", "BestFitRaw",
        "RandomScore", "DotProduct", "GpuClustering", "GpuPacking", "FGD", "Scarcity", "CpSatBatch",
        "WorstFit", "FirstFit", "Balanced", "CpuMemFit", "Cheapest", "SpotMix", "ZoneSpread", "AntiAffinity",
        "Carbon", "Pue", "Latency"}


@pytest.mark.parametrize("name", PLUGINS)
def test_every_plugin_has_frozen_slotted_args_and_builds_with_defaults(name):
    p = REGISTRY.create(name)
    cls = type(p).Args
    assert dataclasses.is_dataclass(cls) and cls.__dataclass_params__.frozen and "__slots__" in cls.__dict__
    assert p.args == cls() and isinstance(p.args, cls)
    assert REGISTRY.create(name, explicit(cls())).args == p.args        # the explicit form round-trips


@pytest.mark.parametrize("name", PLUGINS)
def test_unknown_key_is_refused_naming_the_plugin_and_the_key(name):
    with pytest.raises(StrategyConfigError, match=rf"^plugin '{name}': unknown argument 'bogus'; allowed: "):
        REGISTRY.create(name, {"bogus": 1})


# (plugin, args, message after "plugin '<name>': ")
BAD = [
    ("BestFit", {"max_cpu": -1}, "bad value for max_cpu: -1; allowed: a number > 0"),
    ("BestFitRaw", {"kinds": {"cpu": 1.5}}, "bad value for kinds.cpu: 1.5; allowed: a number in 0..1"),
    ("DotProduct", {"max_gpu": "8000"}, "bad value for max_gpu: '8000'; allowed: a number > 0"),
    ("FGD", {"mode": "linear"}, "bad value for mode: 'linear'; allowed: one of 'sigmoid', 'raw'"),
    ("FGD", {"typical": [{"cpu_milli": -1}]}, "bad value for typical[0].cpu_milli: -1; allowed: an integer >= 0"),
    ("Scarcity", {"weight_by": "milli"}, "bad value for weight_by: 'milli'; allowed: one of 'gpu', 'count'"),
    ("CpSatBatch", {"candidates": 0}, "bad value for candidates: 0; allowed: an integer >= 1"),
    ("CpuMemFit", {"gpu_node_penalty": "x"}, "bad value for gpu_node_penalty: 'x'; allowed: a number >= 0"),
    ("Cheapest", {"pricing_factor": {"SPOT": -1}}, "bad value for pricing_factor.SPOT: -1; allowed: a number >= 0"),
    ("SpotMix", {"risk_silver": None}, "bad value for risk_silver: None; allowed: a number >= 0"),
    ("ZoneSpread", {"group_label": 3}, "bad value for group_label: 3; allowed: a non-empty string"),
    ("AntiAffinity", {"strict_replicas": "true"}, "bad value for strict_replicas: 'true'; allowed: true or false"),
    ("Carbon", {"watts_per_gpu_model": {"T4": "70"}}, "bad value for watts_per_gpu_model.T4: '70'"),
    ("Pue", {"default_pue": 0}, "bad value for default_pue: 0; allowed: a number > 0"),
    ("Latency", {"links": [{"a": "x", "b": "", "ms": 1}]}, "bad value for links[0].b: ''; allowed: a non-empty string"),
    ("NodeReady", {"anything": 1}, "unknown argument 'anything'; allowed: none"),
]


@pytest.mark.parametrize("name,args,msg", BAD)
def test_bad_plugin_values_are_refused_naming_plugin_key_value_and_allowed(name, args, msg):
    with pytest.raises(StrategyConfigError) as err:
        REGISTRY.create(name, args)
    assert str(err.value).startswith(f"plugin {name!r}: {msg}"), str(err.value)


def test_a_plugin_takes_its_args_as_an_instance_a_json_object_or_keywords():
    a = FGDArgs(mode="raw", gap_weight=0.5)
    assert FGD(a).args is a
    assert FGD({"mode": "raw", "gap_weight": 0.5}).args == a == FGD(mode="raw", gap_weight=0.5).args
    assert REGISTRY.create("FGD", a).args is a
    with pytest.raises(TypeError):
        FGD(a, mode="raw")
    with pytest.raises(StrategyConfigError, match="^plugin 'BestFit': the arguments must be a JSON object"):
        REGISTRY.create("BestFit", ["max_cpu"])


def test_profile_build_accepts_typed_args_and_plain_entries():
    prof = Profile.build(REGISTRY, FILTERS, [{"name": "BestFit", "args": NormaliserArgs(max_cpu=64000.0)},
                                             {"name": "FGD", "weight": 2, "args": {"mode": "raw"}}],
                         tie_break="BestFit", secondary=[{"name": "BestFit"}], others=["Capacity"])
    (bf, w1), (fgd, w2) = prof.scorers
    assert (bf.args.max_cpu, w1, fgd.args.mode, w2) == (64000.0, 1.0, "raw", 2.0)
    assert [p.name for p in prof.filters] == FILTERS and list(prof.secondary) == ["BestFit"]


def test_a_plugin_without_args_refuses_any():
    class Mine(Plugin):
        name = "Mine"

        def score(self, ctx, rows):
            return np.zeros(rows.size)

    reg = PluginRegistry()
    reg.register(Mine)
    assert isinstance(reg.create("Mine").args, NoArgs)
    with pytest.raises(StrategyConfigError, match="^plugin 'Mine': unknown argument 'x'; allowed: none"):
        reg.create("Mine", {"x": 1})


def test_latency_args_are_hashable_and_links_typed():
    a = REGISTRY.create("Latency", {"links": [{"a": "zone:a", "b": "zone:b", "ms": 2}]}).args
    assert a == LatencyArgs(links=(Link("zone:a", "zone:b", 2.0),)) and hash(a) == hash(LatencyArgs(
        links=(Link("zone:a", "zone:b", 2.0),)))


def test_bestfit_normalisers_change_the_score():
    s = CellState("x")
    s.add_node("n0", 64000, 1000, 2, "T4")
    ctx = CycleContext(s, Request(cpu=8000, mem=0, gpu_count=1, gpu_milli=500), "t", 0, {})
    rows = np.array([0])
    assert REGISTRY.create("BestFit").score(ctx, rows).tolist() == [68.0]
    assert REGISTRY.create("BestFit", {"max_cpu": 64000}).score(ctx, rows).tolist() == [46.0]


def test_stable_top_is_the_k_best_by_score_then_lowest_position():
    import numpy as np
    from suanli.processors.framework import stable_top

    rnd = np.random.default_rng(3)
    for _ in range(300):
        n = int(rnd.integers(2, 60))
        total = rnd.integers(0, 6, n).astype(float)
        k = int(rnd.integers(1, n))
        tied = np.flatnonzero(total == total.max())
        want = sorted(range(n), key=lambda i: (-total[i], i))[:k]
        assert sorted(stable_top(total, k, tied).tolist()) == sorted(want)


def test_a_condition_change_reaches_the_next_cycle_after_an_all_normal_one():
    """The cycle learns "every node NORMAL" once per condition change (a cached answer);
    a node turning HOT after that is kept off at the very next cycle, and back on when
    it is NORMAL again."""
    from suanli.processors.framework import run_cycle
    from suanli.processors.strategies import get_strategy
    s = CellState("c")
    for i in range(4):
        s.add_node(f"n{i}", 8000, 16000, 1, "A10")
    profile = get_strategy("bestfit").profile

    def feasible():
        res = run_cycle(profile, CycleContext(s, Request(1000, 1024, 1, 1000), "t", 0, {}))
        return res.n_feasible, [r for r, _, _ in res.filtered]
    assert feasible() == (4, [])
    s.set_condition("n2", "HOT")
    assert feasible() == (3, ["node HOT (telemetry)"])
    s.set_condition("n2", "NORMAL")
    assert feasible() == (4, [])


def test_default_devices_are_the_best_fit_ones():
    """A shared task: the first of the devices with the least free milli that still fit it;
    a whole-GPU task: the lowest-index devices with enough free; none when too few fit."""
    import random

    from suanli.processors.framework import default_devices
    rnd = random.Random(4)
    s = CellState("d")
    for i in range(60):
        s.add_node(f"n{i}", 64000, 256000, rnd.choice((1, 2, 4, 8)), "A10")
        for d in range(int(s.gpu_count[i])):
            s.gpu_free[i, d] = rnd.choice((0, 100, 250, 600, 1000, 1000))
    for row in range(s.n_nodes):
        g = s.gpu_free[row]
        for req in (Request(0, 0, 1, 250), Request(0, 0, 1, 600), Request(0, 0, 2, 1000), Request(0, 0, 1, 1000),
                    Request(0, 0, 0, 0)):
            fit = [d for d in range(g.size) if g[d] >= req.gpu_milli]
            if req.kind == "cpu":
                want = []
            elif req.kind == "shared":
                least = min((int(g[d]) for d in fit), default=None)
                want = [next(d for d in fit if g[d] == least)] if fit else []
            else:
                want = fit[: req.gpu_count] if len(fit) >= req.gpu_count else []
            got = default_devices(s, row, req)
            assert got == want and all(type(d) is int for d in got), (row, req, g.tolist())


def test_a_scorer_that_does_not_say_it_is_per_class_sees_every_row():
    """``class_scores`` scores one row per node class only when every scorer says its
    score is a function of the class (``Plugin.per_class``, False unless overridden)."""
    class Seen(Plugin):
        name = "Seen"
        per_class_says = False

        def __init__(self):
            super().__init__()
            self.sizes = []

        def per_class(self, ctx):
            return self.per_class_says

        def score(self, ctx, rows):
            self.sizes.append(rows.size)
            return ctx.state.cpu_free[rows].astype(np.float64)

    s = CellState("k")
    for i in range(200):
        s.add_node(f"n{i:03d}", 64000, 1024, 0, None)       # one node class
    ctx, rows = CycleContext(s, Request(1000, 10, 0, 0), "t", 0, {}), np.arange(200)
    assert not Plugin.per_class(Seen(), ctx)
    p = Seen()
    values, slot = class_scores([(p, 1.0)], ctx, rows)
    assert slot is None and values.tolist() == [64000.0] * 200 and p.sizes == [200]
    p.per_class_says = True
    values, slot = class_scores([(p, 2.0)], ctx, rows)
    assert values.tolist() == [128000.0] and slot.tolist() == [0] * 200 and p.sizes == [200, 1]
    assert framework.CLASS_SCORING_MIN_ROWS > 1
    values, slot = class_scores([(p, 1.0)], ctx, rows[:3])
    assert slot is None and values.size == 3 and p.sizes[-1] == 3              # few rows: every one
