"""Explicit strategy configurations decide exactly like the implicit defaults."""
import json

import pytest

from suanli.errors import ReplayError
from suanli.processors import CellState, decide
from suanli.processors.model import NodeRegistered, PolicyChanged, TaskSubmitted, from_avro, to_avro
from suanli.processors import strategies as S
from suanli.processors.strategies import MODULES
from suanli.replay import strategy_config as sc
from suanli.replay.openb import read_nodes, read_pods

# strategy.json's config of each strategy as the probe-based explicit form (before typed
# Args) wrote it for {}: it must still parse and mean the same
PROBED_EXPLICIT = {
    "analytics": {"retry_budget": 32, "seed": 0, "tie_break": "BestFit", "top_k": 5},
    "anti-affinity": {"retry_budget": 32, "seed": 0, "tie_break": "random", "top_k": 5},
    "balanced": {"retry_budget": 32, "seed": 0, "tie_break": "BestFit", "top_k": 5},
    "batch": {"retry_budget": 32, "seed": 0, "top_k": 5},
    "bestfit": {"max_cpu": 128000,
                "max_gpu": 8000,
                "retry_budget": 32,
                "seed": 0,
                "tie_break": "name",
                "top_k": 5},
    "cost-cheapest": {"retry_budget": 32, "seed": 0, "tie_break": "BestFit", "top_k": 5},
    "cost-spot-mix": {"retry_budget": 32, "seed": 0, "tie_break": "BestFit", "top_k": 5},
    "default": {"bestfit_kinds": {"cpu": 0.0, "shared": 0.25},
                "bestfit_weight": 1.0,
                "class_weight": "count",
                "device_tie": "bestfit",
                "gap_weight": 0.5,
                "ignore_noaccess": False,
                "mode": "raw",
                "quantum": 0,
                "refresh_every": 500,
                "retry_budget": 32,
                "scarcity_weight": 1.0,
                "seed": 0,
                "threshold_pct": 95.0,
                "tie_break": "BestFit",
                "top_k": 5,
                "typical_tasks": "observed"},
    "dotprod": {"retry_budget": 32, "seed": 0, "tie_break": "name", "top_k": 5},
    "fgd": {"class_weight": "count",
            "device_tie": "first",
            "gap_weight": 0,
            "ignore_noaccess": False,
            "mode": "sigmoid",
            "quantum": 0,
            "refresh_every": 500,
            "retry_budget": 32,
            "seed": 0,
            "threshold_pct": 95.0,
            "tie_break": "name",
            "top_k": 5,
            "typical_tasks": "observed"},
    "first-fit": {"retry_budget": 32, "seed": 0, "tie_break": "first", "top_k": 5},
    "gpu-clustering": {"retry_budget": 32, "seed": 0, "tie_break": "name", "top_k": 5},
    "gpu-packing": {"retry_budget": 32, "seed": 0, "tie_break": "name", "top_k": 5},
    "green-carbon": {"retry_budget": 32, "seed": 0, "tie_break": "BestFit", "top_k": 5},
    "green-pue": {"retry_budget": 32, "seed": 0, "tie_break": "BestFit", "top_k": 5},
    "latency": {"retry_budget": 32, "seed": 0, "tie_break": "BestFit", "top_k": 5},
    "random": {"retry_budget": 32, "seed": 0, "tie_break": "random", "top_k": 5},
    "rules": {"fallback": "default", "fallback_config": None, "retry_budget": 32, "seed": 0},
    "spread-zones": {"retry_budget": 32,
                     "seed": 0,
                     "strict_replicas": False,
                     "tie_break": "BestFit",
                     "top_k": 5},
    "worst-fit": {"retry_budget": 32, "seed": 0, "tie_break": "random", "top_k": 5},
}


def test_reference_strategies_write_out_their_plugin_defaults():
    assert {"bestfit_weight", "quantum", "device_tie", "seed", "retry_budget", "top_k"} <= set(sc.defaults("default"))
    assert {"max_cpu", "max_gpu"} <= set(sc.defaults("bestfit"))


@pytest.mark.parametrize("name", sorted(PROBED_EXPLICIT))
def test_probe_era_strategy_json_still_parses_and_means_the_same(name):
    old = {"strategy": name, "config": PROBED_EXPLICIT[name]}
    assert S.parse_config(name, old["config"]) == S.parse_config(name, {})
    assert sc.same_meaning(old, {"strategy": name, "config": {}})
    assert sc.same_meaning(old, sc.explicit({"strategy": name, "config": {}}))
    assert set(old["config"]) <= set(sc.defaults(name))          # nothing the old form had is dropped


