"""Latency family: network distance from a networkx topology of zones / regions / sites."""
from kit import Cell
from suanli.processors.plugins.latency import build_topology


def _geo(config=None):
    c = Cell("latency", config)
    c.node("hz-a", cpu=32000, gpus=2, zone="hz-a", region="hangzhou")
    c.node("hz-b", cpu=32000, gpus=2, zone="hz-b", region="hangzhou")
    c.node("bj-a", cpu=32000, gpus=2, zone="bj-a", region="beijing")
    return c


def test_latency_places_next_to_the_users_zone():
    c = _geo()
    c.task("inf", gpus=1, milli=300, labels={"workload": "realtime-inference", "users-zone": "bj-a"})
    assert c.node_of("inf") == "bj-a"
    c.task("inf2", gpus=1, milli=300, labels={"users-region": "hangzhou"})
    assert c.node_of("inf2") in ("hz-a", "hz-b")


def test_latency_uses_configured_links():
    # a direct low-latency link makes hz-b the nearest to bj-a's users once bj-a is full
    c = _geo({"links": [{"a": "zone:hz-b", "b": "zone:bj-a", "ms": 3.0}]})
    c.task("fill", cpu=32000, labels={})
    c.send("NodeStatusChanged", {"node_id": "bj-a", "cell": "kit", "status": "CORDONED", "at": 1})
    c.task("inf", gpus=1, milli=300, labels={"users-zone": "bj-a"})
    assert c.node_of("inf") == "hz-b"
    g, locs = build_topology(c.state, {"links": [{"a": "zone:hz-b", "b": "zone:bj-a", "ms": 3.0}]})
    assert locs == ["zone:hz-a", "zone:hz-b", "zone:bj-a"] and g.has_edge("zone:hz-b", "zone:bj-a")
