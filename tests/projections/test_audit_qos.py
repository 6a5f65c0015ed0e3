"""The audit index answers "who was preempted, by whom and why" and "what moved where" from typed
decisions (``processors/model.py``), on the in-memory and the RocksDB backend.

The decisions are the core's typed values turned into Avro dicts by ``model.to_avro`` (what
the follower decodes from the decisions topic), so every field of ``TaskPreempted`` and
``TaskMigrated`` reaches the index; ``payload_of`` must give each one back exactly, and that
payload must still encode with the event's Avro schema.
"""
from __future__ import annotations

import fastavro
import pytest

from suanli.errors import AuditError
from suanli.processors import model as m
from suanli.projections.audit import AuditIndex, AuditQuery, SourceRecord, payload_of, render_rows, render_why
from suanli.projections.audit_store import MemoryStore, RocksStore
from suanli.schemas.catalog import catalog
from suanli.schemas.codec import parse_plain

TOPIC = "t.decisions"
CELL = "c"


def prov(at: int, offset: int) -> m.Provenance:
    return m.Provenance(input=m.LogPosition(topic="t.cells", partition=0, offset=offset),
                        strategy=m.StrategyRef(name="default", version="1.2.0", config_digest="abc123"),
                        candidates=(m.Candidate(node_id="n1", score=0.9, rank=1),), filtered=(),
                        path=("submitted", "preempt", "bind n1"), decided_at=at)


def did(offset: int, n: int = 0) -> str:
    return f"{CELL}/t.cells/0/{offset}/{n}"


def placed(tid: str, tenant: str, nid: str, at: int, offset: int) -> m.TaskPlaced:
    return m.TaskPlaced(event_id=f"{did(offset)}/TaskPlaced", decision_id=did(offset), task_id=tid, tenant=tenant,
                        cell=CELL, node_id=nid, gpu_devices=(0,), gpu_milli=1000, cpu_milli=1000, memory_mib=1024,
                        provenance=prov(at, offset))


def preempted(victim: str, tenant: str, nid: str, at: int, offset: int, n: int, by: str,
              victims: tuple[str, ...]) -> m.TaskPreempted:
    return m.TaskPreempted(event_id=f"{did(offset, n)}/TaskPreempted", decision_id=did(offset, n), task_id=victim,
                           tenant=tenant, cell=CELL, node_id=nid, preempted_by=by,
                           reason=f"{by} (GOLD, priority 10) cannot be placed; BRONZE work blocks it",
                           provenance=prov(at, offset), grace_ms=30_000, work_lost_ms=42_000, victims=victims)


def pending(tid: str, tenant: str, at: int, offset: int, reason: str) -> m.TaskPending:
    return m.TaskPending(event_id=f"{did(offset)}/TaskPending", decision_id=did(offset), task_id=tid, tenant=tenant,
                         cell=CELL, reasons=(m.PendingReason(reason=reason, nodes=3),), queue_position=0,
                         provenance=prov(at, offset))


def migrated(tid: str, tenant: str, src: str, dst: str, at: int, offset: int) -> m.TaskMigrated:
    return m.TaskMigrated(event_id=f"{did(offset)}/TaskMigrated", decision_id=did(offset), task_id=tid, tenant=tenant,
                          cell=CELL, from_node=src, to_node=dst, gpu_devices=(1,), reason=f"{src} stopped sending "
                          "heartbeats", provenance=prov(at, offset), cause="NODE_DOWN", since=at - 16_500,
                          elapsed_ms=16_500, reserve_first=False, preempted=("bronze-9",))


def history() -> list[m.Decision]:
    """gold-1 (tenant acme) preempts bronze-1 (acme) and bronze-2 (tenant zeta) on n1; bronze-1 is
    pending again after its grace; gold-2 moves off n2, a DOWN node, to n3."""
    t = 1_760_000_000_000
    return [
        placed("bronze-1", "acme", "n1", t, 10), placed("bronze-2", "zeta", "n1", t + 1, 11),
        preempted("bronze-1", "acme", "n1", t + 5_000, 20, 0, "gold-1", ("bronze-1", "bronze-2")),
        preempted("bronze-2", "zeta", "n1", t + 5_000, 20, 1, "gold-1", ("bronze-1", "bronze-2")),
        placed("gold-1", "acme", "n1", t + 5_000, 20),
        pending("bronze-1", "acme", t + 35_000, 30, "preempted by gold-1; waiting for a node"),
        placed("gold-2", "acme", "n2", t + 40_000, 40),
        migrated("gold-2", "acme", "n2", "n3", t + 60_000, 50),
    ]


def records(decisions) -> list[SourceRecord]:
    return [SourceRecord(TOPIC, 0, i, d.KIND, m.to_avro(d)) for i, d in enumerate(decisions)]


