"""Intake's pure triage, table-driven, and the runner's dispatch (no broker: an offline codec)."""
from __future__ import annotations

import struct

import pytest

from suanli.processors.model import from_avro
from suanli.replay.dir_registry import DirRegistry
from suanli.schemas.catalog import catalog
from suanli.schemas.codec import Codec
from suanli.streams.cell_runner import CellRunner
from suanli.streams.intake import triage
from suanli.streams.records import RawRecord
from suanli.streams.topics import TopicNames

TOPICS = TopicNames("ns")


@pytest.fixture(scope="module")
def codec() -> Codec:
    schemas = {100 + i: ev.schema for i, (_k, ev) in enumerate(sorted(catalog().items()))}
    return Codec(DirRegistry(schemas))  # type: ignore[arg-type]


def node(**over):
    return {"event_id": "n0", "node_id": "n0", "cell": "c1", "site": "s", "region": "r", "zone": "z",
            "tier": "onprem", "arch": "x86_64", "cpu_milli": 8000, "memory_mib": 16384,
            "accelerators": [{"kind": "GPU", "model": "T4", "count": 2, "memory_mib": 16384}],
            "connector": "local", "registered_at": 0, **over}


def task(**over):
    return {"event_id": "s0", "task_id": "t0", "tenant": "a", "cell": "c1", "submitted_at": 1000,
            "resources": {"cpu_milli": 1000, "memory_mib": 512, "gpu_count": 1, "gpu_milli": 500}, **over}


def ack(accepted):
    return {"event_id": "a0", "dispatch_id": "d0", "task_id": "t0", "node_id": "n0", "connector": "local",
            "cell": "c1", "accepted": accepted, "message": "", "at": 7}


# (name, topic, how to build the value from the codec, expected [(topic, error_kind or kind)])
CASES = [
    ("a task goes to its cell's log", "raw_tasks", lambda c: c.encode("TaskSubmitted", task()), [("cells", "TaskSubmitted")]),
    ("a node too", "raw_nodes", lambda c: c.encode("NodeRegistered", node()), [("cells", "NodeRegistered")]),
    ("garbage", "raw_tasks", lambda c: b"\x7fnot avro", [("deadletter", "UNDECODABLE")]),
    ("a schema id nobody issued", "raw_tasks", lambda c: struct.pack(">bI", 0, 999_999) + b"\x00",
     [("deadletter", "UNKNOWN_SCHEMA")]),
    ("negative GPUs", "raw_tasks",
     lambda c: c.encode("TaskSubmitted", task(resources={"cpu_milli": 1, "memory_mib": 1, "gpu_count": -2})),
     [("deadletter", "INVALID")]),
    ("an accepted dispatch becomes DISPATCHED", "raw_status", lambda c: c.encode("DispatchAck", ack(True)),
     [("cells", "TaskStatusChanged")]),
    ("heartbeats go to the cell (health runs on the cell clock)", "raw_nodes",
     lambda c: c.encode("NodeHeartbeat", {"event_id": "h", "node_id": "n0", "cell": "c1", "seq": 1, "at": 1}),
     [("cells", "NodeHeartbeat")]),
    ("raw metrics stop at intake (the telemetry worker reads them)", "raw_nodes",
     lambda c: c.encode("NodeMetrics", {"event_id": "m", "node_id": "n0", "cell": "c1", "at": 1, "cpu_util": 0.5,
                                        "memory_used_mib": 10}), []),
    ("a link outside any cell stops at intake", "raw_nodes",
     lambda c: c.encode("LinkMetrics", {"event_id": "l", "src": "a", "dst": "b", "scope": "SITE", "latency_ms": 1.0,
                                        "bandwidth_mbps": 10.0, "at": 1}), []),
]


@pytest.mark.parametrize("name, topic, value, expected", CASES, ids=[c[0] for c in CASES])
def test_triage(codec, name, topic, value, expected):
    data = value(codec)
    out = triage(codec, RawRecord(getattr(TOPICS, topic), 0, 9, 1, b"k", data), TOPICS)
    got = []
    for record in out:
        kind, payload = codec.decode(record.value)
        got.append((record.topic.split(".", 1)[1], payload["error_kind"] if kind == "DeadLetter" else kind))
        if kind == "DeadLetter":
            assert payload["value"] == data and payload["reason"]          # nothing is lost
        elif topic != "raw_status":
            assert record.value == data and record.key == b"c1"            # forwarded verbatim, keyed by cell
    assert got == expected


