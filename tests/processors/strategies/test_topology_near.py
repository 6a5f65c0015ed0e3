"""TopologyNear: a task labelled data-site / user-site goes to the feasible nodes nearest
to that place on the cell's topology graph; without the label nothing changes."""
import random

import numpy as np
import pytest

from kit import Cell
from suanli.errors import StrategyConfigError
from suanli.processors import REGISTRY, CellState
from suanli.processors.framework import CycleContext, Profile, run_cycle
from suanli.processors.model import Node, Request, Task, TaskPlaced
from suanli.processors.state import TaskRecord
from suanli.processors.plugins.basic import FILTERS
from suanli.processors.strategies import _CACHE
from suanli.processors.strategies import default as default_strategy


def _geo(strategy="default"):
    c = Cell(strategy)
    c.node("a1", gpus=2, site="s1", region="r1", zone="z1", labels={"rack": "r1"})
    c.node("a2", gpus=2, site="s1", region="r1", zone="z1", labels={"rack": "r1"})
    c.node("a3", gpus=2, site="s1", region="r1", zone="z1", labels={"rack": "r2"})
    c.node("b1", gpus=2, site="s1", region="r1", zone="z2", labels={"rack": "r1"})
    c.node("c1", gpus=2, site="s2", region="r2", zone="z3", labels={"rack": "r1"})
    c.node("c2", gpus=2, site="s2", region="r2", zone="z4", labels={"rack": "r1"})
    return c


def test_places_next_to_the_named_place_and_says_why():
    c = _geo()
    c.task("t1", gpus=1, milli=500, labels={"data-site": "s2"})
    assert c.node_of("t1") in ("c1", "c2")
    prov = c.placed("t1")["provenance"]
    reasons = {f["reason"]: f["nodes"] for f in prov["filtered"]}
    assert reasons == {"farther than the nearest feasible node from data-site=s2 (6.25 ms, topology)": 4}
    assert any("farther than the nearest feasible node" in p for p in prov["path"])
    assert {x["node_id"] for x in prov["candidates"]} <= {"c1", "c2"}
    c.task("t2", gpus=1, milli=500, labels={"user-site": "z2"})
    assert c.node_of("t2") == "b1"
    c.task("t3", gpus=1, milli=500, labels={"users-site": "zone:z4"})
    assert c.node_of("t3") == "c2"


def test_a_node_place_falls_back_to_its_rack_then_its_zone():
    c = _geo()
    c.task("fill", gpus=2, milli=1000, labels={"data-site": "a1"})
    assert c.node_of("fill") == "a1"
    c.task("next", gpus=2, milli=1000, labels={"data-site": "a1"})
    assert c.node_of("next") == "a2"                     # a1 is full: its rack mate
    c.task("third", gpus=2, milli=1000, labels={"data-site": "a1"})
    assert c.node_of("third") == "a3"                    # the rack is full: the zone


def test_measured_links_and_conditions_move_the_choice():
    c = _geo()
    c.send("NodeStatusChanged", {"node_id": "c1", "cell": "kit", "status": "CORDONED", "at": 1})
    c.task("t1", gpus=1, milli=500, labels={"data-site": "c1"})
    assert c.node_of("t1") == "c2"                       # same site
    c.send("LinkMetrics", {"event_id": "l", "src": "c1", "dst": "b1", "scope": "NODE", "latency_ms": 0.5,
                           "bandwidth_mbps": 1000.0, "loss_pct": 0.0, "at": 2, "cell": "kit"})
    c.task("t2", gpus=1, milli=500, labels={"data-site": "c1"})
    assert c.node_of("t2") == "b1"                       # the measured link is the shortest way
    c.send("NodeConditionChanged", {"event_id": "", "node_id": "b1", "cell": "kit", "condition": "CONGESTED",
                                    "at": 3})
    c.task("t3", gpus=1, milli=500, labels={"data-site": "c1"})
    assert c.node_of("t3") == "c2"                       # b1 congested: +10 ms, and NORMAL nodes are preferred
    reasons = [f["reason"] for f in c.placed("t3")["provenance"]["filtered"]]
    assert any("topology" in r for r in reasons)


