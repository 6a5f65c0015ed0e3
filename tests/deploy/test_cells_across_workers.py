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
import signal
import time
import uuid
from collections import Counter

import pytest

from suanli.bench.cells_across_workers import cell_names, node_event, placed, publish, read_topic, task_event
from suanli.config import load_settings, to_env
from suanli.deploy.plane import settled, worker_processes
from suanli.deploy.waiting import wait_for
from suanli.errors import StackError
from suanli.replay.log_replay import describe, first_divergence, regenerate
from suanli.schemas.codec import Codec
from suanli.schemas.registry import RegistryClient
from suanli.streams.kafka_io import end_offsets, ensure_topics
from suanli.streams.records import RawRecord
from suanli.streams.topics import TopicNames, core_topics

pytestmark = pytest.mark.stack

CELLS = 6
NODES_PER_CELL = 4


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
        shares = wait_for("three workers sharing the six partitions",
                       lambda: settled(schedulers.values(), CELLS), timeout=120)
        # Phase 1: nodes and 100 tasks in every cell, all placed.
        events = [node_event(c, i) for c in cells for i in range(NODES_PER_CELL)]
        events += [task_event(c, i) for i in range(100) for c in cells]
        asyncio.run(publish(settings, events))
        wait_for("the first 600 placements", lambda: len(placed(settings)) == 600 or None, timeout=180)
        # Phase 2: SIGKILL the worker holding the most cells while 100 more tasks a cell stream in.
        victim = max(sorted(shares), key=lambda n: len(shares[n]))
        orphaned = [cells[p] for p in sorted(shares[victim])]
        os.kill(schedulers[victim].pid(), signal.SIGKILL)
        killed_at = time.time()
        asyncio.run(publish(settings, [task_event(c, i) for i in range(100, 200) for c in cells],
                             rate=200))
        decided = _wait_or_report("1,200 placements after the kill", settings, cells, started,
                                  lambda: (p := placed(settings)) and len(p) == 1200 and p, timeout=240)
        # When each orphaned cell decided again: its first placement of a task submitted after the kill
        # (the decision record's broker timestamp against the wall clock of the kill).
        resumed = {c: min(r.timestamp for t in range(100, 200) for r in decided[f"{c}-t{t:05d}"]) / 1000 - killed_at
                   for c in orphaned}
        survivors = [s for n, s in schedulers.items() if n != victim]
        after_kill = wait_for("the two survivors sharing the six partitions", lambda: settled(survivors, CELLS), timeout=180)
        # Phase 3: a fourth worker joins and takes its share; 50 more tasks a cell.
        fourth[0].start(fourth[1], env=to_env(settings))
        started.append(fourth[0])
        with_fourth = wait_for("four workers sharing the six partitions",
                            lambda: settled([*survivors, fourth[0]], CELLS), timeout=120)
        asyncio.run(publish(settings, [task_event(c, i) for i in range(200, 250) for c in cells]))
        decided = _wait_or_report("1,500 placements", settings, cells, started,
                                  lambda: (p := placed(settings)) and len(p) == 1500 and p, timeout=180)
    finally:
        for service in reversed(started):
            service.stop()

    # No task lost (1,500 placed: every one submitted) or placed twice (copies are redeliveries:
    # the same event id and bytes).
    for task_id, copies in decided.items():
        assert len({r.payload["event_id"] for r in copies}) == 1, f"{task_id} placed twice"
        assert len({r.value for r in copies}) == 1, f"{task_id}: copies differ"
    # Every cell's decisions equal a crash-free replay of its cell log, byte for byte.
    decisions = asyncio.run(read_topic(settings, topics.decisions))
    cell_log = asyncio.run(read_topic(settings, topics.cell_log))
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
            divergence = first_divergence(recorded, regenerated)
            if divergence is not None:
                i = divergence.index
                pytest.fail(f"cell {cell}: {len(recorded)} decisions, a crash-free replay makes "
                            f"{len(regenerated)}; first difference #{i}: recorded "
                            f"{describe(codec, divergence.recorded)}, replayed {describe(codec, divergence.regenerated)}; "
                            f"recorded around it: {[describe(codec, v) for v in recorded[max(0, i - 2):i + 3]]}, "
                            f"replayed around it: {[describe(codec, v) for v in regenerated[max(0, i - 2):i + 3]]}; "
                            f"killed {victim} holding {orphaned}; recoveries: {_recoveries(started)}")
    figures = {"killed": victim, "its_cells": orphaned,
               "duplicate_placements": sum(len(copies) - 1 for copies in decided.values()),
               "resumed_s": {c: round(sec, 2) for c, sec in resumed.items()},
               "shares": {"three": _names(shares), "after_kill": _names(after_kill), "four": _names(with_fourth)}}
    print("cells across workers:", json.dumps(figures))
    assert with_fourth[fourth[0].name], figures


def _wait_or_report(what: str, settings, cells: list[str], services, probe, timeout: float):
    """``wait_for``; on a timeout, fail with what each cell had placed, how far each cell log
    partition goes, and the last lines of every worker's log (where a stall shows)."""
    try:
        return wait_for(what, probe, timeout=timeout)
    except StackError as exc:
        by_cell = Counter(task_id.rsplit("-t", 1)[0] for task_id in placed(settings))
        ends = dict(sorted(asyncio.run(end_offsets(settings.bootstrap_servers,
                                                   TopicNames(settings.namespace).cell_log)).items()))
        tails = {s.name: s.log_tail() for s in services}
        pytest.fail(f"{exc}\ntasks placed per cell: {dict(sorted((c, by_cell[c]) for c in cells))}\n"
                    f"cell-log end offsets by partition: {ends}\n"
                    + "\n".join(f"--- {name}:\n{tail}" for name, tail in tails.items()))


def _recoveries(services) -> dict[str, list[str]]:
    """Each scheduler worker's recovery log lines: where it took each cell's state from."""
    out = {}
    for service in services:
        text = service.log_file.read_text(errors="replace") if service.log_file.exists() else ""
        out[service.name] = [line.split("scheduler: ", 1)[-1] for line in text.splitlines() if "recovered" in line]
    return out


def _names(held: dict[str, set[int]]) -> dict[str, list[int]]:
    return {name: sorted(parts) for name, parts in sorted(held.items())}
