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


def _history(tasks: int):
    from suanli.bench.read_model_memory import history

    codec = memory_codec()
    return codec, history(tasks, 40, codec)


def _folded(codec, records, **kwargs) -> ReadModel:
    model = ReadModel(decode=codec.decode, **kwargs)
    for offset, (role, _kind, wire) in enumerate(records):
        kind, payload = codec.decode(wire)
        model.apply(role, kind, payload, f"c.{role}", 0, offset, wire)
    return model


def test_a_model_that_forgets_keeps_the_newest_finished_tasks_exactly_as_one_that_forgets_nothing():
    codec, records = _history(400)
    whole = _folded(codec, records)
    kept = _folded(codec, records, keep_finished=40, keep_ids=100)
    assert len(whole.lifecycle.tasks) == 400 and whole.lifecycle.forgotten == {}
    # at most an eighth more than kept between passes; the tombstones bounded
    assert 40 <= kept.lifecycle.finished_held() <= 45 and len(kept.lifecycle.forgotten) == 100
    assert kept.lifecycle.counts() == whole.lifecycle.counts()
    assert set(kept.decisions) == set(kept.lifecycle.tasks)
    for task_id, view in kept.lifecycle.tasks.items():
        assert view == whole.lifecycle.tasks[task_id]
        assert kept.task_decisions(task_id) == whole.task_decisions(task_id)
    newest = list(whole.lifecycle.tasks)[-40:]        # each completes at once: finished in submission order
    assert set(newest) <= set(kept.lifecycle.tasks)
    kept.lifecycle.check()


def test_a_forgotten_task_is_404_saying_so_to_its_tenant_only():
    import asyncio

    import pytest
    from api_helpers import ListSink, make_service

    from suanli.errors import NotFoundError

    codec, records = _history(30)
    model = _folded(codec, records, keep_finished=10, keep_ids=100)
    service = make_service(ListSink(), model)
    gone = next(iter(model.lifecycle.forgotten))
    tenant = model.lifecycle.forgotten[gone][0]
    with pytest.raises(NotFoundError, match=f"task '{gone}' finished \\(COMPLETED\\) and the API no longer keeps it"):
        asyncio.run(service.get_task(tenant, gone))
    with pytest.raises(NotFoundError, match=f"^no task '{gone}'$"):
        asyncio.run(service.get_task("someone-else", gone))
    # its submission read again from the raw topic does not bring it back as SUBMITTED
    raw = next(codec.decode(w)[1] for role, kind, w in records if kind == "TaskSubmitted"
               and codec.decode(w)[1]["task_id"] == gone)
    model.apply("raw_tasks", "TaskSubmitted", raw)
    assert gone not in model.submissions and gone not in model.lifecycle.tasks


def test_the_dashboard_drops_its_marks_of_forgotten_tasks_and_keeps_counting_them():
    from suanli.api.ui.state import DashboardState

    codec, more = _history(60)
    model = ReadModel(decode=codec.decode, keep_finished=10, keep_ids=100)
    board = DashboardState(model)
    for offset, (role, _kind, wire) in enumerate(more):
        kind, payload = codec.decode(wire)
        model.apply(role, kind, payload, f"c.{role}", 0, offset, wire)
    assert model.lifecycle.forgotten and not set(model.lifecycle.forgotten) & set(board.task_seq)
    assert set(board._task) == set(model.lifecycle.tasks)
    assert sum(c["COMPLETED"] for c in board.counts.values()) == model.lifecycle.counts()["completed"] == 60
