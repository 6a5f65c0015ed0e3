"""Cells across scheduler workers on the real stack: six cells on six partitions of the cell
log, three scheduler workers in one consumer group. One worker is SIGKILLed mid-stream: its
cells resume on the others (from snapshot plus log) with no task lost or placed twice, and
every cell's decisions equal a crash-free replay of its log byte for byte. Then a fourth
worker joins and takes its share of the cells.
"""
from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import time
import uuid
from collections import defaultdict

import pytest
from aiokafka.partitioner import murmur2

from suanli.config import load_settings, to_env
from suanli.deploy.plane import worker_processes
from suanli.processors.model import from_avro, to_avro
from suanli.replay.log_replay import first_divergence, regenerate
from suanli.schemas.codec import Codec
from suanli.schemas.registry import RegistryClient
from suanli.streams.kafka_io import EventConsumer, EventProducer, ensure_topics
from suanli.streams.records import RawRecord
from suanli.streams.topics import TopicNames, core_topics

pytestmark = pytest.mark.stack

CELLS = 6
NODES_PER_CELL = 4
ASSIGNED = re.compile(r"scheduler: cell-log partitions assigned: \[([\d, ]*)\]")


def cell_names(run: str, partitions: int) -> list[str]:
    """One cell name per partition (Kafka's default partitioner, as intake's producer uses),
    so that the six cells are spread over the six partitions."""
    names: dict[int, str] = {}
    i = 0
    while len(names) < partitions:
        name = f"c{i}-{run}"
        names.setdefault((murmur2(name.encode()) & 0x7FFFFFFF) % partitions, name)
        i += 1
    return [names[p] for p in range(partitions)]


def _payload(kind: str, fields: dict) -> dict:
    return to_avro(from_avro(kind, fields))


def _node(cell: str, i: int) -> dict:
    return {"event_id": f"reg-{cell}-{i}", "node_id": f"{cell}-n{i}", "cell": cell, "site": "s", "region": "r",
            "zone": "z", "tier": "onprem", "arch": "x86_64", "cpu_milli": 64000, "memory_mib": 262144,
            "accelerators": [], "registered_at": 0}


def _task(cell: str, i: int) -> dict:
    return {"event_id": f"sub-{cell}-{i}", "task_id": f"{cell}-t{i:04d}", "tenant": "e2e", "cell": cell,
            "submitted_at": 1 + i, "resources": {"cpu_milli": 100 + 10 * (i % 7), "memory_mib": 256}}


async def _publish(settings, events: list[tuple[str, dict]], rate: float = 0.0) -> None:
    """Publish ``events`` (at ``rate`` a second; 0: at once) and wait for the broker's acks."""
    with RegistryClient(settings.registry_url) as registry:
        async with EventProducer(settings.bootstrap_servers, Codec(registry), namespace=settings.namespace) as producer:
            pending = []
            for n, (kind, fields) in enumerate(events):
                pending.append(await producer.publish(kind, _payload(kind, fields)))
                if rate and n % 10 == 9:
                    await asyncio.sleep(10 / rate)
            await asyncio.gather(*pending)


async def _read(settings, topic: str) -> list:
    with RegistryClient(settings.registry_url) as registry:
        async with EventConsumer(settings.bootstrap_servers, Codec(registry), [topic]) as consumer:
            return await consumer.read_until_end(idle_ms=1000)


def _placed(settings) -> dict[str, list]:
    """TaskPlaced records by task id (every copy, redeliveries included)."""
    out: dict[str, list] = defaultdict(list)
    for r in asyncio.run(_read(settings, TopicNames(settings.namespace).decisions)):
        if r.kind == "TaskPlaced":
            out[r.payload["task_id"]].append(r)
    return out


def _wait(what: str, probe, timeout: float = 180.0):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = probe()
        if last:
            return last
        time.sleep(0.5)
    pytest.fail(f"timed out after {timeout:.0f}s waiting for {what}; last seen: {last!r}")


def _held(service) -> set[int]:
    """The cell-log partitions a scheduler worker holds now: its log's last assignment line
    (Faust rebalances eagerly, so every assignment is the whole set); none once it died."""
    if service.pid() is None or not service.log_file.exists():
        return set()
    found = ASSIGNED.findall(service.log_file.read_text(errors="replace"))
    return {int(x) for x in re.findall(r"\d+", found[-1])} if found else set()


def _settled(services, count: int) -> dict[str, set[int]] | None:
    """The live workers' assignments once they split all ``count`` partitions among them."""
    held = {s.name: _held(s) for s in services}
    parts = [p for ps in held.values() for p in ps]
    return held if sorted(parts) == list(range(count)) and all(held.values()) else None


