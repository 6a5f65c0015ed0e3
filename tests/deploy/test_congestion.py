"""Congestion is avoided, on the real stack: intake, scheduler and telemetry workers started as
the plane starts them, in a fresh namespace.

100 openb nodes register in a cell whose policy is ``worst-fit`` (the emptiest node wins, so
an idle node attracts every task unless something keeps work off it). The nodes' exporters
(the simulator's generator, publishing NodeMetrics as a site's Prometheus source would) report
normal metrics; then 10 % of the nodes report their GPUs at about 92 °C. The telemetry worker
turns that into NodeConditionChanged HOT, intake forwards it into the cell log, and:

- of the next 500 placements none lands on a HOT node while the others fit, and every
  decision's provenance (and ``suanli audit why``) names the condition;
- once the metrics are normal again the nodes go back to NORMAL and take work again.
"""
from __future__ import annotations

import asyncio
import json
import os
import random
import subprocess
import sys
import time
import uuid
from collections import Counter

import pytest

from suanli.config import REPO_ROOT, load_settings, to_env
from suanli.connectors.sim_telemetry import Fault, TelemetryGenerator
from suanli.connectors.simulated import DEFAULT_NODES, describe_node
from suanli.deploy.plane import worker_processes
from suanli.replay.openb import read_nodes
from suanli.schemas.codec import Codec
from suanli.schemas.registry import RegistryClient
from suanli.streams.kafka_io import EventConsumer, EventProducer, ensure_topics
from suanli.streams.topics import TopicNames, core_topics

pytestmark = [pytest.mark.stack, pytest.mark.timeout(600)]

HOT_REASON = "node HOT (telemetry)"
TASK_KINDS = ("TaskPlaced", "TaskPending", "TaskUnschedulable")


def _task(run: str, cell: str, i: int) -> dict:
    rng = random.Random(i)
    shape = i % 5               # 2 in 5 CPU-only, 2 in 5 a shared GPU, 1 in 5 a whole GPU
    gpu_count, gpu_milli = (0, 0) if shape < 2 else (1, rng.choice((250, 500))) if shape < 4 else (1, 1000)
    return {"event_id": f"{run}/submit/{i}", "task_id": f"{run}-t{i:04d}", "tenant": "acme", "cell": cell,
            "submitted_at": int(time.time() * 1000),
            "resources": {"cpu_milli": rng.choice((1000, 2000, 4000, 8000)), "memory_mib": rng.choice((2048, 8192, 16384)),
                          "gpu_count": gpu_count, "gpu_milli": gpu_milli, "gpu_models": [], "gpu_memory_mib": 0,
                          "accelerators": []},
            "qos_tier": "SILVER", "priority": 0, "labels": {}, "deadline": None, "duration_estimate_ms": None,
            "command": None, "profile": None, "env": {}}


