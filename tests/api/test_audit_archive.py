"""The audit of tasks the read model has forgotten (``ApiService`` with an archive): answered
from an audit index that folded the same decisions, with the task's last status, for its
tenant only. Pure: the real core's history, an in-memory audit index, no services."""
from __future__ import annotations

import asyncio

import pytest
from api_helpers import ListSink

from suanli.api.audit import FollowerAuditSource
from suanli.api.readmodel import ReadModel
from suanli.api.service import ApiService
from suanli.bench.read_model_memory import codec as memory_codec
from suanli.bench.read_model_memory import history
from suanli.errors import NotFoundError
from suanli.projections.audit import AuditIndex, SourceRecord
from suanli.projections.audit_follower import AuditIndexSource
from suanli.projections.audit_store import MemoryStore


def _setup(tasks: int = 30, keep: int = 10):
    """(a model that forgets, one that keeps all, an index of every decision) over one history."""
    codec = memory_codec()
    records = history(tasks, 40, codec)
    forgets = ReadModel(decode=codec.decode, keep_finished=keep, keep_ids=100)
    whole = ReadModel(decode=codec.decode)
    index, decided = AuditIndex(MemoryStore()), []
    for offset, (role, _kind, wire) in enumerate(records):
        kind, payload = codec.decode(wire)
        for model in (forgets, whole):
            model.apply(role, kind, payload, f"c.{role}", 0, offset, wire)
        if role == "decisions":
            decided.append(SourceRecord(f"c.{role}", 0, offset, kind, payload))
    index.apply(decided)
    return forgets, whole, index


def _service(model: ReadModel, archive=None) -> ApiService:
    return ApiService(model, ListSink(), FollowerAuditSource(model), namespace="unit",
                      clock=lambda: 1_700_000_000.0, archive=archive)


def test_a_forgotten_task_is_audited_from_the_archive_as_the_whole_model_would_answer():
    forgets, whole, index = _setup()
    service, reference = _service(forgets, AuditIndexSource(index)), _service(whole)
    gone = list(forgets.lifecycle.forgotten)
    assert len(gone) >= 15
    for task_id in gone:
        tenant, status = forgets.lifecycle.forgotten[task_id]
        trail = asyncio.run(service.get_audit(tenant, task_id))
        expected = asyncio.run(reference.get_audit(tenant, task_id))
        assert trail == expected and status == "COMPLETED"
        assert [d.kind for d in trail.decisions] == ["TaskPlaced", "TaskReleased"]
        listed = asyncio.run(service.list_audit(tenant, task_id=task_id))
        assert listed == asyncio.run(reference.list_audit(tenant, task_id=task_id))
        assert sorted(d.event_id for d in listed.decisions) == sorted(d.event_id for d in trail.decisions)
        # the task itself stays forgotten; its 404 says where its audit is
        with pytest.raises(NotFoundError, match=f"GET /v1/tasks/{task_id}/audit"):
            asyncio.run(service.get_task(tenant, task_id))
    # a kept task is still answered from the read model, alike
    kept = next(iter(forgets.lifecycle.tasks))
    tenant = forgets.lifecycle.tasks[kept].tenant
    assert asyncio.run(service.get_audit(tenant, kept)) == asyncio.run(reference.get_audit(tenant, kept))


def test_another_tenant_learns_nothing_and_without_an_archive_it_stays_404():
    forgets, _whole, index = _setup()
    gone = next(iter(forgets.lifecycle.forgotten))
    with pytest.raises(NotFoundError, match=f"^no task '{gone}'$"):
        asyncio.run(_service(forgets, AuditIndexSource(index)).get_audit("someone-else", gone))
    tenant = forgets.lifecycle.forgotten[gone][0]
    assert asyncio.run(_service(forgets, AuditIndexSource(index)).list_audit("someone-else", task_id=gone)).decisions == []
    with pytest.raises(NotFoundError, match="no longer keeps it.*`suanli audit why"):
        asyncio.run(_service(forgets).get_audit(tenant, gone))


