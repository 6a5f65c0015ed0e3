"""Preemption and migration decisions through the real broker, registry and audit CLI.

The decisions are the core's typed values, encoded with the registry's current schemas onto
the decisions topic of a namespace of their own; the audit follower reads them back into a
RocksDB index, and `suanli audit list --kind preemption` / `audit why` answer from it. Every
field of TaskPreempted and TaskMigrated must survive the trip.
"""
from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import uuid

import pytest

from suanli.config import load_settings, to_env
from suanli.processors import model as m
from suanli.projections.audit import AuditQuery, payload_of
from suanli.projections.audit_follower import index_dir, opened_index
from suanli.schemas.codec import Codec
from suanli.schemas.registry import RegistryClient
from suanli.streams.kafka_io import EventProducer, ensure_topics
from suanli.streams.topics import TopicNames, core_topics

pytestmark = [pytest.mark.stack, pytest.mark.timeout(300)]

CELL = "qos-audit"


def prov(at: int, offset: int) -> m.Provenance:
    return m.Provenance(input=m.LogPosition(topic="x.cells", partition=0, offset=offset),
                        strategy=m.StrategyRef(name="bestfit", version="1", config_digest="abc"),
                        candidates=(m.Candidate(node_id="n2", score=1.0, rank=1),), filtered=(),
                        path=("preempt", "bind n2"), decided_at=at)


def decisions() -> list:
    t = 1_760_000_000_000
    did = lambda off, n=0: f"{CELL}/x.cells/0/{off}/{n}"    # noqa: E731
    return [
        m.TaskPreempted(event_id=f"{did(7)}/TaskPreempted", decision_id=did(7), task_id="bronze-1", tenant="acme",
                        cell=CELL, node_id="n2", preempted_by="gold-1", reason="preempted by gold-1 (GOLD) on n2",
                        provenance=prov(t, 7), grace_ms=5_000, work_lost_ms=61_000, victims=("bronze-1", "bronze-2")),
        m.TaskPreempted(event_id=f"{did(7, 1)}/TaskPreempted", decision_id=did(7, 1), task_id="bronze-2",
                        tenant="zeta", cell=CELL, node_id="n2", preempted_by="gold-1",
                        reason="preempted by gold-1 (GOLD) on n2", provenance=prov(t, 7), grace_ms=5_000,
                        work_lost_ms=3_000, victims=("bronze-1", "bronze-2")),
        m.TaskMigrated(event_id=f"{did(7, 2)}/TaskMigrated", decision_id=did(7, 2), task_id="gold-1", tenant="acme",
                       cell=CELL, from_node="n1", to_node="n2", gpu_devices=(0, 1), reason="NODE_DOWN: n1 -> n2",
                       provenance=prov(t, 7), cause="NODE_DOWN", since=t - 15_500, elapsed_ms=15_500,
                       reserve_first=False, preempted=("bronze-1", "bronze-2")),
    ]


@pytest.fixture(scope="module")
def namespace(stack):
    settings = load_settings(namespace=f"tq{uuid.uuid4().hex[:10]}", partitions=1)
    topic = TopicNames(settings.namespace).decisions

    async def produce() -> None:
        await ensure_topics(settings.bootstrap_servers, core_topics(settings.partitions, settings.namespace))
        with RegistryClient(settings.registry_url) as registry:
            async with EventProducer(settings.bootstrap_servers, Codec(registry)) as producer:
                for d in decisions():
                    await (await producer.send(topic, d.KIND, m.to_avro(d), key=CELL))

    asyncio.run(produce())
    yield settings
    shutil.rmtree(index_dir(settings), ignore_errors=True)          # left by the CLI


def test_every_field_survives_the_broker_and_the_index(namespace, tmp_path):
    async def rows():
        async with opened_index(namespace, path=tmp_path / "index") as (index, stats):
            return index.query(AuditQuery(limit=None)), stats

    found, stats = asyncio.run(rows())
    assert stats.result.applied == 3
    originals = {m.to_avro(d)["event_id"]: (d.KIND, m.to_avro(d)) for d in decisions()}
    assert {r["event_id"] for r in found} == set(originals)
    for row in found:
        kind, payload = originals[row["event_id"]]
        assert row["event"] == kind and payload_of(row) == payload
        assert row["decision"]["topic"] == TopicNames(namespace.namespace).decisions


def _cli(settings, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, **to_env(settings)}
    return subprocess.run([sys.executable, "-m", "suanli", *args], capture_output=True, text=True, env=env, timeout=120)


def test_the_audit_cli_answers_who_was_preempted_by_whom_and_why(namespace):
    listed = _cli(namespace, "audit", "list", "--kind", "preemption", "--json")
    assert listed.returncode == 0, listed.stderr
    rows = json.loads(listed.stdout)["decisions"]
    assert [(r["task_id"], r["detail"]["preempted_by"], r["detail"]["grace_ms"]) for r in rows] == [
        ("bronze-1", "gold-1", 5_000), ("bronze-2", "gold-1", 5_000)]
    by = _cli(namespace, "audit", "list", "--preempted-by", "gold-1", "--tenant", "zeta")
    assert by.returncode == 0 and "bronze-2" in by.stdout and "bronze-1" not in by.stdout, by.stdout
    why = _cli(namespace, "audit", "why", "bronze-1")
    assert why.returncode == 0, why.stderr
    assert "preempted by gold-1 on n2: preempted by gold-1 (GOLD) on n2" in why.stdout
    assert "work lost 61 s" in why.stdout and "preempted with it by the same decision: bronze-2" in why.stdout
    moved = _cli(namespace, "audit", "why", "gold-1")
    assert "moved n1 -> n2: NODE_DOWN since" in moved.stdout and "it preempted 2 task(s):" in moved.stdout
    migrations = _cli(namespace, "audit", "list", "--kind", "migration", "--node", "n1")
    assert "n1 -> n2 NODE_DOWN +15.5 s" in migrations.stdout, migrations.stdout
