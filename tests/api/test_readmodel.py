"""The read model's decisions: kept as wire bytes when it can decode them, read back decoded,
each once, in log order (``api/readmodel.py``). Pure: a codec over an in-memory registry."""
from __future__ import annotations

from suanli.api.readmodel import ReadModel
from suanli.bench.read_model_memory import codec as memory_codec
from suanli.processors import model as m


def _placed(task: str, event_id: str, node: str = "n1") -> m.TaskPlaced:
    prov = m.Provenance(input=m.LogPosition(topic="c.cells", partition=0, offset=7),
                        strategy=m.StrategyRef(name="default", version="1", config_digest="d"),
                        candidates=(), filtered=(), path=("place",), decided_at=1000)
    return m.TaskPlaced(event_id=event_id, decision_id=f"c/d/{event_id}", task_id=task, tenant="t", cell="c",
                        node_id=node, gpu_devices=(0,), gpu_milli=1000, cpu_milli=100, memory_mib=64,
                        provenance=prov)


def _released(task: str, event_id: str) -> m.TaskReleased:
    placed = _placed(task, event_id)
    return m.TaskReleased(event_id=event_id, decision_id=f"c/d/{event_id}", task_id=task, tenant="t", cell="c",
                          node_id="n1", cause="COMPLETED", gpu_devices=(0,), provenance=placed.provenance)


def _fold(model: ReadModel, codec, values, *, wire: bool) -> None:
    for offset, value in enumerate(values):
        data = codec.encode(m.kind_of(value), m.to_avro(value))
        kind, payload = codec.decode(data)
        model.apply("decisions", kind, payload, "c.decisions", 0, offset, data if wire else None)


def test_decisions_are_kept_as_their_bytes_and_read_back_decoded_once_each_in_log_order():
    codec = memory_codec()
    values = [_placed("a", "e1"), _placed("b", "e2"), _placed("a", "e1"), _released("a", "e3")]
    kept = ReadModel(decode=codec.decode)
    _fold(kept, codec, values, wire=True)
    assert all(isinstance(d.body, bytes) for rows in kept.decisions.values() for d in rows)
    answer = kept.task_decisions("a")
    assert [(r.kind, r.payload["event_id"], r.offset) for r in answer] == [("TaskPlaced", "e1", 0),
                                                                            ("TaskReleased", "e3", 3)]
    assert answer[0].payload == m.to_avro(values[0]) and answer[1].payload["cause"] == "COMPLETED"
    assert kept.task_decisions("nobody") == []
    # the same records kept decoded (no codec, or no bytes) answer the same
    plain = ReadModel()
    _fold(plain, codec, values, wire=False)
    assert all(isinstance(d.body, dict) for rows in plain.decisions.values() for d in rows)
    assert plain.task_decisions("a") == answer and plain.task_decisions("b") == kept.task_decisions("b")
