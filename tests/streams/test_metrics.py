"""The workers' Prometheus metrics (streams/metrics.py), no broker: a real CellRunner and the
real core with an offline codec; the figures are checked against the runner's own outputs and
the cell state, and the exposition is linted by ``promtool check metrics``."""
from __future__ import annotations

import gc
import shutil
import subprocess
import sys
import textwrap
import time
from collections import Counter

import httpx
import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from suanli.replay.dir_registry import DirRegistry
from suanli.schemas.catalog import catalog
from suanli.schemas.codec import Codec
from suanli.streams import metrics as M
from suanli.streams.cell_runner import CellRunner
from suanli.streams.intake import triage
from suanli.streams.records import RawRecord
from suanli.streams.topics import TopicNames

TOPICS = TopicNames("ns")
LOG_MS = 1_700_000_000_000
PROMTOOL = shutil.which("promtool") or "/usr/bin/promtool"


@pytest.fixture(scope="module")
def codec() -> Codec:
    schemas = {100 + i: ev.schema for i, (_k, ev) in enumerate(sorted(catalog().items()))}
    return Codec(DirRegistry(schemas))  # type: ignore[arg-type]


def node(node_id, model, gpus, cpu=8000):
    return {"event_id": node_id, "node_id": node_id, "cell": "c1", "site": "s", "region": "r", "zone": "z",
            "tier": "onprem", "arch": "x86_64", "cpu_milli": cpu, "memory_mib": 65536,
            "accelerators": [{"kind": "GPU", "model": model, "count": gpus, "memory_mib": 16384}],
            "connector": "sim", "registered_at": 0}


def task(task_id, tier, cpu=8000, gpus=1):
    return {"event_id": task_id, "task_id": task_id, "tenant": "a", "cell": "c1", "submitted_at": LOG_MS,
            "qos_tier": tier, "resources": {"cpu_milli": cpu, "memory_mib": 512, "gpu_count": gpus, "gpu_milli": 1000 if gpus else 0}}


class Feed:
    """Cell-log records through a runner, as the scheduler's loop does (one record a batch)."""

    def __init__(self, codec: Codec, metrics: M.SchedulerMetrics):
        self.codec, self.metrics = codec, metrics
        self.runner = CellRunner(codec, TOPICS)
        metrics.bind(self.runner)
        self.offset = 0
        self.outputs: list = []

    def send(self, kind: str, payload: dict, ack_after_ms: int = 0) -> list:
        record = RawRecord(TOPICS.cell_log, 0, self.offset, LOG_MS + self.offset, b"c1", self.codec.encode(kind, payload))
        self.offset += 1
        out = self.runner.apply(record)
        self.metrics.batch_done([record], out, acked_ms=record.timestamp + ack_after_ms)
        self.outputs.extend(out)
        return out

    def decision_kinds(self) -> Counter:
        return Counter(self.codec.decode(r.value)[0] for r in self.outputs if r.topic == TOPICS.decisions)


def families(registry) -> dict:
    return {f.name: f for f in text_string_to_metric_families(generate_latest(registry).decode())}


def value(registry, name: str, **labels) -> float | None:
    return registry.get_sample_value(name, labels)


