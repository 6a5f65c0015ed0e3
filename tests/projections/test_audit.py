"""The audit index: one contract suite, run against the in-memory and the RocksDB backend.

No services: decisions are synthetic but schema-shaped (``projections/audit_bench.py``),
and the expected answers come from a brute-force filter over the same list.
"""
from __future__ import annotations

import itertools
import random

import pytest

from suanli.errors import AuditError
from suanli.projections.audit import (AuditIndex, AuditQuery, SourceRecord, normalize_kind, payload_of, render_rows,
                                      render_why)
from suanli.projections.audit_bench import as_records, synthetic_decisions
from suanli.projections.audit_store import Batch, MemoryStore, RocksStore

TOPIC = "t.decisions"


@pytest.fixture(params=["memory", "rocksdb"])
def make_index(request, tmp_path):
    """A factory of indexes on the backend under test; RocksDB ones are closed afterwards."""
    opened = []

    def make(name: str = "idx") -> AuditIndex:
        store = MemoryStore() if request.param == "memory" else RocksStore(tmp_path / name)
        opened.append(store)
        return AuditIndex(store)

    yield make
    for store in opened:
        store.close()


@pytest.fixture(scope="module")
def history():
    decisions = list(synthetic_decisions(1500, tenants=4, nodes=40, seed=5))
    return decisions, list(as_records(iter(decisions), TOPIC, partitions=1))


def _fold(index: AuditIndex, records, chunk: int = 200) -> None:
    for i in range(0, len(records), chunk):
        index.apply(records[i:i + chunk])


def _ids(rows) -> list[str]:
    return [r["event_id"] for r in rows]


def _expected(records, **f) -> list[str]:
    """Brute force: event ids of the records matching the filters, oldest first."""
    kind = normalize_kind(f.get("kind"))
    kinds = {"TaskPlaced": "placement", "TaskPending": "pending", "TaskUnschedulable": "rejection",
             "TaskReleased": "release", "TaskPreempted": "preemption", "TaskMigrated": "migration"}
    out = []
    for r in records:
        p = r.payload
        at = p["provenance"]["decided_at"]
        nodes = {p.get("node_id"), p.get("to_node"), p.get("from_node")} - {None, ""}
        if f.get("tenant") is not None and p["tenant"] != f["tenant"]:
            continue
        if f.get("task") is not None and p["task_id"] != f["task"]:
            continue
        if f.get("node") is not None and f["node"] not in nodes:
            continue
        if f.get("strategy") is not None and p["provenance"]["strategy"]["name"] != f["strategy"]:
            continue
        if kind is not None and kinds[r.kind] != kind:
            continue
        if f.get("since") is not None and at < f["since"]:
            continue
        if f.get("until") is not None and at >= f["until"]:
            continue
        if f.get("preempted_by") is not None and (r.kind != "TaskPreempted" or p["preempted_by"] != f["preempted_by"]):
            continue
        out.append((at, r.offset, p["event_id"]))
    return [e for _a, _o, e in sorted(out)]


def test_why_gives_the_decision_path_with_provenance_and_positions(make_index, history):
    decisions, records = history
    index = make_index()
    _fold(index, records)
    # A task that waited, was placed and released.
    task = next(p["task_id"] for k, p in decisions if k == "TaskPending")
    answer = index.why(task)
    kinds = [d["kind"] for d in answer["decisions"]]
    assert kinds == ["pending", "placement", "release"]
    placed = answer["decisions"][1]
    source = next(r for r in records if r.kind == "TaskPlaced" and r.payload["task_id"] == task)
    assert placed["decision"] == {"topic": TOPIC, "partition": 0, "offset": source.offset,
                                  "cite": f"{TOPIC}[0]@{source.offset}"}
    prov = source.payload["provenance"]
    assert placed["input"]["offset"] == prov["input"]["offset"]
    assert placed["input"]["cite"] == f"bench.cells[0]@{prov['input']['offset']}"
    assert placed["strategy"]["name"] == prov["strategy"]["name"] and placed["strategy"]["version"]
    assert placed["candidates"][0]["node_id"] == placed["node_id"] == answer["node_id"] or answer["outcome"] == "release"
    assert [c["score"] for c in placed["candidates"]] == sorted((c["score"] for c in placed["candidates"]), reverse=True)
    assert placed["filtered"] and all(f["reason"] and f["nodes"] > 0 for f in placed["filtered"])
    assert placed["path"][-1].startswith("bind ")
    assert answer["decisions"][0]["detail"]["reasons"]
    assert [c["decision"] for c in answer["cites"]] == [d["decision"]["cite"] for d in answer["decisions"]]
    text = render_why(answer)
    assert f"{TOPIC}[0]@{source.offset}" in text and "candidates: #1" in text and "rejected" in text


