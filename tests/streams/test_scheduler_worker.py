"""The scheduler's plain aiokafka loop on the real stack (streams/scheduler_worker.py).

Most of what it does is followed by the plane's tests (every plane runs it: dispatch, the
SIGKILL crash test, cells across workers, the skipped records). Here: what only this loop
has, an upgrade from the Faust loop it replaced, and a restart that resumes from its own
durable marks without sending anything twice."""
from __future__ import annotations

import asyncio
import re
import uuid

import pytest

from suanli.bench.cells_across_workers import node_event, publish, read_topic, task_event
from suanli.config import load_settings, to_env
from suanli.deploy.plane import worker_processes
from suanli.deploy.waiting import wait_for
from suanli.replay.log_replay import first_divergence, regenerate
from suanli.schemas.codec import Codec
from suanli.schemas.registry import RegistryClient
from suanli.streams.kafka_io import end_offsets, ensure_topics
from suanli.streams.records import RawRecord
from suanli.streams.snapshot_store import changelog_topic
from suanli.streams.topics import TopicNames, core_topics

pytestmark = pytest.mark.stack


def _placed(settings, cell: str, n: int) -> list:
    topics = TopicNames(settings.namespace)
    return wait_for(f"{n} placements in {cell}",
                    lambda: (p := [r for r in asyncio.run(read_topic(settings, topics.decisions))
                                   if r.kind == "TaskPlaced" and r.payload["cell"] == cell]) and len(p) >= n and p,
                    timeout=120)


async def _configs(bootstrap: str, topic: str, names: tuple[str, ...]) -> dict[str, str]:
    from aiokafka.admin import AIOKafkaAdminClient
    from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

    from suanli.streams.kafka_security import client_options

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, **client_options(bootstrap))
    await admin.start()
    try:
        [response] = await admin.describe_configs(
            [ConfigResource(ConfigResourceType.TOPIC, topic, configs=dict.fromkeys(names))])
        return {str(entry[0]): str(entry[1]) for entry in response.resources[0][4]}
    finally:
        await admin.close()


def _recoveries(text: str) -> list[tuple[str, int, int]]:
    """(state source, records re-applied, of them with outputs) of each recovery logged."""
    return [(m[1], int(m[2]), int(m[3])) for m in
            re.finditer(r"recovered: state from (\w+) as of -?\d+, re-applied (\d+) records \((\d+) with", text)]


@pytest.mark.parametrize("first_loop", ["faust", "plain"])
def test_a_plain_scheduler_resumes_where_the_last_one_stopped_and_sends_nothing_twice(stack, first_loop):
    """A scheduler (the Faust loop, or this one) places three tasks and is stopped; a plain one
    takes over the group: it recovers the partition from what the first one stored (its
    durable mark: nothing re-sent), places three more, and the cell's decisions are once each
    and equal a crash-free replay of its log, byte for byte."""
    settings = load_settings(namespace=f"t{uuid.uuid4().hex[:10]}", partitions=2)
    topics = TopicNames(settings.namespace)
    asyncio.run(ensure_topics(settings.bootstrap_servers, core_topics(settings.partitions, settings.namespace)))
    processes = worker_processes(settings)
    intake, (scheduler, argv) = processes["intake"], processes["scheduler"]
    cell = f"up-{uuid.uuid4().hex[:6]}"
    started = [intake[0]]
    try:
        intake[0].start(intake[1], env=to_env(settings))
        scheduler.start(argv, env=to_env(settings.model_copy(update={"scheduler_loop": first_loop})))
        started.append(scheduler)
        asyncio.run(publish(settings, [node_event(cell, 0), *(task_event(cell, i) for i in range(3))]))
        _placed(settings, cell, 3)
        # the first loop's marks are on the snapshots' topic before it goes
        wait_for("a durable mark", lambda: sum(asyncio.run(end_offsets(
            settings.bootstrap_servers, changelog_topic(topics.worker_group("scheduler")))).values()) > 0, timeout=60)
        scheduler.stop()
        first_log = scheduler.log_file.read_text(errors="replace")
        scheduler.log_file.unlink()
        scheduler.start(argv, env=to_env(settings))        # the default: the plain loop
        asyncio.run(publish(settings, [task_event(cell, i) for i in range(3, 6)]))
        placed = _placed(settings, cell, 6)
        second_log = wait_for("the plain loop's recovery", lambda: (t := scheduler.log_file.read_text(errors="replace"))
                              and _recoveries(t) and t, timeout=60)
        decisions = asyncio.run(read_topic(settings, topics.decisions))
        cell_log = asyncio.run(read_topic(settings, topics.cell_log))
    finally:
        for service in reversed(started):
            service.stop()

    assert ("plain aiokafka loop" in first_log) == (first_loop == "plain")
    # the snapshots' topic is compacted; made by the plain loop, its segments roll every 10 min
    configs = asyncio.run(_configs(settings.bootstrap_servers, changelog_topic(topics.worker_group("scheduler")),
                                   ("cleanup.policy", "segment.ms")))
    assert configs["cleanup.policy"] == "compact"
    assert (configs["segment.ms"] == "600000") == (first_loop == "plain"), configs
    assert "plain aiokafka loop" in second_log
    # it resumed from the durable mark: what it re-applied, it re-applied silently
    [(_, reapplied, with_outputs)] = [r for r in _recoveries(second_log)]
    assert with_outputs == 0, second_log[-2000:]
    assert sorted(p.payload["task_id"] for p in placed) == sorted(task_event(cell, i)[1]["task_id"] for i in range(6))
    recorded = [d.value for d in decisions if d.payload.get("cell") == cell]
    assert len(recorded) == len(set(recorded)), "a decision was sent twice"
    log = [RawRecord(r.topic, r.partition, r.offset, r.timestamp, r.key, r.value)
           for r in sorted(cell_log, key=lambda r: r.offset) if r.key == cell.encode()]
    with RegistryClient(settings.registry_url) as registry:
        regenerated = regenerate(Codec(registry), log)
    assert first_divergence(recorded, regenerated[:len(recorded)]) is None
