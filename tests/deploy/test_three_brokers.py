"""The three-broker stack (`suanli stack up --brokers 3`) and a broker failure under load.

A KRaft quorum of three brokers on loopback ports of its own (29092-29097, registry 28081),
in a home of its own, beside the suite's single-broker stack. Every topic is replicated 3
times with min.insync.replicas=2. In a 10,000-task stream the broker leading the cell log's
partition is SIGKILLed, then restarted: no task is lost or placed twice, decisions go on,
and the cell log replays IDENTICAL.
"""
from __future__ import annotations

import asyncio
import os
import signal
import threading
import time
import uuid

import pytest
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.partitioner import murmur2

from suanli.config import Settings, load_settings
from suanli.deploy import stack as stack_mod
from suanli.deploy.plane import Plane, PlaneOptions
from suanli.replay.log_replay import first_divergence, regenerate
from suanli.schemas.codec import Codec
from suanli.schemas.registry import RegistryClient
from suanli.streams.kafka_io import EventConsumer, end_offsets, ensure_topics
from suanli.streams.records import RawRecord
from suanli.streams.topics import TopicNames, core_topics

pytestmark = pytest.mark.stack


@pytest.fixture(scope="module")
def quorum(stack, tmp_path_factory) -> Settings:
    """The three-broker stack with its registry, started for this module and stopped after."""
    home = tmp_path_factory.mktemp("quorum")
    if (stack.home / "cache").is_dir():                 # the jars the suite's stack resolved already
        (home / "cache").symlink_to(stack.home / "cache")
    settings = load_settings(home=home, brokers=3, kafka_port=29092, controller_port=29093, registry_port=28081,
                             namespace=f"q{uuid.uuid4().hex[:8]}", partitions=2)
    try:
        report = stack_mod.up(settings, log=lambda _m: None)
        print(f"three-broker stack ready in {report['ready_seconds']} s")
        yield settings
    finally:
        stack_mod.down(settings, log=lambda _m: None)


async def _describe(settings: Settings, topics: list[str]) -> dict[str, list[dict]]:
    admin = AIOKafkaAdminClient(bootstrap_servers=settings.bootstrap_servers)
    await admin.start()
    try:
        return {d["topic"]: d["partitions"] for d in await admin.describe_topics(topics)}
    finally:
        await admin.close()


async def _read(settings: Settings, topic: str) -> list:
    with RegistryClient(settings.registry_url) as registry:
        async with EventConsumer(settings.bootstrap_servers, Codec(registry), [topic]) as consumer:
            return await consumer.read_until_end(idle_ms=1500)


def test_every_topic_is_replicated_three_times(quorum):
    assert quorum.bootstrap_servers == "127.0.0.1:29092,127.0.0.1:29094,127.0.0.1:29096"
    rows = stack_mod.status(quorum)
    assert [r["service"] for r in rows[:3]] == ["kafka-1", "kafka-2", "kafka-3"] and all(r["ready"] for r in rows)
    asyncio.run(ensure_topics(quorum.bootstrap_servers, core_topics(quorum.partitions, quorum.namespace)))
    names = TopicNames(quorum.namespace)
    topics = [names.cell_log, names.decisions, "kafkasql-journal"]
    deadline = time.monotonic() + 30          # a created topic reaches every broker's metadata shortly after
    while True:
        described = asyncio.run(_describe(quorum, topics))
        if all(described.get(t) for t in topics) or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    for topic, partitions in described.items():
        assert partitions and all(len(p["replicas"]) == 3 for p in partitions), (topic, partitions)


