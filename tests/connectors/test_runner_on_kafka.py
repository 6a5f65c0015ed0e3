"""ConnectorRunner against the real broker and registry: discovery, dispatch, dedup, bad input, recovery.

Each test uses its own connector name (so its own dispatch topic and consumer group) and its
own task ids; the raw topics are shared with everything else, so reads start at a snapshot of
their end offsets and keep only this test's records.
"""
from __future__ import annotations

import asyncio
import signal
import struct
import subprocess
import sys
import uuid
from collections import Counter
from pathlib import Path

import pytest

from connector_helpers import Tail, assert_no_tasks_left, command, group_gone, running, snapshot, status_trail, stop
from suanli.connectors.kit import ConnectorRunner
from suanli.connectors.local_process import LocalProcesses
from suanli.connectors.simulated import SimulatedCluster
from suanli.streams.kafka_io import EventProducer, ensure_topics
from suanli.streams.topics import TopicNames, TopicSpec

pytestmark = [pytest.mark.stack, pytest.mark.timeout(60)]


def _unique() -> str:
    return f"t{uuid.uuid4().hex[:10]}"


def _node_csv(tmp_path: Path, name: str) -> Path:
    path = tmp_path / "nodes.csv"
    path.write_text("sn,cpu_milli,memory_mib,gpu,model\n"
                    f"{name}-cpu,32000,131072,0,\n{name}-t4,64000,262144,2,T4\n{name}-v100,96000,393216,8,V100M32\n")
    return path


@pytest.fixture
def topics(stack) -> TopicNames:
    """The topic names of the test namespace (the runners' default namespace too)."""
    return TopicNames(stack.namespace)


async def _prepare(stack) -> dict:
    t = TopicNames(stack.namespace)
    await ensure_topics(stack.bootstrap_servers, [TopicSpec(n, stack.partitions) for n in (t.raw_nodes, t.raw_status)]
                        + [TopicSpec(t.dead_letters, 1)])
    return await snapshot(stack.bootstrap_servers, t.raw_nodes, t.raw_status, t.dead_letters)


async def _produce(stack, codec, topic: str, items: list) -> None:
    """Items are ``(kind, payload)`` to encode, or raw bytes to send as they are."""
    async with EventProducer(stack.bootstrap_servers, codec) as producer:
        futures = []
        for item in items:
            if isinstance(item, bytes):
                futures.append(await producer.send_raw(topic, item, key=b"garbage"))
            else:
                kind, payload = item
                futures.append(await producer.send(topic, kind, payload, key=payload.get("task_id")))
        await asyncio.gather(*futures)


def _mine(prefix: str, topics: TopicNames):
    def keep(r) -> bool:
        p = r.payload or {}
        return (any(str(p.get(f, "")).startswith(prefix) for f in ("task_id", "node_id"))
                or p.get("source_topic") == topics.dispatch(prefix))
    return keep


def _count(records, kind: str) -> int:
    return sum(r.kind == kind for r in records)