@pytest.mark.parametrize("filters", [
    {"tenant": "tenant-1"},
    {"node": "node-00007"},
    {"node": "node-00007", "tenant": "tenant-2"},
    {"strategy": "fgd"},
    {"strategy": "bestfit", "tenant": "tenant-3"},
    {"kind": "rejection"},
    {"kind": "unschedulable", "tenant": "tenant-0"},
    {"kind": "migration"},
    {"kind": "preemption", "tenant": "tenant-1"},
    {"kind": "release", "node": "node-00003"},
    {"kind": "pending"},
])
def test_list_filters_match_brute_force(make_index, history, filters):
    _decisions, records = history
    index = make_index()
    _fold(index, records)
    ats = sorted(r.payload["provenance"]["decided_at"] for r in records)
    for since, until in ((None, None), (ats[len(ats) // 4], None), (None, ats[len(ats) // 2]),
                         (ats[len(ats) // 3], ats[2 * len(ats) // 3])):
        got = index.query(AuditQuery(**filters, since=since, until=until, limit=None))
        assert _ids(got) == _expected(records, **filters, since=since, until=until), (filters, since, until)


def test_limit_keeps_the_newest(make_index, history):
    _decisions, records = history
    index = make_index()
    _fold(index, records)
    everything = _expected(records, tenant="tenant-2")
    assert _ids(index.query(AuditQuery(tenant="tenant-2", limit=10))) == everything[-10:]
    assert render_rows(index.query(AuditQuery(tenant="tenant-2", limit=3))).count(f"{TOPIC}[0]@") == 3


def test_a_tenant_never_sees_another_tenants_decisions(make_index, history):
    decisions, records = history
    index = make_index()
    _fold(index, records)
    # The same node and strategy serve every tenant; each tenant sees only its own rows.
    for tenant in ("tenant-0", "tenant-1", "tenant-2", "tenant-3"):
        for q in (AuditQuery(tenant=tenant, limit=None), AuditQuery(tenant=tenant, node="node-00001", limit=None),
                  AuditQuery(tenant=tenant, strategy="fgd", limit=None),
                  AuditQuery(tenant=tenant, kind="placement", limit=None)):
            rows = index.query(q)
            assert rows and {r["tenant"] for r in rows} == {tenant}
    other = next(p for _k, p in decisions if p["tenant"] == "tenant-1")
    assert index.query(AuditQuery(tenant="tenant-2", task=other["task_id"])) == []
    with pytest.raises(AuditError, match="no decisions about task"):
        index.why(other["task_id"], tenant="tenant-2")
    assert index.why(other["task_id"], tenant="tenant-1")["tenant"] == "tenant-1"


def test_redelivery_and_overlapping_reads_are_idempotent(make_index, history):
    _decisions, records = history
    once = make_index("once")
    _fold(once, records)
    again = make_index("again")
    rnd = random.Random(9)
    # Arbitrary chunks, each re-read from a little before where the previous one ended.
    i = 0
    while i < len(records):
        j = min(len(records), i + rnd.randint(1, 150))
        again.apply(records[max(0, i - rnd.randint(0, 40)):j])
        i = j
    # Redelivered duplicates further on in the topic (same event ids, new offsets).
    dupes = [SourceRecord(TOPIC, 0, len(records) + k, r.kind, r.payload) for k, r in enumerate(records[:50])]
    result = again.apply(dupes)
    assert result.applied == 0 and result.duplicates == 50
    assert again.count() == once.count() == len(records)
    assert again.positions() == {(TOPIC, 0): len(records) + 50}
    for q in (AuditQuery(limit=None), AuditQuery(tenant="tenant-3", limit=None), AuditQuery(node="node-00011")):
        assert once.query(q) == again.query(q)


def test_rows_and_position_are_written_together(make_index, history):
    _decisions, records = history
    index = make_index()
    index.apply(records[:100])

    class Crash(Exception):
        pass

    real_write = index.store.write

    def crashing_write(batch: Batch) -> None:
        raise Crash()

    index.store.write = crashing_write
    with pytest.raises(Crash):
        index.apply(records[100:200])
    index.store.write = real_write
    # Nothing of the failed batch is visible: neither rows nor the position moved.
    assert index.count() == 100 and index.positions() == {(TOPIC, 0): 100}
    index.apply(records[50:300])            # the consumer resumes from its last commit
    assert index.count() == 300 and index.positions() == {(TOPIC, 0): 300}


def test_non_decisions_advance_the_position_but_are_not_indexed(make_index):
    index = make_index()
    result = index.apply([SourceRecord(TOPIC, 1, 0, None, None),
                          SourceRecord(TOPIC, 1, 1, "DeadLetter", {"event_id": "x"}),
                          SourceRecord(TOPIC, 1, 2, "TaskPlaced", {"event_id": ""})])
    assert result.ignored == 3 and result.applied == 0
    assert index.positions() == {(TOPIC, 1): 3} and index.count() == 0
    assert index.query(AuditQuery(limit=None)) == []


def test_rebuild_from_scratch_gives_identical_answers(make_index, history):
    decisions, records = history
    first = make_index("first")
    _fold(first, records, chunk=97)
    second = make_index("second")
    _fold(second, records, chunk=1000)
    tasks = sorted({p["task_id"] for _k, p in decisions})
    for task in tasks[:: max(1, len(tasks) // 40)]:
        assert first.why(task) == second.why(task)
    for tenant, node in itertools.product(("tenant-0", None), ("node-00005", "node-00020")):
        q = AuditQuery(tenant=tenant, node=node, limit=None)
        assert first.query(q) == second.query(q)


def test_bad_kind_is_refused_with_the_vocabulary():
    with pytest.raises(AuditError, match="placement"):
        normalize_kind("placed-ish")
    assert normalize_kind("Unschedulable") == "rejection" and normalize_kind("TaskMigrated") == "migration"


def test_rocksdb_index_survives_reopen_and_can_be_read_while_held(tmp_path, history):
    _decisions, records = history
    store = RocksStore(tmp_path / "idx")
    index = AuditIndex(store)
    _fold(index, records[:700])
    answer = index.query(AuditQuery(tenant="tenant-1", limit=None))
    # A second opener gets a clean error while the first holds the lock; read-only works.
    with pytest.raises(AuditError) as err:
        RocksStore(tmp_path / "idx")
    assert RocksStore.is_locked_error(err.value)
    reader = RocksStore(tmp_path / "idx", read_only=True)
    assert AuditIndex(reader).query(AuditQuery(tenant="tenant-1", limit=None)) == answer
    reader.close()
    store.close()
    reopened = AuditIndex(RocksStore(tmp_path / "idx"))
    assert reopened.positions() == {(TOPIC, 0): 700} and reopened.count() == 700
    _fold(reopened, records)                     # resumes from its stored position
    assert reopened.count() == len(records)
    reopened.store.close()


class RowReads:
    """A store that counts the decision rows read through it (``row NUL ...`` gets)."""

    def __init__(self, store):
        self.store, self.rows = store, 0
        self.read_only = getattr(store, "read_only", False)

    def get(self, key):
        self.rows += key.startswith(b"row\x00")
        return self.store.get(key)

    def get_many(self, keys):
        return self.store.get_many(keys)

    def scan(self, prefix, start=None):
        return self.store.scan(prefix, start)

    def write(self, batch):
        self.store.write(batch)


def _as_before_the_preemptor_keys(store) -> None:
    """Make ``store`` the index the code before the preemptor keys wrote: no such keys, no
    layout mark."""
    old = Batch()
    for key, _ in list(store.scan(b"ix\x00preemptor\x00")):
        old.delete(key)
    old.delete(b"meta\x00layout")
    store.write(old)


def test_who_a_task_preempted_is_read_from_its_own_keys_and_an_older_index_gets_them_on_opening(
        make_index, history):
    _decisions, records = history
    index = make_index()
    _fold(index, records)
    preemptors = sorted({r.payload["preempted_by"] for r in records if r.kind == "TaskPreempted"})
    assert len(preemptors) >= 20
    answers = {t: index.query(AuditQuery(preempted_by=t, limit=None)) for t in preemptors}
    for task, rows in answers.items():
        assert _ids(rows) == _expected(records, preempted_by=task) and rows
    # Only the rows of the answer are read: no scan over every preemption.
    counted = AuditIndex(RowReads(index.store))
    for task in preemptors[:10]:
        counted.store.rows = 0
        rows = counted.query(AuditQuery(preempted_by=task, limit=None))
        assert counted.store.rows == len(rows)
        counted.store.rows = 0
        assert counted.why(task)["preempted"] == [{"task_id": r["task_id"], "tenant": r["tenant"], "node_id": r["node_id"],
                                                   "decided_at": r["decided_at"], "decision_id": r["decision_id"],
                                                   "reason": r["detail"]["reason"], "cite": r["decision"]["cite"]}
                                                  for r in rows]
    # An index of the older layout gets the same keys, byte for byte, when opened writable.
    contents = dict(index.store.scan(b""))
    _as_before_the_preemptor_keys(index.store)
    assert dict(index.store.scan(b"")) != contents
    reopened = AuditIndex(index.store)
    assert dict(index.store.scan(b"")) == contents
    assert {t: reopened.query(AuditQuery(preempted_by=t, limit=None)) for t in preemptors} == answers


def test_an_older_index_opened_read_only_answers_who_a_task_preempted_by_scanning(tmp_path, history):
    _decisions, records = history
    store = RocksStore(tmp_path / "idx")
    index = AuditIndex(store)
    _fold(index, records)
    preemptors = sorted({r.payload["preempted_by"] for r in records if r.kind == "TaskPreempted"})[:15]
    answers = {t: index.query(AuditQuery(preempted_by=t, limit=None)) for t in preemptors}
    _as_before_the_preemptor_keys(store)
    store.close()
    reader = RocksStore(tmp_path / "idx", read_only=True)
    old = AuditIndex(reader)                 # read-only: left as it is
    assert reader.get(b"meta\x00layout") is None
    assert {t: old.query(AuditQuery(preempted_by=t, limit=None)) for t in preemptors} == answers
    reader.close()


def test_parse_time_forms():
    from suanli.projections.cli import parse_time

    now = 1_750_000_000_000
    assert parse_time("1h", now) == now - 3_600_000
    assert parse_time("90s", now) == now - 90_000
    assert parse_time("1750000000000", now) == 1_750_000_000_000
    assert parse_time("2025-06-15T15:06:40Z", now) == 1_750_000_000_000
    with pytest.raises(AuditError):
        parse_time("yesterday", now)


def test_rows_give_back_the_original_payloads(make_index, history):
    _decisions, records = history
    index = make_index()
    _fold(index, records)
    by_id = {r.payload["event_id"]: r.payload for r in records}
    rows = index.query(AuditQuery(limit=None))
    assert len(rows) == len(records)
    for row in rows:
        # these payloads were written before decisions had job_id (issue 22): its default is null
        assert payload_of(row) == {"job_id": None, **by_id[row["event_id"]]}


def test_audit_names_every_task_decision_kind():
    from suanli.processors.model import TASK_DECISION_KINDS
    from suanli.projections.audit import KINDS

    assert set(KINDS) == TASK_DECISION_KINDS
