"""Helpers for the connector tests: dispatch commands, and reading topics from a snapshot on."""
from __future__ import annotations

import asyncio
import time
from typing import Any, Callable

from aiokafka import TopicPartition

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
    return [(r.kind, (r.payload or {}).get("task_id") or (r.payload or {}).get("node_id"),
             (r.payload or {}).get("status") or (r.payload or {}).get("accepted")) for r in records]


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
