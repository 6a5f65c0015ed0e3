"""Prometheus metrics of the plane's workers (intake, scheduler, telemetry) and of the API.

Every worker process keeps its metrics in a registry of its own (:class:`WorkerMetrics`, or
:class:`SchedulerMetrics` for the scheduler) and serves them in the text exposition format at
``http://127.0.0.1:PORT/metrics`` (:func:`serve`, prometheus-client's own HTTP server in a
daemon thread; Faust's web server stays off). ``python -m suanli.streams.worker ROLE
--metrics-port PORT`` starts it; ``suanli up`` (``deploy/plane.py``) gives each worker a port
and writes them into a Prometheus file-discovery target file (``deploy/prometheus.py``). The
API serves the same format at ``/metrics`` on its REST port (:func:`instrument_api`).

The hooks the workers call are cheap and run on the worker's event loop, between micro-batches:

- ``batch_done(events, outputs)`` after a batch's outputs are acknowledged by the broker: the
  records processed (and so the next offset of each partition), the records produced, the dead
  letters among them by reason, and (scheduler) the decision latency of the batch's decisions;
- the scheduler's :class:`~suanli.streams.cell_runner.CellRunner` calls
  :meth:`SchedulerMetrics.observe` with the typed decisions of each input (decision counts by cell
  and kind, sandbox fallbacks);
- a Faust timer (:meth:`WorkerMetrics.attach`, every ``REFRESH_SECONDS``) reads the end offsets
  of the worker's assigned partitions from the broker (consumer lag) and, in the scheduler,
  recomputes the gauges that fold the cells' state (queue depth per tier, GPUs by model, nodes by
  status and health). A scrape only reads what these left behind (no lock: each refresh swaps in
  a new dict), so it never races the event loop.

Metric names (all prefixed ``suanli_``; base units; counters end in ``_total``):

========================================================  =========================================
``suanli_worker_info{role,namespace}``                     1 per process: what it is
``suanli_records_processed_total{topic}``                  input records handled, by source topic
``suanli_records_produced_total{topic}``                   records produced (acknowledged), by topic
``suanli_consumer_lag_records{group,topic,partition}``     end offset minus the next offset to handle
``suanli_dead_letters_total{reason}``                      DeadLetters produced, by ``error_kind``
``suanli_decisions_total{cell,kind}``                      decisions produced (TaskPlaced, ...)
``suanli_decision_latency_seconds{kind}``                  histogram: input's log timestamp -> the
                                                           decision acknowledged by the broker
``suanli_sandbox_fallbacks_total{cell,strategy,fallback}`` decisions whose strategy failed in the
                                                           sandbox and fell back (the core's
                                                           ``fallback:`` note in the decision path)
``suanli_queue_depth{cell,tier}``                          queued tasks by QoS tier (GOLD/SILVER/BRONZE)
``suanli_gpu_allocated{cell,model}``                       GPUs allocated (fractions: 0.5 = half)
``suanli_gpu_capacity{cell,model}``                        GPUs registered
``suanli_nodes{cell,status,health}``                       nodes by status and heartbeat health
``suanli_cell_tasks{cell,held}``                           tasks in the cell's memory: ``kept`` (their
                                                           records), ``forgotten`` (tombstones of
                                                           finished tasks past the retention) and
                                                           ``past_clients`` (forgotten federated
                                                           clients whose ``ClientView`` it keeps)
``suanli_snapshot_age_seconds{partition}``                 since the partition's state was last
                                                           snapshotted (or restored) by this process
``suanli_snapshot_write_seconds``                          histogram: time to write one snapshot
``suanli_stalled_partitions``                              cell-log partitions of this scheduler with
                                                           records waiting and none applied between
                                                           its last two stall checks
``suanli_telemetry_samples_total``                         NodeMetrics evaluated (telemetry worker)
``suanli_condition_changes_total{condition}``              NodeConditionChanged produced, by condition
``suanli_api_requests_total{method,route,status}``         REST requests (API)
``suanli_api_request_duration_seconds{method,route}``      histogram: REST request handling time (API)
``suanli_api_read_model_tasks{held}``                      tasks in the API's read model: ``kept``,
                                                           ``finished`` (of those kept), ``forgotten``
``suanli_api_read_model_jobs{held}``                       jobs in it: ``kept``, ``forgotten`` (whole)
``suanli_api_read_model_decisions``                        decisions it keeps for the audit (API)
``suanli_api_read_model_orphan_statuses``                  statuses of tasks it does not know (yet),
                                                           waiting for the task (API)
``suanli_api_read_model_orphan_statuses_dropped_total``    such statuses dropped, the oldest beyond
                                                           the tasks it keeps them for (API)
========================================================  =========================================

plus prometheus-client's ``process_*`` and ``python_*`` collectors.
"""
from __future__ import annotations