def test_sim_runner_registers_dispatches_deduplicates_and_survives_garbage(stack, codec, tmp_path, topics):
    name = _unique()
    sim = SimulatedCluster(_node_csv(tmp_path, name), cell=name, name=name, time_scale=0.001)
    runner = ConnectorRunner(sim, codec=codec, bootstrap=stack.bootstrap_servers, monitor_interval_s=0.5,
                             heartbeat_interval_s=0.5, partitions=1)
    d = [command(name, i, f"{name}-t4", duration_estimate_ms=100) for i in range(6)]
    d[2]["node_id"] = f"{name}-nowhere"                      # refused: not a sim node
    d[3]["connector"] = "someone-else"                       # not addressed to this connector
    heartbeat = {"event_id": "x", "node_id": f"{name}-x", "cell": name, "seq": 1, "at": 1}
    records_in = [struct.pack(">bI", 0, 1_999_999_999) + b"\x02", ("DispatchCommand", d[0]), ("DispatchCommand", d[1]),
                  ("DispatchCommand", d[0]),                 # redelivered: must not run twice
                  b"not avro at all", ("NodeHeartbeat", heartbeat),  # bad records: skipped, dead-lettered
                  ("DispatchCommand", d[2]), ("DispatchCommand", d[3]), ("DispatchCommand", d[4]),
                  ("DispatchCommand", {**d[5], "duration_estimate_ms": None})]
    topic = topics.dispatch(name)

    async def scenario():
        start = await _prepare(stack)
        async with Tail(stack.bootstrap_servers, codec, start, keep=_mine(name, topics)) as tail, running(runner):
            await _produce(stack, codec, topic, records_in)
            finished = [d[i]["task_id"] for i in (0, 1, 4, 5)]
            await tail.until(lambda rs: all(status_trail(rs, t)[-1:] == ["COMPLETED"] for t in finished)
                             and _count(rs, "DeadLetter") >= 3 and _count(rs, "NodeMetrics") >= 6)
            await tail.settle(1.5)
        assert_no_tasks_left()
        return tail.records

    records = asyncio.run(scenario())
    for i in (0, 1, 4, 5):
        assert status_trail(records, d[i]["task_id"]) == ["ack", "RUNNING", "COMPLETED"], i
    assert status_trail(records, d[2]["task_id"]) == ["refused"]
    assert status_trail(records, d[3]["task_id"]) == []
    refusal = next(r.payload for r in records if r.kind == "DispatchAck" and not r.payload["accepted"])
    assert "not in the simulated cluster" in refusal["message"] and refusal["event_id"] == f"{d[2]['dispatch_id']}:ack"
    statuses = [r for r in records if r.topic == topics.raw_status]
    assert len({r.payload["event_id"] for r in statuses}) == len(statuses) == 13  # no event twice
    assert all(r.key.decode() == r.payload["task_id"] for r in statuses)

    nodes = [r for r in records if r.topic == topics.raw_nodes]
    registered = {r.payload["node_id"]: r.payload for r in nodes if r.kind == "NodeRegistered"}
    assert set(registered) == {f"{name}-cpu", f"{name}-t4", f"{name}-v100"}
    assert registered[f"{name}-v100"]["accelerators"][0]["count"] == 8
    assert all(p["connector"] == name and p["zone"] for p in registered.values())
    assert all(r.key.decode() == r.payload["node_id"] for r in nodes)
    beats = Counter(n for r in nodes if r.kind == "NodeHeartbeat" for n in (r.payload["node_id"], *r.payload["nodes"]))
    assert set(beats) == set(registered) and min(beats.values()) >= 2

    letters = [r.payload for r in records if r.topic == topics.dead_letters]
    assert sorted(p["error_kind"] for p in letters) == ["INVALID", "UNDECODABLE", "UNKNOWN_SCHEMA"]
    assert {p["source_topic"] for p in letters} == {topic}
    assert b"not avro at all" in [p["value"] for p in letters]
    s = runner.stats
    assert (s.accepted, s.refused, s.duplicates, s.foreign, s.bad_records, s.completed) == (4, 1, 1, 1, 3, 4)