def test_scheduler_metrics_agree_with_the_runner_outputs_and_the_cell_state(codec):
    m = M.SchedulerMetrics("ns", codec, [TOPICS.cell_log])
    feed = Feed(codec, m)
    feed.send("NodeRegistered", node("n0", "T4", 2))
    feed.send("NodeRegistered", node("n1", "V100", 4))
    for task_id, tier in (("g0", "GOLD"), ("g1", "GOLD"), ("g2", "GOLD"), ("s0", "SILVER"), ("b0", "BRONZE"),
                          ("b1", "BRONZE")):
        feed.send("TaskSubmitted", task(task_id, tier), ack_after_ms=250)
    # a status for a node the cell never registered: the scheduler dead-letters it
    feed.send("NodeStatusChanged", {"event_id": "x", "node_id": "ghost", "cell": "c1", "status": "DOWN", "at": 1})
    feed.send("NodeStatusChanged", {"event_id": "y", "node_id": "n1", "cell": "c1", "status": "CORDONED",
                                    "at": LOG_MS})
    m.refresh()
    reg = m.registry

    # decisions by cell and kind: exactly what the runner produced on the decisions topic
    kinds = feed.decision_kinds()
    assert kinds["TaskPlaced"] == 2 and kinds["TaskPending"] >= 4, kinds
    for kind, n in kinds.items():
        assert value(reg, "suanli_decisions_total", cell="c1", kind=kind) == n
    # latency: each task's decisions were acknowledged 250 ms after its record's log timestamp
    placed_latency = value(reg, "suanli_decision_latency_seconds_sum", kind="TaskPlaced")
    assert placed_latency == pytest.approx(2 * 0.25)
    assert value(reg, "suanli_decision_latency_seconds_bucket", kind="TaskPlaced", le="0.1") == 0
    assert value(reg, "suanli_decision_latency_seconds_bucket", kind="TaskPlaced", le="0.25") == 2

    # queue depth per tier = the cell's queue, by the queued tasks' QoS tier
    state = feed.runner.partition(0).cells["c1"]
    truth = Counter(state.tasks[q[-1]].task.qos_tier for q in state.queue)
    assert truth == {"GOLD": 1, "SILVER": 1, "BRONZE": 2}
    for tier in ("GOLD", "SILVER", "BRONZE"):
        assert value(reg, "suanli_queue_depth", cell="c1", tier=tier) == truth[tier]

    # GPUs by model: one whole GPU taken on each node (a full node's CPU each)
    assert value(reg, "suanli_gpu_allocated", cell="c1", model="T4") == 1.0
    assert value(reg, "suanli_gpu_allocated", cell="c1", model="V100") == 1.0
    assert value(reg, "suanli_gpu_capacity", cell="c1", model="T4") == 2.0
    assert value(reg, "suanli_gpu_capacity", cell="c1", model="V100") == 4.0
    # nodes by status and heartbeat health
    assert value(reg, "suanli_nodes", cell="c1", status="READY", health="READY") == 1
    assert value(reg, "suanli_nodes", cell="c1", status="CORDONED", health="READY") == 1

    # dead letters by reason, from the outputs; records processed and produced by topic
    assert value(reg, "suanli_dead_letters_total", reason="UNKNOWN_NODE") == 1
    assert value(reg, "suanli_records_processed_total", topic=TOPICS.cell_log) == feed.offset
    assert value(reg, "suanli_records_produced_total", topic=TOPICS.decisions) == sum(kinds.values())
    assert value(reg, "suanli_records_produced_total", topic=TOPICS.dispatch("sim")) == 2
    assert value(reg, "suanli_worker_info", role="scheduler", namespace="ns") == 1


def test_cell_tasks_counts_the_records_kept_and_the_tombstones_of_forgotten_ones(codec):
    import json

    m = M.SchedulerMetrics("ns", codec, [TOPICS.cell_log])
    feed = Feed(codec, m)
    feed.send("NodeRegistered", node("n0", "T4", 4, cpu=16000))
    feed.send("PolicyChanged", {"event_id": "p", "cell": "c1", "strategy": "default", "changed_by": "test",
                                "config_json": json.dumps({"retention": {"finished_tasks": 1}}), "at": 1})
    for i in range(4):
        feed.send("TaskSubmitted", task(f"t{i}", "SILVER", cpu=1000))
    for i in range(3):                          # 3 finished > 1 kept + a batch of 1: two are forgotten
        feed.send("TaskStatusChanged", {"event_id": f"s{i}", "task_id": f"t{i}", "cell": "c1", "node_id": "n0",
                                        "status": "COMPLETED", "at": 2 + i, "exit_code": 0, "message": "",
                                        "usage": None})
    m.refresh()
    state = feed.runner.partition(0).cells["c1"]
    assert len(state.forgotten) == 2 and len(state.tasks) == 2, (sorted(state.forgotten), sorted(state.tasks))
    assert value(m.registry, "suanli_cell_tasks", cell="c1", held="kept") == 2
    assert value(m.registry, "suanli_cell_tasks", cell="c1", held="forgotten") == 2
    assert value(m.registry, "suanli_cell_tasks", cell="c1", held="past_clients") == 0
    # a federated client's: its tombstone, and what its job's later tasks read of it
    feed.send("TaskSubmitted", dict(task("k", "SILVER", cpu=1000, gpus=0), job_id="J",
                                    labels={"federated-role": "client", "data-site": "s"}))
    for tid in ("t4", "t5"):
        feed.send("TaskSubmitted", task(tid, "SILVER", cpu=1000, gpus=0))
    for tid in ("k", "t4", "t5"):               # finished beyond 1 kept + a batch of 1 go, k first
        feed.send("TaskStatusChanged", {"event_id": f"s-{tid}", "task_id": tid, "cell": "c1", "node_id": "n0",
                                        "status": "COMPLETED", "at": 9, "exit_code": 0, "message": "", "usage": None})
    m.refresh()
    assert "k" in state.forgotten and [c.task_id for c in state.job_clients("J")] == ["k"]
    assert value(m.registry, "suanli_cell_tasks", cell="c1", held="past_clients") == 1
    assert value(m.registry, "suanli_cell_tasks", cell="c1", held="forgotten") == len(state.forgotten)


