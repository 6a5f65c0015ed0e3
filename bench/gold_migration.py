"""Gold migration on the real stack, with the failure injected (issue 14, acceptance check 1).

    python -m suanli.bench.gold_migration [--gold 200] [--silence 5] [--fill 1.05] [--json out.json]

A control plane of its own (a fresh namespace on the running broker and registry: the intake,
scheduler and telemetry workers of ``suanli up`` and the simulated openb cluster, 1,523 nodes)
with the QoS policy (``--policy``, default ``{"qos": {"gold_share": 0.1}}``: a tenth of each GPU
model's nodes set aside for gold, the default timeouts: SUSPECT after 10 s, DOWN after 15 s).

1. ``--gold`` GOLD tasks (the openb trace's GPU pods, its shapes) are submitted and run; then
   BRONZE tasks (the next GPU pods of the trace, cycled) until their GPU demand is ``--fill``
   times the GPUs the gold tasks leave, so the cluster is full and a gold task that must move
   finds no free place: it preempts bronze. Every task runs far longer than the run.
2. The ``--silence`` nodes holding the most gold tasks (read from the decisions: where each gold
   task is placed and reported RUNNING) are silenced with the simulator's node-kill fault
   (``suanli sim fault silence --node ...`` through the control topic): their heartbeats and
   metrics stop, as if their connector had been SIGKILLed (the simulator is one process for all
   its nodes, so the fault stands in for the kill). **Time of kill** = the simulator's wall clock
   when it applied the fault (the ``at`` of its reply, taken just before it silences). The kill
   comes as soon as the load runs (``--phase now``: anywhere in the 5 s heartbeat period) or just
   after the victims' next heartbeat has reached the cell log (``--phase after-heartbeat``: the
   scheduler then waits the whole down timeout from the kill, the worst case).
3. The run waits (conditions on the log, never a sleep) until each gold task of those nodes has
   a ``TaskMigrated`` decision off its node and the connector has reported it RUNNING on the new
   node: the ``TaskStatusChanged`` RUNNING whose event id is ``<TaskMigrated decision_id>:running``
   (the migrated task's dispatch id is the decision id) in the cell log.

Per affected gold task, from the kill, in wall milliseconds (all clocks are this machine's):

- ``running_ms``: to the RUNNING record's timestamp in the cell log (the broker's append time:
  intake's forward of the connector's report arrived; the control plane knows it runs) — the
  headline figure;
- ``running_at_ms``: to the RUNNING report's own ``at`` (the connector's clock when it started it);
- ``decided_ms``: to the TaskMigrated record's timestamp on the decisions topic;
- the decision's own ``elapsed_ms`` (since the node's last heartbeat, on the cell clock).

p50 / p99 / max (nearest rank) of each, against the goal max <= 30 s; the DOWN detection
latency of the silenced nodes; the tasks lost (non-gold), the bronze preempted; and the
correctness checks: every affected gold task migrated to and RUNNING on a node that was not
silenced, no gold task lost (``TaskLost``) or left unplaced, every gold task of the run still
placed and RUNNING at the end, every preempted task placed again or pending with a reason once
its grace ended (the run waits for it). With the policy's ``qos.gold_standby``, the copies
too: each RUNNING before the kill, never on its task's node, moved when silenced, and per
affected gold task whether its copy ran on throughout (``standby_covered``: then the task
was never out of service, ``gold_downtime_ms``). ``--verify`` also exports the cell and replays it
(``suanli replay DIR --verify``): IDENTICAL or not.

A run is void when a node nobody silenced turns SUSPECT (its heartbeats reached the cell log
late: a starved machine); the bench then stops with :class:`MachineTooBusy` instead of
reporting figures. The stack must be up (``suanli stack up``); this never starts or stops it.
The workers and the simulator it starts are stopped at the end.
"""
from __future__ import annotations

import argparse
import asyncio
import bisect
import json
import os
import secrets
import sys
import tempfile
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from suanli.processors.model import OFF_CLOCK_KINDS, input_time
from suanli.processors.qos import primary_of, standby_id

GOAL_MAX_MS = 30_000
DEFAULT_POLICY = {"qos": {"gold_share": 0.1}}
LONG_MS = 10 * 24 * 3_600_000       # every task "runs" ten simulated days: far longer than any run


