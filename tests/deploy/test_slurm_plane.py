"""Real work through Suanli onto a real Slurm cluster (issue 19, the Slurm acceptance checks).

The cluster is ``deploy/slurm.py``'s: Debian's Slurm 22.05 and MUNGE, slurmctld and four
slurmd (n1..n4, 2 CPUs and 2 GiB each, n4 with an FPGA as count-only GRES) on 127.0.0.1, started by this module if it does not
run (and stopped again then). The plane is the real one in a namespace of its own: intake,
scheduler and telemetry workers (``deploy/plane.py``) and the slurm connector as its own
process (``python -m suanli.connectors.slurm``). The test then, as an outside auditor:

- submits 200 tasks (1 CPU, 64 MiB, ``sh -c 'sleep S; exit C'``), one of them long (60 s),
  a quarter of the others exiting non-zero (codes 1..7), straight onto the raw tasks topic;
- samples ``squeue`` every second while they run: every job it lists carries its dispatch
  id (``--comment=suanli:<dispatch id>``), which is the id of the TaskPlaced decision, and
  must run on that decision's node (and bear its task's id as the job name);
- as soon as the long task runs, SIGKILLs its node's slurmd: Slurm marks the node DOWN (and
  its jobs NODE_FAIL), the connector says so (NodeStatusChanged DOWN), the core loses the
  node's tasks (TaskLost) and places them again; each must end on another node, the long
  one COMPLETED. Until the node is judged, Suanli still places short tasks in its free CPU
  (the window): Slurm's launch on the dead slurmd fails and it requeues the job for the
  node; those too must be lost with the node and end elsewhere, none on it;
- waits until every task is released (TaskReleased) and checks that each ended with its
  real exit code (COMPLETED 0, or FAILED with the code its command exits with), reported
  from the node its last placement chose, with its Slurm job id in the message;
- starts the killed slurmd again: Slurm returns the node to service and the connector
  reports it READY and heartbeats it again;
- submits two tasks asking an FPGA (n4's GRES ``fpga:u250:1``, registered as an FPGA
  accelerator): they complete on n4, as Slurm jobs holding ``gres:fpga:u250:1``.

The figures (wall time, outcomes by exit code, squeue rows checked, time from the kill to
DOWN, where the lost tasks went) go to ``<home>/reports/slurm-plane.json`` and stdout (``-s``).
Nothing is mocked and every wait reads Kafka up to a condition, with a deadline.
"""
from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from suanli.config import load_settings, to_env
from suanli.deploy import slurm
from suanli.deploy.plane import worker_processes
from suanli.schemas.codec import Codec
from suanli.schemas.registry import RegistryClient
from suanli.schemas.task_spec import task_from_document
from suanli.streams.kafka_io import EventConsumer, EventProducer, ensure_topics
from suanli.streams.topics import TopicNames, core_topics

pytestmark = [pytest.mark.stack, pytest.mark.timeout(600)]

PY = sys.executable
TASKS, LONG, LONG_S = 200, 1, 60      # long: well past the ~30 s a dead node takes to be DOWN
RUN_DEADLINE_S = 420


