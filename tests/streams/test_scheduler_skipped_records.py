"""Records the scheduler's consumer never delivers are still decided, on the real stack
(streams/scheduler_worker.py ``recover`` and ``PartitionSnapshots.mark_durable``).

A committed offset proves nothing about what was decided: the Faust loop could commit a
partition's offset past records it dropped around a rebalance (its gap filling), and any
other writer of the group's offsets can too. Here the scheduler's group starts with its
committed offsets already at the end of the cell log, past a node and three tasks that no
worker ever decided: its consumer delivers none of them. The next record of the partition
(the intake's CellTick, every ``tick_ms``) shows the gap; the worker re-applies the skipped
records *with* their outputs, since no durable mark covers them. Every task is placed once,
and the cell's decisions equal a crash-free replay of its log, byte for byte."""
from __future__ import annotations

import asyncio
import os
import re
import signal
import uuid
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.structs import OffsetAndMetadata
from prometheus_client.parser import text_string_to_metric_families

from suanli.bench.cells_across_workers import node_event, publish, read_topic, task_event
from suanli.config import load_settings, to_env
from suanli.deploy.plane import metrics_ports, worker_processes
from suanli.deploy.waiting import wait_for
from suanli.replay.log_replay import first_divergence, regenerate
from suanli.schemas.codec import Codec
from suanli.schemas.registry import RegistryClient
from suanli.streams.kafka_io import ensure_topics
from suanli.streams.kafka_security import client_options
from suanli.streams.records import RawRecord
from suanli.streams.topics import TopicNames, core_topics

pytestmark = pytest.mark.stack


async def _commit_at_end(settings, group: str, topic: str) -> dict[int, int]:
    """Commit ``group``'s offsets of every partition of ``topic`` at its end offsets (as
    Faust does when it fills a gap of dropped records); returns them by partition."""
    consumer = AIOKafkaConsumer(bootstrap_servers=settings.bootstrap_servers, group_id=group,
                                enable_auto_commit=False, **client_options(settings.bootstrap_servers))
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in range(settings.partitions)]
        consumer.assign(tps)
        ends = await consumer.end_offsets(tps)
        await consumer.commit({tp: OffsetAndMetadata(ends[tp], "") for tp in tps})
        return {tp.partition: ends[tp] for tp in tps}
    finally:
        await consumer.stop()


@dataclass
class Skipped:
    """A namespace whose cell log holds a node and three tasks of ``cell`` (on ``partition``)
    that the scheduler's group committed past before any scheduler decided them."""
    topics: TopicNames
    cell: str
    partition: int
    tasks: list[dict]
    committed: int          # the group's committed offset of ``partition``


def _skipped_inputs(settings, intake: tuple[Any, list[str]]) -> Skipped:
    """Start the intake worker (``(service, argv)``: the caller stops it), publish a node
    and three tasks, wait until they are on the cell log, then commit the scheduler group's
    offsets at the log's end."""
    service, argv = intake
    topics = TopicNames(settings.namespace)
    cell = f"skip-{uuid.uuid4().hex[:6]}"
    service.start(argv, env=to_env(settings))
    tasks = [task_event(cell, i)[1] for i in range(3)]
    asyncio.run(publish(settings, [node_event(cell, 0), *(("TaskSubmitted", t) for t in tasks)]))
    inputs = wait_for("the node and three tasks on the cell log",
                      lambda: (r := [x for x in asyncio.run(read_topic(settings, topics.cell_log))
                                     if x.key == cell.encode() and x.kind != "CellTick"]) and len(r) == 4 and r,
                      timeout=120)
    ends = asyncio.run(_commit_at_end(settings, topics.worker_group("scheduler"), topics.cell_log))
    assert ends[inputs[0].partition] > inputs[-1].offset
    return Skipped(topics, cell, inputs[0].partition, tasks, ends[inputs[0].partition])


def _namespace():
    settings = load_settings(namespace=f"t{uuid.uuid4().hex[:10]}", partitions=2)
    asyncio.run(ensure_topics(settings.bootstrap_servers, core_topics(settings.partitions, settings.namespace)))
    ports = metrics_ports(0, ("scheduler",))
    processes = worker_processes(settings, metrics_ports=ports)
    return settings, processes["intake"], (*processes["scheduler"], ports["scheduler"])


