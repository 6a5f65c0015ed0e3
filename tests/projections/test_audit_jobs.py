"""The audit of a job's member tasks (issue 22): every decision row of a member carries the
job id, ``AuditQuery(job=...)`` (``suanli audit list --job``) filters by it through its own
index, the raw fold reads the job straight from the Avro bytes, and rows of tasks without a
job are what they were before."""
from __future__ import annotations

import io

import fastavro

from suanli.processors import model as m
from suanli.projections.audit import (AuditIndex, AuditQuery, SourceRecord, entry, index_keys, payload_of,
                                      raw_index_keys)
from suanli.projections.audit_avro import Fields, compile_extractor
from suanli.projections.audit_store import MemoryStore
from suanli.schemas.catalog import catalog
from suanli.schemas.codec import parse_plain


def _placed(task: str, job: str | None, offset: int, tenant: str = "acme") -> dict:
    prov = m.Provenance(input=m.LogPosition(topic="ns.cells", partition=0, offset=offset),
                        strategy=m.StrategyRef(name="bestfit", version="1", config_digest="d"),
                        candidates=(), filtered=(), path=("place",), decided_at=1_000 + offset)
    return m.to_avro(m.TaskPlaced(event_id=f"e-{task}", decision_id=f"c/ns.cells/0/{offset}/0", task_id=task,
                                  tenant=tenant, cell="c", node_id="n1", cpu_milli=1000, memory_mib=512,
                                  provenance=prov, job_id=job))


def _records() -> list[SourceRecord]:
    payloads = [_placed("m1", "j1", 1), _placed("m2", "j1", 2), _placed("solo", None, 3), _placed("m3", "j2", 4),
                _placed("o1", "j1", 5, tenant="other")]
    return [SourceRecord("ns.decisions", 0, i, "TaskPlaced", p) for i, p in enumerate(payloads)]


def test_member_rows_carry_the_job_and_others_are_unchanged():
    with_job, without = _records()[0], _records()[2]
    row = entry("TaskPlaced", with_job.payload, (with_job.topic, with_job.partition, with_job.offset))
    assert row["job_id"] == "j1" and "job_id" not in (row.get("detail") or {})
    plain = entry("TaskPlaced", without.payload, (without.topic, without.partition, without.offset))
    assert "job_id" not in plain and "job_id" not in (plain.get("detail") or {})
    assert not any(b"\x00job\x00" in k for k in index_keys(plain))
    assert payload_of(row) == with_job.payload and payload_of(plain) == without.payload


def test_audit_query_filters_by_job_and_tenant():
    index = AuditIndex(MemoryStore())
    index.apply(_records())
    assert [r["task_id"] for r in index.query(AuditQuery(job="j1"))] == ["m1", "m2", "o1"]
    assert [r["task_id"] for r in index.query(AuditQuery(job="j1", tenant="acme"))] == ["m1", "m2"]
    assert [r["task_id"] for r in index.query(AuditQuery(job="j2"))] == ["m3"]
    assert index.query(AuditQuery(job="nope")) == []
    assert {r.get("job_id") for r in index.query(AuditQuery(task="m1"))} == {"j1"}


def test_the_raw_extractor_reads_the_job_like_a_full_decode():
    schema = catalog()["TaskPlaced"].schema
    extract = compile_extractor(schema)
    assert extract is not None
    for rec in _records():
        body = io.BytesIO()
        fastavro.schemaless_writer(body, parse_plain(schema), rec.payload)
        fields = extract(b"\x00\x00\x00\x00\x01" + body.getvalue())
        assert Fields(*fields).job_id == (rec.payload["job_id"] or "").encode()
        row = entry("TaskPlaced", rec.payload, (rec.topic, rec.partition, rec.offset))
        assert sorted(raw_index_keys("TaskPlaced", fields)) == sorted(index_keys(row))
