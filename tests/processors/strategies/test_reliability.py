"""Reliability family: spread-zones and anti-affinity."""
from kit import Cell


def _zoned(strategy, config=None):
    c = Cell(strategy, config)
    for z in ("z1", "z2", "z3"):
        for i in range(2):
            c.node(f"{z}-n{i}", cpu=32000, gpus=4, zone=z, region="r1")
    return c


def test_spread_zones_puts_replicas_in_distinct_zones():
    c = _zoned("spread-zones")
    for i in range(3):
        c.task(f"r{i}", cpu=2000, labels={"replica-group": "db"})
    zones = {c.state.nodes[c.node_of(f"r{i}")].zone for i in range(3)}
    assert zones == {"z1", "z2", "z3"}
    c.task("r3", cpu=2000, labels={"replica-group": "db"})
    nodes = {c.node_of(f"r{i}") for i in range(4)}
    assert len(nodes) == 4                               # 4th replica: a new node in some zone


def test_spread_zones_strict_replicas_wait_rather_than_share():
    c = Cell("spread-zones", {"strict_replicas": True})
    c.node("only", cpu=32000, zone="z1")
    c.task("a", labels={"replica-group": "g"})
    out = c.task("b", labels={"replica-group": "g"})
    assert out[0][0] == "TaskPending" and out[0][1]["reasons"][0]["reason"] == "anti-affinity"


def test_anti_affinity_label_filter():
    c = Cell("anti-affinity")
    c.node("n1", cpu=32000)
    c.node("n2", cpu=32000)
    c.task("noisy", cpu=1000, labels={"app": "cache"})
    c.task("quiet", cpu=1000, labels={"anti-affinity": "app=cache"})
    assert c.node_of("quiet") != c.node_of("noisy")
    prov = c.placed("quiet")["provenance"]
    assert {"reason": "anti-affinity", "nodes": 1, "sample": [c.node_of("noisy")]} in prov["filtered"]
