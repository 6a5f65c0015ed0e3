"""Typed strategy arguments: defaults, refusals that name the key, the strategy, the value
and what is allowed, and what the core reads from ``Strategy.args``."""
import dataclasses
import json

import pytest

from suanli.errors import StrategyConfigError, StrategyError
from suanli.processors import strategies as S
from suanli.processors.args import explicit
from suanli.processors.matching import BlendMember, Rule
from suanli.processors.strategies.args import StrategyArgs

BUILTIN = sorted(m.NAME for m in S.BUILTIN)


@pytest.mark.parametrize("name", BUILTIN)
def test_every_strategy_has_frozen_slotted_args_with_the_common_keys(name):
    cls = S.args_class(name)
    assert dataclasses.is_dataclass(cls) and issubclass(cls, StrategyArgs)
    assert cls.__dataclass_params__.frozen and "__slots__" in cls.__dict__
    a = cls()
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.seed = 3
    assert (a.seed, a.top_k, a.retry_budget, a.rules, a.fallback_strategy, a.fallback_config) == \
        (0, 5, 32, (), "default", {})
    # the explicit form is JSON and parses back to the same arguments
    d = S.defaults(name)
    assert json.loads(json.dumps(d)) == d
    assert S.parse_config(name, d) == S.parse_config(name, {}) == a


@pytest.mark.parametrize("name,tie_break", [
    ("random", "random"), ("dotprod", "name"), ("gpu-clustering", "name"), ("gpu-packing", "name"),
    ("bestfit", "name"), ("fgd", "name"), ("default", "BestFit"), ("worst-fit", "random"),
    ("first-fit", "first"), ("balanced", "BestFit"), ("analytics", "BestFit"), ("cost-cheapest", "BestFit"),
    ("cost-spot-mix", "BestFit"), ("spread-zones", "BestFit"), ("anti-affinity", "random"),
    ("green-carbon", "BestFit"), ("green-pue", "BestFit"), ("latency", "BestFit"), ("batch", "BestFit"),
])
def test_tie_break_defaults_per_strategy(name, tie_break):
    assert S.parse_config(name, {}).tie_break == tie_break
    assert S.get_strategy(name, {}).profile.tie_break == tie_break


@pytest.mark.parametrize("name", BUILTIN)
def test_unknown_key_is_refused_naming_it_the_strategy_and_the_allowed_keys(name):
    with pytest.raises(StrategyConfigError) as err:
        S.get_strategy(name, {"seed": 1, "no_such_knob": 1})
    msg = str(err.value)
    assert msg.startswith(f"strategy {name!r}: unknown argument 'no_such_knob'; allowed: ")
    assert all(k in msg for k in ("seed", "top_k", "retry_budget", "rules"))


