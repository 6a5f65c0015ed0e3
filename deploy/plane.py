"""``suanli up``: the whole control plane on this machine.

Starts (and on exit stops, by pid) the embedded stack if it is not running, the three Faust
workers (intake with the ticker, scheduler, telemetry), the simulated cluster connector built from the openb node
list, and a workload driver that replays openb tasks. While it runs it prints a live
summary from the log; headless (``--exit-when-drained``) it stops once every submitted
task has a decision and writes the figures as JSON.

Each worker serves its Prometheus metrics (``streams/metrics.py``) on 127.0.0.1: intake on
``PlaneOptions.metrics_port`` (default 19200), the scheduler on the next port, telemetry on the
one after (a port already taken is replaced by a free one; 0: free ports; None: no metrics). The
plane announces them in ``<home>/prometheus/targets/plane-<namespace>.json`` for Prometheus
(``deploy/prometheus.py``) and removes the file when it stops.
"""
from __future__ import annotations

import asyncio
import contextlib
import csv
import json
import re
import secrets
import socket
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable

from suanli.config import Settings, to_env
from suanli.deploy import stack
from suanli.deploy.processes import ServiceProcess
from suanli.errors import StackError

DEFAULT_METRICS_PORT = 19200
METRICS_HOST = "127.0.0.1"
DECIDED = frozenset({"RUNNING", "COMPLETED", "FAILED", "CANCELLED", "PENDING", "UNSCHEDULABLE"})


@dataclass
class PlaneOptions:
    tasks: int = 2000
    rate: float = 500.0                 # submissions per second (0 = as fast as possible)
    time_scale: float = 0.0001          # simulated seconds -> wall seconds
    exit_when_drained: bool = False
    json_path: Path | None = None
    nodes_csv: Path | None = None
    pods_csv: Path | None = None
    cell: str | None = None
    drain_timeout: float = 600.0
    quiet: bool = False                 # no live summary lines
    # Replaces the default workload (publish every task at ``rate``): called with the
    # producer's ``publish`` and ``send_raw`` and the tasks; must publish every task.
    workload: Callable[..., Any] | None = None
    # First port of the workers' /metrics (intake, scheduler, telemetry: this one and the next
    # two); 0: any free ports; None: no metrics servers.
    metrics_port: int | None = DEFAULT_METRICS_PORT
    # Seconds between the simulated nodes' metrics samples (NodeMetrics, ~380 series a node,
    # for the telemetry worker); 0: none (heartbeats still go every 5 s).
    metrics_interval_s: float = 15.0
    # Scheduler workers in the plane's consumer group (``worker_processes``): one cell lives on
    # one partition, so with one cell the others stand by and take over when its worker dies.
    schedulers: int = 1
    # Cells of the run: the node list and the tasks are dealt round-robin among them, one
    # simulated cluster (connector) per cell, and the cells spread over the cell log's
    # partitions (``cells_on_partitions``), so that several scheduler workers share them.
    cells: int = 1


WORKER_ROLES = ("intake", "scheduler", "telemetry")


def worker_processes(settings: Settings, metrics_ports: dict[str, int] | None = None, schedulers: int = 1
                     ) -> dict[str, tuple[ServiceProcess, list[str]]]:
    """The plane's processes: name -> (service handle, argv). ``metrics_ports``: role -> the port
    of its /metrics (none for a role not in it). ``schedulers``: how many scheduler workers
    share the cell log's partitions: ``scheduler``, then ``scheduler-2``, ... (only the first
    serves metrics on the scheduler's port)."""
    run, logs, ns = settings.home / "run", settings.home / "logs", settings.namespace
    py = sys.executable
    ports = metrics_ports or {}

    def svc(name: str, argv: list[str]) -> tuple[ServiceProcess, list[str]]:
        marker = _marker(ns)
        if name in ports:
            argv = [*argv, "--metrics-port", str(ports[name]), "--metrics-host", METRICS_HOST]
        return (ServiceProcess(name, run / f"{ns}-{name}.pid", logs / f"{ns}-{name}.log", marker),
                [py, "-X", marker, *argv])

    if schedulers < 1:
        raise StackError(f"a plane needs at least one scheduler worker, not {schedulers}")
    return {
        "intake": svc("intake", ["-m", "suanli.streams.worker", "intake"]),
        "scheduler": svc("scheduler", ["-m", "suanli.streams.worker", "scheduler"]),
        **{f"scheduler-{i}": svc(f"scheduler-{i}", ["-m", "suanli.streams.worker", "scheduler", "--instance", str(i)])
           for i in range(2, schedulers + 1)},
        # NodeMetrics -> NodeConditionChanged (changes only), back through intake
        "telemetry": svc("telemetry", ["-m", "suanli.streams.worker", "telemetry"]),
    }


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((METRICS_HOST, port))
        except OSError:
            return False
    return True


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((METRICS_HOST, 0))
        return int(sock.getsockname()[1])