def test_an_urgent_task_is_forwarded_verbatim_with_the_urgent_header_and_others_without(codec):
    from suanli.streams.records import URGENT_HEADER, is_urgent

    urgent = codec.encode("TaskSubmitted", task(labels={"scheduling": "urgent"}))
    [out] = triage(codec, RawRecord(TOPICS.raw_tasks, 0, 1, 1, b"k", urgent), TOPICS)
    assert out.value == urgent and out.headers == (URGENT_HEADER,) and is_urgent(out.kafka_headers())
    for labels in ({}, {"scheduling": "batch"}, {"scheduling": "urgently"}):
        [out] = triage(codec, RawRecord(TOPICS.raw_tasks, 0, 1, 1, b"k",
                                        codec.encode("TaskSubmitted", task(labels=labels))), TOPICS)
        assert out.headers == () and out.kafka_headers() is None and not is_urgent(out.kafka_headers())


def test_lane_headers_mark_only_urgent_task_submissions():
    from suanli.streams.intake import lane_headers
    from suanli.streams.records import URGENT_HEADER

    assert lane_headers("TaskSubmitted", task(labels={"scheduling": "urgent"})) == (URGENT_HEADER,)
    for labels in ({}, {"scheduling": "batch"}, {"scheduling": "normal"}, {"urgent": "scheduling"}):
        assert lane_headers("TaskSubmitted", task(labels=labels)) == ()
    assert lane_headers("TaskSubmitted", {**task(), "labels": None}) == ()
    # only a submission is ever urgent, whatever another event's payload holds
    assert lane_headers("TaskCancelled", {"task_id": "t", "labels": {"scheduling": "urgent"}}) == ()


def test_a_refused_dispatch_fails_the_task(codec):
    [out] = triage(codec, RawRecord(TOPICS.raw_status, 0, 1, 1, b"t0", codec.encode("DispatchAck", ack(False))), TOPICS)
    kind, payload = codec.decode(out.value)
    assert (kind, payload["status"], payload["message"]) == ("TaskStatusChanged", "FAILED", "refused by connector")


def test_the_dispatch_carries_the_command_env_duration_and_devices(codec):
    runner = CellRunner(codec, TOPICS)
    log = TOPICS.cell_log
    runner.apply(RawRecord(log, 0, 0, 1, b"c1", codec.encode("NodeRegistered", node())))
    submitted = task(command=["python", "-c", "print(1)"], env={"MODE": "fast"}, duration_estimate_ms=1234)
    out = runner.apply(RawRecord(log, 0, 1, 2, b"c1", codec.encode("TaskSubmitted", submitted)))
    assert [r.topic for r in out] == ["ns.decisions", "ns.dispatch.local"]
    placed = from_avro(*codec.decode(out[0].value))
    command = from_avro(*codec.decode(out[1].value))
    assert command.command == ("python", "-c", "print(1)") and command.env == {"MODE": "fast"}
    assert command.duration_estimate_ms == 1234 and command.gpu_devices == placed.gpu_devices == (0,)
    assert (command.gpu_milli, command.cpu_milli, command.memory_mib) == (500, 1000, 512)
    assert command.dispatch_id == placed.decision_id and command.issued_at == 1000


def test_a_bad_policy_is_dead_lettered_by_the_scheduler(codec):
    runner = CellRunner(codec, TOPICS)
    bad = {"event_id": "p", "cell": "c1", "strategy": "default", "config_json": '{"bestfit_weight": "heavy"}', "at": 0}
    [letter] = runner.apply(RawRecord(TOPICS.cell_log, 0, 0, 1, b"c1", codec.encode("PolicyChanged", bad)))
    kind, payload = codec.decode(letter.value)
    assert kind == "DeadLetter" and payload["error_kind"] == "INVALID" and "bestfit_weight" in payload["reason"]
    assert runner.partition(0).cells["c1"].policy.strategy == "default"       # unchanged


def test_a_task_no_node_could_ever_serve_is_dead_lettered_by_the_scheduler(codec):
    """C1: a TaskSubmitted asking accelerators no registered node has is refused with its
    reason, not queued forever; the cell log moves on and an FPGA node's task is placed."""
    runner = CellRunner(codec, TOPICS)
    log = TOPICS.cell_log
    fpga = node(node_id="f1", accelerators=[{"kind": "FPGA", "model": "xilinx-u250", "count": 1, "memory_mib": 0}])
    runner.apply(RawRecord(log, 0, 0, 1, b"c1", codec.encode("NodeRegistered", fpga)))
    asks = lambda n: {"cpu_milli": 1000, "memory_mib": 512,                  # noqa: E731
                      "accelerators": [{"kind": "FPGA", "model": "xilinx-u250", "count": n}]}
    [letter] = runner.apply(RawRecord(log, 0, 1, 2, b"c1", codec.encode("TaskSubmitted", task(resources=asks(2)))))
    kind, payload = codec.decode(letter.value)
    assert kind == "DeadLetter" and payload["error_kind"] == "INVALID"
    assert "has 2 free-or-used FPGA devices of model 'xilinx-u250' (largest: 1 on node f1)" in payload["reason"]
    assert "t0" not in runner.partition(0).cells["c1"].tasks
    out = runner.apply(RawRecord(log, 0, 2, 3, b"c1", codec.encode("TaskSubmitted", task(task_id="t1",
                                                                                           resources=asks(1)))))
    placed = from_avro(*codec.decode(out[0].value))
    assert placed.KIND == "TaskPlaced" and placed.node_id == "f1"


