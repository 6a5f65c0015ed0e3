"""Intake's worker on the real broker and registry (``streams/intake_worker.py``): what it
forwards and dead-letters, that it commits only what it has stored (at the latest when it
stops), that an uncommitted batch is read again, and that it follows the fetch settings."""
from __future__ import annotations

import asyncio
import uuid

import pytest
from aiokafka import AIOKafkaProducer

from suanli.bench.cells_across_workers import publish, read_topic, task_event
from suanli.config import load_settings
from suanli.streams.intake_worker import IntakeWorker
from suanli.streams.kafka_io import end_offsets, ensure_topics, wait_until_consumed
from suanli.streams.topics import TopicNames, core_topics

pytestmark = pytest.mark.stack

TASKS = 50


def _settings(stack, **changes):
    return load_settings(namespace=f"t{uuid.uuid4().hex[:10]}", **changes)


async def _run_until_consumed(worker: IntakeWorker, timeout: float = 60.0) -> None:
    """Run ``worker`` until its group has committed every raw record written so far, then stop it."""
    s = worker.settings
    running = asyncio.create_task(worker.run())
    try:
        waiting = asyncio.create_task(wait_until_consumed(s.bootstrap_servers, worker.topics.worker_group("intake"),
                                                          worker.topics.raw, timeout=timeout))
        done, _ = await asyncio.wait({running, waiting}, return_when=asyncio.FIRST_COMPLETED)
        if running in done:
            waiting.cancel()
            running.result()                      # raises what stopped it
            raise AssertionError("the intake worker returned before it had handled the raw records")
        waiting.result()
    finally:
        worker.stop()
        await asyncio.wait_for(running, 30)


async def _write_garbage(settings, topic: str) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=settings.bootstrap_servers)
    await producer.start()
    try:
        await (await producer.send(topic, b"not avro at all", key=b"x"))
    finally:
        await producer.stop()


def test_it_forwards_inputs_verbatim_dead_letters_bad_ones_and_commits_what_it_stored(stack):
    settings = _settings(stack, fetch_busy_min_bytes=8192, fetch_max_wait_ms=30)
    topics = TopicNames(settings.namespace)
    cell = f"iw-{uuid.uuid4().hex[:6]}"
    asyncio.run(ensure_topics(settings.bootstrap_servers, core_topics(settings.partitions, settings.namespace)))
    asyncio.run(publish(settings, [task_event(cell, i) for i in range(TASKS)]))
    asyncio.run(_write_garbage(settings, topics.raw_tasks))

    worker = IntakeWorker(settings)
    asyncio.run(_run_until_consumed(worker))

    # it read with the settings' fetch wait, and fuller fetches while busy
    assert worker.consumer._fetch_max_wait_ms == 30
    assert worker.busy_fetch.busy_min_bytes == 8192
    raw = [r for t in topics.raw for r in asyncio.run(read_topic(settings, t))]
    forwarded = [r for r in asyncio.run(read_topic(settings, topics.cell_log)) if r.kind == "TaskSubmitted"]
    assert sorted(r.payload["task_id"] for r in forwarded) == sorted(f"{cell}-t{i:05d}" for i in range(TASKS))
    # verbatim: the producer's bytes, keyed by the cell
    by_id = {r.payload["task_id"]: r.value for r in raw if r.kind == "TaskSubmitted"}
    assert all(r.value == by_id[r.payload["task_id"]] and r.key == cell.encode() for r in forwarded)
    [dead] = asyncio.run(read_topic(settings, topics.dead_letters))
    assert dead.payload["error_kind"] == "UNDECODABLE" and dead.payload["value"] == b"not avro at all"
    assert dead.payload["source_topic"] == topics.raw_tasks
    # everything it read is committed (wait_until_consumed), and nothing past the ends
    ends = {(t, p): e for t in topics.raw for p, e in asyncio.run(end_offsets(settings.bootstrap_servers, t)).items()}
    assert {(tp.topic, tp.partition): o for tp, o in worker.committed.items()} == {tp: e for tp, e in ends.items() if e}
    assert worker.records == TASKS + 1 and worker.state()["records"] == TASKS + 1


def test_a_batch_it_did_not_commit_is_read_again_by_the_next_worker(stack):
    settings = _settings(stack)
    topics = TopicNames(settings.namespace)
    cell = f"iw-{uuid.uuid4().hex[:6]}"
    asyncio.run(ensure_topics(settings.bootstrap_servers, core_topics(settings.partitions, settings.namespace)))
    asyncio.run(publish(settings, [task_event(cell, i) for i in range(TASKS)]))

    async def crash_before_commit() -> None:
        # a worker that dies between storing a batch's outputs and committing it
        first = IntakeWorker(settings)
        handle = first.handle

        async def handle_then_die(fetched):
            await handle(fetched)
            first.stop()

        async def no_commit():
            pass
        first.handle, first.commit_stored = handle_then_die, no_commit
        await asyncio.wait_for(first.run(), 60)
        assert first.batches >= 1 and first.stored and first.committed == {}

    asyncio.run(crash_before_commit())
    stored = [r for r in asyncio.run(read_topic(settings, topics.cell_log)) if r.kind == "TaskSubmitted"]
    assert stored, "the first worker forwarded its batch before it stopped"

    asyncio.run(_run_until_consumed(IntakeWorker(settings)))
    forwarded = [r.payload["task_id"] for r in asyncio.run(read_topic(settings, topics.cell_log))
                 if r.kind == "TaskSubmitted"]
    # at least once: every task is there, and the uncommitted batch twice (the scheduler
    # ignores a repeated submission)
    assert set(forwarded) == {f"{cell}-t{i:05d}" for i in range(TASKS)}
    assert len(forwarded) == TASKS + len(stored)


def test_it_ticks_the_cells_it_forwarded_to(stack):
    settings = _settings(stack, tick_ms=50)
    topics = TopicNames(settings.namespace)
    cell = f"iw-{uuid.uuid4().hex[:6]}"
    asyncio.run(ensure_topics(settings.bootstrap_servers, core_topics(settings.partitions, settings.namespace)))
    asyncio.run(publish(settings, [task_event(cell, 0)]))

    async def run_until_ticked() -> None:
        worker = IntakeWorker(settings)
        running = asyncio.create_task(worker.run())
        try:
            for _ in range(600):
                records = await read_topic(settings, topics.cell_log)
                if any(r.kind == "CellTick" and r.payload["cell"] == cell for r in records):
                    return
                if running.done():
                    running.result()
                await asyncio.sleep(0.1)
            raise AssertionError("no CellTick for the cell within 60 s")
        finally:
            worker.stop()
            await asyncio.wait_for(running, 30)

    asyncio.run(run_until_ticked())