def metrics_ports(base: int | None, roles: tuple[str, ...] = WORKER_ROLES) -> dict[str, int]:
    """The /metrics port of each role: ``base``, ``base + 1``, ... where free, else a free port
    (``base`` 0: free ports; None: no metrics, an empty dict)."""
    if base is None:
        return {}
    ports: dict[str, int] = {}
    for i, role in enumerate(roles):
        wanted = base + i if base else 0
        port = wanted if wanted and _port_free(wanted) else _free_port()
        while port in ports.values():
            port = _free_port()
        ports[role] = port
    return ports


def targets_name(settings: Settings) -> str:
    """The name of the plane's Prometheus target file (``<home>/prometheus/targets/<name>.json``)."""
    return f"plane-{settings.namespace}"


def _marker(namespace: str) -> str:
    # CPython accepts and ignores unknown -X options: a harmless tag in the command line
    # that tells our processes from any other process that inherits a recycled pid.
    return f"suanli-plane={namespace}"


def connector_process(settings: Settings, cell: str, nodes_csv: Path, time_scale: float,
                      metrics_interval_s: float = 15.0, instance: int = 1) -> tuple[ServiceProcess, list[str]]:
    """The simulated cluster of ``cell``: ``sim``, or ``sim-N`` for the Nth cell of a run."""
    ns = settings.namespace
    marker = _marker(ns)
    name = "sim" if instance == 1 else f"sim-{instance}"
    argv = [sys.executable, "-X", marker, "-m", "suanli.connectors", "sim", "--nodes", str(nodes_csv),
            "--cell", cell, "--time-scale", str(time_scale), "--interval", f"{metrics_interval_s:g}", "--heartbeat", "5",
            "--log-level", "WARNING"]
    return ServiceProcess(name, settings.home / "run" / f"{ns}-{name}.pid",
                          settings.home / "logs" / f"{ns}-{name}.log", marker), argv


ASSIGNED = re.compile(r"scheduler: cell-log partitions assigned: \[([\d, ]*)\]")


def held(service: ServiceProcess) -> set[int]:
    """The cell-log partitions a scheduler worker holds now: its log's last assignment line
    (Faust rebalances eagerly, so every assignment is the whole set); none once it died."""
    if service.pid() is None or not service.log_file.exists():
        return set()
    found = ASSIGNED.findall(service.log_file.read_text(errors="replace"))
    return {int(x) for x in re.findall(r"\d+", found[-1])} if found else set()


def settled(services: Iterable[ServiceProcess], count: int) -> dict[str, set[int]] | None:
    """The live workers' assignments once they split all ``count`` partitions among them
    (each holding at least one, or, with more workers than partitions, ``count`` of them
    holding one each), else None."""
    shares = {s.name: held(s) for s in services}
    parts = sorted(p for ps in shares.values() for p in ps)
    holders = sum(1 for ps in shares.values() if ps)
    return shares if parts == list(range(count)) and holders == min(count, len(shares)) else None


def deal_nodes(nodes_csv: Path, cells: int, out_dir: Path, stem: str) -> list[Path]:
    """The node list dealt round-robin into ``cells`` CSV files (header kept) in ``out_dir``."""
    with open(nodes_csv, newline="") as f:
        rows = list(csv.reader(f))
    header, body = rows[0], rows[1:]
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for i in range(cells):
        path = out_dir / f"{stem}-cell{i + 1}-nodes.csv"
        with open(path, "w", newline="") as f:
            csv.writer(f).writerows([header, *body[i::cells]])
        paths.append(path)
    return paths