def test_a_killed_partition_leader_loses_no_task_and_the_log_replays_identical(quorum):
    plane = Plane(quorum, PlaneOptions(tasks=10000, rate=400, time_scale=0.00005, exit_when_drained=True,
                                       quiet=True, drain_timeout=300, metrics_port=None), out=lambda _m: None)
    names = TopicNames(quorum.namespace)
    partition = (murmur2(plane.cell.encode()) & 0x7FFFFFFF) % quorum.partitions
    events: dict[str, float] = {}

    def kill_and_restart() -> None:
        # The leader of the cell's partition of the cell log, once 2,000 tasks are placed; back 15 s later.
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            try:
                if sum(asyncio.run(end_offsets(quorum.bootstrap_servers, names.decisions)).values()) >= 2000:
                    break
            except Exception:  # noqa: BLE001 - the topic may not exist yet
                pass
            time.sleep(0.5)
        described = asyncio.run(_describe(quorum, [names.cell_log]))[names.cell_log]
        leader = next(p["leader"] for p in described if p["partition"] == partition)
        broker = stack_mod.broker_services(quorum)[leader - 1]
        events["leader"] = leader
        os.kill(broker.pid(), signal.SIGKILL)
        events["killed"] = time.time()
        time.sleep(15)
        stack_mod.start_brokers(quorum, log=lambda _m: None)
        events["restarted"] = time.time()

    plane.start()
    thread = threading.Thread(target=kill_and_restart, daemon=True)
    thread.start()
    try:
        result = asyncio.run(plane.run())
    finally:
        thread.join()
        plane.stop()
    assert "killed" in events and "restarted" in events, events
    assert result["submitted"] == 10000
    assert result["placed"] + result["pending"] + result["unschedulable"] == 10000, result      # none lost
    assert result["capacity_violations"] == 0, result["violations"]

    decisions = asyncio.run(_read(quorum, names.decisions))
    cell_log = asyncio.run(_read(quorum, names.cell_log))
    # Placed twice: a second TaskPlaced while the first placement stands (no decision took the
    # task off its node in between). A task placed again after a TaskLost (its node went DOWN
    # while its heartbeats waited on the failover) is counted, not a fault.
    seen, recorded, placed, holding, replaced, kinds = set(), [], {}, set(), 0, {}
    for d in decisions:
        if d.payload["event_id"] in seen:
            continue
        seen.add(d.payload["event_id"])
        recorded.append(d.value)
        kinds[d.kind] = kinds.get(d.kind, 0) + 1
        task_id = d.payload.get("task_id")
        if d.kind == "TaskPlaced":
            assert task_id not in holding, f"{task_id} placed twice"
            holding.add(task_id)
            replaced += task_id in placed
            placed.setdefault(task_id, d.timestamp / 1000)
        elif d.kind in ("TaskLost", "TaskPreempted", "TaskReleased"):
            holding.discard(task_id)
    # How long decisions stopped, and how long placements took (cell-log arrival -> decision
    # written) before the kill, from the kill to the restart, and after it.
    times = sorted(placed.values())
    gap = max(b - a for a, b in zip(times, times[1:]))
    arrived = {r.payload["task_id"]: r.timestamp / 1000 for r in cell_log if r.kind == "TaskSubmitted"}
    phases: dict[str, list[float]] = {"before": [], "during": [], "after": []}
    for task_id, at in placed.items():
        phase = "before" if at < events["killed"] else "during" if at < events["restarted"] else "after"
        phases[phase].append(at - arrived[task_id])
    p99 = {k: round(sorted(v)[int(0.99 * (len(v) - 1))] * 1000) if v else None for k, v in phases.items()}
    last_decided: dict[int, int] = {}
    for d in decisions:
        pos = d.payload["provenance"]["input"]
        last_decided[pos["partition"]] = max(last_decided.get(pos["partition"], -1), pos["offset"])
    with RegistryClient(quorum.registry_url) as registry:
        records = [RawRecord(r.topic, r.partition, r.offset, r.timestamp, r.key, r.value)
                   for r in sorted(cell_log, key=lambda r: (r.partition, r.offset))
                   if r.offset <= last_decided.get(r.partition, -1)]
        assert first_divergence(recorded, regenerate(Codec(registry), records)) is None
    print(f"broker failure: leader {events['leader']} killed; {len(placed)} tasks placed ({replaced} placed again "
          f"after a TaskLost), {len(decisions) - len(recorded)} duplicate records dropped; longest gap in placements "
          f"{gap:.2f} s; p99 ms {p99}; placements per phase { {k: len(v) for k, v in phases.items()} }; "
          f"decisions {kinds}; plane {({k: result[k] for k in ('lost', 'lost_tasks', 'nodes_health', 'seconds')})}")