# (strategy, key, bad value, fragment of the message's "allowed")
BAD = [
    ("bestfit", "seed", "3", "an integer"),
    ("bestfit", "seed", 1.5, "an integer"),
    ("bestfit", "top_k", 0, "an integer >= 1"),
    ("bestfit", "retry_budget", -1, "an integer >= 0"),
    ("bestfit", "tie_break", "BestFit", "one of 'random', 'name', 'first'"),
    ("bestfit", "max_cpu", 0, "a number > 0"),
    ("dotprod", "max_gpu", "8000", "a number > 0"),
    ("worst-fit", "tie_break", "sideways", "one of 'random', 'name', 'first', 'BestFit'"),
    ("fgd", "threshold_pct", 150, "a number in 0..100"),
    ("fgd", "refresh_every", 0, "an integer in 1..100000"),
    ("fgd", "refresh_every", 100_001, "an integer in 1..100000"),       # the shape log's reach
    ("fgd", "mode", "linear", "one of 'sigmoid', 'raw'"),
    ("fgd", "class_weight", "milli", "one of 'count', 'gpu'"),
    ("fgd", "device_tie", "last", "one of 'first', 'bestfit'"),
    ("fgd", "ignore_noaccess", "yes", "true or false"),
    ("fgd", "quantum", -1, "a number >= 0"),
    ("fgd", "typical_tasks", "all", "'observed' or a list of"),
    ("default", "gap_weight", -0.5, "a number >= 0"),
    ("default", "bestfit_weight", True, "a number >= 0"),
    ("default", "scarcity_weight", None, "a number >= 0"),
    ("default", "bestfit_kinds", ["cpu"], "an object mapping one of 'cpu', 'shared', 'whole' to a number in 0..1"),
    ("default", "bestfit_kinds", {"gpu": 0.5}, "(bad key 'gpu')"),
    ("analytics", "gpu_node_penalty", -1, "a number >= 0"),
    ("cost-cheapest", "price_per_core", -0.1, "a number >= 0"),
    ("cost-cheapest", "price_by_model", ["T4"], "an object mapping a string to a number >= 0"),
    ("cost-spot-mix", "risk_gold", "high", "a number >= 0"),
    ("spread-zones", "strict_replicas", 1, "true or false"),
    ("spread-zones", "group_label", "", "a non-empty string"),
    ("green-carbon", "default_pue", 0, "a number > 0"),
    ("green-pue", "idle_watts", -5, "a number >= 0"),
    ("latency", "links", {"a": "zone:x"}, "a list of an object with keys a, b, ms"),
    ("latency", "unreachable_ms", "far", "a number >= 0"),
    ("batch", "window", 0, "an integer >= 1"),
    ("batch", "max_deterministic_time", 0, "a number > 0"),
    ("batch", "tie_break", "random", "'BestFit'"),
    ("rules", "fallback", "rules", "any strategy but 'rules'"),
    ("rules", "rules", {"match": {}}, "a list of an object with keys"),
    ("rules", "fallback_config", [], "an object mapping a string to any JSON value"),
]


@pytest.mark.parametrize("name,key,value,allowed", BAD)
def test_bad_value_is_refused_naming_key_strategy_value_and_what_is_allowed(name, key, value, allowed):
    with pytest.raises(StrategyConfigError) as err:
        S.get_strategy(name, {key: value})
    msg = str(err.value)
    assert msg.startswith(f"strategy {name!r}: bad value for {key}: {value!r}; allowed: "), msg
    assert allowed in msg, msg
    assert isinstance(err.value, StrategyError)


# nested values: the message names the path inside the key
NESTED = [
    ("fgd", {"typical_tasks": [{"cpu_milli": 1000, "gpu_count": "one"}]}, "typical_tasks[0].gpu_count: 'one'"),
    ("fgd", {"typical_tasks": [{"cpu_milli": 1, "gpus": 1}]}, "unknown argument 'typical_tasks[0].gpus'"),
    ("default", {"bestfit_kinds": {"cpu": 2}}, "bestfit_kinds.cpu: 2; allowed: a number in 0..1"),
    ("latency", {"links": [{"a": "zone:x", "b": "zone:y", "ms": -1}]}, "links[0].ms: -1; allowed: a number >= 0"),
    ("latency", {"links": [{"a": "zone:x", "ms": 1}]}, "missing argument 'links[0].b'"),
    ("bestfit", {"rules": [{"match": {"w": "x"}}]}, "rules[0].strategy: None; allowed: exactly one of"),
    ("bestfit", {"rules": [{"strategy": "fgd", "blend": []}]}, "rules[0].strategy: 'fgd'; allowed: exactly one"),
    ("bestfit", {"rules": [{"blend": [{"strategy": "fgd", "weight": -1}]}]}, "rules[0].blend[0].weight: -1;"),
    ("bestfit", {"rules": [{"strategy": "fgd", "when": {}}]}, "unknown argument 'rules[0].when'"),
]


@pytest.mark.parametrize("name,config,fragment", NESTED)
def test_nested_bad_values_name_their_path(name, config, fragment):
    with pytest.raises(StrategyConfigError, match=f"^strategy {name!r}: ") as err:
        S.get_strategy(name, config)
    assert fragment in str(err.value)