def test_snapshot_age_and_consumer_lag(codec):
    m = M.SchedulerMetrics("ns", codec, [TOPICS.cell_log])
    assert "suanli_snapshot_age_seconds" in families(m.registry)
    assert value(m.registry, "suanli_snapshot_age_seconds", partition="0") is None   # no snapshot yet
    m.snapshot_saved(0, seconds=0.02)
    m.snapshot_at[1] = time.time() - 30                                             # as if 30 s ago
    assert 0 <= value(m.registry, "suanli_snapshot_age_seconds", partition="0") < 30
    assert value(m.registry, "suanli_snapshot_age_seconds", partition="1") >= 30
    assert value(m.registry, "suanli_snapshot_write_seconds_count") == 1

    # lag = end offset - next offset to handle: this process's position, else the group's commit
    class Msg:
        def __init__(self, partition, offset):
            self.topic, self.partition, self.offset = TOPICS.cell_log, partition, offset

    m.batch_done([Msg(0, 9), Msg(1, 4)], [])
    m.set_lag({(TOPICS.cell_log, 0): 25, (TOPICS.cell_log, 1): 5, (TOPICS.cell_log, 2): 7,
               (TOPICS.cell_log, 3): 7, (TOPICS.cell_log, 4): 0},
              {(TOPICS.cell_log, 0): 3, (TOPICS.cell_log, 2): 2, (TOPICS.cell_log, 3): None})
    lag = {s.labels["partition"]: s.value for s in families(m.registry)["suanli_consumer_lag_records"].samples}
    assert lag == {"0": 15, "1": 0, "2": 5, "4": 0}    # 3: no position known, left out; 4: empty
    sample = families(m.registry)["suanli_consumer_lag_records"].samples[0]
    assert sample.labels["group"] == "ns-scheduler" and sample.labels["topic"] == TOPICS.cell_log


def test_intake_counts_dead_letters_by_reason(codec):
    m = M.WorkerMetrics("intake", "ns", codec, TOPICS.raw)
    good = codec.encode("TaskSubmitted", task("t", "SILVER"))
    bad_values = [b"\x7fgarbage", b"\x00\x00\x0f\x42\x3f\x00",
                  codec.encode("TaskSubmitted", {**task("u", "GOLD"), "resources": {"cpu_milli": 1, "memory_mib": 1,
                                                                                    "gpu_count": -2}})]
    records = [RawRecord(TOPICS.raw_tasks, 0, i, LOG_MS, b"k", v) for i, v in enumerate([good, *bad_values])]
    outputs = [out for r in records for out in triage(codec, r, TOPICS)]
    m.batch_done(records, outputs)
    reg = m.registry
    assert value(reg, "suanli_dead_letters_total", reason="UNDECODABLE") == 1
    assert value(reg, "suanli_dead_letters_total", reason="UNKNOWN_SCHEMA") == 1
    assert value(reg, "suanli_dead_letters_total", reason="INVALID") == 1
    assert value(reg, "suanli_records_processed_total", topic=TOPICS.raw_tasks) == 4
    assert value(reg, "suanli_records_produced_total", topic=TOPICS.cell_log) == 1
    assert value(reg, "suanli_records_produced_total", topic=TOPICS.dead_letters) == 3


CRASH = '''
"""acme-metrics-crash: a third-party strategy that aborts when it scores (sandboxed)."""
from suanli.processors.framework import Plugin, Profile, REGISTRY
from suanli.processors.plugins.basic import FILTERS
NAME, VERSION = "acme-metrics-crash", "0.1"
class Abort(Plugin):
    name = "AcmeAbort"
    def score(self, ctx, rows):
        import os; os.abort()
def build(config):
    return Profile([REGISTRY.create(f) for f in FILTERS], [(Abort(), 1.0)], tie_break="first")
'''


@pytest.fixture()
def crashing_strategy(tmp_path):
    from suanli.processors import strategies as S

    (tmp_path / "acme_metrics_crash.py").write_text(textwrap.dedent(CRASH))
    info = tmp_path / "acme_metrics_crash-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: acme-metrics-crash\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[suanli.strategies]\nacme-metrics-crash = acme_metrics_crash\n")
    sys.path.insert(0, str(tmp_path))
    assert "acme-metrics-crash" in S.discover()
    yield "acme-metrics-crash"
    sys.path.remove(str(tmp_path))
    S.MODULES.pop("acme-metrics-crash", None)
    S.EXTERNAL.pop("acme-metrics-crash", None)
    sys.modules.pop("acme_metrics_crash", None)


