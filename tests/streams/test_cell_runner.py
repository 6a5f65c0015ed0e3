"""The runner's snapshots: a current one restores the same state; an older format means
'rebuild from the log' (no broker)."""
from __future__ import annotations

import json
import zlib

from suanli.replay.dir_registry import DirRegistry
from suanli.schemas.catalog import catalog
from suanli.schemas.codec import Codec
from suanli.streams.cell_runner import CellRunner
from suanli.streams.records import RawRecord
from suanli.streams.topics import TopicNames
from test_intake import node, task


def _runner() -> CellRunner:
    schemas = {100 + i: ev.schema for i, (_k, ev) in enumerate(sorted(catalog().items()))}
    return CellRunner(Codec(DirRegistry(schemas)), TopicNames("ns"))  # type: ignore[arg-type]


def test_snapshot_restores_the_same_state_and_an_old_format_means_replay():
    a = _runner()
    log = a.topics.cell_log
    a.apply(RawRecord(log, 0, 0, 1, b"c1", a.codec.encode("NodeRegistered", node())))
    a.apply(RawRecord(log, 0, 1, 2, b"c1", a.codec.encode("TaskSubmitted", task())))
    blob = a.snapshot(0)
    b = _runner()
    assert b.restore(0, blob) == 1 and b.digest(0) == a.digest(0)
    old = json.loads(zlib.decompress(blob))
    old["format"] = 1
    assert b.restore(0, zlib.compress(json.dumps(old).encode())) == -1
    assert b.partition(0).cells == {} and b.partition(0).as_of == -1


def test_a_heartbeat_batch_is_taken_even_when_its_first_node_is_unknown_but_a_lone_one_is_refused():
    r = _runner()
    log = r.topics.cell_log
    r.apply(RawRecord(log, 0, 0, 1, b"c1", r.codec.encode("NodeRegistered", node())))
    beat = {"event_id": "hb", "node_id": "ghost", "cell": "c1", "seq": 1, "at": 500}
    [letter] = r.apply(RawRecord(log, 0, 1, 2, b"c1", r.codec.encode("NodeHeartbeat", beat)))
    assert letter.topic == r.topics.dead_letters
    assert r.apply(RawRecord(log, 0, 2, 3, b"c1", r.codec.encode("NodeHeartbeat", {**beat, "nodes": ["n0"]}))) == []
    assert r.partition(0).cells["c1"].last_heartbeat[0] == 500