# values the builders used to accept keep their meaning
ACCEPTED = [
    ("bestfit", {"max_cpu": 128000}, "max_cpu", 128000.0),           # an int for a float
    ("bestfit", {"top_k": 3.0}, "top_k", 3),                         # an integral float for an int
    ("fgd", {"typical_tasks": None}, "typical_tasks", "observed"),   # null meant "observed"
    ("fgd", {"gap_weight": None}, "gap_weight", 0.0),                # `or 0`
    ("default", {"gap_weight": None}, "gap_weight", 0.0),            # also under default (not 0.5)
    ("fgd", {"quantum": None}, "quantum", 0.0),
    ("rules", {"fallback_config": None}, "fallback_config", {}),     # the old explicit form of rules
    ("bestfit", {"rules": None}, "rules", ()),
    ("latency", {"links": None}, "links", ()),
    ("cost-cheapest", {"pricing_factor": None}, "pricing_factor", {"SPOT": 1.0, "RESERVED": 1.0, "ON_DEMAND": 1.0}),
    ("default", {"bestfit_kinds": {"whole": 1}}, "bestfit_kinds", {"whole": 1.0}),
]


@pytest.mark.parametrize("name,config,key,value", ACCEPTED)
def test_values_the_builders_accepted_still_parse(name, config, key, value):
    assert getattr(S.parse_config(name, config), key) == value


def test_typed_nested_values():
    a = S.parse_config("fgd", {"typical_tasks": [{"cpu_milli": 1000, "gpu_count": 1, "gpu_milli": 500,
                                                  "gpu_models": ["T4"], "count": 7}]})
    t = a.typical_tasks[0]
    assert (t.cpu_milli, t.gpu_count, t.gpu_milli, t.gpu_models, t.count) == (1000, 1, 500, ("T4",), 7)
    rule = S.parse_config("bestfit", {"rules": [{"match": {"workload": ["a", "b"]}, "blend": [
        {"strategy": "gpu-packing"}, {"strategy": "default", "weight": 2, "config": {"top_k": 1}}]}]}).rules[0]
    assert rule.blend == (BlendMember("gpu-packing", 1.0, {}), BlendMember("default", 2.0, {"top_k": 1}))
    assert rule.match == {"workload": ("a", "b")}
    assert explicit(rule) == {"match": {"workload": ["a", "b"]}, "config": {}, "blend": [
        {"strategy": "gpu-packing", "weight": 1.0, "config": {}},
        {"strategy": "default", "weight": 2.0, "config": {"top_k": 1}}]}


def test_unknown_strategy_is_a_key_error_and_a_config_error():
    with pytest.raises(KeyError):
        S.get_strategy("nosuch", {})
    with pytest.raises(StrategyConfigError, match="^unknown strategy 'nosuch'; known: analytics, "):
        S.get_strategy("nosuch", {})


def test_strategy_keeps_the_config_as_given_and_its_digest():
    cfg = {"seed": 4, "tie_break": "random"}
    st = S.get_strategy("bestfit", cfg)
    assert st.config == cfg and st.digest == S.config_digest(cfg)
    assert (st.seed, st.retry_budget, st.args.seed, st.args.tie_break, st.args.max_cpu) == (4, 32, 4, "random", 128000.0)
    spelled = S.get_strategy("bestfit", S.defaults("bestfit") | {"seed": 4, "tie_break": "random"})
    assert spelled.args == st.args and spelled.digest != st.digest     # same meaning, other bytes