def test_sim_runner_stops_a_stale_copy_and_silences_and_restores_nodes_on_request(stack, codec, tmp_path, topics,
                                                                                  capsys):
    from suanli.cli import main as suanli_main
    from suanli.cli_sim import control_request

    name = _unique()
    sim = SimulatedCluster(_node_csv(tmp_path, name), cell=name, name=name, time_scale=0.001)
    runner = ConnectorRunner(sim, codec=codec, bootstrap=stack.bootstrap_servers, monitor_interval_s=0.6,
                             heartbeat_interval_s=0.3, partitions=1)
    quiet, loud = f"{name}-t4", f"{name}-cpu"
    stale = command(name, "stale", quiet, duration_estimate_ms=60_000_000)     # 60 s of wall time
    other = command(name, "other", loud, duration_estimate_ms=60_000_000)
    stop = {"event_id": f"{name}/stop", "task_id": stale["task_id"], "cell": name, "node_id": quiet,
            "connector": name, "reason": "stale copy: the task is placed on elsewhere-1", "issued_at": 1}

    def beats(rs, node, after=0, before=2 ** 62):
        return [r.payload["at"] for r in rs if r.kind == "NodeHeartbeat"
                and node in (r.payload["node_id"], *r.payload["nodes"]) and after < r.payload["at"] < before]

    def metrics(rs, node, after=0, before=2 ** 62):
        return [r for r in rs if r.kind == "NodeMetrics" and r.payload["node_id"] == node
                and after < r.payload["at"] < before]

    async def scenario():
        start = await _prepare(stack)
        async with Tail(stack.bootstrap_servers, codec, start, keep=_mine(name, topics)) as tail, running(runner):
            await _produce(stack, codec, topics.dispatch(name), [("DispatchCommand", stale), ("DispatchCommand", other)])
            await tail.until(lambda rs: all(status_trail(rs, c["task_id"])[-1:] == ["RUNNING"] for c in (stale, other)))
            wrong = await control_request(stack, {"action": "status", "cell": "not-this-one"}, connector=name)
            silenced = await control_request(stack, {"action": "silence", "nodes": [quiet]}, connector=name)
            await tail.settle(1.5)
            # the silenced node's task still runs; a StopCommand on the dispatch topic ends it
            await _produce(stack, codec, topics.dispatch(name), [("StopCommand", stop)])
            await tail.until(lambda rs: status_trail(rs, stale["task_id"])[-1:] == ["FAILED"])
            restored = await control_request(stack, {"action": "restore"}, connector=name)
            await tail.until(lambda rs: len(beats(rs, quiet, restored["at"])) >= 2 and metrics(rs, quiet, restored["at"]))
            status = await control_request(stack, {"action": "status"}, connector=name)
            cli = ["--connector", name, "--namespace", stack.namespace]
            codes = [await asyncio.to_thread(suanli_main, ["sim", "fault", *args, *cli]) for args in
                     (["silence", "--nodes", "1", "--seed", "4"], ["restore"], ["status", "--cell", "nope"])]
            # restored, the busy node re-states its task
            await tail.until(lambda rs: status_trail(rs, other["task_id"]) == ["ack", "RUNNING", "RUNNING"])
        assert_no_tasks_left()
        assert codes == [0, 0, 2]
        return tail.records, wrong, silenced, restored, status

    records, wrong, silenced, restored, status = asyncio.run(scenario())
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith(f"silenced 1 node(s) of connector {name} (cell {name}): {name}-") and \
        out[0].endswith("(1 running); silenced now: 1")                 # the busy node: the other task runs
    assert out[1].startswith(f"restored 1 node(s) of connector {name}") and out[1].endswith("silenced now: 0")
    assert "refused" in out[2] and "serves cell" in out[2]
    assert not wrong["ok"] and "serves cell" in wrong["error"]
    assert silenced["ok"] and silenced["nodes"] == [quiet] and silenced["running"] == {quiet: [stale["task_id"]]}
    cut, back = silenced["at"], restored["at"]
    assert beats(records, quiet, 0, cut) and not beats(records, quiet, cut, back)
    assert not metrics(records, quiet, cut, back) and metrics(records, quiet, back)
    assert len(beats(records, loud, cut, back)) >= 4 and metrics(records, loud, cut, back)  # the others talk on
    assert restored["nodes"] == [quiet] and status["silenced"] == []
    failed = next(r.payload for r in records if r.kind == "TaskStatusChanged" and r.payload["status"] == "FAILED"
                  and r.payload["task_id"] == stale["task_id"])
    assert failed["message"].startswith("stopped by the scheduler: stale copy: the task is placed on elsewhere-1")
    assert status_trail(records, stale["task_id"]) == ["ack", "RUNNING", "FAILED"]
    restated = [r.payload for r in records if r.kind == "TaskStatusChanged" and r.payload["task_id"] == other["task_id"]]
    assert [p["event_id"] for p in restated] == [f"{other['dispatch_id']}:running",
                                                 f"{other['dispatch_id']}:running-resync1"]   # untouched by the stop
    s = runner.stats
    assert (s.stops, s.stops_unmatched, s.bad_records, s.control_requests) == (1, 0, 0, 7)


