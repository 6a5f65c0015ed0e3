"""The audit index on a real control-plane run: why/list answers checked against the
decisions topic and the cell log themselves, rebuild, tenant isolation, and the CLI.

One plane run (its own namespace, three tenants) serves the module.
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

from suanli.config import REPO_ROOT, load_settings, to_env
from suanli.deploy.plane import Plane, PlaneOptions
from suanli.errors import AuditError
from suanli.projections.audit import AuditIndex, AuditQuery
from suanli.projections.audit_follower import AuditFollower, index_dir, opened_index, rebuild
from suanli.projections.audit_store import MemoryStore
from suanli.schemas.codec import Codec
from suanli.schemas.registry import RegistryClient
from suanli.streams.kafka_io import EventConsumer, read_range
from suanli.streams.topics import TopicNames

pytestmark = pytest.mark.stack

TENANTS = ("vision", "speech", "robotics")
KINDS = {"TaskPlaced": "placement", "TaskPending": "pending", "TaskUnschedulable": "rejection",
         "TaskReleased": "release"}


async def _read(settings, topic: str) -> list:
    with RegistryClient(settings.registry_url) as registry:
        async with EventConsumer(settings.bootstrap_servers, Codec(registry), [topic]) as consumer:
            return await consumer.read_until_end()


@pytest.fixture(scope="module")
def run(stack, tmp_path_factory):
    from suanli.replay.driver import drive

    settings = load_settings(namespace=f"ta{uuid.uuid4().hex[:10]}", partitions=2)

    async def workload(publish, send_raw, tasks, names):
        await drive(publish, [dict(t, tenant=TENANTS[i % 3]) for i, t in enumerate(tasks)], 800)

    plane = Plane(settings, PlaneOptions(tasks=600, rate=800, exit_when_drained=True, quiet=True, drain_timeout=240,
                                         workload=workload), out=lambda _m: None)
    plane.start()
    try:
        result = asyncio.run(plane.run())
    finally:
        plane.stop()
    assert result["placed"] + result["pending"] + result["unschedulable"] == 600, result
    records = asyncio.run(_read(settings, TopicNames(settings.namespace).decisions))
    seen, decisions = set(), []
    for r in records:          # the topic may hold redelivered duplicates; the first copy counts
        if r.kind in KINDS and r.payload["event_id"] not in seen:
            seen.add(r.payload["event_id"])
            decisions.append(r)
    path = tmp_path_factory.mktemp("audit") / "index"
    yield settings, decisions, path
    shutil.rmtree(index_dir(settings), ignore_errors=True)   # left by the CLI test


def _answer(settings, path, fn):
    async def go():
        async with opened_index(settings, path=path) as (index, stats):
            return fn(index), stats
    return asyncio.run(go())


def test_why_cites_the_decision_record_and_the_cell_log_input(run):
    settings, decisions, path = run
    placed = next(d for d in decisions if d.kind == "TaskPlaced")
    task = placed.payload["task_id"]
    answer, stats = _answer(settings, path, lambda index: index.why(task))
    assert stats.result.applied == len(decisions)
    expected = [d for d in decisions if d.payload["task_id"] == task]
    assert [(d["decision"]["partition"], d["decision"]["offset"]) for d in answer["decisions"]] == \
        [(d.partition, d.offset) for d in expected]
    first = answer["decisions"][[d["event"] for d in answer["decisions"]].index("TaskPlaced")]
    prov = placed.payload["provenance"]
    assert first["node_id"] == placed.payload["node_id"]
    assert first["strategy"] == prov["strategy"] and first["strategy"]["version"]
    assert first["candidates"] == prov["candidates"] and first["candidates"]
    assert first["filtered"] == prov["filtered"]
    assert first["path"] == prov["path"]
    assert first["decision"]["cite"] == f"{placed.topic}[{placed.partition}]@{placed.offset}"
    # The cited input really is the submission of this task on the cell log.
    inp = first["input"]
    assert inp["topic"] == TopicNames(settings.namespace).cell_log
    raw = asyncio.run(read_range(settings.bootstrap_servers, inp["topic"], inp["partition"], inp["offset"],
                                 inp["offset"] + 1))
    with RegistryClient(settings.registry_url) as registry:
        kind, payload = Codec(registry).decode(raw[0].value)
    assert (kind, payload["task_id"]) == ("TaskSubmitted", task)


def test_list_filters_match_the_topic(run):
    settings, decisions, path = run
    node = next(d.payload["node_id"] for d in decisions if d.kind == "TaskPlaced")
    ats = sorted(d.payload["provenance"]["decided_at"] for d in decisions)
    since, until = ats[len(ats) // 4], ats[3 * len(ats) // 4]
    strategy = decisions[0].payload["provenance"]["strategy"]["name"]

    def expect(pred):
        return sorted(d.payload["event_id"] for d in decisions if pred(d))

    cases = [
        (AuditQuery(node=node, limit=None), lambda d: d.payload.get("node_id") == node),
        (AuditQuery(tenant="speech", limit=None), lambda d: d.payload["tenant"] == "speech"),
        (AuditQuery(kind="placement", tenant="vision", limit=None),
         lambda d: d.kind == "TaskPlaced" and d.payload["tenant"] == "vision"),
        (AuditQuery(kind="release", limit=None), lambda d: d.kind == "TaskReleased"),
        (AuditQuery(strategy=strategy, since=since, until=until, limit=None),
         lambda d: d.payload["provenance"]["strategy"]["name"] == strategy
         and since <= d.payload["provenance"]["decided_at"] < until),
    ]
    answers, _ = _answer(settings, path, lambda index: [index.query(q) for q, _p in cases])
    for (q, pred), rows in zip(cases, answers):
        assert sorted(r["event_id"] for r in rows) == expect(pred), q
        assert all(r["decision"]["cite"] and r["input"]["cite"] for r in rows)


def test_tenants_are_isolated(run):
    settings, decisions, path = run
    foreign = next(d.payload for d in decisions if d.payload["tenant"] == "speech")

    def check(index):
        for tenant in TENANTS:
            rows = index.query(AuditQuery(tenant=tenant, limit=None))
            assert rows and {r["tenant"] for r in rows} == {tenant}
            placed = index.query(AuditQuery(tenant=tenant, kind="placement", limit=None))
            assert {r["tenant"] for r in placed} == {tenant}
        assert index.query(AuditQuery(tenant="vision", task=foreign["task_id"])) == []
        with pytest.raises(AuditError):
            index.why(foreign["task_id"], tenant="vision")
        return index.why(foreign["task_id"], tenant="speech")

    answer, _ = _answer(settings, path, check)
    assert answer["tenant"] == "speech"


def test_rebuild_gives_identical_answers(run, tmp_path):
    settings, decisions, path = run
    tasks = sorted({d.payload["task_id"] for d in decisions})

    def snapshot(index):
        return ([index.why(t) for t in tasks[::7]],
                [index.query(AuditQuery(tenant=t, limit=None)) for t in TENANTS],
                index.positions(), index.count())

    before, _ = _answer(settings, path, snapshot)
    stats = asyncio.run(rebuild(settings, path=path))
    assert stats.result.applied == len(decisions) and stats.records >= len(decisions)
    after, again = _answer(settings, path, snapshot)
    assert again.result.applied == 0          # caught up already: nothing new
    assert after == before


def test_the_compiled_kernel_folds_the_plane_s_decisions_as_the_python_fold_does(run):
    """The decisions the plane made, read from the real topic twice: by the compiled fold
    (every batch, no record left to the codec) and by the Python one; the same index."""
    settings, decisions, _path = run
    topic = TopicNames(settings.namespace).decisions

    async def fold(kernel: bool):
        with RegistryClient(settings.registry_url) as registry:
            index = AuditIndex(MemoryStore())
            index.kernel = kernel
            stats = await AuditFollower(settings.bootstrap_servers, topic, index, Codec(registry)).catch_up()
            return index, stats

    (compiled, by_kernel), (python, by_python) = asyncio.run(fold(True)), asyncio.run(fold(False))
    assert by_kernel.result.by_kernel == by_kernel.records > 0 and by_python.result.by_kernel == 0
    assert by_kernel.result.applied == by_python.result.applied == len(decisions)
    assert dict(compiled.store.scan(b"")) == dict(python.store.scan(b""))


def test_cli_why_list_rebuild(run):
    settings, decisions, _path = run
    env = {**os.environ, **to_env(settings)}
    task = next(d.payload for d in decisions if d.kind == "TaskPlaced")

    def cli(*args):
        out = subprocess.run([sys.executable, "-m", "suanli", "audit", *args], cwd=REPO_ROOT, env=env,
                             capture_output=True, text=True, timeout=180)
        return out

    why = cli("why", task["task_id"], "--tenant", task["tenant"], "--json")
    assert why.returncode == 0, why.stderr
    doc = json.loads(why.stdout)
    assert doc["answer"]["task_id"] == task["task_id"] and doc["index"]["applied"] == len(decisions)
    text = cli("why", task["task_id"])
    assert text.returncode == 0 and "decided at cell-log" in text.stdout and "candidates: #1" in text.stdout
    other = next(t for t in TENANTS if t != task["tenant"])
    denied = cli("why", task["task_id"], "--tenant", other)
    assert denied.returncode == 2 and "no decisions about task" in denied.stderr
    listed = cli("list", "--tenant", task["tenant"], "--kind", "placement", "--since", "2h", "--limit", "0", "--json")
    assert listed.returncode == 0, listed.stderr
    rows = json.loads(listed.stdout)["decisions"]
    assert rows and {r["tenant"] for r in rows} == {task["tenant"]} and {r["kind"] for r in rows} == {"placement"}
    rebuilt = cli("rebuild", "--json")
    assert rebuilt.returncode == 0, rebuilt.stderr
    assert json.loads(rebuilt.stdout)["applied"] == len(decisions)
    assert json.loads(rebuilt.stdout)["by_kernel"] == json.loads(rebuilt.stdout)["records"]


def test_replaying_the_cell_log_up_to_the_cited_offset_gives_the_same_decision(run):
    """What the scheduler knew when it decided: the cell log up to the cited input offset,
    re-run through the production core, yields the recorded decision byte for byte."""
    from suanli.replay.log_replay import regenerate

    settings, decisions, path = run
    placed = [d for d in decisions if d.kind == "TaskPlaced"]
    chosen = placed[len(placed) // 2]
    answer, _ = _answer(settings, path, lambda index: index.why(chosen.payload["task_id"]))
    row = next(r for r in answer["decisions"] if r["event_id"] == chosen.payload["event_id"])
    cited = row["input"]
    assert cited["topic"] == TopicNames(settings.namespace).cell_log
    log = asyncio.run(_read(settings, cited["topic"]))
    prefix = sorted((r for r in log if r.partition == cited["partition"] and r.offset <= cited["offset"]),
                    key=lambda r: r.offset)
    assert prefix and prefix[-1].offset == cited["offset"]
    with RegistryClient(settings.registry_url) as registry:
        regenerated = regenerate(Codec(registry), prefix)
    matching = [v for v in regenerated if chosen.payload["event_id"].encode() in v]
    assert matching == [chosen.value]
