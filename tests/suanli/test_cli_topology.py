"""``suanli topology path|show`` over a log directory (no broker): the cell log folded by the
production runner, then the graph's view."""
import json

import pytest

from suanli.cli import main
from suanli.cli_topology import TopologyError, _pick, path_view, state_from_logdir, zone_view
from suanli.replay.dir_registry import DirRegistry
from suanli.replay.export import build_logdir
from suanli.schemas.catalog import catalog
from suanli.schemas.codec import Codec
from suanli.streams.records import RawRecord
from suanli.streams.topics import TopicNames

TOPICS = TopicNames("t")


def _node(nid, zone, rack, site="s1", region="r1"):
    return ("NodeRegistered", {
        "event_id": f"n/{nid}", "node_id": nid, "cell": "c", "site": site, "region": region, "zone": zone,
        "tier": "cloud", "arch": "x86_64", "cpu_milli": 32000, "memory_mib": 65536,
        "accelerators": [{"kind": "GPU", "model": "T4", "count": 2, "memory_mib": 0}], "pricing": "ON_DEMAND",
        "price_per_hour": 0.0, "pue": 1.0, "carbon_g_per_kwh": 0.0, "connector": "sim",
        "labels": {"rack": rack}, "registered_at": 0})


@pytest.fixture()
def logdir(tmp_path):
    schemas = {100 + i: ev.schema for i, (_k, ev) in enumerate(sorted(catalog().items()))}
    registry = DirRegistry(schemas)
    codec = Codec(registry)
    items = [_node("a1", "z1", "r1"), _node("a2", "z1", "r1"), _node("a3", "z1", "r2"), _node("b1", "z2", "r1"),
             _node("c1", "z3", "r1", site="s2", region="r2"),
             ("LinkMetrics", {"event_id": "l1", "src": "a1", "dst": "c1", "scope": "NODE", "latency_ms": 3.0,
                              "bandwidth_mbps": 1000.0, "loss_pct": 10.0, "at": 5, "cell": "c"}),
             ("NodeConditionChanged", {"event_id": "k1", "node_id": "a3", "cell": "c", "condition": "CONGESTED",
                                       "previous": "NORMAL", "metrics": {}, "reason": "test", "at": 6})]
    records = [RawRecord(TOPICS.cell_log, 0, off, 1_700_000_000_000 + off, b"c", codec.encode(kind, payload))
               for off, (kind, payload) in enumerate(items)]
    out = tmp_path / "log"
    build_logdir(out, codec, registry, cell="c", namespace="t", cell_log_topic=TOPICS.cell_log, partition=0,
                 lo=0, hi=len(records), prefix=[], inputs=records, decision_candidates=[], log=lambda *_: None)
    return out


def test_path_over_a_measured_link(logdir, capsys):
    assert main(["topology", "path", "a1", "c1", "--logdir", str(logdir)]) == 0
    out = capsys.readouterr().out
    assert "node:a1 -> node:c1: 6 ms over 1 edge" in out and "(measured link)" in out   # 3 ms x (1 + 10 x 10 %)
    assert main(["topology", "path", "c1", "a1", "--logdir", str(logdir), "--json"]) == 0
    v = json.loads(capsys.readouterr().out)
    assert v["cost_ms"] == pytest.approx(62.5) and "backbone" in v["hops"]
    assert [s["ms"] for s in v["steps"]][:2] == [pytest.approx(0.05), pytest.approx(0.2)]


def test_path_notes_penalised_nodes_and_unknown_names(logdir, capsys):
    assert main(["topology", "path", "a1", "a3", "--logdir", str(logdir)]) == 0
    out = capsys.readouterr().out
    assert "10.5 ms" in out and "node:a3 is penalised (+10 ms per edge)" in out
    assert main(["topology", "path", "a1", "nowhere", "--logdir", str(logdir)]) == 2
    assert "no site, region, zone, rack or node" in capsys.readouterr().err


def test_show_a_zone_and_all_zones(logdir, capsys):
    assert main(["topology", "show", "--zone", "z1", "--logdir", str(logdir)]) == 0
    out = capsys.readouterr().out
    assert "zone:z1: 3 nodes in 2 racks; up: region:r1 (1 ms)" in out
    assert "rack:z1/r2: 1 nodes, 1 not READY/NORMAL" in out and "[CONGESTED]" in out
    assert "node:a1 -> node:c1: 6 ms (latency 3 ms, 1000 Mbit/s, loss 10 %, at 5)" in out
    assert main(["topology", "show", "--logdir", str(logdir), "--json"]) == 0
    v = json.loads(capsys.readouterr().out)
    assert [(z["zone"], z["nodes"], z["racks"], z["bad_condition"]) for z in v["zones"]] == [
        ("zone:z1", 3, 2, 1), ("zone:z2", 1, 1, 0), ("zone:z3", 1, 1, 0)]
    assert main(["topology", "show", "--zone", "z9", "--logdir", str(logdir)]) == 2


def test_views_are_pure_functions_of_the_state(logdir):
    s = state_from_logdir(logdir)
    assert path_view(s, "zone:z1", "b1")["cost_ms"] == pytest.approx(2.25)
    assert zone_view(s, "zone:z2")["racks"] == {"rack:z2/r1": [{"node": "b1", "status": "READY", "health": "READY",
                                                                "condition": "NORMAL", "gpus": 2, "to": "rack:z2/r1",
                                                                "ms": pytest.approx(0.05)}]}
    with pytest.raises(TopologyError, match="not 'x'"):
        state_from_logdir(logdir, "x")


def test_pick_a_cell():
    assert _pick({"a": 1}, None, "log") == 1
    with pytest.raises(TopologyError, match="--cell"):
        _pick({"a": 1, "b": 2}, None, "log")
    with pytest.raises(TopologyError, match="no record"):
        _pick({"a": 1}, "z", "log")


@pytest.mark.stack
def test_folds_the_cell_log_from_kafka(stack, codec, capsys):
    """The same log on the real broker (a namespace of its own, two cells on the log)."""
    import asyncio
    import uuid

    from suanli.streams.kafka_io import EventProducer, ensure_topics
    from suanli.streams.topics import TopicSpec

    ns = f"t{uuid.uuid4().hex[:10]}"
    names = TopicNames(ns)
    items = [_node("a1", "z1", "r1"), _node("c1", "z3", "r1", site="s2", region="r2"),
             ("LinkMetrics", {"event_id": "l1", "src": "a1", "dst": "c1", "scope": "NODE", "latency_ms": 2.0,
                              "bandwidth_mbps": 1000.0, "loss_pct": 0.0, "at": 5, "cell": "c"})]

    async def produce():
        await ensure_topics(stack.bootstrap_servers, [TopicSpec(names.cell_log, 2)])
        async with EventProducer(stack.bootstrap_servers, codec) as producer:
            for kind, payload in items:
                await producer.send(names.cell_log, kind, payload, key="c")
            await producer.send(names.cell_log, "NodeRegistered", {**_node("x1", "zx", "r1")[1], "cell": "other"},
                                key="other")
            await producer.flush()
    asyncio.run(produce())
    assert main(["topology", "path", "a1", "c1", "--namespace", ns, "--cell", "c"]) == 0
    assert "node:a1 -> node:c1: 2 ms over 1 edge" in capsys.readouterr().out
    assert main(["topology", "show", "--namespace", ns]) == 2          # two cells: name one
    assert "--cell" in capsys.readouterr().err