import logging
import re
import threading
import time
import weakref
from collections import Counter as Tally
from typing import Any, Callable, Iterable, Iterator

from prometheus_client import (CollectorRegistry, Counter, Gauge, GCCollector, Histogram, PlatformCollector,
                               ProcessCollector, disable_created_metrics, start_http_server)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from suanli.streams.topics import TopicNames

log = logging.getLogger("suanli.streams.metrics")

REFRESH_SECONDS = 2.0         # consumer lag and state gauges
HOST = "127.0.0.1"
# 1 ms .. 60 s: a decision answers in milliseconds when the plane keeps up, seconds when it lags
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
TIERS = ("GOLD", "SILVER", "BRONZE")
FALLBACK = re.compile(r"^fallback: (?P<strategy>\S+) failed in the sandbox .* -> (?P<fallback>\S+)$")
COMMANDS = frozenset({"StopCommand", "DispatchCommand", "PrewarmCommand"})    # commands, not decisions
# DeadLetter.error_kind values (streams/intake.py, streams/cell_runner.py): counted from 0 so that
# rate() sees the first dead letter of each reason
DEAD_LETTER_REASONS = ("UNDECODABLE", "UNKNOWN_SCHEMA", "INVALID", "UNKNOWN_NODE")

_live: "weakref.WeakSet[Any]" = weakref.WeakSet()      # every metrics object of this process
_live_lock = threading.Lock()


class _Live(Collector):
    """Collects every live metrics object of the process: what :func:`serve` exposes."""

    def collect(self) -> Iterator[Any]:
        with _live_lock:
            members = list(_live)
        for member in members:
            yield from member.registry.collect()


def exposition_registry(own: CollectorRegistry | None = None) -> CollectorRegistry:
    """A registry with the process and Python collectors and ``own`` (default: every metrics
    object of this process)."""
    registry = CollectorRegistry()
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    GCCollector(registry=registry)
    registry.register(_Live() if own is None else own)
    return registry


def serve(port: int, host: str = HOST) -> int:
    """Serve ``/metrics`` of this process on ``host:port`` (0: any free port); returns the port.

    The process's counters and histograms are exposed without prometheus-client's ``*_created``
    series (one more series per label set that no rule here reads)."""
    disable_created_metrics()
    httpd, _thread = start_http_server(port, addr=host, registry=exposition_registry())
    return int(httpd.server_address[1])


def _register(member: Any) -> None:
    with _live_lock:
        _live.add(member)


class _FamilyCollector(Collector):
    """Yields the gauge families a callable builds at scrape time."""

    def __init__(self, build: Callable[[], Iterable[Any]]):
        self.build = build

    def collect(self) -> Iterator[Any]:
        yield from self.build()