def test_what_the_core_reads_from_strategy_args():
    rules = [{"name": "t", "match": {"workload": "training"}, "strategy": "gpu-packing", "config": {"top_k": 2}},
             {"match": {"workload": "mix"}, "blend": [{"strategy": "bestfit", "weight": 1},
                                                        {"strategy": "default", "weight": 2}]}]
    st = S.get_strategy("fgd", {"seed": 9, "retry_budget": 4, "rules": rules,
                                "fallback_strategy": "bestfit", "fallback_config": {"top_k": 3}})
    a = st.args
    assert (a.seed, a.retry_budget, a.fallback_strategy, a.fallback_config) == (9, 4, "bestfit", {"top_k": 3})
    assert all(isinstance(r, Rule) for r in a.rules)
    # the strategies a rule names: exactly what the core builds from the raw rule dicts
    assert S.strategy_for_rule(a.rules[0], st.seed) is S.get_strategy("gpu-packing", {"seed": 9, "top_k": 2})
    assert S.strategy_for_rule(a.rules[1], st.seed) is S.get_blend(rules[1]["blend"], 9)
    assert S.fallback_of(st) is S.get_strategy("bestfit", {"seed": 9, "top_k": 3})
    own = S.get_strategy("default", {"seed": 2})
    assert S.fallback_of(own) is own


def test_validate_policy_checks_nested_strategies_without_building():
    ok = {"rules": [{"match": {"w": "a"}, "strategy": "latency", "config": {"zone_region_ms": 2}},
                    {"match": {"w": "b"}, "blend": [{"strategy": "gpu-packing"}, {"strategy": "default"}]}]}
    assert S.validate_policy("bestfit", ok).rules[0].strategy == "latency"
    assert S.validate_policy("rules", {"fallback": "fgd", "fallback_config": {"mode": "raw"}}).fallback == "fgd"
    cases = [
        ("bestfit", {"rules": [{"strategy": "latency", "config": {"zone_region_ms": -2}}]},
         "strategy 'bestfit': rules[0]: strategy 'latency': bad value for zone_region_ms: -2;"),
        ("bestfit", {"rules": [{"strategy": "nosuch"}]},
         "strategy 'bestfit': rules[0]: unknown strategy 'nosuch'; known: "),
        ("bestfit", {"rules": [{"blend": [{"strategy": "default"}, {"strategy": "fgd", "config": {"x": 1}}]}]},
         "strategy 'bestfit': rules[0].blend[1]: strategy 'fgd': unknown argument 'x'"),
        ("rules", {"fallback": "fgd", "fallback_config": {"mode": "cubic"}},
         "strategy 'rules': fallback: strategy 'fgd': bad value for mode: 'cubic'"),
        ("rules", {"fallback": "nosuch"}, "strategy 'rules': fallback: unknown strategy 'nosuch'"),
        ("fgd", {"fallback_strategy": "nosuch"}, "strategy 'fgd': bad value for fallback_strategy: unknown strategy"),
        ("fgd", {"seed": "x"}, "strategy 'fgd': bad value for seed: 'x'; allowed: an integer"),
    ]
    for name, config, msg in cases:
        with pytest.raises(StrategyConfigError) as err:
            S.validate_policy(name, config)
        assert str(err.value).startswith(msg), str(err.value)


def test_get_blend_takes_typed_or_json_members_alike():
    typed = S.get_blend([BlendMember("gpu-packing", 1.0, {}), BlendMember("default", 1.0, {})], 3)
    plain = S.get_blend([{"strategy": "gpu-packing", "weight": 1}, {"strategy": "default", "config": None}], 3)
    assert typed is plain and typed.name == "blend(gpu-packing:1,default:1)"
    assert typed.args.seed == 3 and typed.retry_budget == 32


def test_describe_args_lists_each_key_with_default_and_allowed():
    rows = {r["name"]: r for r in S.describe_args("fgd")}
    assert rows["threshold_pct"]["default"] == 95.0 and rows["threshold_pct"]["allowed"] == "a number in 0..100"
    assert rows["mode"]["allowed"] == "one of 'sigmoid', 'raw'" and rows["mode"]["doc"]
    assert list(rows)[:3] == ["seed", "top_k", "retry_budget"]
