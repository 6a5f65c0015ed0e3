"""The runner sends a PrewarmCommand to the node's connector dispatch topic keyed by node
id (a command, like StopCommand), and a placement's DispatchCommand carries the model."""
from __future__ import annotations

import json

from suanli.replay.dir_registry import DirRegistry
from suanli.schemas.catalog import catalog
from suanli.schemas.codec import Codec
from suanli.streams.cell_runner import CellRunner
from suanli.streams.records import RawRecord
from suanli.streams.topics import TopicNames
from test_intake import node, task

GIB = 1024


def test_prewarm_goes_to_the_nodes_dispatch_topic_and_dispatch_carries_the_model():
    schemas = {100 + i: ev.schema for i, (_k, ev) in enumerate(sorted(catalog().items()))}
    r = CellRunner(Codec(DirRegistry(schemas)), TopicNames("ns"))  # type: ignore[arg-type]
    log = r.topics.cell_log
    off = 0

    def put(kind, payload):
        nonlocal off
        out = r.apply(RawRecord(log, 0, off, off + 1, b"c1", r.codec.encode(kind, payload)))
        off += 1
        return out

    cfg = {"seed": 1, "prewarm": {"enabled": True, "period_ms": 1000, "min_use": 0.01, "bandwidth_mib_s": 5000}}
    put("PolicyChanged", {"event_id": "p", "cell": "c1", "strategy": "default", "config_json": json.dumps(cfg),
                          "at": 0})
    for nid, site in (("a0", "sa"), ("b0", "sb")):
        put("NodeRegistered", node(event_id=nid, node_id=nid, site=site, region=site, zone=site, tier="edge",
                                   model_cache_mib=50 * GIB))
    profile = {"model_arch": "m@1", "model_uri": "s3://m", "model_size_mib": 2 * GIB}
    outs = put("TaskSubmitted", task(labels={"user-site": "sa"}, profile=profile))
    dispatch = [o for o in outs if o.topic == r.topics.dispatch("local")]
    assert len(dispatch) == 1
    kind, cmd = r.codec.decode(dispatch[0].value)
    assert kind == "DispatchCommand" and cmd["model"]["model_arch"] == "m@1"
    outs = put("CellTick", {"event_id": "t", "cell": "c1", "at": 120_000, "period_ms": 1000})
    pre = [o for o in outs if o.topic == r.topics.dispatch("local")]
    assert len(pre) == 1 and pre[0].key == b"b0"
    kind, cmd = r.codec.decode(pre[0].value)
    assert kind == "PrewarmCommand" and cmd["model_arch"] == "m@1" and cmd["node_id"] == "b0"
    assert not [o for o in outs if o.topic == r.topics.decisions]