def test_records_committed_past_but_never_decided_are_decided_at_the_next_record(stack):
    settings, intake, scheduler = _namespace()
    started = [intake[0]]
    try:
        skipped = _skipped_inputs(settings, intake)
        topics, cell, partition, tasks = skipped.topics, skipped.cell, skipped.partition, skipped.tasks
        scheduler[0].start(scheduler[1], env=to_env(settings))
        started.append(scheduler[0])
        placed = wait_for("three placements", lambda: (p := [r for r in asyncio.run(read_topic(settings, topics.decisions))
                                                             if r.kind == "TaskPlaced"]) and len(p) >= 3 and p,
                          timeout=120)
        log_text = scheduler[0].log_file.read_text(errors="replace")
        decisions = asyncio.run(read_topic(settings, topics.decisions))
        cell_log = asyncio.run(read_topic(settings, topics.cell_log))
    finally:
        for service in reversed(started):
            service.stop()

    assert sorted(r.payload["task_id"] for r in placed) == sorted(t["task_id"] for t in tasks)
    # The worker found nothing marked durable, and re-decided what it skipped with outputs.
    recovery = re.search(rf"partition {partition} recovered: .* re-applied (\d+) records \((\d+) with their outputs",
                         log_text)
    assert recovery and int(recovery[1]) == int(recovery[2]) >= 4, log_text[-2000:]
    # The cell's decisions equal a crash-free replay of its log, byte for byte (the worker
    # may not have decided the latest ticks yet: what it recorded is a prefix of the replay).
    recorded = [d.value for d in decisions if d.payload.get("cell") == cell]
    log = [RawRecord(r.topic, r.partition, r.offset, r.timestamp, r.key, r.value)
           for r in sorted(cell_log, key=lambda r: r.offset) if r.key == cell.encode()]
    with RegistryClient(settings.registry_url) as registry:
        regenerated = regenerate(Codec(registry), log)
    assert len(recorded) >= 3
    assert first_divergence(recorded, regenerated[:len(recorded)]) is None


def test_a_scheduler_whose_records_never_come_says_its_partition_is_stalled(stack):
    """Without the intake, no tick follows the skipped records: nothing is delivered to the
    scheduler, and its stall check (streams/scheduler_worker.py ``warn_of_stalls``) names the partition
    and the records waiting, once two checks in a row found them waiting, and counts it in
    the gauge ``suanli_stalled_partitions``."""
    settings, intake, scheduler = _namespace()
    started = [intake[0]]
    try:
        skipped = _skipped_inputs(settings, intake)
        intake[0].stop()
        started.remove(intake[0])
        scheduler[0].start(scheduler[1], env=to_env(settings))
        started.append(scheduler[0])
        gauge = wait_for("suanli_stalled_partitions 1 on the scheduler's /metrics",
                         lambda: _metric(scheduler[2], "suanli_stalled_partitions") == 1, timeout=120)
        pattern = re.compile(rf"partition {skipped.partition} stalled: (\d+) records wait past offset -1")
        warning = wait_for("the stall warning", lambda: pattern.search(scheduler[0].log_file.read_text(errors="replace"))
                           if scheduler[0].log_file.exists() else None, timeout=120)
        # What an operator does next: SIGUSR1 logs the consumer's state (streams/scheduler_worker.py
        # SchedulerWorker.state).
        os.kill(scheduler[0].pid(), signal.SIGUSR1)
        state = wait_for("the worker's state on SIGUSR1",
                         lambda: re.search(r"worker state:\n(.*?\nkafka consumer: [^\n]*)",
                                           scheduler[0].log_file.read_text(errors="replace"), re.S), timeout=60)
    finally:
        for service in reversed(started):
            service.stop()
    assert gauge
    assert int(warning[1]) >= 4         # the node, the three tasks and the ticks before the intake stopped
    lines = dict(line.split(": ", 1) for line in state[1].splitlines())
    cell_log = f"{TopicNames(settings.namespace).cell_log}:{skipped.partition}"
    assert f"'{cell_log}'" in lines["fetching"]
    # the Kafka consumer's position is at the group's committed offset or later: past the skipped records
    assert int(re.search(rf"{re.escape(cell_log)} position=(\d+)", lines["kafka consumer"])[1]) >= skipped.committed


def _metric(port: int, name: str) -> float | None:
    """A sample's value from a worker's /metrics (None: not served yet, or no such sample)."""
    try:
        text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
    except httpx.HTTPError:
        return None
    return next((sample.value for family in text_string_to_metric_families(text)
                 for sample in family.samples if sample.name == name), None)
