"""The control plane end to end on the real broker and registry: `suanli up` headless,
dead letters, and SIGKILLs of the scheduler worker.

Each test runs its own plane in a namespace of its own (topics, consumer groups and
RocksDB directories), against the stack that `suanli test` started.
"""
from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import struct
import threading
import time
import uuid

import pytest

from suanli.config import load_settings
from suanli.deploy.plane import Plane, PlaneOptions
from suanli.replay.log_replay import decided_prefix, describe, first_divergence, regenerate
from suanli.schemas.codec import Codec
from suanli.schemas.registry import RegistryClient
from suanli.streams.kafka_io import EventConsumer

pytestmark = pytest.mark.stack


def _plane(stack, **options) -> Plane:
    settings = load_settings(namespace=f"t{uuid.uuid4().hex[:10]}", partitions=2)
    options.setdefault("drain_timeout", 240)
    return Plane(settings, PlaneOptions(exit_when_drained=True, quiet=True, **options), out=lambda _m: None)


def _run(plane: Plane) -> dict:
    plane.start()
    try:
        return asyncio.run(plane.run())
    finally:
        plane.stop()


async def _read(settings, topic: str) -> list:
    with RegistryClient(settings.registry_url) as registry:
        async with EventConsumer(settings.bootstrap_servers, Codec(registry), [topic]) as consumer:
            return await consumer.read_until_end()


def test_thousand_openb_tasks_on_the_full_cluster(stack):
    plane = _plane(stack, tasks=1000, rate=1000)
    plane.start()
    services = [service for service, _argv in plane.services]
    try:
        result = asyncio.run(plane.run())
    finally:
        plane.stop()
    assert result["submitted"] == 1000
    decided = result["placed"] + result["pending"] + result["unschedulable"]
    assert decided == 1000, result
    assert result["placed"] > 900, result
    assert result["capacity_violations"] == 0, result["violations"]
    assert result["dead_lettered"] == 0
    assert len(services) == 4          # intake, scheduler, telemetry, the simulated cluster
    for service in services:
        assert service.pid() is None, f"{service.name} still running"  # stop() left nothing behind
    _report("e2e-1000", result)


def test_bad_input_is_dead_lettered_and_valid_input_scheduled(stack):
    async def workload(publish, send_raw, tasks, names):
        rng = random.Random(11)
        for i, task in enumerate(tasks):
            await publish("TaskSubmitted", task)
            kind = i % 4
            if kind == 0:       # undecodable bytes
                await send_raw(names.raw_tasks, b"\x7f" + bytes(rng.getrandbits(8) for _ in range(20)), f"bad-{i}")
            elif kind == 1:     # a schema id the registry never issued
                await send_raw(names.raw_tasks, struct.pack(">bI", 0, 1_900_000_000 + i) + b"\x02\x04", f"bad-{i}")
            elif kind == 2:     # invalid values: negative GPUs
                bad = dict(task, task_id=f"{task['task_id']}-neg", event_id=f"{task['event_id']}-neg",
                           resources=dict(task["resources"], gpu_count=-2))
                await publish("TaskSubmitted", bad)
            else:               # a status for a node that never registered
                await publish("NodeStatusChanged", {"event_id": f"ghost-{i}", "node_id": f"ghost-node-{i}",
                                                    "cell": task["cell"], "status": "DOWN", "reason": "", "at": 1})

    plane = _plane(stack, tasks=1000, rate=0, workload=workload)
    result = _run(plane)
    assert result["worker_restarts"] == {}
    assert result["dead_lettered"] == 1000, result
    assert result["placed"] + result["pending"] + result["unschedulable"] == 1000
    assert result["capacity_violations"] == 0
    letters = asyncio.run(_read(plane.s, f"{plane.s.namespace}.deadletter"))
    kinds = {}
    for letter in letters:
        kinds[letter.payload["error_kind"]] = kinds.get(letter.payload["error_kind"], 0) + 1
        assert letter.payload["reason"]
        assert letter.payload["value"]  # the original bytes are kept
    assert kinds == {"UNDECODABLE": 250, "UNKNOWN_SCHEMA": 250, "INVALID": 250, "UNKNOWN_NODE": 250}
    invalid = next(l for l in letters if l.payload["error_kind"] == "INVALID")
    assert "resources.gpu_count" in invalid.payload["reason"]
    _report("dead-letters", {**result, "by_kind": kinds})


