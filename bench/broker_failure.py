"""A broker failure under load (issue 18): SIGKILL the broker leading the cell log's partition
mid-stream, restart it, and measure what the plane did meanwhile.

``SUANLI_BROKERS=3 python -m suanli.bench.broker_failure [--tasks 10000] [--rate 150]
[--down-s 10] [--json FILE]`` (with the three-broker stack up: ``suanli stack up --brokers 3``).

A plane of its own (``deploy/plane.py``: intake, scheduler and telemetry workers and the
simulated cluster of the openb node list) in a fresh namespace streams ``--tasks`` openb tasks
at ``--rate`` a second. Once ``--kill-after`` of them are submitted, the broker that leads
the cell's partition of the cell log is SIGKILLed; ``--down-s`` seconds later it is started
again. After the run drains, every figure is read from the log:

* ``lost``: tasks submitted with no placement and no pending or unschedulable answer;
* ``placed_twice``: tasks with two TaskPlaced decisions (distinct event ids: a redelivered
  decision repeats its event id and is counted once), ``tasks_lost``: TaskLost decisions
  (a node judged DOWN: its tasks are placed again), ``nodes_unhealthy``: nodes turned SUSPECT
  or DOWN;
* ``decision_gap_ms``: the longest time between two consecutive decision records (broker
  timestamps) while tasks were streaming, and when it began (``decision_gap_starts_s_after_kill``:
  the last decision before it, from the kill; negative if just before);
* ``latency_ms``: submission (the raw record's timestamp) to first decision, p50 and p99, for
  tasks submitted before the kill, while the broker was down, and after it was started again
  (``rejoined_s``: when it was back in the cluster, counted from the kill);
* ``tick_pause_ms``: the longest pause of the cell's clock (between two CellTicks), and when
  it began: intake holds its ticks back while a raw partition has no leader that answers, so
  the nodes' heartbeats held up meanwhile are not counted as silence;
* ``replay``: the cell log up to the last input decided, replayed through the core, against
  the recorded decisions (first occurrences): ``IDENTICAL`` or the first difference.

It measures and reports; ``tests/deploy/test_three_brokers.py`` runs it small and asserts.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sys
import threading
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable

from suanli.streams.kafka_security import client_options
from suanli.config import Settings, load_settings


@dataclass
class Options:
    tasks: int = 10_000
    rate: float = 150.0
    down_s: float = 10.0              # how long the killed broker stays down
    kill_after: float = 0.3           # share of the tasks submitted before the kill
    time_scale: float = 0.00005       # simulated seconds -> wall seconds (tasks run a while)
    partitions: int = 2
    # The simulated nodes' metrics samples (~21 MB a round for the openb cluster, written three
    # times over) would take the two cores from the brokers and the decision path; off by
    # default (heartbeats still go every 5 s).
    metrics_interval_s: float = 0.0


def leader_of(settings: Settings, topic: str, partition: int) -> int:
    """The node id of the broker leading ``topic[partition]`` now."""
    from aiokafka.admin import AIOKafkaAdminClient

    async def ask() -> int:
        admin = AIOKafkaAdminClient(bootstrap_servers=settings.bootstrap_servers, **client_options(settings.bootstrap_servers))
        await admin.start()
        try:
            (described,) = await admin.describe_topics([topic])
            return next(p["leader"] for p in described["partitions"] if p["partition"] == partition)
        finally:
            await admin.close()

    return asyncio.run(ask())


def _records(settings: Settings, topic: str) -> int:
    from suanli.streams.kafka_io import end_offsets

    return sum(asyncio.run(end_offsets(settings.bootstrap_servers, topic)).values())


class BrokerKiller(threading.Thread):
    """Kills the cell log partition's leader once ``threshold`` tasks are submitted (records on
    the raw tasks topic), and starts it again ``down_s`` later; records when (``time.time()``
    seconds)."""

    def __init__(self, plane: Any, threshold: int, down_s: float, log: Callable[[str], None]):
        super().__init__(daemon=True)
        self.plane, self.threshold, self.down_s, self.log = plane, threshold, down_s, log
        self.stop = threading.Event()
        self.killed_at: float | None = None
        self.restarted_at: float | None = None
        self.rejoined_at: float | None = None
        self.node: int | None = None
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self._run()
        except BaseException as e:  # noqa: BLE001 - reported by the caller
            self.error = e

    def _run(self) -> None:
        from suanli.deploy import kafka_broker, stack
        from suanli.deploy.waiting import wait_for
        from suanli.streams.topics import TopicNames, partition_of

        s = self.plane.s
        names = TopicNames(s.namespace)
        while not self.stop.is_set() and _records(s, names.raw_tasks) < self.threshold:
            self.stop.wait(0.5)
        if self.stop.is_set():
            return
        partition = partition_of(self.plane.cell, s.partitions)
        self.node = leader_of(s, names.cell_log, partition)
        victim = stack.broker_services(s)[self.node - 1]
        pid = victim.pid()
        if pid is None:
            raise RuntimeError(f"{victim.name}, the leader of {names.cell_log}[{partition}], is not running")
        os.kill(pid, signal.SIGKILL)
        self.killed_at = time.time()
        self.log(f"killed {victim.name} (pid {pid}), leader of {names.cell_log}[{partition}]")
        self.stop.wait(self.down_s)
        wait_for(f"{victim.name} gone", lambda: victim.pid() is None, timeout=30)
        stack.start_brokers(s, log=self.log)
        self.restarted_at = time.time()
        wait_for(f"{victim.name} back in the cluster",
                 lambda: kafka_broker.live_brokers(s.bootstrap_servers) >= s.brokers, timeout=120)
        self.rejoined_at = time.time()
        self.log(f"{victim.name} back in the cluster {self.rejoined_at - self.killed_at:.1f} s after the kill")


def _pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    values = sorted(values)
    return round(values[min(len(values) - 1, int(q * len(values)))], 1)


def analyse(settings: Settings, cell: str, submitted: int, killer: BrokerKiller) -> dict[str, Any]:
    """The figures of the module docstring, from the namespace's topics."""
    from suanli.bench.cells_across_workers import read_topic
    from suanli.replay.log_replay import decided_prefix, describe, first_divergence, regenerate
    from suanli.schemas.codec import Codec
    from suanli.schemas.registry import RegistryClient
    from suanli.streams.topics import TopicNames

    names = TopicNames(settings.namespace)
    raw = asyncio.run(read_topic(settings, names.raw_tasks))
    cell_log = asyncio.run(read_topic(settings, names.cell_log))
    decisions = asyncio.run(read_topic(settings, names.decisions))
    seen: set[str] = set()
    distinct = []
    for d in decisions:
        if d.kind is not None and d.payload["cell"] == cell and d.payload["event_id"] not in seen:
            seen.add(d.payload["event_id"])
            distinct.append(d)
    sent = {r.payload["task_id"]: r.timestamp for r in raw if r.kind == "TaskSubmitted"}
    placements: dict[str, int] = {}
    first: dict[str, int] = {}
    answered: set[str] = set()
    for d in distinct:
        tid = d.payload.get("task_id")
        if d.kind == "TaskPlaced":
            placements[tid] = placements.get(tid, 0) + 1
        if d.kind in ("TaskPlaced", "TaskPending", "TaskUnschedulable"):
            answered.add(tid)
            first.setdefault(tid, d.timestamp)
    unhealthy = {d.payload["node_id"] for d in distinct
                 if d.kind == "NodeHealthChanged" and d.payload["status"] in ("SUSPECT", "DOWN")}
    # The streaming window: first submission to last first-decision.
    start, end = min(sent.values()), max(first.values())
    stamps = sorted(d.timestamp for d in distinct if start <= d.timestamp <= end)
    gaps = [(b - a, a) for a, b in zip(stamps, stamps[1:])]
    gap, gap_at = max(gaps) if gaps else (0, start)
    kill = (killer.killed_at or 0) * 1000
    back = (killer.restarted_at or 0) * 1000
    phases: dict[str, list[float]] = {"before": [], "during": [], "after": []}
    for tid, at in sent.items():
        if tid in first:
            phase = "before" if at < kill else "during" if at < back else "after"
            phases[phase].append(first[tid] - at)
    # The cell clock: intake holds its ticks back while a raw partition cannot be read, so the
    # longest pause between two ticks of the cell shows the hold (about the failover's length).
    tick_ats = [r.payload["at"] for r in cell_log if r.kind == "CellTick" and r.payload.get("cell") == cell]
    pauses = [(b - a, a) for a, b in zip(tick_ats, tick_ats[1:])]
    pause, pause_at = max(pauses) if pauses else (0, 0)
    with RegistryClient(settings.registry_url) as registry:
        codec = Codec(registry)
        records = decided_prefix(cell_log, (d.payload for d in distinct))
        divergence = first_divergence([d.value for d in distinct], regenerate(codec, records))
        replay = "IDENTICAL" if divergence is None else (
            f"DIFFERENT at decision #{divergence.index}: recorded {describe(codec, divergence.recorded)}, "
            f"replayed {describe(codec, divergence.regenerated)}")
    return {
        "submitted": submitted, "answered": len(answered & set(sent)),
        "lost": sorted(set(sent) - answered)[:20], "lost_count": len(set(sent) - answered),
        "placed_twice": sorted(t for t, n in placements.items() if n > 1)[:20],
        "placed_twice_count": sum(1 for n in placements.values() if n > 1),
        "tasks_lost": sum(1 for d in distinct if d.kind == "TaskLost"),
        "nodes_unhealthy": len(unhealthy),
        "decision_records": len(decisions), "distinct_decisions": len(distinct),
        "decision_gap_ms": gap, "decision_gap_starts_s_after_kill": round((gap_at - kill) / 1000, 1) + 0.0 if kill else None,
        "latency_ms": {phase: {"tasks": len(v), "p50": _pct(v, 0.5), "p99": _pct(v, 0.99)}
                       for phase, v in phases.items()},
        "tick_pause_ms": pause,
        "tick_pause_starts_s_after_kill": round((pause_at - kill) / 1000, 1) + 0.0 if kill and pauses else None,
        "killed_node": killer.node,
        "down_s": round((killer.restarted_at - killer.killed_at), 1) if killer.restarted_at else None,
        "rejoined_s": round((killer.rejoined_at - killer.killed_at), 1) if killer.rejoined_at else None,
        "replay": replay,
    }


