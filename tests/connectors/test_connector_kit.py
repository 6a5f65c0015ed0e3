"""The adapter kit without services: event shapes, reporter rules, runner construction."""
from __future__ import annotations

import asyncio
import json

import fastavro
import pytest

from suanli.connectors.kit import (Adapter, ConnectorRunner, TaskReporter, ack_event, batch_heartbeats,
                                  heartbeat_event, status_event)
from suanli.errors import ConnectorError
from suanli.schemas.catalog import catalog
from suanli.schemas.codec import parse_plain
from suanli.streams.topics import TopicNames

COMMAND = {"dispatch_id": "cell1/42", "task_id": "task-9", "cell": "cell1", "node_id": "n1", "connector": "sim"}


def fits(kind: str, payload: dict) -> bool:
    schema = parse_plain(catalog()[kind].schema)
    return fastavro.validation.validate(payload, schema, raise_errors=True)


def test_events_have_deterministic_ids_and_fit_the_contract():
    ack = ack_event(COMMAND, "sim", False, "no such node", 5)
    assert ack["event_id"] == "cell1/42:ack" and fits("DispatchAck", ack)
    usage = {"cpu_seconds": 1.5, "max_rss_mib": 10, "wall_ms": 1500}
    done = status_event(COMMAND, "COMPLETED", 7, exit_code=0, usage=usage)
    assert done["event_id"] == "cell1/42:completed" and done["usage"] == usage and fits("TaskStatusChanged", done)


def test_the_reporter_sends_each_status_once_and_nothing_after_an_outcome():
    sent: list[dict] = []

    async def emit(payload: dict) -> None:
        sent.append(payload)

    async def scenario():
        reporter = TaskReporter(COMMAND, lambda: 1000, emit)
        await reporter.running()
        await reporter.running("again")
        await asyncio.gather(reporter.failed(2, "boom"), reporter.completed())  # racing outcomes: first wins
        await reporter.running()
        return reporter

    reporter = asyncio.run(scenario())
    assert [(p["status"], p["exit_code"]) for p in sent] == [("RUNNING", None), ("FAILED", 2)]
    assert reporter.outcome == "FAILED"


class _Nameless(Adapter):
    name, cell = "", "c"

    def discover(self):
        return []

    def monitor(self, at, seq):
        return []

    def admit(self, command):
        return None

    async def execute(self, command, report):
        await report.completed()


def test_a_runner_needs_a_named_adapter_and_derives_its_topic_and_group(settings):
    with pytest.raises(ConnectorError):
        ConnectorRunner(_Nameless(), codec=None, bootstrap="127.0.0.1:1")
    named = _Nameless()
    named.name = "edge7"
    runner = ConnectorRunner(named, codec=None, bootstrap="127.0.0.1:1", partitions=1, namespace="ns1")
    assert runner.topic == TopicNames("ns1").dispatch("edge7") == "ns1.dispatch.edge7"
    assert runner.group_id == "ns1-connector-edge7"
    assert runner.describe()["dispatch_topic"] == runner.topic
    # Without a namespace, the runner takes the settings' one when it is built.
    default = ConnectorRunner(named, codec=None, bootstrap="127.0.0.1:1", partitions=1)
    ns = settings.namespace
    assert default.topic == f"{ns}.dispatch.edge7" and default.group_id == f"{ns}-connector-edge7"


class _Sleepy(_Nameless):
    """Runs forever, cannot stop a task itself, answers control requests."""
    name = "sleepy"

    def monitor(self, at, seq):
        return [("NodeHeartbeat", {"event_id": "hb", "node_id": "n1", "cell": "c", "seq": seq, "at": at}),
                ("NodeMetrics", {"event_id": "m", "node_id": "n1"})]

    async def execute(self, command, report):
        await report.running()
        await asyncio.sleep(3600)

    def control(self, request):
        if request.get("action") == "boom":
            raise ValueError("no such action")
        return {"echo": request.get("action")}


def _runner(adapter) -> tuple[ConnectorRunner, list[dict]]:
    runner = ConnectorRunner(adapter, codec=None, bootstrap="127.0.0.1:1", partitions=1, namespace="ns1")
    sent: list[dict] = []

    async def emit(payload: dict) -> None:
        sent.append(payload)

    runner._emit_status = emit
    return runner, sent


def test_heartbeats_default_to_one_per_discovered_node_and_metrics_to_monitor_without_them():
    adapter = _Sleepy()
    runner, _ = _runner(adapter)
    runner.nodes = [{"node_id": "n1", "cell": "c"}, {"node_id": "n2", "cell": "c"}]
    assert adapter.heartbeats(5, 1) is None
    assert heartbeat_event("sleepy", runner.nodes[1], 3, 99) == (
        "NodeHeartbeat", {"event_id": "sleepy/n2/hb/3", "node_id": "n2", "cell": "c", "seq": 3, "at": 99})
    assert [k for k, _ in adapter.metrics(5, 1)] == ["NodeMetrics"]
    assert (runner.heartbeat_interval_s, runner.monitor_interval_s) == (5.0, 15.0)
    assert runner.controlled and runner.control_topic == "ns1.control.sleepy"
    plain = _Nameless()
    plain.name = "plain"
    assert not _runner(plain)[0].controlled          # no control(): no control consumer