def test_sandbox_fallbacks_are_counted_from_the_decision_path(codec, crashing_strategy):
    import json

    m = M.SchedulerMetrics("ns", codec, [TOPICS.cell_log])
    feed = Feed(codec, m)
    feed.send("PolicyChanged", {"event_id": "p", "cell": "c1", "strategy": crashing_strategy, "at": 0,
                                "config_json": json.dumps({"sandbox": {"cpu_seconds": 1, "wall_seconds": 5}})})
    feed.send("NodeRegistered", node("n0", "T4", 2))
    feed.send("TaskSubmitted", task("t0", "SILVER", cpu=1000, gpus=0))
    [placed] = [feed.codec.decode(r.value)[1] for r in feed.outputs if feed.codec.decode(r.value)[0] == "TaskPlaced"]
    assert any(line.startswith(f"fallback: {crashing_strategy} failed in the sandbox")
               for line in placed["provenance"]["path"])
    fallback = placed["provenance"]["strategy"]["name"]
    assert value(m.registry, "suanli_sandbox_fallbacks_total", cell="c1", strategy=crashing_strategy,
                 fallback=fallback) == 1
    assert value(m.registry, "suanli_decisions_total", cell="c1", kind="TaskPlaced") == 1


def test_names_follow_prometheus_conventions_and_promtool_accepts_the_exposition(codec):
    gc.collect()                               # the other tests' metrics objects are gone
    scheduler = M.SchedulerMetrics("ns", codec, [TOPICS.cell_log])
    feed = Feed(codec, scheduler)
    feed.send("NodeRegistered", node("n0", "T4", 2))
    feed.send("TaskSubmitted", task("t0", "GOLD"), ack_after_ms=40)
    scheduler.snapshot_saved(0, 0.01)
    scheduler.set_lag({(TOPICS.cell_log, 0): 5}, {})
    scheduler.refresh()
    port = M.serve(0)
    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
    names = {f.name: f.type for f in text_string_to_metric_families(text)}
    ours = {n: t for n, t in names.items() if n.startswith("suanli_")}
    assert {"suanli_decisions", "suanli_decision_latency_seconds", "suanli_queue_depth", "suanli_consumer_lag_records",
            "suanli_dead_letters", "suanli_gpu_allocated", "suanli_gpu_capacity", "suanli_snapshot_age_seconds",
            "suanli_sandbox_fallbacks", "suanli_nodes"} <= set(ours), sorted(ours)
    assert "process_cpu_seconds" in names               # the process collector is served too
    for name, kind in ours.items():
        if kind == "histogram":
            assert name.endswith("_seconds"), name
    assert 'suanli_decisions_total{cell="c1",kind="TaskPlaced"} 1.0' in text
    lint = subprocess.run([PROMTOOL, "check", "metrics"], input=text, capture_output=True, text=True, timeout=60)
    assert lint.returncode == 0, lint.stdout + lint.stderr


def test_the_api_counts_requests_by_route_template_and_serves_metrics():
    from fastapi import FastAPI
    from fastapi.testclient import TestClient

    app = FastAPI()

    @app.get("/v1/things/{thing_id}")
    async def thing(thing_id: str) -> dict:
        if thing_id == "missing":
            from fastapi import HTTPException
            raise HTTPException(404)
        return {"id": thing_id}

    api = M.instrument_api(app, "ns")
    with TestClient(app) as client:
        assert client.get("/v1/things/a").status_code == 200
        assert client.get("/v1/things/b").status_code == 200
        assert client.get("/v1/things/missing").status_code == 404
        assert client.get("/nowhere").status_code == 404
        response = client.get("/metrics")
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/plain")
    route = "/v1/things/{thing_id}"
    assert value(api.registry, "suanli_api_requests_total", method="GET", route=route, status="200") == 2
    assert value(api.registry, "suanli_api_requests_total", method="GET", route=route, status="404") == 1
    assert value(api.registry, "suanli_api_requests_total", method="GET", route="(unmatched)", status="404") == 1
    assert value(api.registry, "suanli_api_request_duration_seconds_count", method="GET", route=route) == 3
    assert 'suanli_api_requests_total{method="GET",route="/v1/things/{thing_id}",status="200"} 2.0' in response.text