def run(settings: Settings, options: Options, log: Callable[[str], None] = print) -> dict[str, Any]:
    """One run on the running three-broker stack of ``settings``; the figures."""
    from suanli.deploy.plane import Plane, PlaneOptions
    from suanli.errors import StackError

    if settings.brokers < 3:
        raise StackError("the broker-failure bench needs the three-broker stack: SUANLI_BROKERS=3 "
                         "(suanli stack up --brokers 3)")
    settings = settings.model_copy(update={"namespace": f"bf{uuid.uuid4().hex[:8]}",
                                           "partitions": options.partitions})
    plane = Plane(settings, PlaneOptions(tasks=options.tasks, rate=options.rate, time_scale=options.time_scale,
                                         exit_when_drained=True, quiet=True, drain_timeout=900, metrics_port=None,
                                         metrics_interval_s=options.metrics_interval_s),
                  out=log)
    plane.start()
    killer = BrokerKiller(plane, int(options.tasks * options.kill_after), options.down_s, log)
    killer.start()
    try:
        result = asyncio.run(plane.run())
    finally:
        killer.stop.set()
        killer.join()
        plane.stop()
    if killer.error is not None:
        raise killer.error
    if killer.killed_at is None:
        raise StackError("the run drained before the broker was killed: more tasks or a lower --kill-after")
    figures = analyse(settings, plane.cell, result["submitted"], killer)
    figures.update(options=asdict(options), plane={k: result[k] for k in ("placed", "pending", "unschedulable",
                                                                       "dead_lettered", "seconds")},
                   worker_restarts=result["worker_restarts"])
    return figures


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m suanli.bench.broker_failure", description=__doc__.split("\n")[0])
    ap.add_argument("--tasks", type=int, default=Options.tasks)
    ap.add_argument("--rate", type=float, default=Options.rate)
    ap.add_argument("--down-s", type=float, default=Options.down_s)
    ap.add_argument("--kill-after", type=float, default=Options.kill_after)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    figures = run(load_settings(), Options(tasks=args.tasks, rate=args.rate, down_s=args.down_s,
                                           kill_after=args.kill_after),
                  log=lambda m: print(m, file=sys.stderr))
    text = json.dumps(figures, indent=2)
    if args.json:
        args.json.write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
