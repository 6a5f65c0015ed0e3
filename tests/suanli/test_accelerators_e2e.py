"""Accelerators of every kind (C1, issue 19) followed from `suanli submit` to the decision, on
the real stack: intake and scheduler workers in a namespace of their own, three nodes
registered by a producer (CPU only; two FPGAs of one model; an NPU and a 40 GiB GPU). An FPGA
task lands on the FPGA node, an NPU task on the NPU node, a task asking GPUs of 40 GiB on
the node that has them; a task asking three FPGAs, which no node has, is dead-lettered with
its reason, and the cell goes on deciding. No mocks; every wait polls a condition.
"""
from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pytest
import yaml

from suanli.config import load_settings, to_env
from suanli.deploy.plane import worker_processes
from suanli.schemas.codec import Codec
from suanli.schemas.registry import RegistryClient
from suanli.streams.kafka_io import EventConsumer, EventProducer, ensure_topics
from suanli.streams.topics import TopicNames, core_topics

from test_dispatch_e2e import LocalPlane, wait_for

pytestmark = [pytest.mark.stack, pytest.mark.timeout(300)]


def _node(cell: str, node_id: str, accelerators: list[dict]) -> dict:
    return {"event_id": f"reg/{node_id}", "node_id": node_id, "cell": cell, "site": "s1", "region": "r1",
            "zone": "z1", "tier": "onprem", "arch": "x86_64", "cpu_milli": 16000, "memory_mib": 65536,
            "accelerators": accelerators, "connector": "sim", "registered_at": 1}


@pytest.fixture(scope="module")
def cell(stack):
    settings = load_settings(namespace=f"t{uuid.uuid4().hex[:10]}", partitions=1)
    run = uuid.uuid4().hex[:6]
    lp = LocalPlane(settings, cell=f"accel-{run}", node_id=f"cpu-{run}")
    nodes = {"cpu": f"cpu-{run}", "fpga": f"fpga-{run}", "npu": f"npu-{run}"}
    asyncio.run(ensure_topics(settings.bootstrap_servers, core_topics(settings.partitions, settings.namespace)))

    async def register() -> None:
        with RegistryClient(settings.registry_url) as registry:
            async with EventProducer(settings.bootstrap_servers, Codec(registry),
                                     namespace=settings.namespace) as producer:
                for payload in (
                        _node(lp.cell, nodes["cpu"], []),
                        _node(lp.cell, nodes["fpga"], [{"kind": "FPGA", "model": "xilinx-u250", "count": 2,
                                                        "memory_mib": 0}]),
                        _node(lp.cell, nodes["npu"], [{"kind": "NPU", "model": "ascend-910", "count": 1,
                                                       "memory_mib": 0},
                                                      {"kind": "GPU", "model": "A100", "count": 2,
                                                       "memory_mib": 40960}])):
                    await (await producer.publish("NodeRegistered", payload))

    asyncio.run(register())
    services = list(worker_processes(settings).values())
    for service, argv in services:
        service.start(argv, env=to_env(settings))
    try:
        for node in nodes.values():
            wait_for(f"{node} in `suanli nodes`",
                     lambda n=node: any(r["node_id"] == n for r in lp.cli_json("nodes", "--cell", lp.cell)),
                     timeout=180)
        yield lp, nodes
    finally:
        for service, _argv in reversed(services):
            service.stop()


def _submit(lp: LocalPlane, tmp: Path, name: str, resources: dict) -> str:
    task_id = f"{name}-{uuid.uuid4().hex[:6]}"
    path = tmp / f"{task_id}.yaml"
    path.write_text(yaml.safe_dump({"id": task_id, "tenant": "e2e", "cell": lp.cell,
                                    "resources": {"cpu": 1, "memory": "1Gi", **resources}}))
    out = lp.cli("submit", str(path))
    assert out.returncode == 0 and f"submitted {task_id}" in out.stdout, out.stderr
    return task_id


def _placed_on(lp: LocalPlane, task_id: str) -> str:
    t = wait_for(f"{task_id} placed", lambda: (t := lp.task(task_id)) and t.get("node_id") and t, timeout=120)
    return t["node_id"]


def test_each_kind_lands_only_where_its_devices_are_and_the_impossible_is_dead_lettered(cell, tmp_path):
    lp, nodes = cell
    fpga = _submit(lp, tmp_path, "fpga", {"accelerators": [{"kind": "FPGA", "model": "xilinx-u250", "count": 2}]})
    npu = _submit(lp, tmp_path, "npu", {"accelerators": [{"kind": "NPU"}]})
    big = _submit(lp, tmp_path, "gpu40", {"gpu": 1, "gpu_memory": "40Gi"})
    plain = _submit(lp, tmp_path, "plain", {})
    impossible = _submit(lp, tmp_path, "fpga3", {"accelerators": [{"kind": "FPGA", "count": 3}]})
    assert _placed_on(lp, fpga) == nodes["fpga"]
    assert _placed_on(lp, npu) == nodes["npu"]
    assert _placed_on(lp, big) == nodes["npu"]
    assert _placed_on(lp, plain) in nodes.values()

    # the FPGAs are taken: a second task asking both waits, with the reason
    second = _submit(lp, tmp_path, "fpga-b", {"accelerators": [{"kind": "FPGA", "count": 2}]})
    pending = wait_for(f"{second} pending", lambda: (t := lp.task(second)) and t["status"] == "PENDING" and t,
                       timeout=120)
    assert "accelerators" in str(pending), pending

    async def letters() -> list:
        with RegistryClient(lp.s.registry_url) as registry:
            async with EventConsumer(lp.s.bootstrap_servers, Codec(registry),
                                     [TopicNames(lp.s.namespace).dead_letters]) as consumer:
                return [r.payload for r in await consumer.read_until_end() if r.kind == "DeadLetter"]

    dead = wait_for("the impossible task's dead letter", lambda: [d for d in asyncio.run(letters())
                                                                  if impossible.encode() in (d["value"] or b"")],
                    timeout=120)
    assert "3" in dead[0]["reason"] and "FPGA" in dead[0]["reason"], dead[0]