# --------------------------------------------------------------------------- workers
class WorkerMetrics:
    """The metrics every worker has: records in and out, dead letters, consumer lag.

    ``codec`` decodes the DeadLetters among the outputs (their reason); ``topics`` are the
    topics the worker consumes (lag is reported for its assigned partitions of those)."""

    def __init__(self, role: str, namespace: str, codec: Any = None, topics: Iterable[str] = (),
                 group: str | None = None):
        self.role, self.namespace, self.codec = role, namespace, codec
        self.topics = frozenset(topics)
        names = TopicNames(namespace)
        self.group = group or names.worker_group(role)
        self.dead_letter_topic = names.dead_letters
        self.registry = CollectorRegistry()
        info = Gauge("suanli_worker_info", "One per worker process: its role and namespace.",
                     ["role", "namespace"], registry=self.registry)
        info.labels(role, namespace).set(1)
        self.processed = Counter("suanli_records_processed", "Input records handled, by source topic.",
                                 ["topic"], registry=self.registry)
        self.produced = Counter("suanli_records_produced",
                                "Records produced and acknowledged by the broker, by topic.", ["topic"],
                                registry=self.registry)
        self.dead_letters = Counter("suanli_dead_letters", "DeadLetters produced, by reason (error_kind).",
                                    ["reason"], registry=self.registry)
        for reason in DEAD_LETTER_REASONS:
            self.dead_letters.labels(reason)
        self.next_offset: dict[tuple[str, int], int] = {}      # (topic, partition) -> next offset to handle
        self._lag: dict[tuple[str, int], int] = {}
        self.registry.register(_FamilyCollector(self._lag_families))
        _register(self)

    # ------------------------------------------------------------------ hooks
    def batch_done(self, events: Iterable[Any], outputs: Iterable[Any]) -> None:
        """After a micro-batch's outputs were acknowledged: ``events`` are Faust events (or
        messages, or anything with ``topic``/``partition``/``offset``), ``outputs`` the
        :class:`~suanli.streams.records.OutRecord` produced."""
        counts: Tally[str] = Tally()
        for event in events:
            message = getattr(event, "message", event)
            self.next_offset[(message.topic, message.partition)] = message.offset + 1
            counts[message.topic] += 1
        for topic, n in counts.items():
            self.processed.labels(topic).inc(n)
        produced: Tally[str] = Tally()
        for record in outputs:
            produced[record.topic] += 1
            if record.topic == self.dead_letter_topic:
                self.dead_letters.labels(self._reason(record.value)).inc()
        for topic, n in produced.items():
            self.produced.labels(topic).inc(n)

    def _reason(self, value: bytes) -> str:
        if self.codec is None:
            return "UNKNOWN"
        try:
            kind, payload = self.codec.decode(value)
        except Exception:  # noqa: BLE001 - a metric must never stop a worker
            return "UNKNOWN"
        return str(payload.get("error_kind") or "UNKNOWN") if kind == "DeadLetter" else "UNKNOWN"

    # ------------------------------------------------------------------ consumer lag
    def set_lag(self, ends: dict[tuple[str, int], int], committed: dict[tuple[str, int], int | None]) -> None:
        """Lag of each partition in ``ends`` (end offsets): the end offset minus the next offset
        to handle (this process's own position when it has handled a record of the partition,
        else the group's committed offset; an empty partition has none to handle; any other
        partition with neither position is left out)."""
        lag = {}
        for tp, end in ends.items():
            position = self.next_offset.get(tp)
            known = committed.get(tp)
            if known is not None and (position is None or known > position):
                position = known
            if position is None and int(end) == 0:
                position = 0
            if position is not None:
                lag[tp] = max(0, int(end) - int(position))
        self._lag = lag

    def _lag_families(self) -> Iterator[Any]:
        family = GaugeMetricFamily("suanli_consumer_lag_records",
                                   "Records in an assigned partition not handled yet: end offset minus the next "
                                   "offset to handle.", labels=["group", "topic", "partition"])
        for (topic, partition), lag in sorted(self._lag.items()):
            family.add_metric([self.group, topic, str(partition)], lag)
        yield family

    async def sample_lag(self, app: Any) -> None:
        """Read the end offsets of the app's assigned partitions (of :attr:`topics`) from the broker."""
        consumer = app.consumer
        tps = [tp for tp in consumer.assignment() if tp.topic in self.topics]
        if not tps:
            self._lag = {}
            return
        ends = await consumer.highwaters(*tps)
        # Faust's view of the group's committed offsets (the next offset to read), loaded from the
        # broker at assignment and updated at each commit.
        committed_by_faust = getattr(consumer, "_committed_offset", {}) or {}
        committed = {(tp.topic, tp.partition): committed_by_faust.get(tp) for tp in tps}
        self.set_lag({(tp.topic, tp.partition): end for tp, end in ends.items() if end is not None}, committed)

    def refresh(self) -> None:
        """Recompute gauges folded from the worker's state (nothing for a plain worker)."""

    def attach(self, app: Any, interval: float = REFRESH_SECONDS) -> "WorkerMetrics":
        """Register a Faust timer on ``app`` that refreshes the lag and the state gauges."""

        async def suanli_metrics_refresh() -> None:
            try:
                self.refresh()
                await self.sample_lag(app)
            except Exception as exc:  # noqa: BLE001 - not started yet, a rebalance, a broker hiccup
                log.debug("metrics refresh: %s", exc)

        app.timer(interval=interval, name=f"suanli_metrics_refresh_{self.role}")(suanli_metrics_refresh)
        return self


