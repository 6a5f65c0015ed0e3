"""The adapter kit without services: event shapes, reporter rules, runner construction."""
from __future__ import annotations

import asyncio

import fastavro
import pytest

from suanli.connectors.kit import Adapter, ConnectorRunner, TaskReporter, ack_event, status_event
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
