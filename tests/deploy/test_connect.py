"""Kafka Connect for real: PostgreSQL and a Connect worker started through deploy/postgres.py
and deploy/connect.py, the Debezium JDBC sink reading Suanli's Avro through Apicurio's
converter, and the Debezium PostgreSQL source feeding nodes into a running control plane.

Each test runs a plane in a namespace of its own (its own SQL schema, connectors, slot).
The module starts PostgreSQL and the worker if they are not running and stops what it
started afterwards.
"""
from __future__ import annotations

import asyncio
import os
import signal
import threading
import time
import uuid
from pathlib import Path

import pytest

from suanli.config import load_settings
from suanli.deploy import connect, postgres
from suanli.deploy.plane import Plane, PlaneOptions
from suanli.processors.model import TASK_DECISION_KINDS
from suanli.schemas.codec import Codec
from suanli.schemas.registry import RegistryClient
from suanli.streams.kafka_io import EventConsumer
from suanli.streams.topics import TopicNames

from plane_helpers import read_topic

pytestmark = pytest.mark.stack



@pytest.fixture(scope="module")
def connect_stack(stack):
    started_pg = postgres.up(stack, log=lambda _m: None)
    started_worker = connect.start_worker(stack, log=lambda _m: None)
    yield stack
    if started_worker:
        connect.stop_worker(stack, log=lambda _m: None)
    if started_pg:
        postgres.down(stack, log=lambda _m: None)


@pytest.fixture()
def namespace(connect_stack):
    """A fresh namespace with its connectors; its connectors, slot and schema removed after."""
    settings = load_settings(namespace=f"tc{uuid.uuid4().hex[:10]}", partitions=2)
    yield settings
    svc, _argv = connect.bridge_service(settings)
    svc.stop()
    connect.unregister(settings, drop_schema=True)


def _decisions(settings) -> dict[str, tuple]:
    """Distinct decisions in the topic: event id -> (kind, {(partition, offset) of each copy})."""
    out: dict[str, tuple] = {}
    for r in asyncio.run(read_topic(settings, TopicNames(settings.namespace).decisions)):
        if r.kind in TASK_DECISION_KINDS:
            out.setdefault(r.payload["event_id"], (r.kind, set()))[1].add((r.partition, r.offset))
    return out


def _rows(settings, sql: str = "SELECT count(*) FROM {t}") -> list[list[str]]:
    return postgres.psql(sql.format(t=f"{connect.pg_schema(settings.namespace)}.decision"))


def _wait_rows(settings, expected: int, timeout: float = 120) -> int:
    deadline = time.monotonic() + timeout
    while True:
        count = int(_rows(settings)[0][0])
        if count >= expected or time.monotonic() > deadline:
            return count
        time.sleep(0.5)


def _plane(settings, **options) -> Plane:
    return Plane(settings, PlaneOptions(exit_when_drained=True, quiet=True, drain_timeout=240, **options),
                 out=lambda _m: None)


def _check_sink(settings, decisions: dict[str, tuple]) -> None:
    count = _wait_rows(settings, len(decisions))
    assert count == len(decisions)
    rows = _rows(settings, "SELECT event_id, event, decision_partition, decision_offset, "
                           "input_offset IS NOT NULL, decided_at IS NOT NULL FROM {t}")
    assert len(rows) == len({r[0] for r in rows}) == len(decisions)      # no duplicates
    assert {r[0] for r in rows} == set(decisions)                      # none lost
    for event_id, kind, partition, offset, *_ in rows:                 # each cites a copy of itself
        assert kind == decisions[event_id][0] and (int(partition), int(offset)) in decisions[event_id][1]
    assert all(r[4] == "t" and r[5] == "t" for r in rows)


def test_sink_lands_every_decision_of_a_1000_task_run(namespace):
    connect.up(namespace, source=False, log=lambda _m: None)
    plane = _plane(namespace, tasks=1000, rate=1000)
    plane.start()
    try:
        result = asyncio.run(plane.run())
    finally:
        plane.stop()
    assert result["placed"] + result["pending"] + result["unschedulable"] == 1000
    decisions = _decisions(namespace)
    assert len(decisions) >= 1000
    _check_sink(namespace, decisions)
    # The flattened provenance is queryable: every placement has its candidates and path.
    placed = _rows(namespace, "SELECT count(*), count(*) FILTER (WHERE jsonb_array_length(candidates) > 0 "
                              "AND top_candidate = node_id AND jsonb_array_length(path) > 0) "
                              "FROM {t} WHERE kind = 'placement'")
    assert int(placed[0][0]) == sum(1 for kind, _copies in decisions.values() if kind == "TaskPlaced")
    assert placed[0][0] == placed[0][1]