@pytest.fixture(params=["memory", "rocksdb"])
def index(request, tmp_path):
    store = MemoryStore() if request.param == "memory" else RocksStore(tmp_path / "audit")
    idx = AuditIndex(store)
    idx.apply(records(history()))
    yield idx
    store.close()


def test_list_preemptions_names_each_victim_its_preemptor_and_why(index):
    rows = index.query(AuditQuery(kind="preemption", limit=None))
    assert [(r["task_id"], r["tenant"], r["node_id"], r["event"]) for r in rows] == [
        ("bronze-1", "acme", "n1", "TaskPreempted"), ("bronze-2", "zeta", "n1", "TaskPreempted")]
    detail = rows[0]["detail"]
    assert detail["preempted_by"] == "gold-1" and "BRONZE work blocks it" in detail["reason"]
    assert (detail["grace_ms"], detail["work_lost_ms"], detail["victims"]) == (30_000, 42_000, ["bronze-1", "bronze-2"])
    assert index.query(AuditQuery(kind="preempted", tenant="zeta", limit=None))[0]["task_id"] == "bronze-2"
    table = render_rows(rows)
    assert table.count("preemption") == 2 and "by gold-1: gold-1 (GOLD, priority 10) cannot be placed" in table


def test_why_a_victim_says_who_preempted_it_why_and_when_it_is_queued_again(index):
    answer = index.why("bronze-1")
    assert [d["kind"] for d in answer["decisions"]] == ["placement", "preemption", "pending"]
    assert answer["outcome"] == "pending" and answer["preempted"] == []
    text = render_why(answer)
    assert "2. preemption (TaskPreempted)" in text
    assert "preempted by gold-1 on n1: gold-1 (GOLD, priority 10) cannot be placed; BRONZE work blocks it" in text
    assert "grace 30 s: queued again at 2025-10-09 08:53:55.000Z; work lost 42 s" in text
    assert "preempted with it by the same decision: bronze-2" in text
    assert f"decided at cell-log t.cells[0]@20" in text
    assert "reasons: preempted by gold-1; waiting for a node (3 nodes)" in text


def test_why_a_preemptor_lists_whom_it_preempted_within_the_callers_tenant(index):
    answer = index.why("gold-1")
    assert [(v["task_id"], v["tenant"], v["node_id"]) for v in answer["preempted"]] == [
        ("bronze-1", "acme", "n1"), ("bronze-2", "zeta", "n1")]
    assert "it preempted 2 task(s):" in render_why(answer)
    mine = index.why("gold-1", tenant="acme")
    assert [v["task_id"] for v in mine["preempted"]] == ["bronze-1"]      # zeta's victim stays zeta's
    assert [r["task_id"] for r in index.query(AuditQuery(preempted_by="gold-1", limit=None))] == ["bronze-1", "bronze-2"]
    assert index.query(AuditQuery(preempted_by="gold-2", limit=None)) == []
    with pytest.raises(AuditError, match="preempted-by"):
        index.query(AuditQuery(preempted_by="gold-1", kind="placement"))


def test_a_migration_is_found_under_both_nodes_with_its_cause_and_times(index):
    [row] = index.query(AuditQuery(kind="migration", limit=None))
    assert (row["task_id"], row["node_id"]) == ("gold-2", "n3")
    assert [r["event_id"] for r in index.query(AuditQuery(node="n2", kind="migration", limit=None))] == [row["event_id"]]
    d = row["detail"]
    assert (d["from_node"], d["to_node"], d["cause"], d["elapsed_ms"], d["reserve_first"], d["preempted"]) == \
        ("n2", "n3", "NODE_DOWN", 16_500, False, ["bronze-9"])
    text = render_why(index.why("gold-2"))
    assert "moved n2 -> n3: NODE_DOWN since 2025-10-09 08:54:03.500Z, decided 16.5 s later " \
           "(the old place is given up at once)" in text
    assert "preempted to make room: bronze-9" in text
    assert "n2 -> n3 NODE_DOWN +16.5 s" in render_rows([row])


@pytest.mark.parametrize("kind", ["TaskPreempted", "TaskMigrated"])
def test_the_index_keeps_every_field_of_the_decision(index, kind):
    schema = parse_plain(catalog()[kind].schema)
    originals = {m.to_avro(d)["event_id"]: m.to_avro(d) for d in history() if d.KIND == kind}
    rows = [r for r in index.query(AuditQuery(limit=None)) if r["event"] == kind]
    assert len(rows) == len(originals) > 0
    for row in rows:
        payload = payload_of(row)
        assert payload == originals[row["event_id"]]
        assert fastavro.validation.validate(payload, schema, raise_errors=True)
        assert m.from_avro(kind, payload) == next(d for d in history() if m.to_avro(d)["event_id"] == row["event_id"])