def test_a_stop_command_cancels_the_run_of_an_adapter_without_stop_and_reports_it_stopped():
    runner, sent = _runner(_Sleepy())
    command = {**COMMAND, "connector": "sleepy", "dispatch_id": "cell1/43"}
    stop = {"event_id": "s", "task_id": "task-9", "cell": "cell1", "node_id": "n1", "connector": "sleepy",
            "reason": "stale copy: the task is placed on n2", "issued_at": 9}

    async def scenario():
        run = asyncio.create_task(runner._run(command))
        while not sent:
            await asyncio.sleep(0.01)
        await runner._stop_command({**stop, "node_id": "n2"})          # not where it runs: nothing
        await runner._stop_command({**stop, "connector": "other"})     # not ours: nothing
        assert not run.done()
        await runner._stop_command(stop)
        await asyncio.wait_for(run, 2)
        return run

    run = asyncio.run(scenario())
    assert not run.cancelled()                                          # the run ended, it was not torn down
    assert [(p["status"], p["message"]) for p in sent] == [
        ("RUNNING", ""), ("FAILED", "stopped by the scheduler: stale copy: the task is placed on n2")]
    s = runner.stats
    assert (s.stops, s.stops_unmatched, s.foreign) == (1, 1, 1) and not runner._inflight


def test_control_requests_are_answered_refused_or_skipped():
    runner, _ = _runner(_Sleepy())
    reply = runner._answer(b'{"request_id": "r1", "action": "status"}')
    assert reply["ok"] and reply["echo"] == "status" and reply["request_id"] == "r1" and reply["type"] == "reply"
    assert reply["connector"] == "sleepy" and reply["cell"] == "c"
    wrong_cell = runner._answer(b'{"request_id": "r2", "action": "status", "cell": "elsewhere"}')
    assert not wrong_cell["ok"] and "serves cell 'c'" in wrong_cell["error"]
    failing = runner._answer(b'{"request_id": "r3", "action": "boom"}')
    assert not failing["ok"] and failing["error"] == "ValueError: no such action"
    assert runner._answer(b"not json") is None
    assert runner._answer(json.dumps(reply).encode()) is None          # its own replies are not requests
    assert runner.stats.control_requests == 3


def test_metric_parts_are_sampled_in_turn_spread_over_the_period():
    class Parts(_Sleepy):
        metric_parts = 3

        def metrics(self, at, seq, part=0, parts=1):
            return [("NodeMetrics", {"node_id": f"n{part}", "part": part, "parts": parts, "seq": seq, "at": at})]

    runner, _ = _runner(Parts())
    runner.monitor_interval_s = 0.3
    sent: list[dict] = []

    async def send_all(topic, events):
        sent.extend(p for _k, p in events)

    runner._send_all = send_all

    async def scenario():
        loop = asyncio.create_task(runner._monitor_loop())
        deadline = asyncio.get_running_loop().time() + 10
        while len(sent) < 6 and asyncio.get_running_loop().time() < deadline:   # two full rounds of 3 parts
            await asyncio.sleep(0.02)
        loop.cancel()
        await asyncio.gather(loop, return_exceptions=True)

    asyncio.run(scenario())
    assert len(sent) >= 6 and [p["part"] for p in sent] == [i % 3 for i in range(len(sent))]
    assert {p["parts"] for p in sent} == {3}
    for part in range(3):
        seqs = [p["seq"] for p in sent if p["part"] == part]
        assert all(a < b <= a + 2 for a, b in zip(seqs, seqs[1:])), seqs      # about +1 per period, per part
    gaps = [b["at"] - a["at"] for a, b in zip(sent, sent[1:])]
    assert all(60 <= g <= 200 for g in gaps), gaps                             # one part every 0.1 s


def test_a_resync_restates_the_running_status_under_a_new_event_id():
    sent: list[dict] = []

    async def emit(payload: dict) -> None:
        sent.append(payload)

    async def scenario():
        reporter = TaskReporter(COMMAND, lambda: 1000, emit)
        assert not await reporter.resync()                  # nothing reported yet
        await reporter.running()
        assert await reporter.resync("back") and await reporter.resync()
        await reporter.completed()
        assert not await reporter.resync()                  # ended: nothing to re-state

    asyncio.run(scenario())
    assert [p["event_id"] for p in sent] == ["cell1/42:running", "cell1/42:running-resync1",
                                            "cell1/42:running-resync2", "cell1/42:completed"]
    assert all(fits("TaskStatusChanged", p) for p in sent)


def test_a_sample_of_heartbeats_goes_as_batches_per_cell_of_at_most_the_limit():
    beats = [heartbeat_event("sim", {"node_id": f"n{i}", "cell": "c" if i < 5 else "d"}, 3, 99) for i in range(7)]
    other = ("NodeMetrics", {"node_id": "n0"})
    out = batch_heartbeats([other, *beats], limit=2)
    assert out[0] == other
    assert [(p["node_id"], p["nodes"], p["cell"]) for _, p in out[1:]] == \
        [("n0", ["n1"], "c"), ("n2", ["n3"], "c"), ("n4", [], "c"), ("n5", ["n6"], "d")]
    assert [p["event_id"] for _, p in out[1:]] == ["sim/n0/hb/3", "sim/n2/hb/3", "sim/n4/hb/3", "sim/n5/hb/3"]
    assert all(fits("NodeHeartbeat", p) for _, p in out[1:])
    named = sorted(n for _, p in out[1:] for n in (p["node_id"], *p["nodes"]))
    assert named == sorted(f"n{i}" for i in range(7))             # every node once
