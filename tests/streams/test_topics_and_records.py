"""Topic names are a pure function of a namespace; the stream logic imports no Kafka client."""
from __future__ import annotations

import json
import os
import subprocess
import sys

from suanli.replay.dir_registry import DirRegistry
from suanli.schemas.catalog import catalog
from suanli.schemas.codec import Codec
from suanli.streams.cell_runner import CellRunner
from suanli.streams.intake import triage
from suanli.streams.records import RawRecord
from suanli.streams.topics import TopicNames, TopicSpec, core_topics, raw_route

BROKER_FREE = ("suanli.streams.records", "suanli.streams.topics", "suanli.streams.intake",
               "suanli.streams.cell_runner")


def test_importing_the_stream_logic_loads_no_kafka_client_and_reads_no_settings():
    probe = (
        "import importlib, json, sys\n"
        f"for m in {BROKER_FREE!r}:\n"
        "    importlib.import_module(m)\n"
        "from suanli.config import settings\n"
        "print(json.dumps({'clients': sorted(m for m in sys.modules if m.split('.')[0] in ('aiokafka', 'faust')),\n"
        "                  'settings_reads': settings.cache_info().misses}))\n")
    # A namespace settings() would refuse: reading the settings at import would fail loudly.
    env = dict(os.environ, SUANLI_NAMESPACE="not a namespace!")
    proc = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.splitlines()[-1]) == {"clients": [], "settings_reads": 0}


def test_topic_names_of_a_namespace():
    t = TopicNames("ns1")
    assert (t.raw_tasks, t.raw_nodes, t.raw_status, t.raw_policy) == t.raw == (
        "ns1.raw.tasks", "ns1.raw.nodes", "ns1.raw.status", "ns1.raw.policy")
    assert (t.cell_log, t.decisions, t.dead_letters) == ("ns1.cells", "ns1.decisions", "ns1.deadletter")
    assert t.dispatch("edge7") == "ns1.dispatch.edge7"
    assert TopicNames("ns1") == t and TopicNames("ns2").decisions == "ns2.decisions"
    assert t.worker_group("intake") == "ns1-intake"          # the Faust app id of a worker role


def test_raw_route_and_core_topics_take_the_namespace():
    assert raw_route("TaskSubmitted", {"task_id": "t1"}, "ns1") == ("ns1.raw.tasks", "t1")
    assert raw_route("ReservationBid", {"bid_id": "b1"}, "ns2") == ("ns2.raw.tasks", "b1")
    assert raw_route("DispatchAck", {"task_id": "t1"}, "ns1") == ("ns1.raw.status", "t1")
    assert raw_route("PolicyChanged", {"cell": "c"}, "ns1") == ("ns1.raw.policy", "c")
    specs = core_topics(3, "ns1", connectors=("sim", "edge"))
    assert specs[-1] == TopicSpec("ns1.deadletter", 1)
    assert [s.name for s in specs[:-1]] == ["ns1.raw.tasks", "ns1.raw.nodes", "ns1.raw.status", "ns1.raw.policy",
                                            "ns1.cells", "ns1.decisions", "ns1.dispatch.sim", "ns1.dispatch.edge"]
    assert {s.partitions for s in specs[:-1]} == {3}
    # Only the cell log is stamped by the broker: its timestamps say when an input arrived.
    assert [s.name for s in specs if s.log_append_time] == ["ns1.cells"]


def _codec() -> Codec:
    schemas = {100 + i: ev.schema for i, (_k, ev) in enumerate(sorted(catalog().items()))}
    return Codec(DirRegistry(schemas))  # type: ignore[arg-type]


NODE = {"event_id": "n0", "node_id": "n0", "cell": "c1", "site": "s", "region": "r", "zone": "", "tier": "cloud",
        "arch": "x86_64", "cpu_milli": 32000, "memory_mib": 131072,
        "accelerators": [{"kind": "GPU", "model": "T4", "count": 2, "memory_mib": 0}], "pricing": "ON_DEMAND",
        "price_per_hour": 0.0, "pue": 1.0, "carbon_g_per_kwh": 0.0, "connector": "edge7", "labels": {},
        "registered_at": 0}
TASK = {"event_id": "s0", "task_id": "t0", "tenant": "t", "cell": "c1", "submitted_at": 1000,
        "resources": {"cpu_milli": 1000, "memory_mib": 1024, "gpu_count": 1, "gpu_milli": 1000, "gpu_models": [],
                      "gpu_memory_mib": 0, "accelerators": []},
        "qos_tier": "SILVER", "priority": 0, "labels": {}, "deadline": None, "duration_estimate_ms": None,
        "command": None}


def test_intake_and_the_runner_produce_to_the_names_they_are_given():
    codec, topics = _codec(), TopicNames("ns1")
    raw = RawRecord(topics.raw_tasks, 0, 5, 1, b"t0", codec.encode("TaskSubmitted", TASK))
    [forwarded] = triage(codec, raw, topics)
    assert forwarded.topic == "ns1.cells" and forwarded.key == b"c1" and forwarded.value == raw.value
    [letter] = triage(codec, RawRecord(topics.raw_tasks, 0, 6, 1, b"x", b"not avro"), topics)
    assert letter.topic == "ns1.deadletter"

    runner = CellRunner(codec, topics)
    log = "ns1.cells"
    assert runner.apply(RawRecord(log, 0, 0, 1, b"c1", codec.encode("NodeRegistered", NODE))) == []
    out = runner.apply(RawRecord(log, 0, 1, 2, b"c1", codec.encode("TaskSubmitted", TASK)))
    assert [r.topic for r in out] == ["ns1.decisions", "ns1.dispatch.edge7"]
    status = {"event_id": "x", "task_id": "t0", "cell": "c1", "node_id": "nowhere", "status": "RUNNING", "at": 3,
              "exit_code": None, "message": "", "usage": None}
    [unknown] = runner.apply(RawRecord(log, 0, 2, 3, b"c1", codec.encode("TaskStatusChanged", status)))
    assert unknown.topic == "ns1.deadletter"


def test_a_tenants_raw_topic_names_its_tenant_and_matches_the_pattern():
    import re

    from suanli.streams.topics import TopicNames

    names = TopicNames("ns")
    assert names.tenant_raw("alpha") == "ns.raw.tasks.tenant.alpha"
    assert names.tenant_of("ns.raw.tasks.tenant.alpha") == "alpha"
    assert names.tenant_of("ns.raw.tasks") is None and names.tenant_of("other.raw.tasks.tenant.alpha") is None
    pattern = re.compile(names.tenant_raw_pattern)
    assert pattern.fullmatch("ns.raw.tasks.tenant.alpha") and pattern.fullmatch("ns.raw.tasks.tenant.b-2")
    assert not pattern.fullmatch("ns.raw.tasks") and not pattern.fullmatch("nsXraw.tasks.tenant.alpha")