def test_hot_nodes_get_no_work_while_others_fit_and_take_work_again_when_normal(stack):
    run = uuid.uuid4().hex[:8]
    settings = load_settings(namespace=f"t{run}cg", partitions=2)
    topics = TopicNames(settings.namespace)
    cell = f"cg-{run}"
    nodes = [describe_node(n, "sim") for n in read_nodes(DEFAULT_NODES, cell)[::15][:100]]
    gpu_nodes = sorted(n["node_id"] for n in nodes if sum(a["count"] for a in n["accelerators"]) >= 2)
    hot = set(random.Random(13).sample(gpu_nodes, 10))      # 10 % of the nodes; empty, they fit every task below
    gen = TelemetryGenerator(seed=2)
    seq = 0
    asyncio.run(ensure_topics(settings.bootstrap_servers, core_topics(settings.partitions, settings.namespace)))
    services = list(worker_processes(settings).values())
    env = to_env(settings)

    async def metrics_round(producer: EventProducer) -> None:
        nonlocal seq
        seq += 1
        at = int(time.time() * 1000)
        for n in nodes:
            await producer.publish("NodeMetrics", gen.node_metrics(n, [], at, seq, f"sim/{n['node_id']}/metrics/{seq}",
                                                                   cell))
        await producer.flush()

    async def until(consumer: EventConsumer, done, what: str, timeout: float = 120) -> list:
        seen: list = []
        deadline = time.monotonic() + timeout
        async for batch in consumer.batches(timeout_ms=500):
            seen += [r for r in batch if r.kind is not None and r.payload.get("cell") == cell]
            if done(seen):
                return seen
            if time.monotonic() > deadline:
                tails = "\n".join(f"--- {s.name}\n{s.log_tail(10)}" for s, _ in services)
                raise AssertionError(f"{what}: not seen within {timeout:.0f} s; {Counter(r.kind for r in seen)}\n{tails}")
        return seen

    def conditions(records: list, condition: str) -> set[str]:
        return {r.payload["node_id"] for r in records
                if r.kind == "NodeConditionChanged" and r.payload["condition"] == condition}

    async def scenario() -> tuple[list, list, list]:
        async with EventConsumer(settings.bootstrap_servers, codec, [topics.cell_log]) as cells, \
                EventConsumer(settings.bootstrap_servers, codec, [topics.decisions]) as decisions, \
                EventProducer(settings.bootstrap_servers, codec, namespace=settings.namespace) as producer:
            await producer.publish("PolicyChanged", {"event_id": f"{run}/policy", "cell": cell, "strategy": "worst-fit",
                                                     "config_json": "{}", "changed_by": "test", "at": 1})
            for n in nodes:
                await producer.publish("NodeRegistered", {**n, "registered_at": int(time.time() * 1000)})
            await producer.flush()
            await metrics_round(producer)                       # all normal: no change, nothing enters the cell
            for node_id in hot:
                gen.set_fault(node_id, Fault(temp_c=92))
            await metrics_round(producer)
            log = await until(cells, lambda s: conditions(s, "HOT") >= hot and any(r.kind == "PolicyChanged" for r in s),
                              "the HOT conditions in the cell log")
            assert conditions(log, "HOT") == hot, "only the hot nodes are HOT"

            first = [_task(run, cell, i) for i in range(500)]
            for t in first:
                await producer.publish("TaskSubmitted", t)
            await producer.flush()
            ids = {t["task_id"] for t in first}
            placed = await until(decisions, lambda s: len({r.payload["task_id"] for r in s
                                                           if r.kind in TASK_KINDS and r.payload["task_id"] in ids}) >= 500,
                                 "500 decisions")

            for node_id in hot:
                gen.set_fault(node_id, None)
            await metrics_round(producer)
            log = await until(cells, lambda s: conditions(s, "NORMAL") >= hot, "the NORMAL conditions in the cell log")
            assert conditions(log, "NORMAL") == hot and not conditions(log, "HOT")

            second = [_task(run, cell, i) for i in range(500, 600)]
            for t in second:
                await producer.publish("TaskSubmitted", t)
            await producer.flush()
            ids2 = {t["task_id"] for t in second}
            after = await until(decisions, lambda s: len({r.payload["task_id"] for r in s
                                                          if r.kind in TASK_KINDS and r.payload["task_id"] in ids2}) >= 100,
                                "100 more decisions")
            return [r for r in placed if r.kind in TASK_KINDS and r.payload["task_id"] in ids], \
                [r for r in after if r.kind in TASK_KINDS and r.payload["task_id"] in ids2], log

    with RegistryClient(settings.registry_url) as registry:
        codec = Codec(registry)
        for service, argv in services:
            service.start(argv, env=env)
        try:
            during, after, _log = asyncio.run(scenario())
            first_task = during[0].payload["task_id"]
            why = subprocess.run([sys.executable, "-m", "suanli", "audit", "why", first_task], cwd=REPO_ROOT,
                                 env={**os.environ, **env}, capture_output=True, text=True, timeout=180)
        finally:
            for service, _argv in services:
                service.stop()

    # While HOT: every one of the 500 is placed (the others fit), none on a HOT node, and each
    # decision says why the HOT nodes were left out.
    assert Counter(r.kind for r in during) == {"TaskPlaced": 500}
    assert not hot & {r.payload["node_id"] for r in during}
    for r in during:
        filtered = r.payload["provenance"]["filtered"]
        named = [f for f in filtered if f["reason"] == HOT_REASON]
        assert named and named[0]["nodes"] == len(hot) and set(named[0]["sample"]) <= hot, filtered
        assert r.payload["provenance"]["strategy"]["name"] == "worst-fit"
    assert why.returncode == 0, why.stderr
    assert HOT_REASON in why.stdout and "rejected 10 node(s)" in why.stdout, why.stdout

    # NORMAL again: worst-fit sends new work to the emptiest nodes, which are the ones that were HOT.
    assert Counter(r.kind for r in after) == {"TaskPlaced": 100}
    assert not any(f["reason"] == HOT_REASON for r in after for f in r.payload["provenance"]["filtered"])
    back = Counter(r.payload["node_id"] for r in after if r.payload["node_id"] in hot)
    assert len(back) == len(hot) and sum(back.values()) >= 20, back
    figures = {"nodes": len(nodes), "hot": len(hot), "placed_while_hot": len(during),
               "on_hot_nodes_while_hot": 0, "decisions_naming_hot": len(during),
               "placed_after_normal": len(after), "of_which_on_formerly_hot": sum(back.values())}
    out = settings.home / "reports"
    out.mkdir(parents=True, exist_ok=True)
    (out / "congestion.json").write_text(json.dumps(figures, indent=2))
    print(f"congestion: {json.dumps(figures)}")
