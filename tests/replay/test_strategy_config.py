"""Explicit strategy configurations decide exactly like the implicit defaults."""
import json

import pytest

from suanli.errors import ReplayError
from suanli.processors import CellState, decide
from suanli.processors.strategies import MODULES
from suanli.replay import strategy_config as sc
from suanli.replay.openb import read_nodes, read_pods



def test_reference_strategies_write_out_their_plugin_defaults():
    assert {"bestfit_weight", "quantum", "device_tie", "seed", "retry_budget", "top_k"} <= set(sc.defaults("default"))
    assert {"max_cpu", "max_gpu"} <= set(sc.defaults("bestfit"))


def _placements(nodes, pods, policy):
    state = CellState("openb")
    off = 0
    for n in nodes:
        state, _ = decide(state, "NodeRegistered", n, ("c", 0, off))
        off += 1
    state, _ = decide(state, "PolicyChanged", {"cell": "openb", "strategy": policy["strategy"],
                                               "config": policy["config"], "at": 0}, ("c", 0, off))
    out = []
    for p in pods:
        off += 1
        state, outs = decide(state, "TaskSubmitted", p, ("c", 0, off))
        for kind, d in outs:
            prov = dict(d["provenance"], strategy=None)
            out.append((kind, d.get("node_id"), d.get("gpu_devices"), json.dumps(prov, sort_keys=True)))
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
