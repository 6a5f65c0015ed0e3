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
import re
import signal
import struct
import threading
import time
import uuid

import pytest

from suanli.bench.urgent_latency import read_latency
from suanli.config import load_settings
from suanli.deploy.plane import Plane, PlaneOptions, held
from suanli.deploy.waiting import wait_for
from suanli.errors import StackError
from suanli.processors.state import TERMINAL
from suanli.replay.log_replay import REPLAY_NAMESPACE, decided_prefix, describe, first_divergence, regenerate
from suanli.schemas.codec import Codec
from suanli.schemas.registry import RegistryClient
from suanli.streams.app import latency_path
from suanli.streams.cell_runner import CellRunner
from suanli.streams.records import RawRecord
from suanli.streams.topics import TopicNames

from plane_helpers import publish_policy_in_force, read_topic

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
    _decided_as_if_scored_per_row(plane.s)


def _decided_as_if_scored_per_row(settings) -> None:
    """The live scheduler scored its cycles one row per node class (the openb cluster's
    1,213 nodes fall into few classes; ``framework.class_scores``): its recorded decisions
    must be, byte for byte, what the core decides with every feasible row scored, and the
    inputs must have taken the class path."""
    from suanli.processors import compiled, framework

    cell_log = asyncio.run(read_topic(settings, f"{settings.namespace}.cells"))
    decisions = asyncio.run(read_topic(settings, f"{settings.namespace}.decisions"))
    recorded, placements = _distinct_decisions(decisions)
    assert len(placements) > 900
    classed = []
    real = compiled.KERNELS.class_rows

    def counting(ids, rows, marks, reps, slot):
        k = real(ids, rows, marks, reps, slot)
        classed.append(2 * k <= rows.size)
        return k
    with RegistryClient(settings.registry_url) as registry:
        codec = Codec(registry)
        records = decided_prefix(cell_log, (d.payload for d in decisions))
        saved = framework.CLASS_SCORING_MIN_ROWS
        compiled.KERNELS.class_rows = counting
        try:
            assert first_divergence(recorded, regenerate(codec, records)) is None
            framework.CLASS_SCORING_MIN_ROWS = 10 ** 9          # every feasible row scored
            divergence = first_divergence(recorded, regenerate(codec, records))
        finally:
            framework.CLASS_SCORING_MIN_ROWS = saved
            compiled.KERNELS.class_rows = real
        assert divergence is None, (f"decision #{divergence.index}: recorded {describe(codec, divergence.recorded)}, "
                                    f"scored per row {describe(codec, divergence.regenerated)}")
    assert sum(classed) > 500, f"{sum(classed)} of {len(classed)} cycles scored per class"


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
    letters = asyncio.run(read_topic(plane.s, f"{plane.s.namespace}.deadletter"))
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
    letters = asyncio.run(read_topic(plane.s, f"{plane.s.namespace}.deadletter"))
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
        """The workers that recovered a partition they hold now (the cell's: the other is empty)."""
        found = []
        for w in workers:
            text = w.log_file.read_text(errors="replace") if w.log_file.exists() else ""
            if {int(p) for p in re.findall(r"partition (\d+) recovered", text)} & held(w):
                found.append(w)
        return found

    def submissions_applied(w) -> int:
        """TaskSubmitted inputs ``w``'s running process has applied, from its latency report
        (written every few seconds while it decides; 0 before the first, or from an older process)."""
        report = read_latency(latency_path(plane.s, 1 if w.name == "scheduler" else 2))
        if report is None or report.get("pid") != w.pid():
            return 0
        return int(report.get("apply", {}).get("TaskSubmitted", {}).get("count", 0))

    def killer() -> None:
        # Wait until both workers hold a partition and one of them has decided 200 more submissions: the first
        # to start recovers the cell, and may hand it to the second when that one joins. (Taking
        # the first "recovered" in any log once killed the worker left with the empty partition.)
        def steady() -> list | None:
            active = deciding()
            return active if len(active) == 1 and all(held(w) for w in workers) else None

        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                active = wait_for("one worker deciding the cell, both holding a partition", steady,
                                  timeout=max(1.0, deadline - time.monotonic()), every=0.2)
            except StackError:
                return                   # the test then fails: "the active worker was never found"
            # let it decide a while before the kill: 200 more submissions through its core
            seen = submissions_applied(active[0])
            try:
                wait_for("the active worker deciding 200 more submissions",
                         lambda: submissions_applied(active[0]) >= seen + 200 or None,
                         timeout=max(1.0, deadline - time.monotonic()), every=0.2)
            except StackError:
                return
            if steady() == active:
                taken["killed"], taken["pid"] = active[0].name, active[0].pid()
                os.kill(taken["pid"], signal.SIGKILL)
                return

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
    decisions = asyncio.run(read_topic(plane.s, f"{plane.s.namespace}.decisions"))
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

    # Each kill waits until the scheduler it kills has recovered its partition and run a while
    # (so that restores from snapshots (written every 5 s) plus catch-up are tested, not only
    # processes killed while joining the group).
    thread = _killer(plane, kills, stop, times=5, pause=(2.0, 8.0), seed=2026)
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
    cell_log = asyncio.run(read_topic(settings, f"{settings.namespace}.cells"))
    decisions = asyncio.run(read_topic(settings, f"{settings.namespace}.decisions"))
    recorded, placements = _distinct_decisions(decisions)
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