class Plane:
    """One run of the local control plane (see the module docstring)."""

    def __init__(self, settings: Settings, options: PlaneOptions, out: Callable[[str], None] = print):
        self.s = settings
        self.o = options
        self.out = out
        self.run_id = time.strftime("r%m%d%H%M%S") + secrets.token_hex(2)
        if options.cells < 1:
            raise StackError("a run needs at least one cell")
        self.cell = options.cell or f"openb-{self.run_id}"
        self.cells = [self.cell]          # more than one: named in start(), once the partitions are known
        self.partitions = 0               # the cell log's, read in start() when there are several cells
        self.nodes_csv = options.nodes_csv or settings.openb_dir / "openb_node_list_all_node.csv"
        self.pods_csv = options.pods_csv or settings.openb_dir / "openb_pod_list_default.csv"
        self.created = time.monotonic()      # first_placement_s counts from here: the command's start
        self.started_stack = False
        self.services: list[tuple[ServiceProcess, list[str]]] = []
        self.restarts: dict[str, int] = {}
        self._env: dict[str, str] = {}
        self.metrics_ports: dict[str, int] = {}

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        from suanli.streams.kafka_io import end_offsets, ensure_topics
        from suanli.streams.topics import TopicNames, cells_on_partitions, core_topics

        for path in (self.nodes_csv, self.pods_csv):
            if not Path(path).exists():
                raise StackError(f"trace file {path} not found (set SUANLI_OPENB_DIR)")
        was_up = all(r["ready"] for r in stack.status(self.s))
        stack.up(self.s, log=self.out)
        self.started_stack = not was_up
        asyncio.run(ensure_topics(self.s.bootstrap_servers, core_topics(self.s.partitions, self.s.namespace)))
        self._env = to_env(self.s)
        self.metrics_ports = metrics_ports(self.o.metrics_port)
        connectors = [connector_process(self.s, self.cell, self.nodes_csv, self.o.time_scale,
                                        self.o.metrics_interval_s)]
        if self.o.cells > 1:
            partitions = self.partitions = len(asyncio.run(end_offsets(self.s.bootstrap_servers,
                                                                        TopicNames(self.s.namespace).cell_log)))
            if partitions < self.o.cells:
                self.out(f"suanli: the cell log of namespace {self.s.namespace} has {partitions} partitions, fewer "
                         f"than the {self.o.cells} cells: some cells share a partition (a fresh namespace with "
                         f"SUANLI_PARTITIONS={self.o.cells} gives each its own)")
            self.cells = cells_on_partitions(self.cell, self.o.cells, partitions)
            self.cell = self.cells[0]
            dealt = deal_nodes(self.nodes_csv, self.o.cells, self.s.home / "run", f"{self.s.namespace}-{self.run_id}")
            connectors = [connector_process(self.s, cell, path, self.o.time_scale, self.o.metrics_interval_s, i + 1)
                          for i, (cell, path) in enumerate(zip(self.cells, dealt))]
        for service, argv in [*worker_processes(self.s, self.metrics_ports, self.o.schedulers).values(),
                              *connectors]:
            if service.pid() is None:
                service.start(argv, env=self._env)
            self.services.append((service, argv))
        metrics = ""
        if self.metrics_ports:
            from suanli.deploy.prometheus import write_targets

            write_targets(self.s, targets_name(self.s),
                          {role: f"{METRICS_HOST}:{port}" for role, port in self.metrics_ports.items()})
            metrics = "; metrics on " + ", ".join(f"{role} {METRICS_HOST}:{port}"
                                                   for role, port in self.metrics_ports.items())
        where = f"cell {self.cell}" if len(self.cells) == 1 else f"{len(self.cells)} cells {', '.join(self.cells)}"
        self.out(f"suanli: run {self.run_id}: workers and simulated cluster starting in {where}; "
                 f"logs in {self.s.home / 'logs'}{metrics}")
        if len(self.cells) > 1 and self.o.schedulers > 1:
            self._wait_for_shares()

    def stop(self) -> None:
        for service, _argv in reversed(self.services):
            service.stop()
        self.services.clear()
        if self.metrics_ports:
            from suanli.deploy.prometheus import remove_targets

            remove_targets(self.s, targets_name(self.s))
        if self.started_stack:
            stack.down(self.s, log=lambda _m: None)

    def check_alive(self) -> None:
        """Supervise: restart a worker that died (its state comes back from the log).

        Gives up with the log tail when one service keeps dying (more than 20 restarts).
        """
        for service, argv in self.services:
            if service.pid() is None:
                count = self.restarts[service.name] = self.restarts.get(service.name, 0) + 1
                if count > 20:
                    raise StackError(f"{service.name} keeps exiting; last lines of {service.log_file}:\n"
                                     f"{service.log_tail()}")
                self.out(f"suanli: {service.name} exited; restarting it (restart {count})")
                service.start(argv, env=self._env)

    # ------------------------------------------------------------------ the run
    async def run(self) -> dict[str, Any]:
        from suanli.projections.lifecycle import LifecycleView
        from suanli.replay.driver import drive, openb_tasks
        from suanli.schemas.codec import Codec
        from suanli.schemas.registry import RegistryClient
        from suanli.streams.kafka_io import EventConsumer, EventProducer, wait_until_consumed
        from suanli.streams.topics import TopicNames

        names = TopicNames(self.s.namespace)
        began = time.monotonic()
        start_ms = int(time.time() * 1000)
        expected_nodes = sum(1 for _ in open(self.nodes_csv)) - 1
        tasks = openb_tasks(Path(self.pods_csv), self.o.tasks, run_id=self.run_id, cell=self.cell)
        for i, task in enumerate(tasks):                  # dealt round-robin, as the nodes are
            task["cell"] = self.cells[i % len(self.cells)]
        task_ids = {t["task_id"] for t in tasks}
        ours = set(self.cells)
        view = LifecycleView()
        first_placement: float | None = None
        with RegistryClient(self.s.registry_url) as registry:
            codec = Codec(registry)
            async with EventConsumer(self.s.bootstrap_servers, codec,
                                     [names.cell_log, names.decisions, names.dead_letters]) as consumer, \
                    EventProducer(self.s.bootstrap_servers, codec, namespace=self.s.namespace) as producer:
                batches = consumer.batches(timeout_ms=250, busy_min_bytes=self.s.fetch_busy_min_bytes)

                async def pump() -> None:
                    nonlocal first_placement
                    for r in await anext(batches):
                        if r.kind is None:
                            continue
                        if r.kind == "DeadLetter":
                            if r.timestamp >= start_ms:
                                view.apply(r.kind, r.payload)
                        elif r.payload.get("cell") in ours:
                            view.apply(r.kind, r.payload)
                            if r.kind == "TaskPlaced" and first_placement is None:
                                first_placement = time.monotonic() - self.created

                deadline = time.monotonic() + 180
                while sum(1 for (c, _n) in view.nodes if c in ours) < expected_nodes:
                    self.check_alive()
                    if time.monotonic() > deadline:
                        raise StackError(f"only {len(view.nodes)} of {expected_nodes} nodes registered after 180 s")
                    await pump()
                # Seen on the cell log is not applied: the scheduler may still be folding the
                # registrations (5,000 of them take it about a second). Work submitted meanwhile
                # would queue behind them, and a run's first seconds would measure that backlog.
                # Waited for in short rounds, so that a worker that dies meanwhile is restarted.
                while True:
                    try:
                        await wait_until_consumed(self.s.bootstrap_servers, names.worker_group("scheduler"),
                                                  [names.cell_log], timeout=5)
                        break
                    except StackError:
                        self.check_alive()
                        if time.monotonic() > deadline:
                            raise
                self.out(f"suanli: {expected_nodes} nodes registered and applied after "
                         f"{time.monotonic() - began:.1f}s; submitting {len(tasks)} tasks at {self.o.rate:g}/s")
                if self.o.workload is not None:
                    work = self.o.workload(producer.publish, producer.send_raw, tasks, names)
                else:
                    work = drive(producer.publish, tasks, self.o.rate)
                driver = asyncio.create_task(work)
                last_print = 0.0
                deadline = time.monotonic() + self.o.drain_timeout
                try:
                    while True:
                        await pump()
                        now = time.monotonic()
                        if now - last_print >= 1.0:
                            self.check_alive()
                            if self.o.quiet:
                                last_print = now
                                continue
                            self.out(self._summary_line(view, now - began, len(tasks)))
                            last_print = now
                        if driver.done():
                            driver.result()
                            if self.o.exit_when_drained and self._drained(view, task_ids):
                                break
                        if self.o.exit_when_drained and now > deadline:
                            raise StackError(f"not drained after {self.o.drain_timeout:.0f}s: "
                                             f"{len(view.undecided(task_ids))} tasks without a decision")
                finally:
                    driver.cancel()
                    with contextlib.suppress(asyncio.CancelledError, Exception):
                        await driver
                    await producer.flush()
            # Decided is not done: intake may still be writing dead letters for the last raw
            # inputs, and the scheduler for the last cell-log inputs (a status of a node the
            # cell never saw is refused there, UNKNOWN_NODE). Count only once intake has handled
            # every raw record written so far, and then the scheduler every cell-log record.
            await wait_until_consumed(self.s.bootstrap_servers, names.worker_group("intake"), names.raw)
            await wait_until_consumed(self.s.bootstrap_servers, names.worker_group("scheduler"), [names.cell_log])
            result = await self._final_figures(codec, names, task_ids, start_ms)
        if len(self.cells) > 1:
            result["cells"] = self.cells
        result.update(run_id=self.run_id, cell=self.cell, seconds=round(time.monotonic() - began, 2),
                      worker_restarts=dict(self.restarts),
                      first_placement_s=None if first_placement is None else round(first_placement, 2))
        return result

    def _wait_for_shares(self, timeout: float = 180.0) -> None:
        """At start, with several cells and workers: every scheduler worker has joined the group and they share the
        cell log's partitions (a worker still starting would otherwise get its cells only
        after a short run is over)."""
        from suanli.deploy.waiting import wait_for

        schedulers = [s for s, _ in self.services if s.name.startswith("scheduler")]
        partitions = self.partitions
        def shared() -> dict[str, set[int]] | None:
            self.check_alive()                  # a worker that died while joining is restarted
            return settled(schedulers, partitions)

        shares = wait_for(f"{len(schedulers)} scheduler workers to share the {partitions} cell-log partitions",
                          shared, timeout=timeout, every=0.5)
        self.out("suanli: scheduler workers share the cells' partitions: "
                 + ", ".join(f"{name} {sorted(parts)}" for name, parts in sorted(shares.items())))

    @staticmethod
    def _drained(view: Any, task_ids: set[str]) -> bool:
        return all((t := view.tasks.get(i)) is not None and t.status in DECIDED for i in task_ids)

    def _summary_line(self, view: Any, elapsed: float, total: int) -> str:
        c = view.counts()
        health = self._health(view)
        trouble = (f"  nodes suspect {health['SUSPECT']} down {health['DOWN']}  lost {c['lost']}"
                   if c["lost"] or health["SUSPECT"] or health["DOWN"] else "")
        return (f"[{elapsed:6.1f}s] submitted {c['submitted']}/{total}  placed {c['placed']}  "
                f"pending {c['pending']}  running {c['running']}  completed {c['completed']}  "
                f"GPU alloc {view.gpu_allocation_pct():5.1f}%  dead letters {c['dead_lettered']}{trouble}")

    def _health(self, view: Any) -> dict[str, int]:
        """Nodes per health over the run's cells."""
        out = {"READY": 0, "SUSPECT": 0, "DOWN": 0}
        for cell in self.cells:
            for health, n in view.health_counts(cell).items():
                out[health] = out.get(health, 0) + n
        return out

    async def _final_figures(self, codec: Any, names: Any, task_ids: set[str], start_ms: int) -> dict[str, Any]:
        """Recount from the log (cell log first, then decisions: see projections/reader.py)."""
        from suanli.projections.reader import load_lifecycle

        view = await load_lifecycle(self.s, cell=self.cells, since_ms=start_ms, codec=codec)
        statuses = [view.tasks[t].status if t in view.tasks else "SUBMITTED" for t in task_ids]
        return {
            "submitted": len(task_ids),
            "placed": sum(1 for t in task_ids if t in view.tasks and view.tasks[t].placed_once),
            "running": sum(statuses.count(s) for s in ("PLACED", "DISPATCHED", "RUNNING")),
            "completed": statuses.count("COMPLETED"),
            "failed": statuses.count("FAILED"),
            "pending": statuses.count("PENDING"),
            "unschedulable": statuses.count("UNSCHEDULABLE"),
            "dead_lettered": view.dead_letters,
            "capacity_violations": len(view.violations),
            "violations": view.violations[:20],
            # node health (NodeHealthChanged) and the tasks it cost (TaskLost: placed again later)
            "lost": view.lost,
            "lost_tasks": sum(1 for t in task_ids if t in view.tasks and view.tasks[t].lost),
            "stale_statuses": view.stale_statuses,
            "nodes_health": self._health(view),
            **({"placed_per_cell": {cell: sum(1 for t in task_ids if t in view.tasks and view.tasks[t].placed_once
                                              and view.tasks[t].cell == cell) for cell in self.cells}}
               if len(self.cells) > 1 else {}),
        }


def run_plane(settings: Settings, options: PlaneOptions, out: Callable[[str], None] = print) -> dict[str, Any]:
    """Start, run until drained (or Ctrl-C), stop everything; returns the figures."""
    plane = Plane(settings, options, out)
    try:
        plane.start()
        result = asyncio.run(plane.run())
    finally:
        plane.stop()
    if options.json_path is not None:
        options.json_path.write_text(json.dumps(result, indent=2) + "\n")
    return result
