"""DataSite and AggregatorTraffic (plugins/federated.py) through the ``federated`` strategy:
clients stay at their data's site, the aggregator goes where a round's traffic is least,
and the decision's path says why."""
import json
import random

import numpy as np
import pytest

from kit import Cell
from suanli.processors import REGISTRY
from suanli.processors.framework import CycleContext
from suanli.processors.plugins.federated import job_members
from suanli.processors.strategies import _CACHE, get_strategy

RULE = {"rules": [{"name": "federated", "match": {"federated-role": "*"}, "strategy": "federated"}]}


def _clouds(strategy="federated", config=None):
    """Three clouds: a1, a2 at cloud-a; b1, b2 at cloud-b; c1 at cloud-c (one region and zone each)."""
    c = Cell(strategy, config)
    for nid, s in (("a1", "a"), ("a2", "a"), ("b1", "b"), ("b2", "b"), ("c1", "c")):
        c.node(nid, site=f"cloud-{s}", region=f"r{s}", zone=f"z{s}")
    return c


def _client(c, tid, job, site, **labels):
    c.task(tid, labels={"job": job, "federated-role": "client", "data-site": site, **labels})


def _agg(c, tid, job, **labels):
    c.task(tid, labels={"job": job, "federated-role": "aggregator", **labels})


def _path(c, tid):
    return c.placed(tid)["provenance"]["path"]


def test_a_client_runs_only_at_its_data_site_and_the_filter_says_so():
    c = _clouds()
    _client(c, "k1", "j1", "cloud-b")
    assert c.node_of("k1") in ("b1", "b2")
    reasons = {f["reason"]: f["nodes"] for f in c.placed("k1")["provenance"]["filtered"]}
    assert reasons == {"data of this task is at site cloud-b": 3}


def test_a_site_no_node_has_is_unresolvable():
    c = _clouds()
    outs = c.task("k1", labels={"data-site": "mars"})
    (kind, d), = [o for o in outs if o[0] != "TaskSubmitted"]
    assert kind == "TaskUnschedulable"
    assert d["reasons"][0]["reason"] == "no node of this cell is at site mars (data of this task is there)"
    assert any("pre-filter: DataSite" in p for p in d["provenance"]["path"])


def test_a_site_whose_nodes_are_full_keeps_the_client_waiting_there():
    c = _clouds()
    c.task("big", cpu=32000, labels={"data-site": "cloud-c"})
    assert c.node_of("big") == "c1"
    outs = c.task("k1", cpu=1000, labels={"data-site": "cloud-c"})
    assert [k for k, _ in outs] == ["TaskPending"]


def test_the_aggregator_goes_to_the_site_with_most_client_traffic_and_explains_it():
    c = _clouds()
    _client(c, "k1", "j1", "cloud-a")                   # the first client: its site is the home cloud
    _client(c, "k2", "j1", "cloud-b")
    _client(c, "k3", "j1", "cloud-b")
    _agg(c, "agg", "j1", **{"federated-up-bytes": "4000000", "federated-down-bytes": "1000000",
                            "federated-quantisation": "int8"})
    node = c.node_of("agg")
    assert node[0] == "b"
    clients_at = {c.node_of(k) for k in ("k2", "k3")}
    note = next(p for p in _path(c, "agg") if p.startswith("federated job j1: "))
    assert f"aggregator on node:{node} (site cloud-b)" in note
    assert "at home cloud-a" in note and "over 3 clients" in note
    # int8 updates: 1 MB up + 1 MB down per client; the cloud-a client crosses: 2 MB/round vs 4 at home
    assert "cross-cloud 2 MB/round vs 4 MB" in note
    assert _path(c, "agg")[-1] == f"bind {node}" and _path(c, "agg").index(note) == len(_path(c, "agg")) - 2
    if len(clients_at) == 1:                             # both cloud-b clients share a node: it wins outright
        assert node in clients_at


def test_home_site_label_names_the_home_cloud():
    c = _clouds()
    _client(c, "k1", "j1", "cloud-b")
    _client(c, "k2", "j1", "cloud-b")
    _agg(c, "agg", "j1", **{"home-site": "cloud-c"})
    note = next(p for p in _path(c, "agg") if p.startswith("federated job j1: "))
    assert c.node_of("agg")[0] == "b"
    assert "at home cloud-c on node:c1" in note and "(-" in note
    assert "2 clients without federated-up/down-bytes labels: 1000000 B up, 1000000 B down assumed" in note


def test_an_aggregator_before_its_clients_is_placed_by_the_other_scores_and_the_index_catches_up():
    c = _clouds()
    _agg(c, "early", "j1")
    assert any(p == "federated job j1: no clients known yet, placed by the other scores" for p in _path(c, "early"))
    _client(c, "k1", "j1", "cloud-c")
    _client(c, "k2", "j1", "cloud-c")
    assert job_members(c.state, "j1") == ("early", "k1", "k2")
    _agg(c, "late", "j1")
    assert c.node_of("late") == "c1"