def test_a_cell_that_forgets_survives_kills_and_still_refuses_its_forgotten_tasks(stack):
    """Retention on the real stack: a policy that keeps only 16 finished tasks, two SIGKILLs of
    the scheduler (each restore comes from a snapshot that carries tombstones), then every one
    of the first 150 tasks submitted again under a new event id. Half the tasks are members of
    jobs (a quarter of those federated clients), which a cell forgets like any other, keeping
    of each client what its job's later tasks read. None is placed twice, and the decisions
    are those of a crash-free replay and of a replay whose cell forgets nothing."""
    from suanli.replay.driver import drive

    forget = {"retention": {"finished_tasks": 16, "forgotten_ids": 100_000}}
    again = 150
    kills: list[float] = []
    restored, stop = threading.Event(), threading.Event()

    async def workload(publish, send_raw, tasks, names):
        await publish_policy_in_force(plane.s, publish, {
            "event_id": "forgetful", "cell": tasks[0]["cell"], "strategy": "default",
            "config_json": json.dumps(forget), "changed_by": "test", "at": 1})
        for i, task in enumerate(tasks):                # the resubmissions below carry these too
            if i % 2:
                task["job_id"] = f"array-{i // 40}"
            if i % 8 == 1:                               # a federated job's clients, in those jobs
                task["labels"] = {**(task.get("labels") or {}), "federated-role": "client"}
        await drive(publish, tasks, 50)
        # the resubmissions go to a cell restored (after the last kill) from a snapshot
        deadline = time.monotonic() + 120
        while not restored.is_set() and time.monotonic() < deadline:
            await asyncio.sleep(0.2)
        for task in tasks[:again]:
            await publish("TaskSubmitted", dict(task, event_id=f"again-{task['event_id']}"))

    plane = _plane(stack, tasks=1200, rate=50, time_scale=0.00005, workload=workload)
    plane.start()

    # Each kill waits for the scheduler's recovery and then long enough (6-8 s) for a snapshot
    # (every 5 s) of a cell that has forgotten tasks by then; the resubmissions wait for the
    # recovery after the last kill.
    thread = _killer(plane, kills, stop, times=2, pause=(6.0, 8.0), seed=7, recovered=restored)
    try:
        result = asyncio.run(plane.run())
    finally:
        stop.set()
        thread.join()
        recoveries = _recoveries(plane)
        plane.stop()
    assert len(kills) == 2, f"only {len(kills)} kills happened before the run drained"
    assert result["submitted"] == 1200
    assert result["placed"] + result["pending"] + result["unschedulable"] == 1200, result
    assert result["capacity_violations"] == 0, result["violations"]
    restores = [line for line in recoveries if "state from snapshot" in line]
    tombstones = [int(m) for line in restores for m in re.findall(r"and (\d+) tombstones", line)]
    assert tombstones and max(tombstones) > 0, f"no restore from a snapshot with tombstones: {recoveries}"

    settings = plane.s
    cell_log = asyncio.run(read_topic(settings, f"{settings.namespace}.cells"))
    decisions = asyncio.run(read_topic(settings, f"{settings.namespace}.decisions"))
    recorded, placed = _distinct_decisions(decisions)      # fails on a resubmission placed again
    resubmitted = [r for r in cell_log if r.kind == "TaskSubmitted" and r.payload["event_id"].startswith("again-")]
    assert len(resubmitted) == again

    with RegistryClient(settings.registry_url) as registry:
        codec = Codec(registry)
        records = decided_prefix(cell_log, (d.payload for d in decisions))
        crash_free = regenerate(codec, records)
        divergence = first_divergence(recorded, crash_free)
        assert divergence is None, (f"decision #{divergence.index} differs from a crash-free replay: recorded "
                                    f"{describe(codec, divergence.recorded)}, replayed "
                                    f"{describe(codec, divergence.regenerated)}")

        def remembering(record):
            kind, payload = codec.decode(record.value)
            if kind != "PolicyChanged":
                return record
            config = {"retention": {"finished_tasks": 1_000_000, "forgotten_ids": 0}}
            value = codec.encode(kind, dict(payload, config_json=json.dumps(config)))
            return RawRecord(record.topic, record.partition, record.offset, record.timestamp, record.key, value)

        def gist(values):
            out = []
            for value in values:
                kind, payload = codec.decode(value)
                out.append((kind, payload.get("event_id"), payload.get("task_id"), payload.get("node_id"),
                            tuple(payload.get("gpu_devices") or ())))
            return out

        # the whole log (the resubmissions too), replayed by a cell that forgets and by one
        # whose policy forgets nothing: the same decisions (the provenance's policy digest aside)
        whole = [RawRecord(r.topic, r.partition, r.offset, r.timestamp, r.key, r.value)
                 for r in sorted(cell_log, key=lambda r: (r.partition, r.offset))]
        runner = CellRunner(codec, TopicNames(REPLAY_NAMESPACE))
        assert gist(regenerate(codec, [remembering(r) for r in whole])) == gist(regenerate(codec, whole,
                                                                                          runner=runner))
    # the cell that forgot did forget job members, and kept what their jobs read of the clients
    submitted = [r.payload for r in cell_log if r.kind == "TaskSubmitted"]
    members = {p["task_id"] for p in submitted if p.get("job_id")}
    assert len(members) == 600, len(members)
    (cell,) = [c for part in runner.partitions.values() for c in part.cells.values()]
    forgotten_members = members & set(cell.forgotten)
    assert len(forgotten_members) > 100, len(forgotten_members)
    clients = {p["task_id"] for p in submitted if (p.get("labels") or {}).get("federated-role") == "client"}
    assert len(clients) == 150, len(clients)
    past = {c.task_id for cs in cell.past_clients.values() for c in cs}
    assert past == clients & set(cell.forgotten) and len(past) > 25, len(past)
    assert not {t.task.task_id for t in cell.tasks.values() if t.task.job_id and t.status in TERMINAL} - \
        set(cell.finished), "a finished array-job member is not in line to be forgotten"
    _report("retention", {"kills": len(kills), "restarts": result["worker_restarts"],
                          "tombstones_at_restores": tombstones, "placed": len(placed), "resubmitted": again,
                          "job_members_forgotten": len(forgotten_members), "clients_forgotten": len(past),
                          "seconds": result["seconds"]})


