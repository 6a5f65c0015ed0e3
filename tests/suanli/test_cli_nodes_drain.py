"""`suanli nodes drain|uncordon` against the running stack: the event lands on the cell log.

A namespace of its own with the real intake worker (as `suanli up` starts it) and nothing
else: nodes register on the raw nodes topic, intake forwards them to the cell log, the CLI
(a subprocess, as a person runs it) finds the node there and writes its NodeStatusChanged to
the raw nodes topic, and intake forwards that to the cell log, keyed by the node's cell.
Refused commands (unknown node or cell, an id registered in two cells without --cell) write
nothing. Every wait polls a condition with a deadline.
"""
from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
import uuid
from typing import Any

import pytest

from suanli.config import Settings, load_settings, to_env
from suanli.deploy.plane import worker_processes
from suanli.schemas.codec import Codec
from suanli.schemas.registry import RegistryClient
from suanli.streams.kafka_io import EventConsumer, EventProducer, ensure_topics
from suanli.streams.topics import TopicNames, core_topics
from suanli.deploy.waiting import wait_for

pytestmark = [pytest.mark.stack, pytest.mark.timeout(400)]


def _node(node_id: str, cell: str) -> dict[str, Any]:
    return {"event_id": f"reg/{cell}/{node_id}", "node_id": node_id, "cell": cell, "site": "s", "region": "r",
            "zone": "z", "tier": "cloud", "arch": "x86_64", "cpu_milli": 8000, "memory_mib": 16384,
            "accelerators": [{"kind": "GPU", "model": "T4", "count": 1, "memory_mib": 16384}], "connector": "sim",
            "registered_at": int(time.time() * 1000)}


class Plane:
    def __init__(self, settings: Settings):
        self.s = settings
        self.env = {**os.environ, **to_env(settings)}
        self.names = TopicNames(settings.namespace)

    def cli(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "suanli", *args], capture_output=True, text=True, env=self.env,
                              timeout=120)

    def read(self, topic: str) -> list[tuple[str, dict[str, Any], bytes | None]]:
        async def run() -> list:
            with RegistryClient(self.s.registry_url) as registry:
                async with EventConsumer(self.s.bootstrap_servers, Codec(registry), [topic]) as consumer:
                    return await consumer.read_until_end()

        return [(r.kind, r.payload, r.key) for r in asyncio.run(run()) if r.kind is not None]

    def status_changes(self, topic: str) -> list[tuple[dict[str, Any], bytes | None]]:
        return [(p, key) for kind, p, key in self.read(topic) if kind == "NodeStatusChanged"]

    def publish(self, kind: str, payloads: list[dict[str, Any]]) -> None:
        async def run() -> None:
            with RegistryClient(self.s.registry_url) as registry:
                async with EventProducer(self.s.bootstrap_servers, Codec(registry), namespace=self.s.namespace) as p:
                    for payload in payloads:
                        await (await p.publish(kind, payload))

        asyncio.run(run())


@pytest.fixture(scope="module")
def plane(stack) -> Plane:
    settings = load_settings(namespace=f"t{uuid.uuid4().hex[:10]}", partitions=1)
    asyncio.run(ensure_topics(settings.bootstrap_servers, core_topics(settings.partitions, settings.namespace)))
    service, argv = worker_processes(settings)["intake"]
    service.start(argv, env=to_env(settings))
    try:
        plane = Plane(settings)
        plane.cells = (f"drain-a-{uuid.uuid4().hex[:6]}", f"drain-b-{uuid.uuid4().hex[:6]}")
        a, b = plane.cells
        plane.publish("NodeRegistered", [_node("n1", a), _node("n2", a), _node("n1", b)])
        wait_for("the three registrations on the cell log",
                 lambda: {(p["cell"], p["node_id"]) for k, p, _ in plane.read(plane.names.cell_log)
                          if k == "NodeRegistered"} >= {(a, "n1"), (a, "n2"), (b, "n1")})
        yield plane
    finally:
        service.stop()


def test_drain_lands_on_the_cell_log_and_uncordon_makes_the_node_ready(plane):
    a, _b = plane.cells
    out = plane.cli("nodes", "drain", "n2", "--reason", "kernel upgrade", "--json")
    assert out.returncode == 0, out.stderr
    written = json.loads(out.stdout)
    assert (written["node_id"], written["cell"], written["status"], written["reason"], written["previous"]) == \
        ("n2", a, "DRAINING", "kernel upgrade", "READY")
    assert written["stored"]["topic"] == plane.names.raw_nodes

    def landed(event_id: str) -> Any:
        return next(((p, key) for p, key in plane.status_changes(plane.names.cell_log)
                     if p["event_id"] == event_id), None)

    event, key = wait_for("the DRAINING on the cell log", lambda: landed(written["event_id"]))
    assert (event["node_id"], event["cell"], event["status"], event["reason"]) == ("n2", a, "DRAINING", "kernel upgrade")
    assert key == a.encode()                                 # the cell log is keyed by cell
    nodes = {n["node_id"]: n for n in json.loads(plane.cli("nodes", "--cell", a, "--json").stdout)}
    assert nodes["n2"]["status"] == "DRAINING" and nodes["n1"]["status"] == "READY"
    table = plane.cli("nodes", "--cell", a)
    assert table.returncode == 0 and any(line.split()[1] == "n2" and line.endswith("DRAINING")
                                         for line in table.stdout.splitlines()[1:]), table.stdout

    again = plane.cli("nodes", "uncordon", "n2", "--cell", a)
    assert again.returncode == 0 and f"node n2 (cell {a}): DRAINING -> READY requested" in again.stdout, again.stderr
    ready_id = again.stdout.split(" requested (")[1].split(" at ")[0]
    back, _ = wait_for("the READY on the cell log", lambda: landed(ready_id))
    assert back["status"] == "READY"
    nodes = {n["node_id"]: n for n in json.loads(plane.cli("nodes", "--cell", a, "--json").stdout)}
    assert nodes["n2"]["status"] == "READY"


def test_refused_drains_say_why_and_write_nothing(plane):
    a, b = plane.cells
    before = {p["event_id"] for p, _ in plane.status_changes(plane.names.raw_nodes)}
    for args, said in ((("n1",), f"node 'n1' is registered in cells {', '.join(sorted((a, b)))}: name its cell"),
                       (("ghost",), "no node 'ghost' has registered"),
                       (("n2", "--cell", b), f"no node 'n2' in cell '{b}'"),
                       (("n2", "--cell", "nowhere"), "no cell 'nowhere'")):
        out = plane.cli("nodes", "drain", *args)
        assert out.returncode == 2 and said in out.stderr, (args, out.stderr)
    ok = plane.cli("nodes", "drain", "n1", "--cell", b, "--json")          # the same id, its cell named
    assert ok.returncode == 0, ok.stderr
    written = json.loads(ok.stdout)
    assert (written["cell"], written["node_id"]) == (b, "n1")
    after = {p["event_id"] for p, _ in plane.status_changes(plane.names.raw_nodes)}
    assert after - before == {written["event_id"]}