# --------------------------------------------------------------------------- the scheduler
class SchedulerMetrics(WorkerMetrics):
    """The scheduler worker's metrics: the common ones, plus decisions, their latency, sandbox
    fallbacks, snapshots and the gauges folded from the cells' state (see the module docstring)."""

    def __init__(self, namespace: str, codec: Any = None, topics: Iterable[str] = (), group: str | None = None):
        super().__init__("scheduler", namespace, codec, topics, group)
        self.decisions = Counter("suanli_decisions", "Decisions produced, by cell and kind (TaskPlaced, ...).",
                                 ["cell", "kind"], registry=self.registry)
        self.latency = Histogram("suanli_decision_latency_seconds",
                                 "Wall time from the input record's cell-log timestamp (its arrival: the broker's append time) to the "
                                 "decision acknowledged by the broker, by decision kind.", ["kind"],
                                 buckets=LATENCY_BUCKETS, registry=self.registry)
        self.fallbacks = Counter("suanli_sandbox_fallbacks",
                                 "Decisions whose strategy failed in the sandbox and fell back to the cell "
                                 "policy's fallback strategy.", ["cell", "strategy", "fallback"],
                                 registry=self.registry)
        self.snapshot_write = Histogram("suanli_snapshot_write_seconds", "Time to write one partition snapshot.",
                                        buckets=(0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0),
                                        registry=self.registry)
        self.stalled = Gauge("suanli_stalled_partitions",
                             "Cell-log partitions of this worker that the last stall check found with records "
                             "waiting and none applied since the check before (streams/app.py warn_of_stalls).",
                             registry=self.registry)
        self.runner: Any = None
        self.pending: list[tuple[int, list[str]]] = []     # (input log ms, decision kinds) awaiting the ack
        self.snapshot_at: dict[int, float] = {}            # partition -> wall time of its last snapshot
        self._state: dict[str, dict[tuple[str, ...], float]] = {}
        self.registry.register(_FamilyCollector(self._state_families))

    def bind(self, runner: Any) -> "SchedulerMetrics":
        """Observe ``runner``'s decisions and fold its cells' state into the gauges."""
        self.runner = runner
        runner.observer = self.observe
        return self

    def observe(self, record: Any, cell: str, state: Any, decisions: list[Any]) -> None:
        """Called by the cell runner with the core's typed outputs for one input."""
        kinds = []
        for decision in decisions:
            kind = decision.KIND
            if kind in COMMANDS:
                continue
            kinds.append(kind)
            self.decisions.labels(cell, kind).inc()
            provenance = getattr(decision, "provenance", None)
            if provenance is None:
                continue
            for line in provenance.path:
                if line.startswith("fallback:"):
                    m = FALLBACK.match(line)
                    self.fallbacks.labels(cell, m["strategy"] if m else "?", m["fallback"] if m else "?").inc()
                    break
        if kinds:
            self.pending.append((int(record.timestamp or 0), kinds))

    def batch_done(self, events: Iterable[Any], outputs: Iterable[Any], acked_ms: float | None = None) -> None:
        super().batch_done(events, outputs)
        now = acked_ms if acked_ms is not None else time.time() * 1000
        for log_ms, kinds in self.pending:
            seconds = max(0.0, (now - log_ms) / 1000) if log_ms > 0 else None
            if seconds is None:
                continue
            for kind in kinds:
                self.latency.labels(kind).observe(seconds)
        self.pending.clear()

    def snapshot_saved(self, partition: int, seconds: float | None = None) -> None:
        """A snapshot of ``partition`` was written (``seconds``: how long it took) or restored."""
        self.snapshot_at[partition] = time.time()
        if seconds is not None:
            self.snapshot_write.observe(seconds)

    # ------------------------------------------------------------------ state gauges
    def refresh(self) -> None:
        if self.runner is None:
            return
        queue: dict[tuple[str, ...], float] = {}
        allocated: dict[tuple[str, ...], float] = {}
        capacity: dict[tuple[str, ...], float] = {}
        nodes: dict[tuple[str, ...], float] = {}
        tasks: dict[tuple[str, ...], float] = {}
        for part in list(self.runner.partitions.values()):
            for cell, state in list(part.cells.items()):
                fold_state(cell, state, queue, allocated, capacity, nodes)
                tasks[(cell, "kept")] = float(len(state.tasks))
                tasks[(cell, "forgotten")] = float(len(state.forgotten))
                tasks[(cell, "past_clients")] = float(sum(len(cs) for cs in state.past_clients.values()))
        self._state = {"queue": queue, "allocated": allocated, "capacity": capacity, "nodes": nodes, "tasks": tasks}

    def _state_families(self) -> Iterator[Any]:
        state = self._state
        specs = (("queue", "suanli_queue_depth", "Queued (pending) tasks, by cell and QoS tier.", ["cell", "tier"]),
                 ("allocated", "suanli_gpu_allocated", "GPUs allocated, by cell and GPU model (0.5 = half a GPU).",
                  ["cell", "model"]),
                 ("capacity", "suanli_gpu_capacity", "GPUs registered, by cell and GPU model.", ["cell", "model"]),
                 ("nodes", "suanli_nodes", "Registered nodes, by cell, status and heartbeat health.",
                  ["cell", "status", "health"]),
                 ("tasks", "suanli_cell_tasks", "Tasks in a cell's memory: kept (their records), forgotten "
                  "(tombstones of finished tasks past the policy's retention) and past_clients (of those, "
                  "federated clients whose job's later tasks still read what the cell kept of them).",
                  ["cell", "held"]))
        for key, name, doc, labels in specs:
            family = GaugeMetricFamily(name, doc, labels=labels)
            for label_values, value in sorted(state.get(key, {}).items()):
                family.add_metric(list(label_values), value)
            yield family
        age = GaugeMetricFamily("suanli_snapshot_age_seconds",
                                "Seconds since this process last wrote (or restored) the partition's snapshot.",
                                labels=["partition"])
        now = time.time()
        for partition, at in sorted(dict(self.snapshot_at).items()):
            age.add_metric([str(partition)], max(0.0, now - at))
        yield age