def _killer(plane: Plane, kills: list[float], stop: threading.Event, *, times: int, pause: tuple[float, float],
            seed: int, recovered: threading.Event | None = None) -> threading.Thread:
    """A started thread that SIGKILLs the plane's scheduler ``times`` times (appending the
    time of each to ``kills``): each once the scheduler has recovered (from its start or the
    last kill) and run a random ``pause`` seconds more. ``recovered`` is set once it has
    recovered from the last kill. Stops early when ``stop`` is set."""
    def run() -> None:
        rng = random.Random(seed)
        seen = 0
        while len(kills) < times and not stop.is_set():
            _wait_for_recovery(plane, seen, stop)
            stop.wait(rng.uniform(*pause))
            pid = next(s for s, _ in plane.services if s.name == "scheduler").pid()
            if pid is not None and not stop.is_set():
                seen = len(_recoveries(plane))
                os.kill(pid, signal.SIGKILL)
                kills.append(time.monotonic())
        if recovered is not None and _wait_for_recovery(plane, seen, stop):
            recovered.set()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def _distinct_decisions(decisions: list) -> tuple[list[bytes], dict[str, tuple]]:
    """The decision records' values, first occurrences only (duplicates from redelivery carry
    the same event id and bytes), and each placed task's (node, devices); fails if a task was
    placed twice."""
    seen, recorded, placements = set(), [], {}
    for d in decisions:
        if d.payload["event_id"] in seen:
            continue
        seen.add(d.payload["event_id"])
        recorded.append(d.value)
        if d.kind == "TaskPlaced":
            assert d.payload["task_id"] not in placements, f"{d.payload['task_id']} placed twice"
            placements[d.payload["task_id"]] = (d.payload["node_id"], d.payload["gpu_devices"])
    return recorded, placements


def _wait_for_recovery(plane: Plane, seen: int, stop: threading.Event, timeout: float = 60.0) -> bool:
    """Wait until the scheduler's log has more than ``seen`` recovery lines (False: stopped or
    timed out first)."""
    deadline = time.monotonic() + timeout
    while len(_recoveries(plane)) <= seen:
        if stop.is_set() or time.monotonic() > deadline:
            return False
        stop.wait(0.2)
    return True


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