def _placements(nodes, pods, policy):
    state = CellState("openb")
    off = 0
    for n in nodes:
        state, _ = decide(state, from_avro(NodeRegistered, n), ("c", 0, off))
        off += 1
    state, _ = decide(state, PolicyChanged.of("openb", policy["strategy"], policy["config"]), ("c", 0, off))
    out = []
    for p in pods:
        off += 1
        state, outs = decide(state, from_avro(TaskSubmitted, p), ("c", 0, off))
        for d in outs:
            a = to_avro(d)
            # commands (a preempted victim's StopCommand) carry no provenance
            prov = dict(a["provenance"], strategy=None) if "provenance" in a else a
            out.append((d.KIND, a.get("node_id"), a.get("gpu_devices"), json.dumps(prov, sort_keys=True)))
    return out


@pytest.mark.parametrize("name", sorted(MODULES))
def test_explicit_defaults_decide_like_empty_config(openb_small, name):
    nodes = read_nodes(openb_small[0])
    pods = read_pods(openb_small[1])[:120]
    implicit = _placements(nodes, pods, {"strategy": name, "config": {"seed": 3}})
    spelled = _placements(nodes, pods, sc.explicit({"strategy": name, "config": {"seed": 3}}))
    assert implicit == spelled
    if name == "default":
        changed = _placements(nodes, pods, sc.explicit({"strategy": name, "config": {"seed": 3, "bestfit_weight": 50.0}}))
        assert [p[:3] for p in changed] != [p[:3] for p in implicit]   # the knob is real


def test_initial_policy_is_the_recorded_literal_unless_the_meaning_changed():
    recorded = {"strategy": "default", "config": {}}
    assert sc.initial_policy(sc.explicit(recorded), recorded) == recorded
    edited = sc.explicit(recorded)
    edited["config"]["bestfit_weight"] = 2.0
    assert sc.initial_policy(edited, recorded) == edited
    other = {"strategy": "bestfit", "config": sc.defaults("bestfit")}
    assert sc.initial_policy(other, recorded)["strategy"] == "bestfit"


def test_parse_policy(tmp_path):
    assert sc.parse_policy("bestfit") == ("bestfit", {"strategy": "bestfit", "config": {}})
    label, spec = sc.parse_policy("default:bestfit_weight=2.0:tie_break=random")
    assert spec == {"strategy": "default", "config": {"bestfit_weight": 2.0, "tie_break": "random"}}
    f = tmp_path / "s.json"
    f.write_text(json.dumps({"strategy": "fgd", "config": {"seed": 1}}))
    assert sc.parse_policy(str(f))[1] == {"strategy": "fgd", "config": {"seed": 1}}
    for bad in ("nosuch", "default:oops", str(tmp_path / "missing.json")):
        with pytest.raises(ReplayError):
            sc.parse_policy(bad)


@pytest.mark.parametrize("spec,msg", [
    ("default:bestfit_wieght=2", "policy 'default:bestfit_wieght=2': strategy 'default': unknown argument "
                                 "'bestfit_wieght'; allowed: bestfit_kinds, bestfit_weight, "),
    ("fgd:mode=linear", "policy 'fgd:mode=linear': strategy 'fgd': bad value for mode: 'linear'; "
                        "allowed: one of 'sigmoid', 'raw'"),
    ("bestfit:top_k=0", "policy 'bestfit:top_k=0': strategy 'bestfit': bad value for top_k: 0; allowed: an integer >= 1"),
    ("nosuch:x=1", "unknown strategy 'nosuch'; known: analytics, "),
])
def test_parse_policy_names_the_bad_key(spec, msg):
    with pytest.raises(ReplayError) as err:
        sc.parse_policy(spec)
    assert str(err.value).startswith(msg), str(err.value)


def test_parse_policy_checks_a_strategy_json_too(tmp_path):
    f = tmp_path / "s.json"
    f.write_text(json.dumps({"strategy": "rules", "config": {"rules": [{"match": {}, "strategy": "fgd",
                                                                       "config": {"quantum": -1}}]}}))
    with pytest.raises(ReplayError, match=r"strategy 'rules': rules\[0\]: strategy 'fgd': bad value for quantum: -1"):
        sc.parse_policy(str(f))


def test_same_meaning_compares_parsed_configs():
    a = {"strategy": "bestfit", "config": {"max_cpu": 128000}}
    assert sc.same_meaning(a, {"strategy": "bestfit", "config": {"max_cpu": 128000.0}})
    assert sc.same_meaning(a, {"strategy": "bestfit", "config": {}})
    assert not sc.same_meaning(a, {"strategy": "bestfit", "config": {"max_cpu": 64000}})
    assert not sc.same_meaning(a, {"strategy": "dotprod", "config": {}})
    # a strategy unknown here, or a config it refuses, is compared as written
    assert sc.same_meaning({"strategy": "acme", "config": {"k": 1}}, {"strategy": "acme", "config": {"k": 1}})
    assert not sc.same_meaning({"strategy": "fgd", "config": {"oops": 1}}, {"strategy": "fgd", "config": {}})