def fold_state(cell: str, state: Any, queue: dict, allocated: dict, capacity: dict, nodes: dict) -> None:
    """Add one cell's queue depth per tier, GPUs per model and nodes per status/health to the dicts."""
    import numpy as np

    from suanli.processors.model import GPU_MILLI

    tiers = Tally({tier: 0 for tier in TIERS})
    tasks = state.tasks
    for entry in state.queue:
        record = tasks.get(entry[-1])
        if record is not None:
            tiers[record.task.qos_tier] += 1
    for tier, n in tiers.items():
        queue[(cell, tier)] = float(n)
    if state.n_nodes:
        free = state.gpu_free
        used = np.where(free >= 0, GPU_MILLI - free, 0).sum(axis=1)
        for idx, model in enumerate(state.models):
            rows = state.model_idx == idx
            allocated[(cell, model)] = float(used[rows].sum()) / GPU_MILLI
            capacity[(cell, model)] = float(state.gpu_count[rows].sum())
        pairs = Tally(zip(state.node_status, state.health))
        for (status, health), n in pairs.items():
            nodes[(cell, status, health)] = float(n)


# --------------------------------------------------------------------------- telemetry
class TelemetryMetrics(WorkerMetrics):
    """The telemetry worker's metrics: the common ones, plus samples evaluated and condition changes."""

    def __init__(self, namespace: str, codec: Any = None, topics: Iterable[str] = (), group: str | None = None):
        super().__init__("telemetry", namespace, codec, topics, group)
        self.samples = Counter("suanli_telemetry_samples", "NodeMetrics samples evaluated.", registry=self.registry)
        self.changes = Counter("suanli_condition_changes", "NodeConditionChanged produced, by the new condition.",
                               ["condition"], registry=self.registry)