def test_local_runner_runs_real_processes_and_stops_them_on_shutdown(stack, codec, topics):
    name = _unique()
    node = f"{name}-host"
    local = LocalProcesses(cell=name, name=name, node_id=node, max_concurrent=4, kill_grace_s=2.0)
    runner = ConnectorRunner(local, codec=codec, bootstrap=stack.bootstrap_servers, monitor_interval_s=1.0,
                             partitions=1)
    py = sys.executable
    ok = command(name, "ok", node, command=[py, "-c", "print('hello')"])
    bad = command(name, "bad", node, command=[py, "-c", "import sys; sys.exit(3)"])
    empty = command(name, "empty", node)                          # no command: refused
    slow = command(name, "slow", node, command=["sleep", "30"])  # still running at shutdown
    topic = topics.dispatch(name)

    async def scenario():
        start = await _prepare(stack)
        async with Tail(stack.bootstrap_servers, codec, start, keep=_mine(name, topics)) as tail, running(runner) as run:
            await _produce(stack, codec, topic, [("DispatchCommand", c) for c in (ok, bad, empty, ok, slow)]
                           + [b"\x00garbage"])
            await tail.until(lambda rs: status_trail(rs, ok["task_id"])[-1:] == ["COMPLETED"]
                             and status_trail(rs, bad["task_id"])[-1:] == ["FAILED"]
                             and status_trail(rs, slow["task_id"]) == ["ack", "RUNNING"])
            slow_running = next(r.payload for r in tail.records if r.kind == "TaskStatusChanged"
                           and r.payload["task_id"] == slow["task_id"])
            await stop(run)
            await tail.until(lambda rs: status_trail(rs, slow["task_id"])[-1:] == ["FAILED"])
            await tail.settle(1.0)
        assert_no_tasks_left()
        return tail.records, slow_running

    records, slow_running = asyncio.run(scenario())
    assert status_trail(records, ok["task_id"]) == ["ack", "RUNNING", "COMPLETED"]
    assert status_trail(records, bad["task_id"]) == ["ack", "RUNNING", "FAILED"]
    assert status_trail(records, empty["task_id"]) == ["refused"]
    assert status_trail(records, slow["task_id"]) == ["ack", "RUNNING", "FAILED"]

    def final(task_id):
        return [r.payload for r in records if r.kind == "TaskStatusChanged" and r.payload["task_id"] == task_id][-1]

    assert final(ok["task_id"])["exit_code"] == 0 and final(ok["task_id"])["usage"]["cpu_seconds"] > 0
    assert final(ok["task_id"])["usage"]["max_rss_mib"] > 0
    assert final(bad["task_id"])["exit_code"] == 3
    assert "stopped while the task was running" in final(slow["task_id"])["message"]
    refusal = next(r.payload for r in records if r.kind == "DispatchAck" and not r.payload["accepted"])
    assert "has no command" in refusal["message"]
    assert group_gone(int(slow_running["message"].split()[-1]))
    [registered] = [r.payload for r in records if r.kind == "NodeRegistered"]
    assert registered["node_id"] == node and registered["connector"] == name and registered["accelerators"] == []
    assert runner.stats.duplicates == 1 and runner.stats.bad_records == 1