def test_unknown_place_or_no_label_changes_nothing():
    c = _geo()
    c.task("t1", gpus=1, milli=500, labels={"data-site": "atlantis"})
    assert c.placed("t1")["provenance"]["filtered"] == []
    c.task("t2", gpus=1, milli=500)
    assert c.placed("t2")["provenance"]["filtered"] == []


def _run(build, monkeypatch, seed):
    """Decisions of default on a random label-free workload, with ``build`` as default's profile."""
    monkeypatch.setattr(default_strategy, "build", build)
    _CACHE.clear()
    rnd = random.Random(seed)
    c = Cell("default")
    for i in range(12):
        c.node(f"n{i}", cpu=rnd.choice([16000, 32000]), gpus=rnd.choice([0, 2, 4, 8]), zone=f"z{i % 3}",
               site="s", region="r", labels={"rack": f"r{i % 2}"})
    for j in range(60):
        kind = rnd.random()
        if kind < 0.3:
            c.task(f"t{j}", cpu=rnd.choice([1000, 4000]))
        elif kind < 0.7:
            c.task(f"t{j}", cpu=2000, gpus=1, milli=rnd.choice([250, 500, 700]))
        else:
            c.task(f"t{j}", cpu=4000, gpus=rnd.choice([1, 2, 4]), milli=1000)
        if j % 7 == 6:
            done = next((t for t, r in c.state.tasks.items() if r.status == "PLACED"), None)
            if done:
                c.done(done)
    _CACHE.clear()
    return c.outputs


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_default_decides_byte_for_byte_as_without_the_filter(monkeypatch, seed):
    from suanli.processors.strategies._profile import standard_profile

    original = default_strategy.build

    def without(args):
        prof = original(args)
        assert [p.name for p in prof.filters] == [*FILTERS, "TopologyNear"]
        bare = standard_profile(args, [{"name": p.name, "args": p.args, "weight": w} for p, w in prof.scorers])
        bare.stable_candidates = prof.stable_candidates
        return bare

    with_filter = _run(original, monkeypatch, seed)
    without_filter = _run(without, monkeypatch, seed)
    assert with_filter == without_filter and len(with_filter) > 60


def test_as_a_normalised_scorer():
    s = CellState("x")
    for nid, zone, region, site in (("a", "z1", "r1", "s1"), ("b", "z2", "r1", "s1"), ("c", "z3", "r2", "s2")):
        s.add_node(nid, 8000, 8000, 0, None, Node(node_id=nid, cpu_milli=8000, memory_mib=8000, zone=zone,
                                                     region=region, site=site))
    prof = Profile.build(REGISTRY, FILTERS, [{"name": "TopologyNear"}], tie_break="first")
    near = prof.scorers[0][0]
    s.tasks["t"] = TaskRecord(Task(task_id="t", tenant="x", request=Request(1000, 100, 0, 0), labels={"data-site": "z2"}), 1)
    ctx = CycleContext(s, Request(1000, 100, 0, 0), "t", 0, {})
    rows = np.arange(3)
    raw = near.score(ctx, rows)
    assert raw.tolist() == [-2250.0, -250.0, -62250.0]    # minus microseconds
    res = run_cycle(prof, ctx)
    assert res.plan.node_id == "b" and res.candidates[0] == (1, 100.0)
    s.tasks["t"] = TaskRecord(Task(task_id="t", tenant="x", request=Request(1000, 100, 0, 0)), 1)
    assert near.score(ctx, rows).tolist() == [0.0, 0.0, 0.0]


def test_args_are_typed():
    with pytest.raises(StrategyConfigError, match="slack"):
        REGISTRY.create("TopologyNear", {"slack": 1})
    p = REGISTRY.create("TopologyNear", {"labels": ["near-me"], "slack_ms": 0.5})
    assert p.args.labels == ("near-me",) and p.args.slack_ms == 0.5


def test_cpu_tasks_go_near_too():
    c = _geo()
    out = c.task("t", cpu=1000, labels={"data-site": "z3"})
    assert out[0][0] == TaskPlaced.KIND and out[0][1]["node_id"] == "c1"