def test_the_dispatch_names_the_accelerators_the_core_chose_with_their_attributes(codec):
    """C1: a task asking "one QPU of any model" is dispatched with the model the core took on
    that node, and the node's registered attributes of it (an adapter reads the qubits)."""
    runner = CellRunner(codec, TOPICS)
    log = TOPICS.cell_log
    qpu = node(node_id="q1", connector="quantum", accelerators=[
        {"kind": "QPU", "model": "aer-7q", "count": 1, "memory_mib": 0,
         "attributes": {"qubits": "7", "noise": "depolarizing:0.01"}},
        {"kind": "FPGA", "model": "xilinx-u250", "count": 2, "memory_mib": 0}])
    runner.apply(RawRecord(log, 0, 0, 1, b"c1", codec.encode("NodeRegistered", qpu)))
    asks = {"cpu_milli": 1000, "memory_mib": 512, "accelerators": [{"kind": "QPU", "model": "", "count": 1}]}
    out = runner.apply(RawRecord(log, 0, 1, 2, b"c1", codec.encode("TaskSubmitted", task(resources=asks))))
    assert [r.topic for r in out] == ["ns.decisions", "ns.dispatch.quantum"]
    command = from_avro(*codec.decode(out[1].value))
    [qpu_held] = command.accelerators
    assert (qpu_held.kind, qpu_held.model, qpu_held.count) == ("QPU", "aer-7q", 1)
    assert qpu_held.attributes == {"qubits": "7", "noise": "depolarizing:0.01"}
    plain = runner.apply(RawRecord(log, 0, 2, 3, b"c1", codec.encode("TaskSubmitted", task(
        task_id="t1", resources={"cpu_milli": 1000, "memory_mib": 512}))))
    assert from_avro(*codec.decode(plain[1].value)).accelerators == ()


# ---------------------------------------------------------------- a tenant's own raw topic (secure stack)
def _on(codec: Codec, topic: str, value: bytes) -> list[tuple[str, str, str]]:
    """(output topic, kind or dead letter's error kind, dead letter's reason) of triaging ``value`` on ``topic``."""
    out = []
    for record in triage(codec, RawRecord(topic, 0, 4, 1, b"t0", value), TOPICS):
        kind, payload = codec.decode(record.value)
        out.append((record.topic, *((payload["error_kind"], payload["reason"]) if kind == "DeadLetter"
                                    else (kind, ""))))
    return out


def test_a_tenant_submitting_as_itself_on_its_topic_is_forwarded(codec):
    assert _on(codec, TOPICS.tenant_raw("a"), codec.encode("TaskSubmitted", task(tenant="a"))) == \
        [("ns.cells", "TaskSubmitted", "")]


def test_a_record_naming_another_tenant_on_a_tenants_topic_is_dead_lettered_with_the_reason(codec):
    [(topic, kind, reason)] = _on(codec, TOPICS.tenant_raw("a"), codec.encode("TaskSubmitted", task(tenant="b")))
    assert (topic, kind) == ("ns.deadletter", "INVALID")
    assert reason.startswith("tenant mismatch: the record names tenant 'b' but came on the raw topic of tenant 'a'")
    # a cancellation in someone else's name too; a node registration is not a tenant's to send
    cancel = {"event_id": "c", "task_id": "t0", "tenant": "b", "cell": "c1", "reason": "", "at": 2}
    assert _on(codec, TOPICS.tenant_raw("a"), codec.encode("TaskCancelled", cancel))[0][1] == "INVALID"
    [(_t, kind, reason)] = _on(codec, TOPICS.tenant_raw("a"), codec.encode("NodeRegistered", node()))
    assert kind == "INVALID" and "carries only TaskSubmitted, TaskCancelled, ReservationBid, JobRound, not NodeRegistered" in reason


def test_the_shared_raw_topic_keeps_believing_the_payload(codec):
    """Only the control plane's own principal may write it on the secure stack."""
    assert _on(codec, TOPICS.raw_tasks, codec.encode("TaskSubmitted", task(tenant="b"))) == \
        [("ns.cells", "TaskSubmitted", "")]
