"""Helpers for the connector tests: dispatch commands, and reading topics from a snapshot on."""
from __future__ import annotations

import asyncio
import contextlib
import os
import time
from typing import Any, AsyncIterator, Callable

from aiokafka import TopicPartition

from suanli.connectors.kit import ConnectorRunner
from suanli.streams.kafka_io import EventConsumer, Received, end_offsets


def command(name: str, i: int | str, node_id: str, *, connector: str | None = None, **fields: Any) -> dict[str, Any]:
    """A DispatchCommand for connector ``name`` (ids unique per test through ``name``)."""
    out = {"event_id": f"{name}-cmd-{i}", "dispatch_id": f"{name}-d{i}", "task_id": f"{name}-task{i}",
           "tenant": "tests", "cell": name, "node_id": node_id, "connector": connector or name,
           "gpu_devices": [], "gpu_milli": 0, "cpu_milli": 1000, "memory_mib": 512, "command": None,
           "duration_estimate_ms": 50, "issued_at": int(time.time() * 1000)}
    out.update(fields)
    return out


async def snapshot(bootstrap: str, *topics: str) -> dict[TopicPartition, int]:
    """The current end offset of every partition of ``topics``: read from here to see only new records."""
    out = {}
    for topic in topics:
        for partition, end in (await end_offsets(bootstrap, topic)).items():
            out[TopicPartition(topic, partition)] = end
    return out


class Tail:
    """Reads the partitions of a snapshot from its offsets on, keeping records that ``keep`` accepts."""

    def __init__(self, bootstrap: str, codec, start: dict[TopicPartition, int],
                 keep: Callable[[Received], bool] = lambda r: True):
        self.start, self.keep = start, keep
        self.records: list[Received] = []
        self._consumer = EventConsumer(bootstrap, codec, [], group_id=None)

    async def __aenter__(self) -> "Tail":
        await self._consumer.__aenter__()
        self._consumer.raw.assign(list(self.start))
        for tp, offset in self.start.items():
            self._consumer.raw.seek(tp, offset)
        self._batches = self._consumer.batches(timeout_ms=200)
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._batches.aclose()
        await self._consumer.__aexit__(*exc)

    async def until(self, done: Callable[[list[Received]], bool], timeout: float = 15.0) -> list[Received]:
        """Read until ``done(records)`` holds; AssertionError with what was seen after ``timeout``."""
        deadline = time.monotonic() + timeout
        while not done(self.records):
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {timeout}s; saw {summary(self.records)}")
            self.records.extend(r for r in await anext(self._batches) if self.keep(r))
        return self.records

    async def settle(self, seconds: float) -> list[Received]:
        """Keep reading for ``seconds`` more (to catch anything that should NOT arrive)."""
        deadline = time.monotonic() + seconds
        await self.until(lambda _: time.monotonic() > deadline, timeout=seconds + 5)
        return self.records


def summary(records: list[Received]) -> list[tuple]:
    """What was read, without the heartbeats and metrics (they would drown the rest)."""
    return [(r.kind, (r.payload or {}).get("task_id") or (r.payload or {}).get("node_id"),
             (r.payload or {}).get("status") or (r.payload or {}).get("accepted")) for r in records
            if r.kind not in ("NodeHeartbeat", "NodeMetrics")]


def status_trail(records: list[Received], task_id: str) -> list[str]:
    """``['ack', 'RUNNING', 'COMPLETED']``-style history of one task on RAW_STATUS."""
    out = []
    for r in records:
        if r.payload is None or r.payload.get("task_id") != task_id:
            continue
        if r.kind == "DispatchAck":
            out.append("ack" if r.payload["accepted"] else "refused")
        elif r.kind == "TaskStatusChanged":
            out.append(r.payload["status"])
    return out


async def stop(task: asyncio.Task, timeout: float = 15.0) -> None:
    """Cancel a runner task and require it to end cancelled, not with an error."""
    task.cancel()
    done, _ = await asyncio.wait({task}, timeout=timeout)
    assert done, "the runner did not stop within the timeout"
    assert task.cancelled() or task.exception() is None, task.exception()


def assert_no_tasks_left() -> None:
    """Nothing but the caller still runs (call it once every consumer and runner is closed)."""
    leftovers = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    assert not leftovers, f"tasks left behind: {leftovers}"


@contextlib.asynccontextmanager
async def running(runner: ConnectorRunner, ready_timeout: float = 20.0) -> AsyncIterator[asyncio.Task]:
    """Run ``runner`` in a task for the block; stop it (cleanly, asserted) when the block ends.

    Stopping it here, rather than leaving it to ``asyncio.run``, matters when a test fails:
    asyncio.run cancels aiokafka's internal tasks together with the runner, and their
    shutdown then waits out request timeouts (40 s).
    """
    task = asyncio.create_task(runner.run())
    try:
        ready = asyncio.create_task(runner.ready.wait())
        await asyncio.wait({task, ready}, timeout=ready_timeout, return_when=asyncio.FIRST_COMPLETED)
        ready.cancel()
        if task.done():
            task.result()  # the runner failed to start: raise its error
        assert runner.ready.is_set(), f"the runner was not ready within {ready_timeout}s"
        yield task
    finally:
        if not task.done():
            await stop(task)


def live_members(pgid: int) -> list[int]:
    """Pids in process group ``pgid`` that are not zombies (killed orphans wait for init to reap them)."""
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[2]) == pgid and fields[0] != "Z":
                out.append(int(entry))
    return out


def group_gone(pgid: int, timeout: float = 2.0) -> bool:
    deadline = time.monotonic() + timeout
    while live_members(pgid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True
