"""Workload driver: replays openb tasks into a live control plane at a chosen rate.

Task ids are prefixed with a run id, so every run is new work even on a long-lived
cluster. Durations come from the trace (deletion - creation); the simulated connector
compresses them with its time scale.
"""
from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any, Callable

from suanli.replay.openb import read_pods


def openb_tasks(pods_csv: Path, count: int, *, run_id: str, cell: str, tenant: str = "openb",
                now_ms: int | None = None) -> list[dict[str, Any]]:
    """The first ``count`` tasks of a pod list as TaskSubmitted payloads for this run."""
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    pods = read_pods(pods_csv, cell=cell, tenant=tenant)
    if count > len(pods):
        pods = [dict(p, task_id=f"{p['task_id']}-r{i // len(pods)}") for i, p in
                enumerate(pods * (count // len(pods) + 1))]
    tasks = []
    for pod in pods[:count]:
        task = dict(pod)
        task["task_id"] = f"{run_id}-{pod['task_id']}"
        task["event_id"] = f"{run_id}/submit/{pod['task_id']}"
        task["submitted_at"] = now_ms
        tasks.append(task)
    return tasks


async def drive(publish: Callable[[str, dict[str, Any]], Any], tasks: list[dict[str, Any]], rate: float,
                on_progress: Callable[[int], None] | None = None) -> None:
    """Publish ``tasks`` at about ``rate`` per second (0 = as fast as possible)."""
    started = time.monotonic()
    for i, task in enumerate(tasks):
        task = dict(task, submitted_at=int(time.time() * 1000))
        await publish("TaskSubmitted", task)
        if rate > 0:
            ahead = (i + 1) / rate - (time.monotonic() - started)
            if ahead > 0:
                await asyncio.sleep(ahead)
        if on_progress is not None and (i + 1) % 100 == 0:
            on_progress(i + 1)
