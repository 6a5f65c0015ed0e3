"""The runner routes PrewarmCommands from the dispatch topic to ``adapter.prewarm``, without
Kafka: a recording producer stands in for aiokafka (the real topic: test_prewarm_on_kafka.py)."""
from __future__ import annotations

import asyncio
from typing import Any

from suanli.connectors.kit import COMMAND_KINDS, Adapter, ConnectorRunner
from suanli.streams.kafka_io import Received


class _Recorder:
    """What the runner sends, in order: ``(topic, kind, payload)``; every send is stored at once."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, str, dict[str, Any]]] = []

    async def send(self, topic: str, kind: str, payload: dict[str, Any], key: Any) -> asyncio.Future:
        self.sent.append((topic, kind, payload))
        done = asyncio.get_running_loop().create_future()
        done.set_result(None)
        return done


class _Warming(Adapter):
    """Its prewarm waits for ``release``; a model named 'broken' fails; a dispatch completes at once."""

    name, cell = "edge", "c1"

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.prewarmed: list[str] = []
        self.executed: list[str] = []

    def discover(self):
        return []

    def monitor(self, at, seq):
        return []

    def admit(self, command):
        return None

    async def execute(self, command, report):
        self.executed.append(command["dispatch_id"])
        await report.completed()

    async def prewarm(self, command):
        if command["model_arch"] == "broken":
            raise OSError("disk on fire")
        await self.release.wait()
        self.prewarmed.append(command["model_arch"])


class _NoCache(_Warming):
    prewarm = Adapter.prewarm                  # the base's: ignored


def _record(kind: str, payload: dict[str, Any], offset: int) -> Received:
    return Received(topic="ns1.dispatch.edge", partition=0, offset=offset, timestamp=1, key=b"n1", value=b"",
                    kind=kind, payload=payload)


def _prewarm(arch: str) -> dict[str, Any]:
    return {"event_id": f"pw-{arch}", "node_id": "n1", "cell": "c1", "model_arch": arch,
            "artifact_uri": f"file:///models/{arch}.bin", "size_mib": 10, "at": 1, "reason": "demand"}


DISPATCH = {"event_id": "e1", "dispatch_id": "d1", "task_id": "t1", "tenant": "x", "cell": "c1", "node_id": "n1",
            "connector": "edge", "cpu_milli": 1000, "memory_mib": 10, "issued_at": 1}


def _runner(adapter: Adapter) -> tuple[ConnectorRunner, _Recorder]:
    runner = ConnectorRunner(adapter, codec=None, bootstrap="127.0.0.1:1", partitions=1, namespace="ns1")
    runner._producer = recorder = _Recorder()
    return runner, recorder


def test_a_prewarm_is_handed_to_the_adapter_and_never_holds_up_the_dispatches_behind_it():
    adapter = _Warming()
    runner, recorder = _runner(adapter)

    async def scenario():
        await runner._handle_batch([_record("PrewarmCommand", _prewarm("llama"), 0),
                                    _record("DispatchCommand", DISPATCH, 1),
                                    _record("PrewarmCommand", _prewarm("broken"), 2)])
        await asyncio.gather(*runner._runs)        # the dispatch ran to its end ...
        pending = [t for t in runner._prewarms if not t.done()]
        assert adapter.executed == ["d1"] and adapter.prewarmed == [] and len(pending) == 1   # ... the copy waits
        adapter.release.set()
        await asyncio.gather(*pending)

    asyncio.run(scenario())
    assert adapter.prewarmed == ["llama"]
    assert [(kind, p.get("status")) for _, kind, p in recorder.sent] == [("DispatchAck", None),
                                                                       ("TaskStatusChanged", "COMPLETED")]
    s = runner.stats
    assert (s.prewarms, s.prewarm_failures, s.bad_records, s.accepted) == (2, 1, 0, 1) and not runner._prewarms


def test_an_adapter_without_a_model_cache_ignores_prewarms():
    runner, recorder = _runner(_NoCache())

    async def scenario():
        await runner._handle_batch([_record("PrewarmCommand", _prewarm("llama"), 0)])
        await asyncio.gather(*runner._prewarms)

    asyncio.run(scenario())
    assert recorder.sent == [] and (runner.stats.prewarms, runner.stats.prewarm_failures) == (1, 0)


def test_prewarms_in_progress_are_cancelled_when_the_runner_stops():
    adapter = _Warming()
    runner, _ = _runner(adapter)

    async def scenario():
        await runner._handle_batch([_record("PrewarmCommand", _prewarm("llama"), 0)])
        [task] = runner._prewarms
        await runner._stop_runs()
        await runner._handle_batch([_record("PrewarmCommand", _prewarm("late"), 1)])   # closing: not started
        return task

    task = asyncio.run(scenario())
    assert task.cancelled() and adapter.prewarmed == [] and runner.stats.prewarms == 1


def test_records_of_other_kinds_are_still_dead_lettered():
    assert "PrewarmCommand" in COMMAND_KINDS
    runner, recorder = _runner(_Warming())
    heartbeat = {"event_id": "x", "node_id": "n1", "cell": "c1", "seq": 1, "at": 1}
    asyncio.run(runner._handle_batch([_record("NodeHeartbeat", heartbeat, 7)]))
    [(topic, kind, letter)] = recorder.sent
    assert (topic, kind, letter["error_kind"]) == ("ns1.deadletter", "DeadLetter", "INVALID")
    assert letter["reason"] == "expected a DispatchCommand, StopCommand or PrewarmCommand, got NodeHeartbeat"
    assert runner.stats.bad_records == 1 and runner.stats.prewarms == 0