def test_bad_policy_is_dead_lettered_with_its_reason_and_never_crashes_the_scheduler(stack):
    bad = [("default", {"bestfit_wieght": 2.0}, "bestfit_wieght"),        # an unknown argument
           ("fgd", {"threshold_pct": 250}, "threshold_pct"),              # a value out of range
           ("no-such-strategy", {}, "no-such-strategy")]                  # an unknown strategy

    async def workload(publish, send_raw, tasks, names):
        for i, (strategy, config, _) in enumerate(bad):
            await publish("PolicyChanged", {"event_id": f"bad-policy-{i}", "cell": tasks[0]["cell"],
                                            "strategy": strategy, "config_json": json.dumps(config),
                                            "changed_by": "test", "at": 1})
        for task in tasks:
            await publish("TaskSubmitted", task)

    plane = _plane(stack, tasks=200, rate=0, workload=workload)
    result = _run(plane)
    assert result["worker_restarts"] == {}
    assert result["dead_lettered"] == len(bad), result
    assert result["placed"] == 200 and result["capacity_violations"] == 0
    letters = asyncio.run(_read(plane.s, f"{plane.s.namespace}.deadletter"))
    reasons = sorted(letter.payload["reason"] for letter in letters)
    assert all(letter.payload["error_kind"] == "INVALID" and letter.payload["value"] for letter in letters)
    for _strategy, _config, named in bad:
        assert any(named in reason for reason in reasons), (named, reasons)


def test_two_scheduler_workers_survive_a_kill_of_the_deciding_one(stack):
    # `suanli up --workers 2`: the run's one cell is on one partition, so one worker decides
    # and the other stands by. Kill the deciding one: the cell resumes on the standby or on
    # the killed one's restart (the plane restarts it at once; the group decides which).
    plane = _plane(stack, tasks=2000, rate=100, time_scale=0.00005, schedulers=2)
    plane.start()
    workers = [s for s, _ in plane.services if s.name.startswith("scheduler")]
    assert [w.name for w in workers] == ["scheduler", "scheduler-2"]
    taken: dict[str, object] = {}

    def deciding() -> list:
        return [w for w in workers if w.log_file.exists() and "recovered" in w.log_file.read_text(errors="replace")]

    def killer() -> None:
        deadline = time.monotonic() + 120
        while not deciding() and time.monotonic() < deadline:
            time.sleep(0.2)
        time.sleep(3)
        [active] = deciding()
        taken["killed"], taken["pid"] = active.name, active.pid()
        os.kill(taken["pid"], signal.SIGKILL)

    thread = threading.Thread(target=killer, daemon=True)
    thread.start()
    try:
        result = asyncio.run(plane.run())
    finally:
        thread.join()
        plane.stop()
    assert taken, "the active worker was never found"
    recoveries = sum(w.log_file.read_text(errors="replace").count("recovered") for w in workers)
    assert recoveries >= 2, "no worker resumed the cell after the kill"
    assert result["worker_restarts"].get(taken["killed"]) == 1, result["worker_restarts"]
    assert result["submitted"] == 2000 and result["placed"] + result["pending"] + result["unschedulable"] == 2000
    assert result["capacity_violations"] == 0, result["violations"]
    decisions = asyncio.run(_read(plane.s, f"{plane.s.namespace}.decisions"))
    placed: dict[str, set] = {}
    for d in decisions:
        if d.kind == "TaskPlaced":
            placed.setdefault(d.payload["task_id"], set()).add(d.payload["event_id"])
    assert all(len(ids) == 1 for ids in placed.values()), "a task placed twice"
    _report("standby", {"killed": taken["killed"], "restarts": result["worker_restarts"], "placed": len(placed),
                        "recoveries": recoveries, "seconds": result["seconds"]})