def expected_code(i: int) -> int:
    """The exit code of task i: a quarter of the short tasks fail with 1..7."""
    return 0 if i < LONG or i % 4 else 1 + (i // 4) % 7


def task_doc(i: int, cell: str, run: str) -> dict[str, Any]:
    sleep = LONG_S if i < LONG else 0.2 + (i % 5) * 0.2
    return {"id": f"sl-{run}-{i:03d}", "tenant": "hpc", "cell": cell, "qos": "silver",
            "resources": {"cpu": 1, "memory": "64Mi"},
            "command": ["sh", "-c", f"sleep {sleep:g}; echo task {i} done; exit {expected_code(i)}"],
            "env": {"SUANLI_TEST_RUN": run}, "labels": {"suite": "slurm-plane"}}


@pytest.fixture(scope="module")
def cluster(stack):
    started = slurm.up(stack, timeout=180)
    gres = (slurm.node_states(stack) or {}).get("n4", {}).get("gres", "")
    if "fpga" not in gres:
        pytest.fail(f"the running Slurm cluster's n4 has GRES {gres!r}, not the default fpga:u250:1: restart it "
                    "(`python -m suanli.deploy.slurm down; python -m suanli.deploy.slurm up`)")
    killed: list[str] = []
    yield stack, killed
    if started["started"].get("slurmctld"):
        slurm.down(stack)
    else:
        for node in killed:          # leave the cluster whole for the next run
            slurm.start_node(stack, node)


class Plane:
    def __init__(self, settings, cell: str, run_dir: Path):
        self.s, self.cell, self.run_dir = settings, cell, run_dir
        self.env = {**os.environ, **to_env(settings)}
        self.topics = TopicNames(settings.namespace)


@pytest.fixture(scope="module")
def plane(cluster, tmp_path_factory):
    stack, _killed = cluster
    settings = load_settings(namespace=f"t{uuid.uuid4().hex[:10]}", partitions=1)
    run = uuid.uuid4().hex[:6]
    lp = Plane(settings, f"slurm-{run}", tmp_path_factory.mktemp("slurm-jobs"))
    asyncio.run(ensure_topics(settings.bootstrap_servers, core_topics(1, settings.namespace, connectors=("slurm",))))
    services = list(worker_processes(settings).values())
    for service, argv in services:
        service.start(argv, env=to_env(settings))
    log_path = lp.run_dir / "connector.log"
    connector = None
    try:
        with open(log_path, "ab") as log:
            connector = subprocess.Popen([PY, "-m", "suanli.connectors.slurm", "--cell", lp.cell, "--partitions", "1",
                                          "--run-dir", str(lp.run_dir), "--log-level", "INFO"],
                                         stdout=subprocess.PIPE, stderr=log, text=True, env=lp.env)
        line = connector.stdout.readline()
        assert line.startswith("suanli connector slurm: 4 node(s)"), (line, log_path.read_text()[-3000:])
        lp.connector_log = log_path
        yield lp
    finally:
        if connector is not None:
            connector.terminate()
            try:
                connector.wait(timeout=60)
            except subprocess.TimeoutExpired:
                connector.kill()
                connector.wait()
        for service, _argv in reversed(services):
            service.stop()


class SqueueSampler(threading.Thread):
    """``squeue`` every second: (t, job id, job name, node, state, comment) rows; kills the
    slurmd of the first node that runs a long task (once), recording what it ran."""

    def __init__(self, settings, long_tasks: set[str], killed: list[str]):
        super().__init__(daemon=True)
        self.settings, self.long_tasks, self.killed = settings, long_tasks, killed
        self.rows: list[tuple[float, int, str, str, str, str]] = []
        self.kill: dict[str, Any] | None = None
        self.done = threading.Event()
        self.errors: list[str] = []

    def run(self) -> None:
        while not self.done.is_set():
            out = subprocess.run(["squeue", "-h", "-o", "%i|%j|%N|%T|%k"], capture_output=True, text=True,
                                 env=slurm.client_env(self.settings), timeout=30)
            now = time.monotonic()
            if out.returncode != 0:
                self.errors.append(out.stderr.strip())
            rows = []
            for line in out.stdout.splitlines():
                parts = line.split("|")
                if len(parts) == 5 and parts[0].isdigit():
                    rows.append((now, int(parts[0]), parts[1], parts[2], parts[3], parts[4]))
            self.rows.extend(rows)
            if self.kill is None:
                victim = next((r for r in rows if r[2] in self.long_tasks and r[4] == "RUNNING"), None)
                if victim is not None:
                    node = victim[3]
                    on_node = sorted({r[2] for r in rows if r[3] == node and r[4] in ("RUNNING", "PENDING")})
                    pid = slurm.kill_node(self.settings, node)
                    self.killed.append(node)
                    self.kill = {"node": node, "at": time.monotonic(), "wall": time.time(), "pid": pid,
                                 "tasks": on_node, "long_task": victim[2]}
            self.done.wait(1.0)


async def _publish(settings, docs: list[dict[str, Any]]) -> None:
    now = int(time.time() * 1000)
    with RegistryClient(settings.registry_url) as registry:
        async with EventProducer(settings.bootstrap_servers, Codec(registry), namespace=settings.namespace) as producer:
            futures = [await producer.publish("TaskSubmitted", task_from_document(d, now_ms=now)) for d in docs]
            await asyncio.gather(*futures)


async def _follow(plane: Plane, task_ids: set[str], sampler: SqueueSampler, deadline: float) -> dict[str, Any]:
    """Read decisions, raw statuses and raw node events until every task is released (or the
    deadline); everything the checks need."""
    t = plane.topics
    placed: dict[str, dict] = {}             # decision id -> TaskPlaced
    placed_at: dict[str, float] = {}         # decision id -> when it was read (monotonic)
    placements: dict[str, list[dict]] = {}   # task -> its TaskPlaced, in order
    lost: dict[str, list[dict]] = {}
    released: dict[str, dict] = {}
    statuses: dict[str, list[dict]] = {}
    node_events: list[tuple[float, dict]] = []
    with RegistryClient(plane.s.registry_url) as registry:
        async with EventConsumer(plane.s.bootstrap_servers, Codec(registry),
                                 [t.decisions, t.raw_status, t.raw_nodes]) as consumer:
            async for batch in consumer.batches(timeout_ms=250):
                now = time.monotonic()
                for r in batch:
                    p = r.payload or {}
                    if r.kind == "TaskPlaced" and p.get("task_id") in task_ids:
                        placed[p["decision_id"]] = p
                        placed_at[p["decision_id"]] = now
                        placements.setdefault(p["task_id"], []).append(p)
                    elif r.kind == "TaskLost" and p.get("task_id") in task_ids:
                        lost.setdefault(p["task_id"], []).append(p)
                    elif r.kind == "TaskReleased" and p.get("task_id") in task_ids:
                        released[p["task_id"]] = p
                    elif r.kind == "TaskStatusChanged" and r.topic == t.raw_status and p.get("task_id") in task_ids:
                        statuses.setdefault(p["task_id"], []).append(p)
                    elif r.kind == "NodeStatusChanged" and p.get("cell") == plane.cell:
                        node_events.append((now, p))
                if len(released) == len(task_ids) or time.monotonic() > deadline:
                    break
    return {"placed": placed, "placed_at": placed_at, "placements": placements, "lost": lost, "released": released, "statuses": statuses,
            "node_events": node_events}


async def _node_back(plane: Plane, node_id: str, deadline: float) -> dict[str, Any]:
    """Read raw.nodes until the connector reports ``node_id`` READY after its DOWN and
    heartbeats it again (or the deadline)."""
    ready, beats, down = None, 0, False
    with RegistryClient(plane.s.registry_url) as registry:
        async with EventConsumer(plane.s.bootstrap_servers, Codec(registry), [plane.topics.raw_nodes]) as consumer:
            async for batch in consumer.batches(timeout_ms=250):
                for r in batch:
                    p = r.payload or {}
                    if r.kind == "NodeStatusChanged" and p.get("node_id") == node_id:
                        if p["status"] == "DOWN":
                            down, ready = True, None
                        elif p["status"] == "READY" and down:
                            ready = time.monotonic()
                    elif r.kind == "NodeHeartbeat" and ready is not None and \
                            node_id in [p.get("node_id"), *(p.get("nodes") or [])]:
                        beats += 1
                if (ready is not None and beats) or time.monotonic() > deadline:
                    break
    return {"ready": ready, "heartbeats_after": beats, "down_seen": down}


def _wait_nodes(plane: Plane, count: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        out = subprocess.run([PY, "-m", "suanli", "nodes", "--cell", plane.cell, "--json"], capture_output=True,
                             text=True, env=plane.env, timeout=120)
        if out.returncode == 0:
            last = json.loads(out.stdout)
            if len(last) >= count:
                return
        time.sleep(1)
    pytest.fail(f"the slurm nodes never reached the read model: {last!r}")


def test_200_tasks_run_as_slurm_jobs_and_a_dead_node_s_tasks_run_again_elsewhere(plane, cluster):
    stack, killed = cluster
    _wait_nodes(plane, 4, timeout=120)
    run = plane.cell.split("-", 1)[1]
    docs = [task_doc(i, plane.cell, run) for i in range(TASKS)]
    ids = {d["id"]: i for i, d in enumerate(docs)}
    long_tasks = {d["id"] for d in docs[:LONG]}
    sampler = SqueueSampler(stack, long_tasks, killed)
    began = time.monotonic()
    asyncio.run(_publish(plane.s, docs))
    sampler.start()
    try:
        seen = asyncio.run(_follow(plane, set(ids), sampler, began + RUN_DEADLINE_S))
    finally:
        sampler.done.set()
        sampler.join(timeout=30)
    wall_s = time.monotonic() - began
    log_tail = plane.connector_log.read_text()[-4000:]

    released, statuses, placed, placements = seen["released"], seen["statuses"], seen["placed"], seen["placements"]
    assert len(released) == TASKS, (f"{TASKS - len(released)} task(s) never released, e.g. "
                                    f"{sorted(set(ids) - set(released))[:5]}; connector log: {log_tail}")

    # -- every task ended with its real exit code, reported from its last placement's node
    by_code: dict[str, int] = {}
    for task_id, i in ids.items():
        final = released[task_id]
        node = placements[task_id][-1]["node_id"]
        assert final["node_id"] == node
        ends = [s for s in statuses[task_id] if s["node_id"] == node and s["status"] in ("COMPLETED", "FAILED")]
        assert ends, (task_id, statuses[task_id])
        end = ends[-1]
        want = expected_code(i)
        assert (final["cause"], end["status"], end["exit_code"]) == \
            ("COMPLETED" if want == 0 else "FAILED", "COMPLETED" if want == 0 else "FAILED", want), (task_id, end)
        assert f"on {node.removeprefix('slurm-')}" in end["message"] and "slurm job " in end["message"], end
        running = [s for s in statuses[task_id] if s["node_id"] == node and s["status"] == "RUNNING"]
        assert running and running[-1]["message"].startswith("slurm job "), statuses[task_id]
        by_code[str(end["exit_code"])] = by_code.get(str(end["exit_code"]), 0) + 1

    # -- squeue showed what Suanli placed, on the nodes it chose
    assert not sampler.errors, sampler.errors[:3]
    jobs: dict[int, tuple[str, str, str]] = {}
    checked_rows = 0
    for _t, job_id, name, node, state, comment in sampler.rows:
        if not comment.startswith("suanli:"):
            continue
        decision = placed.get(comment[len("suanli:"):])
        assert decision is not None, f"squeue job {job_id} ({comment}) has no TaskPlaced decision"
        assert decision["task_id"] == name, (job_id, name, decision["task_id"])
        if state in ("RUNNING", "COMPLETING") or node:
            assert node == decision["node_id"].removeprefix("slurm-"), (job_id, node, decision["node_id"])
            checked_rows += 1
        jobs[job_id] = (name, node, state)
    assert len(jobs) >= TASKS // 2, f"squeue saw only {len(jobs)} of the jobs"

    # -- the killed slurmd: node DOWN, its tasks lost and run again elsewhere
    kill = sampler.kill
    assert kill is not None, "no long task ever ran (nothing to kill)"
    victim = f"slurm-{kill['node']}"
    downs = [(at, p) for at, p in seen["node_events"] if p["node_id"] == victim and p["status"] == "DOWN"]
    assert downs, f"node {victim} never reported DOWN; node events: {seen['node_events']}"
    down_after_s = downs[0][0] - kill["at"]
    lost_here = {tid for tid, events in seen["lost"].items() if any(e["node_id"] == victim for e in events)}
    assert kill["long_task"] in lost_here, (kill, sorted(lost_here))
    moved = {}
    for task_id in sorted(lost_here):
        final = released[task_id]
        assert final["node_id"] != victim, (task_id, final)
        assert any(p["node_id"] == victim for p in placements[task_id][:-1]), placements[task_id]
        moved[task_id] = final["node_id"]
    long_end = [s for s in statuses[kill["long_task"]] if s["node_id"] == moved[kill["long_task"]]][-1]
    assert long_end["status"] == "COMPLETED" and long_end["exit_code"] == 0, long_end
    # placed on the victim after the kill (read a second later at least): never ended there
    window = sorted({placed[d]["task_id"] for d, at in seen["placed_at"].items()
                     if placed[d]["node_id"] == victim and at > kill["at"] + 1.0})
    for task_id in window:
        assert released[task_id]["node_id"] != victim, (task_id, released[task_id], statuses[task_id])
    assert not [t for t, r in released.items() if r["node_id"] == victim and t in window]

    # -- the node comes back: its slurmd started again, Slurm returns it to service, the
    # connector reports it READY and heartbeats it again
    restarted = time.monotonic()
    slurm.start_node(stack, kill["node"])
    back = asyncio.run(_node_back(plane, victim, deadline=restarted + 90))
    assert back["ready"] is not None, f"node {victim} never reported READY again: {back}"
    assert back["heartbeats_after"] > 0, back
    back_after_s = back["ready"] - restarted

    # -- accelerators: tasks asking the FPGA that n4's GRES holds run there, as jobs holding that GRES
    fpga = [{**task_doc(TASKS + k, plane.cell, run), "id": f"sl-{run}-fpga-{k}",
             "command": ["sh", "-c", "sleep 1; exit 0"],
             "resources": {"cpu": 1, "memory": "64Mi", "accelerators": [{"kind": "FPGA", "model": "u250", "count": 1}]}}
            for k in range(2)]
    fpga_began = time.monotonic()
    asyncio.run(_publish(plane.s, fpga))
    fpga_seen = asyncio.run(_follow(plane, {d["id"] for d in fpga}, sampler, fpga_began + 120))
    for d in fpga:
        final = fpga_seen["released"].get(d["id"])
        assert final is not None and (final["cause"], final["node_id"]) == ("COMPLETED", "slurm-n4"), \
            (d["id"], final, fpga_seen["statuses"].get(d["id"]))
    listed = subprocess.run(["squeue", "-h", "-t", "all", "-o", "%j|%N|%b|%T"], capture_output=True, text=True,
                            env=slurm.client_env(stack), timeout=30).stdout.splitlines()
    fpga_jobs = [line for line in listed if line.split("|")[0] in {d["id"] for d in fpga}]
    assert len(fpga_jobs) == 2 and all(line.split("|")[1] == "n4" and "fpga:u250:1" in line.split("|")[2]
                                       for line in fpga_jobs), fpga_jobs

    figures = {"tasks": TASKS, "wall_s": round(wall_s, 1), "exit_codes": dict(sorted(by_code.items())),
               "completed": by_code.get("0", 0), "failed": TASKS - by_code.get("0", 0),
               "squeue_jobs_seen": len(jobs), "squeue_rows_checked": checked_rows,
               "killed_node": kill["node"], "down_after_kill_s": round(down_after_s, 1),
               "tasks_on_node_at_kill": kill["tasks"], "lost_and_replaced": moved,
               "lost_tasks_reports_from_dead_node": {t: [f"{x['status']} {x['exit_code']} {x['message'][:90]}"
                                                         for x in statuses[t] if x["node_id"] == victim]
                                                     for t in sorted(lost_here)},
               "long_task": kill["long_task"], "long_task_completed_on": moved[kill["long_task"]],
               "dispatches": len(placed), "placed_on_dead_node_in_window": window, "ready_after_restart_s": round(back_after_s, 1),
               "fpga_jobs": fpga_jobs}
    report = Path(stack.home) / "reports" / "slurm-plane.json"
    report.parent.mkdir(parents=True, exist_ok=True)
    report.write_text(json.dumps(figures, indent=2) + "\n")
    print(json.dumps(figures, indent=2))


def test_stop_and_cancellation_reach_the_real_slurm_job(cluster, tmp_path):
    """The adapter alone (no Kafka) on the real cluster: a StopCommand's grace is SIGTERM then
    scancel; a job that obeys SIGTERM by exiting 0 completes; a cancelled execute (the
    connector stopping) scancels its job."""
    from suanli.connectors.kit import TaskReporter
    from suanli.connectors.slurm import SlurmCluster

    stack, _killed = cluster

    async def run() -> dict[str, list[dict]]:
        adapter = SlurmCluster(cell="stop-test", name="slurmstop", run_dir=tmp_path, poll_interval_s=0.5,
                               node_poll_s=1.0)
        adapter.discover()
        out: dict[str, list[dict]] = {}

        def start(task: str, argv: list[str], node: str = "slurmstop-n2") -> asyncio.Task:
            command = {"dispatch_id": f"{task}:d", "task_id": task, "cell": "stop-test", "node_id": node,
                       "connector": "slurmstop", "cpu_milli": 1000, "memory_mib": 64, "gpu_devices": [],
                       "gpu_milli": 0, "command": argv, "env": {}}
            assert adapter.admit(command) is None

            async def emit(payload):
                out.setdefault(task, []).append(payload)

            return asyncio.create_task(adapter.execute(command, TaskReporter(command, adapter.now_ms, emit)))

        async def running(task: str) -> None:
            while not any(p["status"] == "RUNNING" for p in out.get(task, [])):
                await asyncio.sleep(0.1)

        try:
            stubborn = start("stubborn", ["sleep", "120"])
            polite = start("polite", ["sh", "-c", "trap 'exit 0' TERM; while :; do sleep 0.1; done"], "slurmstop-n3")
            doomed = start("doomed", ["sleep", "120"], "slurmstop-n4")
            await asyncio.wait_for(asyncio.gather(running("stubborn"), running("polite"), running("doomed")), 60)
            t0 = time.monotonic()
            assert await adapter.stop("stubborn", "slurmstop-n2", "preempted", grace_ms=1000)
            assert await adapter.stop("polite", "slurmstop-n3", "moved", grace_ms=10_000)
            await asyncio.wait_for(asyncio.gather(stubborn, polite), 60)
            out["_stop_s"] = [{"seconds": time.monotonic() - t0}]
            job_id = int(out["doomed"][0]["message"].split()[2])
            doomed.cancel()
            with pytest.raises(asyncio.CancelledError):
                await doomed
            out["_doomed_job"] = [{"job_id": job_id}]
        finally:
            await adapter.aclose()
        return out

    out = asyncio.run(run())
    stubborn = out["stubborn"][-1]
    assert stubborn["status"] == "FAILED" and stubborn["message"].startswith("stopped by the scheduler: preempted;")
    assert stubborn["exit_code"] == 128 + 15, stubborn      # sleep killed by SIGTERM, as sh reports it
    assert out["polite"][-1]["status"] == "COMPLETED", [p["message"] for p in out["polite"]]
    assert out["_stop_s"][0]["seconds"] < 30
    job_id = out["_doomed_job"][0]["job_id"]
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        state = subprocess.run(["squeue", "-h", "-t", "all", "-j", str(job_id), "-o", "%T"], capture_output=True,
                               text=True, env=slurm.client_env(stack), timeout=30).stdout.strip()
        if state == "CANCELLED":
            break
        time.sleep(0.2)
    assert state == "CANCELLED", state