def test_an_archive_without_the_task_says_so():
    forgets, _whole, _index = _setup()
    gone = next(iter(forgets.lifecycle.forgotten))
    tenant = forgets.lifecycle.forgotten[gone][0]
    with pytest.raises(NotFoundError, match="the audit index holds no decision about it"):
        asyncio.run(_service(forgets, AuditIndexSource(AuditIndex(MemoryStore()))).get_audit(tenant, gone))


def _job_history():
    from api_helpers import node, placed, released, submitted

    def member(role_kind_payload, job):
        role, kind, payload = role_kind_payload
        return role, kind, {**payload, "job_id": job}

    records = [node()]
    for i, task in enumerate(("m1", "m2")):
        records += [member(submitted(task, "alpha"), "j1"), member(placed(task, "alpha", offset=10 + i), "j1"),
                    member(released(task, "alpha", offset=20 + i), "j1")]
    records += [submitted("solo", "alpha"), placed("solo", "alpha", offset=30), released("solo", "alpha", offset=31)]
    return records


def test_a_job_forgotten_whole_is_audited_from_the_archive_and_its_404_says_so():
    from api_helpers import feed

    model = ReadModel(keep_finished=1, keep_ids=100)
    records = _job_history()
    feed(model, *records)
    assert model.lifecycle.forgotten_jobs == {"j1": frozenset({"alpha"})} and "m1" not in model.lifecycle.tasks
    index = AuditIndex(MemoryStore())
    index.apply([SourceRecord("x.decisions", 0, i, kind, payload) for i, (role, kind, payload) in enumerate(records)
                 if role == "decisions"])
    service = _service(model, AuditIndexSource(index))
    with pytest.raises(NotFoundError, match="job 'j1' finished and the API no longer keeps it.*GET /v1/audit\\?job=j1"):
        asyncio.run(service.get_job("alpha", "j1"))
    with pytest.raises(NotFoundError, match="^no job 'j1'$"):
        asyncio.run(service.get_job("beta", "j1"))
    listed = asyncio.run(service.list_audit("alpha", job="j1"))
    assert [(d.task_id, d.kind) for d in listed.decisions] == [("m1", "TaskPlaced"), ("m2", "TaskPlaced"),
                                                               ("m1", "TaskReleased"), ("m2", "TaskReleased")]
    assert {d.job_id for d in listed.decisions} == {"j1"}
    only_m2 = asyncio.run(service.list_audit("alpha", job="j1", task_id="m2")).decisions
    assert [(d.task_id, d.kind) for d in only_m2] == [("m2", "TaskPlaced"), ("m2", "TaskReleased")]
    assert asyncio.run(service.list_audit("beta", job="j1")).decisions == []
    # without an archive the forgotten job's audit is empty, as for a job never seen
    assert asyncio.run(_service(model).list_audit("alpha", job="j1")).decisions == []
    # a member that comes later starts the job anew; the job's audit has the old members too,
    # each decision once though the index has the new one's as well
    from api_helpers import placed, submitted

    later = [("cell_log", "TaskSubmitted", {**submitted("m3", "alpha")[2], "job_id": "j1"}),
             ("decisions", "TaskPlaced", {**placed("m3", "alpha", offset=40)[2], "job_id": "j1"})]
    for i, (role, kind, payload) in enumerate(later, start=len(records)):
        model.apply(role, kind, payload, f"x.{role}", 0, i)
    index.apply([SourceRecord("x.decisions", 0, len(records) + 1, "TaskPlaced", later[1][2])])
    assert [t.task_id for t in asyncio.run(service.get_job("alpha", "j1")).tasks] == ["m3"]
    kinds = [(d.task_id, d.kind) for d in asyncio.run(service.list_audit("alpha", job="j1")).decisions]
    assert sorted(kinds) == sorted([("m1", "TaskPlaced"), ("m2", "TaskPlaced"), ("m1", "TaskReleased"),
                                    ("m2", "TaskReleased"), ("m3", "TaskPlaced")])