# =========================================================================== small helpers
def dist(values: list[float]) -> dict[str, Any]:
    """count, min, p50, p90, p99, max (nearest rank) and mean of ``values``."""
    if not values:
        return {"count": 0}
    v = sorted(values)
    n = len(v)

    def rank(q: float) -> float:
        return v[max(0, min(n - 1, -(-q * n // 100) - 1))]

    return {"count": n, "min": v[0], "p50": rank(50), "p90": rank(90), "p99": rank(99), "max": v[-1],
            "mean": round(sum(v) / n, 1)}


def gpu_pods(pods_csv: Path) -> list[dict[str, Any]]:
    """The trace's pods that ask for GPU (a share of one, or whole ones), in trace order."""
    from suanli.replay.openb import read_pods

    return [p for p in read_pods(pods_csv) if p["resources"]["gpu_count"] > 0 and p["resources"]["gpu_milli"] > 0]


def gpu_milli(task: dict[str, Any]) -> int:
    r = task["resources"]
    return r["gpu_count"] * r["gpu_milli"]


def make_task(pod: dict[str, Any], *, run: str, cell: str, name: str, tier: str, labels: dict[str, str] | None = None,
              duration_ms: int | None = LONG_MS, priority: int = 0) -> dict[str, Any]:
    """A TaskSubmitted payload: the pod's resources, this run's ids, the given tier and labels."""
    return {**pod, "task_id": f"{run}-{name}", "event_id": f"{run}/submit/{name}", "tenant": "bench", "cell": cell,
            "qos_tier": tier, "priority": priority, "labels": {"source": "openb", **(labels or {})},
            "duration_estimate_ms": duration_ms, "submitted_at": int(time.time() * 1000)}


async def publish_all(producer: Any, tasks: list[dict[str, Any]], rate: float) -> None:
    """Publish ``tasks`` at about ``rate`` per second (0: as fast as possible), each stamped now."""
    started = time.monotonic()
    for i, task in enumerate(tasks):
        task["submitted_at"] = int(time.time() * 1000)
        await producer.publish("TaskSubmitted", task)
        if rate > 0:
            ahead = (i + 1) / rate - (time.monotonic() - started)
            if ahead > 0:
                await asyncio.sleep(ahead)
    await producer.flush()


# =========================================================================== the plane
class StackPlane:
    """The plane's processes in a namespace of their own, on the running stack: intake,
    scheduler and telemetry workers (``deploy/plane.py``'s) and the simulated cluster of
    ``nodes_csv`` serving ``cell``. Started and stopped by pid; the stack is never touched."""

    def __init__(self, nodes_csv: Path, *, time_scale: float = 0.001, partitions: int = 1, prefix: str = "bench",
                 log: Callable[[str], None] = print, argv: dict[str, list[str]] | None = None):
        from suanli.config import load_settings

        run = secrets.token_hex(4)
        self.settings = load_settings(namespace=f"{prefix}{run}", partitions=partitions)
        self.run = f"r{run}"
        self.cell = f"{prefix}-{run}"
        self.nodes_csv = Path(nodes_csv)
        self.expected_nodes = sum(1 for _ in open(self.nodes_csv)) - 1
        self.time_scale = time_scale
        self.log = log
        self.argv = argv or {}           # service name -> its argv after the interpreter (experiments)
        self.services: list[tuple[Any, list[str]]] = []

    def start(self) -> None:
        from suanli.config import to_env
        from suanli.deploy import kafka_broker
        from suanli.deploy.plane import connector_process, worker_processes
        from suanli.errors import StackError
        from suanli.streams.kafka_io import ensure_topics
        from suanli.streams.topics import core_topics

        s = self.settings
        if not kafka_broker.is_ready(s.bootstrap_servers, timeout=10):
            raise StackError(f"Kafka at {s.bootstrap_servers} is not reachable: `suanli stack up` first")
        asyncio.run(ensure_topics(s.bootstrap_servers, core_topics(s.partitions, s.namespace)))
        env = to_env(s)
        for service, argv in [*worker_processes(s).values(),
                              connector_process(s, self.cell, self.nodes_csv, self.time_scale)]:
            if service.name in self.argv:             # keep the interpreter and its pid marker
                argv = [*argv[:3], *self.argv[service.name]]
            service.start(argv, env=env)
            self.services.append((service, argv))
        self.log(f"plane: namespace {s.namespace}, cell {self.cell}: {', '.join(x.name for x, _ in self.services)} "
                 f"started; logs in {s.home / 'logs'}")

    def stop(self) -> None:
        for service, _argv in reversed(self.services):
            service.stop()
        self.services.clear()

    def pids(self) -> dict[str, int | None]:
        return {s.name: s.pid() for s, _ in self.services}

    def check_alive(self) -> None:
        dead = [s for s, _ in self.services if s.pid() is None]
        if dead:
            raise RuntimeError("plane process(es) exited: " + "; ".join(f"{s.name}: {s.log_tail(15)}" for s in dead))

    def tails(self, lines: int = 12) -> str:
        return "\n".join(f"--- {s.name}\n{s.log_tail(lines)}" for s, _ in self.services)


# =========================================================================== what the log shows
@dataclass
class CellView:
    """A cell's log and decisions folded as they arrive (records of other cells ignored;
    decisions deduplicated by event id, as a redelivery repeats them)."""

    cell: str
    nodes: set[str] = field(default_factory=set)
    policies: int = 0
    seen: set[str] = field(default_factory=set)
    submitted: dict[str, int] = field(default_factory=dict)            # task -> TaskSubmitted log timestamp
    received: dict[str, float] = field(default_factory=dict)           # task -> wall ms this reader got it
    first_decision: dict[str, tuple[str, int]] = field(default_factory=dict)   # task -> (kind, record ts)
    kinds: Counter = field(default_factory=Counter)
    holding: dict[str, str] = field(default_factory=dict)              # task -> node it holds now
    pending: set[str] = field(default_factory=set)                     # latest answer: pending
    running: dict[str, tuple[str, str, int]] = field(default_factory=dict)   # task -> (node, event id, log ts)
    statuses: dict[str, tuple[int, dict]] = field(default_factory=dict)      # status event id -> (log ts, payload)
    migrated: dict[str, list[tuple[int, dict]]] = field(default_factory=lambda: defaultdict(list))
    lost: dict[str, list[dict]] = field(default_factory=lambda: defaultdict(list))
    preempted: dict[str, list[dict]] = field(default_factory=lambda: defaultdict(list))
    health: dict[str, list[dict]] = field(default_factory=lambda: defaultdict(list))
    unhealthy: set[str] = field(default_factory=set)                   # nodes ever SUSPECT or DOWN
    beats: dict[str, int] = field(default_factory=dict)                # node -> its last heartbeat's at (log)
    decided_offset: int = -1                                           # last cell-log offset decided
    decisions: list[tuple[str, int, dict]] = field(default_factory=list)     # (kind, record ts, payload)
    ticks: list[tuple[int, int]] = field(default_factory=list)         # CellTicks: (log offset, at)
    clock: list[tuple[int, int]] = field(default_factory=list)         # (log offset, cell clock) where it rose

    def apply(self, r: Any, decisions_topic: str) -> None:
        p = r.payload
        if r.kind is None or p is None or p.get("cell") != self.cell:
            return
        if r.topic == decisions_topic:
            if p["event_id"] in self.seen:
                return
            self.seen.add(p["event_id"])
            self._decision(r.kind, r.timestamp, p)
            return
        k = r.kind                                      # the cell log
        self._advance_clock(r.offset, k, p)
        if k == "NodeRegistered":
            self.nodes.add(p["node_id"])
        elif k == "PolicyChanged":
            self.policies += 1
        elif k == "TaskSubmitted":
            self.submitted.setdefault(p["task_id"], r.timestamp)
            self.received.setdefault(p["task_id"], time.time() * 1000)
        elif k == "CellTick":
            self.ticks.append((r.offset, p["at"]))
        elif k == "NodeHeartbeat":
            for node_id in (p["node_id"], *(p.get("nodes") or ())):         # a batch names several
                self.beats[node_id] = p["at"]
        elif k == "TaskStatusChanged":
            self.statuses.setdefault(p["event_id"], (r.timestamp, p))
            if p["status"] == "RUNNING":
                self.running[p["task_id"]] = (p["node_id"], p["event_id"], r.timestamp)
            elif p["status"] in ("COMPLETED", "FAILED", "CANCELLED"):
                cur = self.running.get(p["task_id"])
                if cur is not None and cur[0] == p["node_id"]:
                    del self.running[p["task_id"]]

    def _advance_clock(self, offset: int, kind: str, p: dict) -> None:
        """The cell clock as ``processors.core`` keeps it: the largest input time the log has
        shown (a JobRound's time is its reporter's and does not count)."""
        if kind in OFF_CLOCK_KINDS:
            return
        at = input_time(kind, p)
        if at and (not self.clock or at > self.clock[-1][1]):
            self.clock.append((offset, at))

    def clock_at(self, offset: int) -> int:
        """The cell clock once the input at ``offset`` was folded (0 before any time)."""
        i = bisect.bisect_right(self.clock, (offset, float("inf")))
        return self.clock[i - 1][1] if i else 0

    def _decision(self, kind: str, ts: int, p: dict) -> None:
        self.kinds[kind] += 1
        self.decisions.append((kind, ts, p))
        self.decided_offset = max(self.decided_offset, p["provenance"]["input"]["offset"])
        tid = p.get("task_id")
        if kind in ("TaskPlaced", "TaskPending", "TaskUnschedulable"):
            self.first_decision.setdefault(tid, (kind, ts))
        if kind == "TaskPlaced":
            self.holding[tid] = p["node_id"]
            self.pending.discard(tid)
        elif kind == "TaskPending":
            self.pending.add(tid)
        elif kind == "TaskMigrated":
            self.migrated[tid].append((ts, p))
            self.holding[tid] = p["to_node"]
        elif kind in ("TaskLost", "TaskReleased", "TaskPreempted"):
            if kind == "TaskLost":
                self.lost[tid].append(p)
            elif kind == "TaskPreempted":
                self.preempted[tid].append(p)
            self.holding.pop(tid, None)
        elif kind == "NodeHealthChanged":
            self.health[p["node_id"]].append(p)
            if p["status"] in ("SUSPECT", "DOWN"):
                self.unhealthy.add(p["node_id"])

    # ---------------------------------------------------------------- questions
    def runs_where_placed(self, tid: str) -> bool:
        node = self.holding.get(tid)
        return node is not None and self.running.get(tid, ("",))[0] == node

    def decided(self, tid: str) -> bool:
        return tid in self.first_decision

    def status(self, tid: str) -> str:
        if tid in self.holding:
            return "RUNNING" if self.runs_where_placed(tid) else "PLACED"
        if tid in self.pending:
            return "PENDING"
        return "LOST" if tid in self.lost else "UNDECIDED" if tid not in self.first_decision else "OTHER"


class MachineTooBusy(RuntimeError):
    """Healthy simulated nodes turned SUSPECT or DOWN: their heartbeats reached the cell log
    late, so the machine was too loaded for the run to measure anything."""


class Follower:
    """Reads the cell log and the decisions of a namespace from the start, folding them into
    a :class:`CellView`; :meth:`until` waits for a condition on it, :meth:`catch_up` reads up to
    the topics' end offsets of the moment.

    A run is only meaningful while the nodes nobody silenced stay READY: a healthy node turning
    SUSPECT means its heartbeats reached the cell log 10 s late (a starved simulator, intake or
    broker; this machine is shared), and the losses and re-placements that follow would swamp
    the figures. So :meth:`until` raises :class:`MachineTooBusy` as soon as a node outside
    ``expect_unhealthy`` turns SUSPECT or DOWN."""

    def __init__(self, plane: StackPlane, codec: Any):
        from suanli.streams.topics import TopicNames

        self.plane = plane
        self.codec = codec
        self.names = TopicNames(plane.settings.namespace)
        self.view = CellView(plane.cell)
        self.expect_unhealthy: set[str] = set()
        self._consumer: Any = None

    async def __aenter__(self) -> "Follower":
        from suanli.streams.kafka_io import EventConsumer

        self._consumer = EventConsumer(self.plane.settings.bootstrap_servers, self.codec,
                                       [self.names.cell_log, self.names.decisions])
        await self._consumer.__aenter__()
        self._batches = self._consumer.batches(timeout_ms=100, max_records=5000)
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._consumer.__aexit__(*exc)

    async def pump(self) -> int:
        batch = await anext(self._batches)
        for r in batch:
            self.view.apply(r, self.names.decisions)
        return len(batch)

    async def until(self, done: Callable[[CellView], Any], timeout: float, what: str) -> Any:
        deadline = time.monotonic() + timeout
        last_check = time.monotonic()
        while True:
            result = done(self.view)
            if result:
                return result
            surprise = self.view.unhealthy - self.expect_unhealthy
            if surprise:
                raise MachineTooBusy(
                    f"{len(surprise)} node(s) nobody silenced turned SUSPECT or DOWN while waiting for {what} "
                    f"(e.g. {sorted(surprise)[:3]}): heartbeats reached the cell log late; load average "
                    f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs. Run again on a quieter machine.")
            if time.monotonic() > deadline:
                raise TimeoutError(f"after {timeout:.0f} s still waiting for {what}; decisions so far "
                                   f"{dict(self.view.kinds)}\n{self.plane.tails()}")
            if time.monotonic() - last_check > 5:
                self.plane.check_alive()
                last_check = time.monotonic()
            await self.pump()

    async def catch_up(self) -> None:
        """Everything the two topics hold now (their end offsets at this call) is folded in."""
        from aiokafka import TopicPartition

        from suanli.streams.kafka_io import end_offsets

        raw = self._consumer.raw
        ends = {TopicPartition(topic, p): off for topic in (self.names.cell_log, self.names.decisions)
                for p, off in (await end_offsets(self.plane.settings.bootstrap_servers, topic)).items()}
        while True:
            behind = [tp for tp, end in ends.items() if end > 0 and await raw.position(tp) < end]
            if not behind:
                return
            await self.pump()


async def control(settings: Any, request: dict[str, Any]) -> dict[str, Any]:
    """A request to the simulator on its control topic (``suanli sim fault``); its reply."""
    from suanli.cli_sim import control_request

    reply = await control_request(settings, request)
    if not reply.get("ok"):
        raise RuntimeError(f"the simulator refused {request}: {reply}")
    return reply


async def set_policy(producer: Any, cell: str, run: str, config: dict[str, Any], strategy: str = "default") -> None:
    await producer.publish("PolicyChanged", {"event_id": f"{run}/policy", "cell": cell, "strategy": strategy,
                                             "config_json": json.dumps(config, sort_keys=True),
                                             "changed_by": "bench", "at": int(time.time() * 1000)})
    await producer.flush()


def replay_verify(settings: Any, cell: str, last_offset: int, directory: Path) -> dict[str, Any]:
    """Export the cell's log up to the last input the scheduler decided and run
    ``suanli replay DIR --verify`` on it; the verdict (``identical``, inputs, recorded)."""
    from suanli.cli import main as suanli_main
    from suanli.replay.export import export_cell

    asyncio.run(export_cell(settings, cell, directory / "log", to_offset=last_offset + 1, log=lambda _m: None))
    verdict = directory / "verdict.json"
    code = suanli_main(["replay", str(directory / "log"), "--verify", "--quiet", "--json", str(verdict)])
    out = json.loads(verdict.read_text())
    out["exit_code"] = code
    return out


# =========================================================================== the scenario
@dataclass
class Options:
    nodes_csv: Path
    pods_csv: Path
    gold: int = 200
    silence: int = 5
    fill: float = 1.05                  # bronze GPU demand / GPUs the gold tasks leave
    policy: dict[str, Any] = field(default_factory=lambda: json.loads(json.dumps(DEFAULT_POLICY)))
    rate: float = 150.0                 # submissions per second (the scheduler keeps up, intake too)
    time_scale: float = 0.001
    timeout: float = 180.0              # per wait
    verify: bool = False
    phase: str = "now"                  # now | after-heartbeat (the worst case: a full timeout to wait)


def cluster_gpus(nodes_csv: Path) -> int:
    from suanli.replay.openb import read_nodes

    return sum(a["count"] for n in read_nodes(nodes_csv, "x") for a in n["accelerators"] if a["kind"] == "GPU")


def workload(o: Options, run: str, cell: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(gold tasks, bronze tasks): the trace's GPU pods, gold first, bronze cycling through the
    rest until their GPU demand is ``fill`` x the GPUs the gold tasks leave."""
    pods = gpu_pods(o.pods_csv)
    gold = [make_task(p, run=run, cell=cell, name=f"gold-{i:04d}", tier="GOLD") for i, p in enumerate(pods[:o.gold])]
    room = cluster_gpus(o.nodes_csv) * 1000 - sum(gpu_milli(t) for t in gold)
    bronze, demand, i = [], 0, 0
    rest = pods[o.gold:] or pods
    while demand < o.fill * room:
        t = make_task(rest[i % len(rest)], run=run, cell=cell, name=f"bronze-{i:05d}", tier="BRONZE")
        bronze.append(t)
        demand += gpu_milli(t)
        i += 1
    return gold, bronze


async def scenario(o: Options, plane: StackPlane, say: Callable[[str], None]) -> dict[str, Any]:
    from suanli.schemas.codec import Codec
    from suanli.schemas.registry import RegistryClient
    from suanli.streams.kafka_io import EventProducer

    s = plane.settings
    gold, bronze = workload(o, plane.run, plane.cell)
    gold_ids = {t["task_id"] for t in gold}
    bronze_ids = {t["task_id"] for t in bronze}
    # with the policy's gold standby, each gold task runs a second copy on another node (qos.py)
    standby_ids = {standby_id(t) for t in gold_ids} if (o.policy.get("qos") or {}).get("gold_standby") else set()
    marks: dict[str, float] = {"began": time.monotonic()}
    with RegistryClient(s.registry_url) as registry:
        codec = Codec(registry)
        async with Follower(plane, codec) as f, \
                EventProducer(s.bootstrap_servers, codec, namespace=s.namespace) as producer:
            await set_policy(producer, plane.cell, plane.run, o.policy)
            await f.until(lambda v: len(v.nodes) >= plane.expected_nodes and v.policies >= 1, o.timeout,
                          f"{plane.expected_nodes} nodes registered and the policy in the cell log")
            marks["registered"] = time.monotonic()
            say(f"gold migration: {plane.expected_nodes} nodes registered; submitting {len(gold)} gold tasks")

            await publish_all(producer, gold, o.rate)
            copies = gold_ids | standby_ids
            await f.until(lambda v: all(v.runs_where_placed(t) for t in copies), o.timeout,
                          f"all {len(gold)} gold tasks placed and RUNNING"
                          + (" with their standby copies" if standby_ids else ""))
            marks["gold_running"] = time.monotonic()
            say(f"gold migration: {len(gold)} gold tasks running; submitting {len(bronze)} bronze tasks "
                f"(GPU demand {sum(map(gpu_milli, bronze)) / 1000:.0f} of {cluster_gpus(o.nodes_csv)} GPUs)")

            await publish_all(producer, bronze, o.rate)
            await f.until(lambda v: all(v.decided(t) for t in bronze_ids)
                          and all(v.runs_where_placed(t) for t in bronze_ids if t in v.holding), o.timeout * 2,
                          "every bronze task decided and every placed one RUNNING")
            marks["filled"] = time.monotonic()
            v = f.view
            if not all(v.runs_where_placed(t) for t in copies):
                raise RuntimeError("a gold task (or standby copy) stopped running while the bronze load arrived: "
                                   f"{sorted(t for t in copies if not v.runs_where_placed(t))[:10]}")
            standby_at_kill = {t: v.holding[standby_id(t)] for t in gold_ids if standby_id(t) in standby_ids}
            bronze_placed = sum(1 for t in bronze_ids if t in v.holding)
            say(f"gold migration: bronze placed {bronze_placed}, pending {len(bronze_ids & v.pending)}; "
                f"preempted so far {sum(len(x) for x in v.preempted.values())}")

            # ---- the nodes holding the most gold tasks, from the decisions (and RUNNING there)
            per_node = Counter(v.holding[t] for t in gold_ids)
            victims = sorted(per_node, key=lambda n: (-per_node[n], n))[:o.silence]
            affected = {t: v.holding[t] for t in sorted(gold_ids) if v.holding[t] in victims}
            on_victims = {t: n for t, n in v.holding.items() if n in victims}
            say(f"gold migration: silencing {victims} ({[per_node[n] for n in victims]} gold tasks; "
                f"{len(on_victims)} tasks in all)")
            f.expect_unhealthy = set(victims)
            if o.phase == "after-heartbeat":
                # kill just after the victims' next heartbeat reached the cell log: the scheduler then
                # waits the whole down timeout from (nearly) the kill, the worst phase for the figure
                seen = {n: v.beats.get(n, 0) for n in victims}
                await f.until(lambda view: all(view.beats.get(n, 0) > seen[n] for n in victims), 30,
                              "the silenced nodes' next heartbeat in the cell log")
            sent = time.time() * 1000
            reply = await control(s, {"action": "silence", "nodes": victims, "cell": plane.cell})
            answered = time.time() * 1000
            kill_ms = reply["at"]
            marks["killed"] = time.monotonic()
            if sorted(reply["nodes"]) != sorted(victims):
                raise RuntimeError(f"the simulator silenced {reply['nodes']}, not {victims}")

            # standby copies on the silenced nodes move too (they are gold): wait for them as well
            to_move = {**affected, **{standby_id(t): n for t, n in standby_at_kill.items() if n in victims}}

            def moved(view: CellView) -> bool:
                for t, node in to_move.items():
                    m = [p for _ts, p in view.migrated.get(t, []) if p["from_node"] == node]
                    if not m or f"{m[0]['decision_id']}:running" not in view.statuses:
                        if view.lost.get(t):
                            raise RuntimeError(f"gold task {t} was LOST: {view.lost[t][-1]['reason']}")
                        return False
                return all(any(h["status"] == "DOWN" for h in view.health.get(n, [])) for n in victims)

            await f.until(moved, o.timeout, f"each of the {len(to_move)} gold tasks (and copies) of the silenced "
                                            "nodes migrated and RUNNING on its new node, every silenced node DOWN")
            marks["migrated"] = time.monotonic()

            # every task preempted is placed again, or queued with its reason, once its grace ends
            def back(view: CellView) -> bool:
                return all(t in view.holding or t in view.pending for t in view.preempted)

            await f.until(back, o.timeout, "every preempted task placed again or pending (after its grace)")
            # the migrated tasks' victims re-queued and placed (or pending) again: let the log settle
            # a few ticks, then read everything written so far
            await f.catch_up()
            v = f.view

    # ---------------------------------------------------------------- figures and checks
    rows, problems = [], []
    for t, node in affected.items():
        m = [(ts, p) for ts, p in v.migrated.get(t, []) if p["from_node"] == node]
        ts, p = m[0]
        run_ts, run = v.statuses[f"{p['decision_id']}:running"]
        if run["node_id"] != p["to_node"]:
            problems.append(f"{t}: RUNNING on {run['node_id']}, migrated to {p['to_node']}")
        if p["to_node"] in victims:
            problems.append(f"{t}: migrated to {p['to_node']}, a silenced node")
        if p.get("cause") != "NODE_DOWN":
            problems.append(f"{t}: TaskMigrated cause {p.get('cause')!r}, expected NODE_DOWN")
        by_me = {vt for vt, ps in v.preempted.items() for vp in ps if vp.get("preempted_by") == t}
        for victim in p.get("preempted") or []:
            if victim not in by_me:
                problems.append(f"{t}: names victim {victim}, which has no TaskPreempted by {t}")
            elif victim in gold_ids:
                problems.append(f"{t}: preempted gold task {victim}")
        rows.append({"task_id": t, "from": node, "to": p["to_node"], "decision_id": p["decision_id"],
                     "preempted": list(p.get("preempted") or []), "since": p.get("since"),
                     "elapsed_ms": p.get("elapsed_ms"), "decided_ms": ts - kill_ms,
                     "running_ms": run_ts - kill_ms, "running_at_ms": run["at"] - kill_ms})
    # a standby covers its task through the failure when its copy ran on a node nobody
    # silenced, from before the kill to the end of the wait, without a move or an end
    covered, uncovered = [], []
    for t in affected:
        sid, where = standby_id(t), standby_at_kill.get(t)
        if where is None:
            continue
        ok = where not in victims and not v.migrated.get(sid) and v.running.get(sid, ("",))[0] == where
        (covered if ok else uncovered).append(t)
    for t in gold_ids:
        sid = standby_id(t)
        if sid in standby_ids and v.holding.get(sid) is not None and v.holding.get(sid) == v.holding.get(t):
            problems.append(f"{t}: its standby copy is on its own node {v.holding[t]}")
    lost_gold = sorted(t for t in gold_ids | standby_ids if v.lost.get(t))
    not_running = sorted(t for t in gold_ids | standby_ids if not v.runs_where_placed(t))
    on_silenced = sorted(t for t in gold_ids | standby_ids if v.holding.get(t) in victims)
    # a task is out from the kill until its new copy runs, unless its standby covered it
    downtime = [0 if r["task_id"] in covered else r["running_ms"] for r in rows]
    down = {n: next(h for h in v.health[n] if h["status"] == "DOWN") for n in victims}
    preempted = [(t, p) for t, ps in v.preempted.items() for p in ps]
    requeued = {t: p for kind, _ts, p in v.decisions if kind == "TaskPending" and (t := p["task_id"]) in v.preempted}
    for t in v.preempted:
        if t in v.pending and not (requeued.get(t) or {}).get("reasons"):
            problems.append(f"{t}: preempted and pending without a reason")
    preempted_by_migration = [(t, p) for t, p in preempted if p.get("preempted_by") in to_move]   # copies' too
    nongold_lost = sorted(t for t in v.lost if t not in gold_ids)
    health_moves = Counter((h["status"]) for hs in v.health.values() for h in hs)
    healthy_suspected = sorted({n for n, hs in v.health.items() if n not in victims
                                and any(h["status"] in ("SUSPECT", "DOWN") for h in hs)})
    figures: dict[str, Any] = {
        "namespace": s.namespace, "cell": plane.cell, "nodes": plane.expected_nodes,
        "cluster_gpus": cluster_gpus(o.nodes_csv), "policy": o.policy, "time_scale": o.time_scale,
        "phase": o.phase,
        "gold_tasks": len(gold), "bronze_tasks": len(bronze),
        "bronze_placed_before_kill": bronze_placed,
        "silenced_nodes": victims, "gold_per_silenced_node": {n: per_node[n] for n in victims},
        "tasks_on_silenced_nodes": len(on_victims), "gold_affected": len(affected),
        "kill_ms": kill_ms, "kill_request_round_trip_ms": round(answered - sent, 1),
        "kill_minus_last_heartbeat_ms": {n: kill_ms - d["last_heartbeat_at"] for n, d in down.items()},
        "down_detection_ms": dist([d["provenance"]["decided_at"] - d["last_heartbeat_at"] for d in down.values()]),
        "kill_to_running_ms": dist([r["running_ms"] for r in rows]),
        "kill_to_running_at_ms": dist([r["running_at_ms"] for r in rows]),
        "kill_to_decision_ms": dist([r["decided_ms"] for r in rows]),
        "decision_elapsed_ms": dist([r["elapsed_ms"] for r in rows if r["elapsed_ms"] is not None]),
        "decision_to_running_ms": dist([r["running_ms"] - r["decided_ms"] for r in rows]),
        "goal_max_ms": GOAL_MAX_MS,
        "bronze_preempted": len(preempted), "bronze_preempted_by_migrations": len(preempted_by_migration),
        "preempted_placed_again": sum(1 for t in v.preempted if t in v.holding),
        "preempted_pending": sum(1 for t in v.preempted if t in v.pending),
        "preempted_tiers": dict(Counter(_tier(t, gold_ids, bronze_ids) for t, _p in preempted)),
        "migrations_with_victims": sum(1 for r in rows if r["preempted"]),
        "gold_standby": bool(standby_ids),
        "standby_covered": covered, "standby_uncovered": uncovered,
        "standbys_on_silenced_nodes": sorted(t for t, n in standby_at_kill.items() if n in victims),
        "gold_downtime_ms": dist(downtime),
        "nongold_lost": len(nongold_lost), "gold_lost": lost_gold,
        "gold_not_running_at_end": not_running, "gold_on_silenced_nodes_at_end": on_silenced,
        "problems": problems, "health_transitions": dict(health_moves),
        "healthy_nodes_suspect_or_down": healthy_suspected,
        "decision_kinds": dict(v.kinds), "decided_offset": v.decided_offset,
        "phases_s": {k: round(marks[k] - marks["began"], 1) for k in marks},
        "migrations": rows,
    }
    figures["goal_met"] = (bool(rows) and figures["kill_to_running_ms"]["max"] <= GOAL_MAX_MS
                           and not problems and not lost_gold and not not_running and not on_silenced)
    return figures


def _tier(t: str, gold: set[str], bronze: set[str]) -> str:
    return "GOLD" if (primary_of(t) or t) in gold else "BRONZE" if t in bronze else "other"


def run(o: Options, say: Callable[[str], None] = print, prefix: str = "benchgm") -> dict[str, Any]:
    plane = StackPlane(o.nodes_csv, time_scale=o.time_scale, prefix=prefix, log=say)
    plane.start()
    try:
        figures = asyncio.run(scenario(o, plane, say))
    finally:
        plane.stop()
    if o.verify:
        with tempfile.TemporaryDirectory() as tmp:
            verdict = replay_verify(plane.settings, plane.cell, figures["decided_offset"], Path(tmp))
        figures["replay"] = {k: verdict.get(k) for k in ("identical", "inputs", "recorded", "exit_code")}
        figures["goal_met"] = figures["goal_met"] and verdict.get("identical") is True
    return figures


def report(f: dict[str, Any]) -> str:
    def line(name: str, d: dict[str, Any]) -> str:
        if not d.get("count"):
            return f"  {name:<34} (none)"
        return (f"  {name:<34} p50 {d['p50'] / 1000:6.2f} s   p99 {d['p99'] / 1000:6.2f} s   "
                f"max {d['max'] / 1000:6.2f} s   (min {d['min'] / 1000:.2f} s, n={d['count']})")

    lines = [
        f"gold migration on the real stack: {f['nodes']} simulated nodes ({f['cluster_gpus']} GPUs), "
        f"{f['gold_tasks']} gold + {f['bronze_tasks']} bronze tasks, policy {json.dumps(f['policy'])}, "
        f"kill phase {f['phase']}",
        f"  silenced {len(f['silenced_nodes'])} nodes holding {f['gold_affected']} gold tasks "
        f"({f['tasks_on_silenced_nodes']} tasks in all): {f['gold_per_silenced_node']}",
        line("kill -> RUNNING on new node (log)", f["kill_to_running_ms"]),
        line("kill -> RUNNING (connector 'at')", f["kill_to_running_at_ms"]),
        line("kill -> TaskMigrated decision", f["kill_to_decision_ms"]),
        line("TaskMigrated -> RUNNING (log)", f["decision_to_running_ms"]),
        line("DOWN: decided_at - last heartbeat", f["down_detection_ms"]),
        f"  kill - last heartbeat: {f['kill_minus_last_heartbeat_ms']} ms",
        f"  bronze preempted: {f['bronze_preempted']} ({f['bronze_preempted_by_migrations']} by the migrations; "
        f"tiers {f['preempted_tiers']}); migrations that preempted: {f['migrations_with_victims']} of "
        f"{f['gold_affected']}; non-gold tasks lost (re-queued): {f['nongold_lost']}; after their grace, "
        f"{f['preempted_placed_again']} placed again and {f['preempted_pending']} pending with a reason",
        *([f"  gold standby: {len(f['standby_covered'])} of {f['gold_affected']} affected gold tasks ran on in "
           f"their standby copy throughout ({len(f['standby_uncovered'])} not); "
           f"{len(f['standbys_on_silenced_nodes'])} standby copies were on silenced nodes"]
          if f.get("gold_standby") else []),
        line("gold task out of service", f["gold_downtime_ms"]),
        f"  gold lost: {len(f['gold_lost'])}; gold not RUNNING at the end: {len(f['gold_not_running_at_end'])}; "
        f"gold still on silenced nodes: {len(f['gold_on_silenced_nodes_at_end'])}; problems: {len(f['problems'])}",
        f"  healthy nodes SUSPECT/DOWN meanwhile: {len(f['healthy_nodes_suspect_or_down'])}; "
        f"health transitions {f['health_transitions']}",
    ]
    if "replay" in f:
        lines.append(f"  replay --verify: {'IDENTICAL' if f['replay']['identical'] else 'DIVERGED'} "
                     f"({f['replay']['inputs']} inputs, {f['replay']['recorded']} recorded decisions)")
    lines.append(f"  goal max <= {GOAL_MAX_MS / 1000:g} s, none lost: {'met' if f['goal_met'] else 'NOT met'}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    from suanli.config import settings

    ap = argparse.ArgumentParser(prog="python -m suanli.bench.gold_migration", description=__doc__.split("\n\n")[0])
    openb = settings().openb_dir
    ap.add_argument("--nodes", type=Path, default=openb / "openb_node_list_all_node.csv")
    ap.add_argument("--pods", type=Path, default=openb / "openb_pod_list_default.csv")
    ap.add_argument("--gold", type=int, default=200, help="gold tasks (default 200)")
    ap.add_argument("--silence", type=int, default=5, help="nodes to silence (default 5)")
    ap.add_argument("--fill", type=float, default=1.05,
                    help="bronze GPU demand as a multiple of the GPUs the gold tasks leave (default 1.05)")
    ap.add_argument("--policy", default=json.dumps(DEFAULT_POLICY), help="the cell's policy config (JSON)")
    ap.add_argument("--rate", type=float, default=150.0,
                    help="submissions per second (default 150: the scheduler keeps up on a shared 2-CPU machine)")
    ap.add_argument("--timeout", type=float, default=180.0, help="seconds per wait")
    ap.add_argument("--phase", choices=("now", "after-heartbeat"), default="now",
                    help="kill as soon as the load runs (now), or just after the nodes' next heartbeat reaches "
                         "the cell log (after-heartbeat: the worst case, a full down timeout from the kill)")
    ap.add_argument("--verify", action="store_true", help="export the cell and replay it with --verify")
    ap.add_argument("--json", metavar="FILE", help="write every figure here")
    args = ap.parse_args(argv)
    o = Options(nodes_csv=args.nodes, pods_csv=args.pods, gold=args.gold, silence=args.silence, fill=args.fill,
                policy=json.loads(args.policy), rate=args.rate, timeout=args.timeout, verify=args.verify,
                phase=args.phase)
    figures = run(o, say=lambda m: print(m, file=sys.stderr, flush=True))
    print(report(figures))
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2) + "\n")
    return 0 if figures["goal_met"] else 1


if __name__ == "__main__":
    sys.exit(main())