def test_scheduler_survives_sigkill_without_lost_or_duplicated_placements(stack):
    plane = _plane(stack, tasks=5000, rate=60, time_scale=0.00005)   # ~85 s of submissions: room for 5 kills
    plane.start()
    kills: list[float] = []
    stop = threading.Event()

    def killer() -> None:
        # Each kill waits until the scheduler it kills has recovered its partition and run a
        # while (so that restores from snapshots (written every 5 s) plus catch-up are tested, not
        # only processes killed while joining the group), then a random 1-4 s more.
        rng = random.Random(2026)
        while len(kills) < 5 and not stop.is_set():
            seen = len(_recoveries(plane))
            deadline = time.monotonic() + 60
            while len(_recoveries(plane)) == seen and time.monotonic() < deadline and not stop.is_set():
                stop.wait(0.2)
            stop.wait(rng.uniform(2.0, 8.0))
            pid = next(s for s, _ in plane.services if s.name == "scheduler").pid()
            if pid is not None and not stop.is_set():
                os.kill(pid, signal.SIGKILL)
                kills.append(time.monotonic())

    thread = threading.Thread(target=killer, daemon=True)
    thread.start()
    try:
        result = asyncio.run(plane.run())
    finally:
        stop.set()
        thread.join()
        plane.stop()
    assert len(kills) == 5, f"only {len(kills)} kills happened before the run drained"
    assert result["worker_restarts"].get("scheduler", 0) >= 5
    assert result["submitted"] == 5000
    assert result["placed"] + result["pending"] + result["unschedulable"] == 5000, result  # none lost
    assert result["capacity_violations"] == 0, result["violations"]

    settings = plane.s
    cell_log = asyncio.run(_read(settings, f"{settings.namespace}.cells"))
    decisions = asyncio.run(_read(settings, f"{settings.namespace}.decisions"))
    # Duplicates from redelivery carry the same event id and bytes; keep first occurrences.
    seen, recorded, placements = set(), [], {}
    for d in decisions:
        if d.payload["event_id"] in seen:
            continue
        seen.add(d.payload["event_id"])
        recorded.append(d.value)
        if d.kind == "TaskPlaced":
            assert d.payload["task_id"] not in placements, f"{d.payload['task_id']} placed twice"
            placements[d.payload["task_id"]] = (d.payload["node_id"], d.payload["gpu_devices"])
    # The connector is stopped first and reports its running tasks FAILED; those inputs may
    # reach the cell log after the scheduler stopped. Compare what the scheduler had read:
    # every input up to the last one it decided on, per partition (the log is ordered).
    with RegistryClient(settings.registry_url) as registry:
        codec = Codec(registry)
        records = decided_prefix(cell_log, (d.payload for d in decisions))
        regenerated = regenerate(codec, records)
        crash_free = {}
        for value in regenerated:
            kind, payload = codec.decode(value)
            if kind == "TaskPlaced":
                crash_free[payload["task_id"]] = (payload["node_id"], payload["gpu_devices"])
        divergence = first_divergence(recorded, regenerated)
        if divergence is not None or placements != crash_free:
            pytest.fail(f"decisions differ from a crash-free replay: {len(crash_free)} placements, "
                        f"{sum(placements.get(t) != p for t, p in crash_free.items())} of them differ; first "
                        f"differing decision #{divergence and divergence.index}: recorded "
                        f"{describe(codec, divergence and divergence.recorded)}, replayed "
                        f"{describe(codec, divergence and divergence.regenerated)}; the scheduler's recoveries: "
                        f"{_recoveries(plane)}")
    report = {"kills": len(kills), "restarts": result["worker_restarts"], "decision_records": len(decisions),
              "distinct_decisions": len(recorded), "duplicates_dropped": len(decisions) - len(recorded),
              "placed": len(placements), "seconds": result["seconds"]}
    _report("crash", report)


def _recoveries(plane: Plane) -> list[str]:
    """The scheduler log's recovery lines: where each restarted worker took its state from."""
    scheduler = next(s for s, _ in plane.services if s.name == "scheduler")
    text = scheduler.log_file.read_text(errors="replace") if scheduler.log_file.exists() else ""
    return [line.split("scheduler: ", 1)[-1] for line in text.splitlines() if "recovered" in line]


def _report(name: str, figures: dict) -> None:
    """Keep a test's measured figures (for the closing note) and show them with -s."""
    import json

    out = load_settings().home / "reports"
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{name}.json").write_text(json.dumps(figures, indent=2))
    print(f"{name}: {json.dumps(figures)}")
