"""Cells across scheduler workers: placements per second with 1, 2 and 3 workers at 6 cells.

``python -m suanli.bench.cells_across_workers [--cells 6] [--workers 1,2,3] [--tasks-per-cell 2000]
[--json FILE]`` (with the stack up: ``suanli stack up``).

For each worker count it runs a plane of its own (a fresh namespace whose cell log has one
partition per cell; intake and that many scheduler workers, ``python -m suanli.streams.worker
scheduler --instance N``), waits until the workers have split the partitions among them (their
logs' assignment lines), registers ``--nodes-per-cell`` nodes in each cell, then publishes
``--tasks-per-cell`` CPU tasks to every cell at once and waits until every one is placed. The
figure is placements per second from the first task published to the last TaskPlaced written
(the decision records' broker timestamps), and its ratio to the first worker count's.

What it means on a small machine: intake, every scheduler worker and this publisher share the
machine's cores. With fewer cores than workers, more workers add rebalancing and context
switches rather than compute, so the ratio says what the partitioning allows at this size, not
what more machines would give. The harness's helpers are also what
``tests/deploy/test_cells_across_workers.py`` uses. It measures and reports; the test asserts.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
import uuid
from collections import defaultdict
from pathlib import Path
from typing import Any, Iterable

from suanli.config import Settings, load_settings, to_env
from suanli.deploy.plane import settled, worker_processes
from suanli.deploy.processes import ServiceProcess
from suanli.deploy.waiting import wait_for
from suanli.processors.model import from_avro, to_avro
from suanli.schemas.codec import Codec
from suanli.schemas.registry import RegistryClient
from suanli.streams.kafka_io import EventConsumer, EventProducer, ensure_topics
from suanli.streams.topics import TopicNames, cells_on_partitions, core_topics

def cell_names(run: str, partitions: int) -> list[str]:
    """One cell name per partition of the cell log, in partition order: ``cells[p]`` lives on
    ``p`` (see :func:`~suanli.streams.topics.cells_on_partitions`)."""
    return cells_on_partitions(run, partitions, partitions)


def node_event(cell: str, i: int) -> tuple[str, dict]:
    """A CPU node of 64 cores and 256 GiB in ``cell``."""
    return "NodeRegistered", {"event_id": f"reg-{cell}-{i}", "node_id": f"{cell}-n{i}", "cell": cell, "site": "s",
                              "region": "r", "zone": "z", "tier": "onprem", "arch": "x86_64", "cpu_milli": 64000,
                              "memory_mib": 262144, "accelerators": [], "registered_at": 0}


def task_event(cell: str, i: int) -> tuple[str, dict]:
    """A small CPU task (0.10-0.16 cores, 256 MiB) ``{cell}-t{i:05d}``."""
    return "TaskSubmitted", {"event_id": f"sub-{cell}-{i}", "task_id": f"{cell}-t{i:05d}", "tenant": "bench",
                             "cell": cell, "submitted_at": 1 + i,
                             "resources": {"cpu_milli": 100 + 10 * (i % 7), "memory_mib": 256}}


async def publish(settings: Settings, events: Iterable[tuple[str, dict]], rate: float = 0.0) -> None:
    """Publish ``events`` (``(kind, fields)``; the model fills the defaults) to their raw
    topics, at ``rate`` a second (0: at once), and wait for the broker's acks."""
    with RegistryClient(settings.registry_url) as registry:
        async with EventProducer(settings.bootstrap_servers, Codec(registry), namespace=settings.namespace) as producer:
            pending = []
            for n, (kind, fields) in enumerate(events):
                pending.append(await producer.publish(kind, to_avro(from_avro(kind, fields))))
                if rate and n % 10 == 9:
                    await asyncio.sleep(10 / rate)
            await asyncio.gather(*pending)


async def read_topic(settings: Settings, topic: str) -> list:
    """Every record of ``topic`` up to its end offsets now, decoded."""
    with RegistryClient(settings.registry_url) as registry:
        async with EventConsumer(settings.bootstrap_servers, Codec(registry), [topic]) as consumer:
            return await consumer.read_until_end()


