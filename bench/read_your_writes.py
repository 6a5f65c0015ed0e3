"""How long the API's read-your-writes barrier takes: ``LogFollower.sync()`` on the real stack.

    python -m suanli.bench.read_your_writes [--calls 50] [--json out.json]

The API answers a read of a task it has not folded yet (just submitted, or not there at
all) only after ``sync()``: the topics' end offsets now, then the fold up to them
(``api/service.py`` ``_find``). A namespace of its own on the running broker and registry,
the API's log follower on it, and two measures, each ``--calls`` times:

- ``idle``: ``sync()`` with nothing new on the topics: the barrier's own cost.
- ``after_write``: one TaskSubmitted sent to the raw tasks topic (acknowledged), then
  ``sync()``, then the submission looked up in the read model: a GET right after a POST.

Prints p50 / p95 / max in ms and writes them with ``--json``. The stack must be up
(``suanli stack up``); this never starts or stops it.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any


def _summary(samples: list[float]) -> dict[str, Any]:
    ordered = sorted(samples)
    return {"calls": len(samples), "p50_ms": round(statistics.median(ordered), 2),
            "p95_ms": round(ordered[max(0, int(len(ordered) * 0.95) - 1)], 2), "max_ms": round(ordered[-1], 2)}


async def measure(calls: int) -> dict[str, Any]:
    from suanli.api.readmodel import LogFollower
    from suanli.config import load_settings
    from suanli.schemas.codec import Codec
    from suanli.schemas.registry import RegistryClient
    from suanli.streams.kafka_io import EventProducer, ensure_topics
    from suanli.streams.topics import TopicNames, core_topics

    settings = load_settings(namespace=f"ryw{uuid.uuid4().hex[:8]}")
    names = TopicNames(settings.namespace)
    await ensure_topics(settings.bootstrap_servers, core_topics(settings.partitions, settings.namespace))
    with RegistryClient(settings.registry_url) as registry:
        codec = Codec(registry)
        follower = LogFollower(settings, codec)
        await follower.start()
        try:
            await follower.wait_ready(60)
            idle: list[float] = []
            for _ in range(calls):
                t0 = time.perf_counter()
                if not await follower.sync(10.0):
                    raise RuntimeError("sync() timed out on an idle namespace")
                idle.append((time.perf_counter() - t0) * 1000)
            after: list[float] = []
            async with EventProducer(settings.bootstrap_servers, codec) as producer:
                for i in range(calls):
                    task_id = f"ryw-{i:04d}"
                    payload = {"task_id": task_id, "event_id": f"ryw/submit/{i}", "tenant": "bench",
                               "cell": "cell-0", "submitted_at": int(time.time() * 1000),
                               "resources": {"cpu_milli": 1000, "memory_mib": 1024}}
                    await (await producer.send(names.raw_tasks, "TaskSubmitted", payload, key=task_id))
                    t0 = time.perf_counter()
                    if not await follower.sync(10.0):
                        raise RuntimeError(f"sync() timed out after sending {task_id}")
                    after.append((time.perf_counter() - t0) * 1000)
                    if task_id not in follower.model.submissions:
                        raise RuntimeError(f"{task_id} is not in the read model after sync()")
        finally:
            await follower.stop()
    return {"namespace": settings.namespace, "idle": _summary(idle), "after_write": _summary(after)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=50)
    parser.add_argument("--json", help="write the figures to this file")
    args = parser.parse_args(argv)
    figures = asyncio.run(measure(args.calls))
    for name in ("idle", "after_write"):
        f = figures[name]
        print(f"sync() {name}: p50 {f['p50_ms']} ms, p95 {f['p95_ms']} ms, max {f['max_ms']} ms ({f['calls']} calls)")
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