def test_sink_survives_sigkill_of_the_worker_without_lost_or_duplicated_rows(namespace):
    connect.up(namespace, source=False, log=lambda _m: None)
    worker = connect.worker_service(namespace)
    plane = _plane(namespace, tasks=1000, rate=250)
    events: dict[str, float] = {}
    failure: list[BaseException] = []
    stop = threading.Event()

    def killer() -> None:
        try:
            while not stop.is_set() and int(_rows(namespace)[0][0]) < 100:
                time.sleep(0.2)
            if stop.is_set():
                return
            events["rows_at_kill"] = int(_rows(namespace)[0][0])
            os.kill(worker.pid(), signal.SIGKILL)
            killed = time.monotonic()
            while worker.pid() is not None:
                time.sleep(0.05)
            connect.start_worker(namespace, log=lambda _m: None)
            connect.wait_running(connect.ConnectClient(), connect.sink_name(namespace), timeout=120)
            events["recovery_s"] = round(time.monotonic() - killed, 2)
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            failure.append(exc)

    plane.start()
    thread = threading.Thread(target=killer, daemon=True)
    thread.start()
    try:
        result = asyncio.run(plane.run())
    finally:
        stop.set()
        thread.join(timeout=180)
        plane.stop()
    assert not failure, failure
    assert "recovery_s" in events, "the worker was never killed: the run ended first"
    assert result["placed"] + result["pending"] + result["unschedulable"] == 1000
    decisions = _decisions(namespace)
    _check_sink(namespace, decisions)
    print(f"connect-kill: {events} decisions={len(decisions)}")


def test_source_inventory_row_becomes_a_node_and_a_task_lands_on_it(namespace, tmp_path):
    connect.up(namespace, sink=False, source=True, log=lambda _m: None)
    nodes_csv = tmp_path / "nodes.csv"
    lines = (Path(namespace.openb_dir) / "openb_node_list_gpu_node.csv").read_text().splitlines()
    nodes_csv.write_text("\n".join(lines[:21]) + "\n")          # header + 20 P100 nodes
    node_id, model = f"inv-{uuid.uuid4().hex[:6]}", f"INVX{uuid.uuid4().hex[:4].upper()}"
    schema = connect.pg_schema(namespace.namespace)
    seen: dict[str, float] = {}

    async def workload(publish, send_raw, tasks, names):
        cell = tasks[0]["cell"]
        inserted = time.monotonic()
        postgres.psql(f"INSERT INTO {schema}.nodes (node_id, cell, cpu_milli, memory_mib, gpu_model, gpu_count) "
                      f"VALUES ('{node_id}', '{cell}', 64000, 262144, '{model}', 4)")
        with RegistryClient(namespace.registry_url) as registry:
            async with EventConsumer(namespace.bootstrap_servers, Codec(registry), [names.cell_log]) as consumer:
                deadline = time.monotonic() + 90
                while "registered" not in seen and time.monotonic() < deadline:
                    for r in await consumer.read_until_end():
                        if r.kind == "NodeRegistered" and r.payload["node_id"] == node_id:
                            seen["registered"] = round(time.monotonic() - inserted, 2)
                            assert r.payload["accelerators"][0]["model"] == model
                    if "registered" not in seen:
                        await asyncio.sleep(0.5)      # not there yet: read the new end in a moment
        assert "registered" in seen, "the inventory row never reached the cell log"
        first = dict(tasks[0], resources=dict(tasks[0]["resources"], gpu_count=1, gpu_milli=1000,
                                              gpu_models=[model]))
        seen["task"] = first["task_id"]
        for task in [first, *tasks[1:]]:
            await publish("TaskSubmitted", task)

    plane = _plane(namespace, tasks=10, rate=0, nodes_csv=nodes_csv, workload=workload)
    plane.start()
    try:
        result = asyncio.run(plane.run())
    finally:
        plane.stop()
    assert result["capacity_violations"] == 0
    records = asyncio.run(read_topic(namespace, TopicNames(namespace.namespace).decisions))
    placed = [r.payload for r in records if r.kind == "TaskPlaced" and r.payload["node_id"] == node_id]
    assert placed, f"no task landed on {node_id}"
    assert seen["task"] in {p["task_id"] for p in placed}
    print(f"connect-source: registered after {seen['registered']}s, placed {[p['task_id'] for p in placed]}")


def test_bridge_maps_debezium_changes_to_suanli_events():
    """The pure half of the nodes bridge (no services needed)."""
    from suanli.schemas.models import validate_event

    row = {"node_id": "rack7-gpu3", "cell": "openb", "site": "inventory", "region": "", "zone": "", "tier": "edge",
           "arch": "arm64", "cpu_milli": 64000, "memory_mib": 262144, "gpu_model": "A100", "gpu_count": 8,
           "gpu_memory_mib": 81920, "connector": "sim", "pricing": "SPOT", "price_per_hour": 2.5,
           "labels": '{"rack": "7"}'}
    source = {"lsn": 27221112, "txId": 744, "ts_ms": 1_750_000_000_000}
    kind, event = connect.node_event({"op": "c", "after": row, "source": source, "ts_ms": 1_750_000_000_123})
    assert kind == "NodeRegistered" and validate_event(kind, event) is None
    assert event["event_id"] == "cdc/rack7-gpu3/c/27221112/744"
    assert event["accelerators"] == [{"kind": "GPU", "model": "A100", "count": 8, "memory_mib": 81920}]
    assert (event["tier"], event["arch"], event["pricing"], event["labels"]) == ("edge", "arm64", "SPOT", {"rack": "7"})
    assert connect.node_event({"op": "r", "after": dict(row, gpu_count=0), "source": source})[1]["accelerators"] == []
    kind, down = connect.node_event({"op": "d", "before": row, "source": source})
    assert kind == "NodeStatusChanged" and down["status"] == "DOWN" and validate_event(kind, down) is None
    assert connect.node_event({"op": "t", "source": source}) is None
    assert connect.pg_schema("T-Abc.1") == "t_abc_1" and connect.pg_schema("9x") == "ns_9x"