def placed(settings: Settings) -> dict[str, list]:
    """TaskPlaced records by task id (every copy: redeliveries included)."""
    out: dict[str, list] = defaultdict(list)
    for r in asyncio.run(read_topic(settings, TopicNames(settings.namespace).decisions)):
        if r.kind == "TaskPlaced":
            out[r.payload["task_id"]].append(r)
    return out


def run_once(cells: int, workers: int, nodes_per_cell: int, tasks_per_cell: int) -> dict[str, Any]:
    """One plane with ``workers`` scheduler workers: its placements per second (see the module)."""
    settings = load_settings(namespace=f"b{uuid.uuid4().hex[:10]}", partitions=cells)
    names = cell_names(uuid.uuid4().hex[:6], cells)
    asyncio.run(ensure_topics(settings.bootstrap_servers, core_topics(settings.partitions, settings.namespace)))
    procs = worker_processes(settings, schedulers=workers)
    services = [procs["intake"], *[procs[n] for n in procs if n.startswith("scheduler")]]
    started: list[ServiceProcess] = []
    try:
        for service, argv in services:
            service.start(argv, env=to_env(settings))
            started.append(service)
        shares = wait_for(f"{workers} worker(s) to split {cells} partitions",
                          lambda: settled(started[1:], cells), timeout=180)
        asyncio.run(publish(settings, [node_event(c, i) for c in names for i in range(nodes_per_cell)]))
        total = cells * tasks_per_cell
        t0 = time.time()
        asyncio.run(publish(settings, [task_event(c, i) for i in range(tasks_per_cell) for c in names]))
        published_s = time.time() - t0
        done = wait_for(f"{total} placements", lambda: (p := placed(settings)) and len(p) == total and p,
                        timeout=600)
        last = max(r.timestamp for copies in done.values() for r in copies) / 1000
        seconds = last - t0
        return {"workers": workers, "cells": cells, "placements": total, "seconds": round(seconds, 2),
                "placements_per_s": round(total / seconds, 1), "publish_s": round(published_s, 2),
                "shares": {n: sorted(p) for n, p in sorted(shares.items())}}
    finally:
        for service in reversed(started):
            service.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m suanli.bench.cells_across_workers",
                                     description="placements/s with several scheduler workers sharing the cells")
    parser.add_argument("--cells", type=int, default=6)
    parser.add_argument("--workers", default="1,2,3", help="worker counts to run, comma-separated (default 1,2,3)")
    parser.add_argument("--nodes-per-cell", type=int, default=20)
    parser.add_argument("--tasks-per-cell", type=int, default=2000)
    parser.add_argument("--json", metavar="FILE", help="write the figures to FILE")
    args = parser.parse_args(argv)
    try:
        counts = [int(w) for w in args.workers.split(",")]
    except ValueError:
        parser.error(f"--workers: comma-separated numbers, not {args.workers!r}")
    if args.cells < 1 or any(w < 1 or w > args.cells for w in counts):
        parser.error("--cells >= 1, and every worker count between 1 and --cells")
    runs = []
    for workers in counts:
        run = run_once(args.cells, workers, args.nodes_per_cell, args.tasks_per_cell)
        runs.append(run)
        print(f"{workers} worker(s): {run['placements']} placements in {run['seconds']} s = "
              f"{run['placements_per_s']} /s  (shares {run['shares']})", flush=True)
    base = runs[0]["placements_per_s"]
    for run in runs:
        run["ratio_to_first"] = round(run["placements_per_s"] / base, 2)
    doc = {"command": "python -m suanli.bench.cells_across_workers " + " ".join(argv or sys.argv[1:]),
           "cpus": os.cpu_count(), "runs": runs}
    print(json.dumps({r["workers"]: r["ratio_to_first"] for r in runs}) + "  (placements/s relative to the first)")
    if args.json:
        Path(args.json).write_text(json.dumps(doc, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
