"""Task profiles (C9, issue 20) on the real stack: 5,000 openb tasks through intake, the
scheduler worker and the simulated cluster with profiles on, the scheduler SIGKILLed once
mid-run. Every task's decision carries its profile; the history behind the profiles comes
back with the worker (snapshot in its changelogged RocksDB table, plus the log after it); and
the decisions regenerate byte for byte from the cell log.
"""
from __future__ import annotations

import asyncio
import os
import signal
import threading
import uuid

import pytest

from suanli.config import load_settings
from suanli.deploy.plane import Plane, PlaneOptions
from suanli.processors.profiler import numeric_dimensions
from suanli.replay.driver import drive
from suanli.replay.log_replay import first_divergence, regenerate
from suanli.schemas.codec import Codec
from suanli.schemas.registry import RegistryClient
from suanli.streams.kafka_io import EventConsumer
from suanli.streams.records import RawRecord

from plane_helpers import publish_policy_in_force, read_topic

pytestmark = pytest.mark.stack

TASKS = 5000
WARM_UP = 500


async def _await_completions(settings, topic: str, count: int, timeout_s: float = 120) -> None:
    """Until the cell log holds ``count`` COMPLETED statuses (a condition, read as records arrive)."""
    done = 0
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    with RegistryClient(settings.registry_url) as registry:
        async with EventConsumer(settings.bootstrap_servers, Codec(registry), [topic]) as consumer:
            async for batch in consumer.batches(timeout_ms=250):
                done += sum(r.kind == "TaskStatusChanged" and r.payload["status"] == "COMPLETED" for r in batch)
                if done >= count:
                    return
                assert loop.time() < deadline, f"only {done} of {count} completions after {timeout_s:.0f} s"


def test_five_thousand_tasks_carry_profiles_that_survive_a_scheduler_kill(stack):
    """A warm-up of 500 tasks gives the cell a history; the scheduler is SIGKILLed once 200 of
    them completed; then 5,000 tasks arrive, every one of them profiled from history the
    restarted worker got back."""
    settings = load_settings(namespace=f"t{uuid.uuid4().hex[:10]}", partitions=2)
    warm = threading.Event()
    restarted = threading.Event()
    run_ids: set[str] = set()

    async def workload(publish, send_raw, tasks, names):
        run_ids.update(t["task_id"] for t in tasks[WARM_UP:])
        # in force before the first task: else the first tasks may be decided without profiles
        await publish_policy_in_force(settings, publish, {
            "event_id": "profiles-on", "cell": tasks[0]["cell"], "strategy": "default",
            "config_json": '{"profiles":{"enabled":true}}', "changed_by": "test", "at": 1})
        await drive(publish, tasks[:WARM_UP], 400)
        await _await_completions(settings, names.cell_log, 200)
        warm.set()
        await asyncio.to_thread(restarted.wait, 60)
        await drive(publish, tasks[WARM_UP:], 400)

    plane = Plane(settings, PlaneOptions(tasks=WARM_UP + TASKS, rate=400, time_scale=0.00005,
                                         exit_when_drained=True, quiet=True, drain_timeout=300, workload=workload),
                  out=lambda _m: None)
    plane.start()
    killed: list[int] = []

    def killer() -> None:
        # one SIGKILL of the scheduler between the warm-up and the run (the plane restarts it)
        if warm.wait(timeout=180):
            scheduler = next(s for s, _ in plane.services if s.name == "scheduler")
            pid = scheduler.pid()
            if pid is not None:
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
        restarted.set()

    thread = threading.Thread(target=killer, daemon=True)
    thread.start()
    try:
        result = asyncio.run(plane.run())
    finally:
        thread.join()
        plane.stop()
    assert killed and result["worker_restarts"].get("scheduler", 0) >= 1, result["worker_restarts"]
    assert result["placed"] + result["pending"] + result["unschedulable"] == WARM_UP + TASKS, result

    decisions = asyncio.run(read_topic(settings, f"{settings.namespace}.decisions"))
    cell_log = asyncio.run(read_topic(settings, f"{settings.namespace}.cells"))
    first: dict[str, dict] = {}
    arrivals_seen: dict[int, float] = {}
    dims = numeric_dimensions()
    for d in sorted(decisions, key=lambda r: (r.payload.get("provenance") or {}).get("input", {}).get("offset", -1)):
        if d.kind not in ("TaskPlaced", "TaskPending", "TaskUnschedulable"):
            continue
        prof = d.payload["provenance"]["profile"]
        assert prof is not None, f"{d.payload['task_id']}: a decision without its profile"
        first.setdefault(d.payload["task_id"], prof)
        part = d.payload["provenance"]["input"]["partition"]
        # the tenant's submissions only grow along the log: a history lost at the restart would drop them
        assert prof["tenant_arrivals"] >= arrivals_seen.get(part, 0), "profile history went back after the restart"
        arrivals_seen[part] = prof["tenant_arrivals"]
    assert len(first) == WARM_UP + TASKS
    assert all(len([k for k in dims if k in p]) >= 50 for p in first.values())
    run = {tid: p for tid, p in first.items() if tid in run_ids}
    assert len(run) == TASKS
    filled = sorted(p["dims_filled"] for p in run.values())
    assert all(p["history_level"] != "prior" for p in run.values()), "a task of the run was profiled without history"
    assert filled[0] >= 50, filled[:10]
    cold = sorted(p["dims_filled"] for tid, p in first.items() if tid not in run_ids)

    # the decisions regenerate from the cell log byte for byte, profiles included
    seen, recorded = set(), []
    last_decided: dict[int, int] = {}
    for d in decisions:
        if d.payload["event_id"] not in seen:
            seen.add(d.payload["event_id"])
            recorded.append(d.value)
        pos = d.payload["provenance"]["input"]
        last_decided[pos["partition"]] = max(last_decided.get(pos["partition"], -1), pos["offset"])
    with RegistryClient(settings.registry_url) as registry:
        records = [RawRecord(r.topic, r.partition, r.offset, r.timestamp, r.key, r.value)
                   for r in sorted(cell_log, key=lambda r: (r.partition, r.offset))
                   if r.offset <= last_decided.get(r.partition, -1)]
        regenerated = regenerate(Codec(registry), records)
    assert first_divergence(recorded, regenerated) is None
    print(f"profiles: run of {len(run)} tasks after a warm-up of {WARM_UP} and a scheduler SIGKILL "
          f"(restarts {result['worker_restarts']}); numeric dimensions {len(dims)}; observed per task "
          f"min/median/max {filled[0]}/{filled[len(filled) // 2]}/{filled[-1]}, >= 50: {sum(f >= 50 for f in filled)}; "
          f"warm-up tasks min/median {cold[0]}/{cold[len(cold) // 2]} "
          f"({sum(f < 50 for f in cold)} decided before anything had finished)")