def test_a_restarted_runner_rebuilds_its_seen_dispatches_from_the_log(stack, codec, tmp_path, topics):
    name = _unique()
    nodes = _node_csv(tmp_path, name)
    node = f"{name}-cpu"
    lost, done, new, later = (command(name, k, node) for k in ("lost", "done", "new", "later"))

    def ack(c):
        return ("DispatchAck", {"event_id": f"{c['dispatch_id']}:ack", "dispatch_id": c["dispatch_id"],
                                "task_id": c["task_id"], "node_id": node, "connector": name, "cell": name,
                                "accepted": True, "message": "accepted", "at": 1})

    def status(c, s):
        return ("TaskStatusChanged", {"event_id": f"{c['dispatch_id']}:{s.lower()}", "task_id": c["task_id"],
                                      "cell": name, "node_id": node, "status": s, "at": 2, "exit_code": None,
                                      "message": "", "usage": None})

    def new_runner():
        sim = SimulatedCluster(nodes, cell=name, name=name, time_scale=0.001)
        return ConnectorRunner(sim, codec=codec, bootstrap=stack.bootstrap_servers, monitor_interval_s=None,
                               partitions=1)

    first, second = new_runner(), new_runner()

    async def scenario():
        start = await _prepare(stack)
        # A previous incarnation's log: 'lost' was accepted and started, then the connector died;
        # 'done' finished. Both commands are redelivered (their offsets were never committed).
        await _produce(stack, codec, topics.raw_status, [ack(lost), status(lost, "RUNNING"), ack(done),
                                                  status(done, "RUNNING"), status(done, "COMPLETED")])
        await _produce(stack, codec, topics.dispatch(name),
                       [("DispatchCommand", c) for c in (lost, done, new)])
        async with Tail(stack.bootstrap_servers, codec, start, keep=_mine(name, topics)) as tail:
            async with running(first):
                await tail.until(lambda rs: status_trail(rs, new["task_id"])[-1:] == ["COMPLETED"]
                                 and status_trail(rs, lost["task_id"])[-1:] == ["FAILED"])
                await tail.settle(1.0)
            # Same connector again (same group): a redelivered 'new' is still not run twice.
            await _produce(stack, codec, topics.dispatch(name), [("DispatchCommand", c) for c in (new, later)])
            async with running(second):
                await tail.until(lambda rs: status_trail(rs, later["task_id"])[-1:] == ["COMPLETED"])
                await tail.settle(1.0)
            return tail.records

    records = [r for r in asyncio.run(scenario()) if r.topic == topics.raw_status]
    assert status_trail(records, lost["task_id"]) == ["ack", "RUNNING", "FAILED"]
    closed = [r.payload for r in records if r.payload["event_id"] == f"{lost['dispatch_id']}:failed"]
    assert len(closed) == 1 and "restarted while the task was in flight" in closed[0]["message"]
    assert status_trail(records, done["task_id"]) == ["ack", "RUNNING", "COMPLETED"]  # only the seeded ones
    assert status_trail(records, new["task_id"]) == ["ack", "RUNNING", "COMPLETED"]
    assert status_trail(records, later["task_id"]) == ["ack", "RUNNING", "COMPLETED"]
    assert (first.stats.recovered_seen, first.stats.recovered_lost, first.stats.duplicates) == (2, 1, 2)
    assert (second.stats.recovered_seen, second.stats.recovered_lost, second.stats.duplicates) == (3, 0, 1)


def test_the_command_line_starts_announces_and_stops_on_sigterm(stack, tmp_path, topics):
    name = _unique()
    nodes = _node_csv(tmp_path, name)
    proc = subprocess.Popen([sys.executable, "-m", "suanli.connectors", "sim", "--nodes", str(nodes), "--cell", name,
                             "--name", name, "--time-scale", "0.001", "--interval", "1", "--partitions", "1"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()  # the start line is printed once the runner consumes
        expected = f"suanli connector {name}: 3 node(s) in cell {name}, consuming {topics.dispatch(name)}"
        assert line.startswith(expected), (line, proc.stderr.read() if proc.poll() is not None else "")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=15) == 0
        assert proc.stdout.read() == ""
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_the_command_line_refuses_a_bad_node_list(tmp_path):
    result = subprocess.run([sys.executable, "-m", "suanli.connectors", "sim", "--nodes", str(tmp_path / "nope.csv")],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and "cannot read node list" in result.stderr