def test_six_cells_on_three_workers_survive_a_worker_kill_and_share_with_a_fourth(stack):
    settings = load_settings(namespace=f"t{uuid.uuid4().hex[:10]}", partitions=CELLS)
    topics = TopicNames(settings.namespace)
    cells = cell_names(uuid.uuid4().hex[:6], CELLS)
    asyncio.run(ensure_topics(settings.bootstrap_servers, core_topics(settings.partitions, settings.namespace)))
    processes = worker_processes(settings, schedulers=4)
    first = [processes[name] for name in ("intake", "scheduler", "scheduler-2", "scheduler-3")]
    fourth = processes["scheduler-4"]
    started = []
    try:
        for service, argv in first:
            service.start(argv, env=to_env(settings))
            started.append(service)
        schedulers = {s.name: s for s, _ in first[1:]}
        shares = _wait("three workers sharing the six partitions",
                       lambda: _settled(schedulers.values(), CELLS), timeout=120)
        # Phase 1: nodes and 100 tasks in every cell, all placed.
        events = [("NodeRegistered", _node(c, i)) for c in cells for i in range(NODES_PER_CELL)]
        events += [("TaskSubmitted", _task(c, i)) for i in range(100) for c in cells]
        asyncio.run(_publish(settings, events))
        _wait("the first 600 placements", lambda: len(_placed(settings)) == 600 or None)
        # Phase 2: SIGKILL the worker holding the most cells while 100 more tasks a cell stream in.
        victim = max(sorted(shares), key=lambda n: len(shares[n]))
        orphaned = [cells[p] for p in sorted(shares[victim])]
        os.kill(schedulers[victim].pid(), signal.SIGKILL)
        killed_at = time.time()
        asyncio.run(_publish(settings, [("TaskSubmitted", _task(c, i)) for i in range(100, 200) for c in cells],
                             rate=200))
        placed = _wait("1,200 placements after the kill", lambda: (p := _placed(settings)) and len(p) == 1200 and p,
                       timeout=240)
        # When each orphaned cell decided again: its first placement of a task submitted after the kill
        # (the decision record's broker timestamp against the wall clock of the kill).
        resumed = {c: min(r.timestamp for t in range(100, 200) for r in placed[f"{c}-t{t:04d}"]) / 1000 - killed_at
                   for c in orphaned}
        survivors = [s for n, s in schedulers.items() if n != victim]
        after_kill = _wait("the two survivors sharing the six partitions", lambda: _settled(survivors, CELLS))
        # Phase 3: a fourth worker joins and takes its share; 50 more tasks a cell.
        fourth[0].start(fourth[1], env=to_env(settings))
        started.append(fourth[0])
        with_fourth = _wait("four workers sharing the six partitions",
                            lambda: _settled([*survivors, fourth[0]], CELLS), timeout=120)
        asyncio.run(_publish(settings, [("TaskSubmitted", _task(c, i)) for i in range(200, 250) for c in cells]))
        placed = _wait("1,500 placements", lambda: (p := _placed(settings)) and len(p) == 1500 and p, timeout=180)
    finally:
        for service in reversed(started):
            service.stop()

    # No task lost (1,500 placed: every one submitted) or placed twice (copies are redeliveries:
    # the same event id and bytes).
    for task_id, copies in placed.items():
        assert len({r.payload["event_id"] for r in copies}) == 1, f"{task_id} placed twice"
        assert len({r.value for r in copies}) == 1, f"{task_id}: copies differ"
    # Every cell's decisions equal a crash-free replay of its cell log, byte for byte.
    decisions = asyncio.run(_read(settings, topics.decisions))
    cell_log = asyncio.run(_read(settings, topics.cell_log))
    with RegistryClient(settings.registry_url) as registry:
        codec = Codec(registry)
        for cell in cells:
            seen, recorded = set(), []
            for d in decisions:
                if d.payload.get("cell") == cell and d.payload["event_id"] not in seen:
                    seen.add(d.payload["event_id"])
                    recorded.append(d.value)
            log = [RawRecord(r.topic, r.partition, r.offset, r.timestamp, r.key, r.value)
                   for r in sorted(cell_log, key=lambda r: r.offset) if r.key == cell.encode()]
            regenerated = regenerate(codec, log)
            assert first_divergence(recorded, regenerated) is None, cell
    figures = {"killed": victim, "its_cells": orphaned,
               "resumed_s": {c: round(sec, 2) for c, sec in resumed.items()},
               "shares": {"three": _names(shares), "after_kill": _names(after_kill), "four": _names(with_fourth)}}
    print("cells across workers:", json.dumps(figures))
    assert with_fourth[fourth[0].name], figures


def _names(held: dict[str, set[int]]) -> dict[str, list[int]]:
    return {name: sorted(parts) for name, parts in sorted(held.items())}