def test_equal_traffic_is_broken_the_same_way_every_time():
    def run():
        c = _clouds()
        _client(c, "k1", "j1", "cloud-a")
        _client(c, "k2", "j1", "cloud-b")
        _agg(c, "agg", "j1")
        return c.node_of("k1"), c.node_of("k2"), c.node_of("agg"), json.dumps(c.outputs, sort_keys=True)

    first, second = run(), run()
    assert first == second
    k1, k2, agg, _ = first
    assert agg in (k1, k2)                               # one of the two clients' nodes, equally far from the other


def test_measured_links_move_the_aggregator():
    c = _clouds()
    for k, s in (("k1", "cloud-a"), ("k2", "cloud-a"), ("k3", "cloud-b")):
        _client(c, k, "j1", s)
    _agg(c, "agg1", "j1")
    assert c.node_of("agg1")[0] == "a"                   # two clients of three at cloud-a
    # a fast direct link from cloud-a to cloud-b: the uploads from cloud-a get cheap to cloud-b
    c.send("LinkMetrics", {"event_id": "l1", "src": "cloud-a", "dst": "cloud-b", "scope": "SITE",
                           "latency_ms": 1.0, "bandwidth_mbps": 10000.0, "loss_pct": 0.0, "at": 2, "cell": "kit"})
    for k, s in (("m1", "cloud-a"), ("m2", "cloud-a"), ("m3", "cloud-b")):
        _client(c, k, "j2", s)
    _agg(c, "agg2", "j2")
    assert c.node_of("agg2")[0] == "b"
    assert "at home cloud-a" in next(p for p in _path(c, "agg2") if p.startswith("federated job j2: "))


def test_a_default_cell_sends_federated_tasks_to_the_strategy_by_a_rule():
    c = _clouds("default", RULE)
    _client(c, "k1", "j1", "cloud-b")
    _client(c, "k2", "j1", "cloud-b")
    _agg(c, "agg", "j1")
    prov = c.placed("agg")["provenance"]
    assert prov["matched_rule"].endswith("-> federated") and c.node_of("agg")[0] == "b"
    assert any(p.startswith("federated job j1: aggregator on node:b") for p in prov["path"])
    c.task("plain")
    assert c.placed("plain")["provenance"]["matched_rule"] is None


def test_plugins_do_nothing_for_tasks_without_the_labels():
    c = _clouds()
    c.task("plain", labels={"job": "j9"})
    ctx = CycleContext(c.state, c.state.tasks["plain"].task.request, "plain", 0, {})
    assert REGISTRY.create("DataSite").filter(ctx) is None
    assert REGISTRY.create("DataSite").pre_filter(ctx).ok
    scores = REGISTRY.create("AggregatorTraffic").score(ctx, np.arange(c.state.n_nodes))
    assert not scores.any() and "federated-aggregator" not in ctx.scratch


def _strip(outputs):
    """Decisions without what names the strategy (its ref, the scorer list in the path)."""
    out = []
    for k, d in outputs:
        d = json.loads(json.dumps(d))
        prov = d.get("provenance")
        if prov:
            prov["strategy"] = None
            prov["path"] = [p.split(" top=")[1] if p.startswith("score: ") else p for p in prov["path"]]
        out.append((k, d))
    return out


@pytest.mark.parametrize("seed", [1, 2])
def test_unlabelled_work_is_placed_exactly_as_default_places_it(seed):
    def run(strategy):
        _CACHE.clear()
        rnd = random.Random(seed)
        c = Cell(strategy)
        for i in range(10):
            c.node(f"n{i}", cpu=rnd.choice([16000, 32000]), gpus=rnd.choice([0, 2, 4]), zone=f"z{i % 3}",
                   site=f"s{i % 2}", region="r")
        for j in range(50):
            kind = rnd.random()
            if kind < 0.4:
                c.task(f"t{j}", cpu=rnd.choice([1000, 4000]))
            elif kind < 0.8:
                c.task(f"t{j}", cpu=2000, gpus=1, milli=rnd.choice([250, 500]))
            else:
                c.task(f"t{j}", cpu=4000, gpus=rnd.choice([1, 2]), milli=1000)
            if j % 6 == 5:
                done = next((t for t, r in c.state.tasks.items() if r.status == "PLACED"), None)
                if done:
                    c.done(done)
        return c.outputs

    fed, dflt = run("federated"), run("default")
    assert _strip(fed) == _strip(dflt) and len(fed) > 50


def test_the_strategy_profile():
    st = get_strategy("federated", {})
    assert [p.name for p in st.profile.filters][-2:] == ["DataSite", "TopologyNear"]
    assert ("AggregatorTraffic", 10_000.0) in [(p.name, w) for p, w in st.profile.scorers]
    assert st.version == "1.0.0"
    assert "AggregatorTraffic" not in [p.name for p, _ in get_strategy("default", {}).profile.scorers]