# --------------------------------------------------------------------------- the API
class ApiMetrics:
    """REST requests of the API process, by method, route template and status; with a read
    model, what it holds (read at scrape time: nothing is counted per record)."""

    def __init__(self, namespace: str, model: Any = None):
        self.registry = CollectorRegistry()
        info = Gauge("suanli_worker_info", "One per worker process: its role and namespace.",
                     ["role", "namespace"], registry=self.registry)
        info.labels("api", namespace).set(1)
        self.requests = Counter("suanli_api_requests", "REST requests answered, by method, route and status.",
                                ["method", "route", "status"], registry=self.registry)
        self.duration = Histogram("suanli_api_request_duration_seconds", "Time to answer a REST request.",
                                  ["method", "route"], registry=self.registry)
        if model is not None:
            self.registry.register(_FamilyCollector(lambda: read_model_families(model)))

    def count_refused(self, scope: dict, status: int) -> None:
        """Count a request that the API's limits answered (429, 413) before any route
        matched: route ``(limits)``, not timed."""
        self.requests.labels(scope.get("method", "?"), "(limits)", str(status)).inc()


def read_model_families(model: Any) -> list[GaugeMetricFamily]:
    """The gauges of an API read model (``api/readmodel.py`` ``ReadModel``): its tasks and jobs,
    kept and forgotten, the decisions it keeps, and the statuses of unknown tasks it holds
    and has dropped."""
    life = model.lifecycle
    tasks = GaugeMetricFamily("suanli_api_read_model_tasks",
                              "Tasks in the API's read model: kept (all), finished (of those kept) and "
                              "forgotten (tombstones of finished tasks past SUANLI_API_FINISHED_TASKS).",
                              labels=["held"])
    for held, value in (("kept", len(life.tasks)), ("finished", life.finished_held()),
                        ("forgotten", len(life.forgotten))):
        tasks.add_metric([held], value)
    jobs = GaugeMetricFamily("suanli_api_read_model_jobs",
                             "Jobs in the API's read model: kept, and forgotten whole (tombstones).", labels=["held"])
    jobs.add_metric(["kept"], len(life.jobs))
    jobs.add_metric(["forgotten"], len(life.forgotten_jobs))
    decisions = GaugeMetricFamily("suanli_api_read_model_decisions",
                                  "Decisions the API's read model keeps (as their records' bytes) for its tasks' audit.")
    decisions.add_metric([], sum(map(len, model.decisions.values())))
    orphans = GaugeMetricFamily("suanli_api_read_model_orphan_statuses",
                                "Connector statuses of tasks the API's read model does not know (yet), waiting "
                                "for the task's submission or decision.")
    orphans.add_metric([], life.orphans_held())
    dropped = CounterMetricFamily("suanli_api_read_model_orphan_statuses_dropped",
                                  "Statuses of unknown tasks dropped: the oldest tasks' beyond those it keeps "
                                  "them for (a status of a task never submitted, or submitted before its log's "
                                  "retention).")
    dropped.add_metric([], life.orphans_dropped)
    return [tasks, jobs, decisions, orphans, dropped]


def instrument_api(app: Any, namespace: str, model: Any = None) -> ApiMetrics:
    """Count and time every REST request of a FastAPI ``app`` and serve ``GET /metrics`` on it
    (the app's request metrics, the read model's gauges when ``model`` is given, and the
    process collectors; no token: it says nothing about any tenant's tasks)."""
    from starlette.responses import Response
    from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

    disable_created_metrics()
    metrics = ApiMetrics(namespace, model)
    registry = exposition_registry(metrics.registry)

    class _Timing:
        def __init__(self, inner: Any):
            self.inner = inner

        async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
            if scope.get("type") != "http":
                await self.inner(scope, receive, send)
                return
            status = {"code": 500}

            async def send_status(message: dict) -> None:
                if message.get("type") == "http.response.start":
                    status["code"] = message.get("status", 500)
                await send(message)

            began = time.perf_counter()
            try:
                await self.inner(scope, receive, send_status)
            finally:
                route = getattr(scope.get("route"), "path", None) or "(unmatched)"
                method = scope.get("method", "?")
                metrics.requests.labels(method, route, str(status["code"])).inc()
                metrics.duration.labels(method, route).observe(time.perf_counter() - began)

    async def prometheus_metrics(_request: Any) -> Response:
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    # a plain Starlette route: not an API operation (no OpenAPI entry, no gRPC twin)
    app.router.add_route("/metrics", prometheus_metrics, methods=["GET"], include_in_schema=False)
    app.add_middleware(_Timing)
    return metrics
