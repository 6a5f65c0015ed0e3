"""Stage breakdown of the end-to-end latency (issue 16): where a submission's time goes.

Per task of a measured phase, the bench reads the time at each boundary from what the
system itself records (no processor reads a clock for this; the workers are unchanged):

``sent``
    ``submitted_at`` of the TaskSubmitted payload, read back from the raw record: the
    driver's wall clock (``time.time()``, ms, truncated) just before it encodes the event
    and hands it to its producer (``replay/driver.drive``).
``raw``
    The raw record's Kafka timestamp on ``<ns>.raw.tasks``. Raw topics are created without a
    ``message.timestamp.type`` (``streams/kafka_io.ensure_topics``) on a broker that sets no
    ``log.message.timestamp.type`` (``deploy/kafka_broker.py``), so it is **CreateTime**: the
    *driver's producer's* clock when aiokafka appended the record to a batch in ``send()``,
    not the broker's. So producer -> raw topic is encoding plus the append only; the
    producer's linger (5 ms, ``EventProducer``), the produce request and the broker's write
    fall into the next stage. The type of every record read is checked and reported
    (``timestamp_types``); another type on a topic would change these meanings.
``acked`` (an aside, not a link of the chain)
    The driver's clock when the send's future resolved: the broker's acknowledgement
    (``acks=all``) as seen by the driver's event loop. Intake may fetch the record before
    that callback runs, so it is reported as send -> ack only.
``cell``
    The timestamp of intake's forwarded record on ``<ns>.cells``, which ``core_topics`` creates
    with **LogAppendTime**: the broker's clock when the record arrived in the cell log, after
    intake fetched the raw record, waited for its micro-batch (``take_events``: 2 ms after a
    quiet batch, 20 ms after a busy one, ``streams/batch_wait.py``), triaged it and sent it
    (at once, without its linger: ``streams/send_now.py``). raw -> cell log is the driver's
    linger + produce + broker + intake's fetch, micro-batch, triage and produce request. (A
    cell log created before 2026-12-05 has CreateTime: intake's producer's clock before its
    produce request, which then fell into the next stage; ``timestamp_types`` says which.)
``decision``
    CreateTime of the task's first decision on ``<ns>.decisions``: the scheduler's producer's
    clock when it was sent: as soon as its input was decided in a quiet micro-batch, after
    *every* input of a busy one (``streams/batch_wait.py``), and always before the broker's
    acknowledgement (its linger, 2 ms, and produce request
    fall into decisions topic -> read model). Only tasks whose first decision is
    TaskPlaced are measured; one answered TaskPending first waited in the queue for
    capacity (scheduling, not the pipeline) and is counted apart.
``applied``
    The bench process's clock when the real :class:`~suanli.api.readmodel.ReadModel`, fed by
    the real :class:`~suanli.api.readmodel.LogFollower` (as ``suanli api`` runs it: the
    namespace's topics, default poll), called its listeners after folding that TaskPlaced.
    It runs in the driver process, on the driver's event loop (beside the submissions and
    the plane's own follower, so their turns on the loop are in this stage too), started
    and caught up before the first submission.

The scheduler's own split of cell log -> decisions topic: the worker does not expose a
per-task "decided" time, only :class:`~suanli.streams.app.DecisionLatency` histograms
(``<home>/workers/<ns>/scheduler/latency.json``): for each cell-log input that yielded a
decision, the time from the input's cell-log timestamp (its arrival) to its micro-batch's start, to the core's
answer (``decided``) and to the broker's acknowledgement (``acked``), in 1 ms buckets. The
bench takes the difference of two of its writes around the phase's submissions (every
TaskSubmitted that phase's scheduler process answered, warm-up included) and reports
their percentiles (bucket lower bounds) beside the per-task stages; they are not
subtracted from per-task figures.

Clocks: every boundary is a ``CLOCK_REALTIME`` read on one machine, so differences across
processes are meaningful to the millisecond truncation. Per task the boundaries must be
non-decreasing within :data:`TOLERANCE_MS`; tasks that are not are counted and listed
(``order_violations``), never silently dropped. Percentiles are nearest-rank over the
tasks after the first 10 % of submissions (warm-up), as the whole-latency figure.
"""
from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Iterable

from suanli.streams.kafka_security import client_options
from suanli.config import Settings

__all__ = ["ASIDE", "BOUNDARIES", "STAGES", "StageProbe", "Stamped", "TaskTimes", "figures", "join",
           "markdown_rows", "order_violations", "percentile", "read_spans"]

BOUNDARIES = ("sent", "raw", "cell", "decision", "applied")
# (label, from boundary, to boundary): consecutive links of the chain, then the whole
STAGES: tuple[tuple[str, str, str], ...] = (
    ("producer -> raw topic", "sent", "raw"),
    ("raw topic -> cell log (intake)", "raw", "cell"),
    ("cell log -> decisions topic (scheduler)", "cell", "decision"),
    ("decisions topic -> read model", "decision", "applied"),
    ("submit -> read model (whole)", "sent", "applied"),
)
ASIDE = ("send -> raw record acknowledged to the driver", "sent", "acked")
# The scheduler's histogram stages (DecisionLatency) and how the report names them
SCHEDULER_SPLIT = (("start_ms", "cell log -> scheduler batch start"), ("decided_ms", "cell log -> decided"),
                   ("acked_ms", "cell log -> decisions acked"))
TOLERANCE_MS = 1.0           # integer-ms stamps (truncated) on one clock: one unit of slack
WARMUP = 0.1                 # the first 10 % of submissions by time are worker start-up
CREATE_TIME, LOG_APPEND_TIME = 0, 1


def percentile(values: list[float], pct: float) -> float:
    """Nearest-rank percentile (index rounded) of ``values``; NaN when empty."""
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    k = max(0, min(len(ordered) - 1, int(round(pct / 100 * (len(ordered) - 1)))))
    return ordered[k]


def spread(values: list[float], digits: int) -> dict[str, float]:
    """``count``, ``p50``, ``p90``, ``p99`` (:func:`percentile`) and ``max`` of ``values``,
    rounded to ``digits``: the latency summary of the single-consumer benches."""
    return {"count": len(values), **{f"p{p}": round(percentile(values, p), digits) for p in (50, 90, 99)},
            "max": round(max(values), digits)}


# --------------------------------------------------------------------------- joining the records
@dataclass(frozen=True)
class Stamped:
    """A decoded record with its Kafka timestamp (ms) and timestamp type (0 CreateTime, 1 LogAppendTime)."""

    topic: str
    kind: str
    payload: dict[str, Any]
    timestamp: int
    timestamp_type: int = CREATE_TIME


@dataclass
class TaskTimes:
    """The boundaries of one task (epoch ms; None: not seen). See the module docstring."""

    task_id: str
    sent: float | None = None
    raw: float | None = None
    acked: float | None = None
    cell: float | None = None
    decision: float | None = None
    first_decision: str | None = None          # kind of the first decision on the decisions topic
    applied: float | None = None
    applied_kind: str | None = None            # kind of the first decision the read model folded

    def get(self, boundary: str) -> float | None:
        return getattr(self, boundary)


def join(task_ids: Iterable[str], cell: str, raw: Iterable[Stamped], cell_log: Iterable[Stamped],
         decisions: Iterable[Stamped], acked: dict[str, float], applied: dict[str, tuple[str, float]]
         ) -> dict[str, TaskTimes]:
    """Per task of ``task_ids``, its boundaries from the records of its phase.

    ``raw``/``cell_log``/``decisions``: the records in offset order per partition (the first
    record per task counts: a redelivered duplicate says nothing new); ``acked``: task -> the
    driver's ack time; ``applied``: task -> (kind, time) of the first decision the read
    model folded. The decision boundary is set only when the first decision is TaskPlaced."""
    from suanli.processors.model import TASK_DECISION_KINDS

    out = {t: TaskTimes(t) for t in task_ids}
    for r in raw:
        t = out.get(r.payload.get("task_id", "")) if r.kind == "TaskSubmitted" else None
        if t is not None and t.raw is None:
            t.raw, t.sent = r.timestamp, r.payload["submitted_at"]
    for r in cell_log:
        if r.kind == "TaskSubmitted" and r.payload.get("cell") == cell:
            t = out.get(r.payload["task_id"])
            if t is not None and t.cell is None:
                t.cell = r.timestamp
    for r in decisions:
        if r.kind in TASK_DECISION_KINDS and r.payload.get("cell") == cell:
            t = out.get(r.payload["task_id"])
            if t is not None and t.first_decision is None:
                t.first_decision = r.kind
                if r.kind == "TaskPlaced":
                    t.decision = r.timestamp
    for task_id, at in acked.items():
        if task_id in out:
            out[task_id].acked = at
    for task_id, (kind, at) in applied.items():
        if task_id in out:
            t = out[task_id]
            t.applied_kind = kind
            if kind == "TaskPlaced":
                t.applied = at
    return out


def order_violations(times: Iterable[TaskTimes], tolerance_ms: float = TOLERANCE_MS) -> list[dict[str, Any]]:
    """Tasks whose boundaries (those present) decrease by more than ``tolerance_ms`` along the chain."""
    bad = []
    for t in times:
        seen = [(b, t.get(b)) for b in BOUNDARIES if t.get(b) is not None]
        for (a, x), (b, y) in zip(seen, seen[1:]):
            if y < x - tolerance_ms:
                bad.append({"task_id": t.task_id, "from": a, "to": b, "ms": round(y - x, 1)})
                break
    return bad


def _dist(values: list[float]) -> dict[str, Any]:
    return {"n": len(values), "p50": round(percentile(values, 50), 1), "p99": round(percentile(values, 99), 1)}


def figures(times: dict[str, TaskTimes], warmup: float = WARMUP) -> dict[str, Any]:
    """p50/p99 of every stage over the steady tasks (after the warm-up) whose first decision is
    TaskPlaced and whose every boundary was seen; the counts of the others; order violations."""
    seen = sorted((t for t in times.values() if t.sent is not None), key=lambda t: (t.sent, t.task_id))
    steady = seen[int(len(seen) * warmup):]
    placed = [t for t in steady if t.first_decision == "TaskPlaced"]
    complete = [t for t in placed if all(t.get(b) is not None for b in BOUNDARIES)]
    complete_ids = {t.task_id for t in complete}
    stages = []
    for label, a, b in (*STAGES, ASIDE):
        # the chain over the complete tasks; the ack aside over every steady task acknowledged
        values = [t.get(b) - t.get(a) for t in steady if t.get(a) is not None and t.get(b) is not None
                  and (b == "acked" or t.task_id in complete_ids)]
        stages.append({"stage": label, "from": a, "to": b, **_dist(values)})
    violations = order_violations(complete)
    return {
        "tasks": len(times), "warmup": len(seen) - len(steady), "measured": len(complete),
        "first_decision_not_placed": len(steady) - len(placed),
        "missing": {b: sum(1 for t in placed if t.get(b) is None) for b in BOUNDARIES},
        "read_model_disagrees": sum(1 for t in steady if t.applied_kind != t.first_decision),
        "stages": stages,
        "order_violations": len(violations), "order_violation_examples": violations[:5],
    }


def scheduler_split(window: dict[str, Any] | None) -> dict[str, Any]:
    """The scheduler's own figures for TaskSubmitted inputs from a ``worker_window`` of two
    latency.json writes (``bench/urgent_latency.py``); ``{"error": ...}`` when there is none."""
    if window is None or "error" in window:
        return {"error": (window or {}).get("error", "no scheduler latency window")}
    hist = window.get("task_submitted", {})
    out: dict[str, Any] = {"source": "DecisionLatency histograms (latency.json), 1 ms buckets, lower bounds",
                           "rows": []}
    for key, label in SCHEDULER_SPLIT:
        d = hist.get(key, {"count": 0})
        out["rows"].append({"stage": label, "n": d.get("count", 0), "p50": d.get("p50"), "p99": d.get("p99")})
    inb = hist.get("in_batch_ms", {"count": 0})
    out["rows"].append({"stage": "scheduler batch start -> decided", "n": inb.get("count", 0),
                        "p50": inb.get("p50"), "p99": inb.get("p99")})
    out["batches"] = window.get("batches")
    return out


# --------------------------------------------------------------------------- reading the topics
async def read_spans(bootstrap: str, spans: dict[tuple[str, int], tuple[int, int]],
                     timeout: float = 120.0) -> list[Any]:
    """The records of each ``(topic, partition)`` with ``start <= offset < end``, one consumer for
    all; stops when every partition's position has reached its end (not on silence)."""
    from aiokafka import AIOKafkaConsumer, TopicPartition

    wanted = {TopicPartition(t, p): (s, e) for (t, p), (s, e) in spans.items() if e > s}
    if not wanted:
        return []
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, **client_options(bootstrap), group_id=None, enable_auto_commit=False,
                                auto_offset_reset="earliest")
    await consumer.start()
    out: list[Any] = []
    try:
        consumer.assign(list(wanted))
        for tp, (start, _end) in wanted.items():
            consumer.seek(tp, start)
        pending = set(wanted)
        deadline = time.monotonic() + timeout
        while pending:
            if time.monotonic() > deadline:
                raise TimeoutError(f"could not read {sorted(map(str, pending))} up to their end offsets")
            fetched = await consumer.getmany(*pending, timeout_ms=1000, max_records=10000)
            for tp, records in fetched.items():
                end = wanted[tp][1]
                out.extend(r for r in records if r.offset < end)
            for tp in list(pending):
                if await consumer.position(tp) >= wanted[tp][1]:
                    pending.discard(tp)
        return out
    finally:
        await consumer.stop()


async def topic_ends(bootstrap: str, topics: Iterable[str]) -> dict[tuple[str, int], int]:
    """``{(topic, partition): end offset}`` of ``topics``."""
    from suanli.streams.kafka_io import end_offsets

    out = {}
    for topic in topics:
        for partition, end in (await end_offsets(bootstrap, topic)).items():
            out[(topic, partition)] = end
    return out


def decode(codec: Any, records: Iterable[Any], keep: Callable[[Any], bool]) -> list[Stamped]:
    """Decode the records ``keep`` accepts (a cheap test on key/topic first); undecodable ones are skipped
    (intake dead-letters them; they carry no task boundary)."""
    from suanli.errors import DecodeError

    out = []
    for r in records:
        if not keep(r):
            continue
        try:
            kind, payload = codec.decode(r.value, topic=r.topic, partition=r.partition, offset=r.offset)
        except DecodeError:
            continue
        out.append(Stamped(r.topic, kind, payload, int(r.timestamp), int(r.timestamp_type)))
    return out


# --------------------------------------------------------------------------- the measured phase
class StageProbe:
    """The workload of a measured phase (``PlaneOptions.workload``) and what it observed.

    Contract: :meth:`workload` returns the coroutine the plane runs once the nodes are
    registered. It notes the end offsets of the raw tasks, cell log and decisions topics
    (the phase's records come after them), starts a :class:`LogFollower` and waits until it
    has caught up, takes a scheduler latency write, publishes every task at ``rate`` with
    ``replay.driver.drive`` (noting each send's acknowledgement), then waits -- on
    conditions, each bounded by ``timeout`` -- until the read model has folded a decision
    for every task and the scheduler has written a histogram counting every submission;
    then stops the follower. :meth:`collect` (after the plane's run) reads the three topics
    up to their end offsets and returns :func:`figures` and the scheduler's split.
    """

    def __init__(self, settings: Settings, rate: float, timeout: float = 300.0):
        self.settings = settings
        self.rate = rate
        self.timeout = timeout
        self.task_ids: set[str] = set()
        self.cell = ""
        self.starts: dict[tuple[str, int], int] = {}
        self.acked: dict[str, float] = {}
        self.applied: dict[str, tuple[str, float]] = {}
        self.latency_window: dict[str, Any] | None = None
        self.notes: list[str] = []
        self._all_folded: asyncio.Event | None = None

    def workload(self, publish: Callable[..., Awaitable[Any]], _send_raw: Any, tasks: list[dict[str, Any]],
                 names: Any) -> Awaitable[None]:
        return self._run(publish, tasks, names)

    def _on_fold(self, role: str, kind: str, payload: dict[str, Any], *_coords: Any) -> None:
        # ReadModel listener: runs right after the record is folded, on the follower's loop.
        from suanli.processors.model import TASK_DECISION_KINDS

        if role != "decisions" or kind not in TASK_DECISION_KINDS:
            return
        task_id = payload.get("task_id")
        if task_id in self.task_ids and task_id not in self.applied:
            self.applied[task_id] = (kind, time.time() * 1000)
            if len(self.applied) == len(self.task_ids) and self._all_folded is not None:
                self._all_folded.set()

    def _on_ack(self, task_id: str, future: asyncio.Future) -> None:
        if not future.cancelled() and future.exception() is None:
            self.acked[task_id] = time.time() * 1000

    async def _run(self, publish: Callable[..., Awaitable[Any]], tasks: list[dict[str, Any]], names: Any) -> None:
        from suanli.api.readmodel import LogFollower
        from suanli.bench.urgent_latency import fresh_latency, worker_window
        from suanli.replay.driver import drive
        from suanli.schemas.codec import Codec
        from suanli.schemas.registry import RegistryClient
        from suanli.streams.app import latency_path

        s = self.settings
        self.task_ids = {t["task_id"] for t in tasks}
        self.cell = tasks[0]["cell"] if tasks else ""
        self._all_folded = asyncio.Event()
        self.starts = await topic_ends(s.bootstrap_servers, (names.raw_tasks, names.cell_log, names.decisions))
        path = latency_path(s)

        async def recording(kind: str, payload: dict[str, Any]) -> Any:
            future = await publish(kind, payload)
            future.add_done_callback(lambda f, t=payload["task_id"]: self._on_ack(t, f))
            return future

        with RegistryClient(s.registry_url) as registry:
            follower = LogFollower(s, Codec(registry))
            follower.model.listeners.append(self._on_fold)
            await follower.start()
            try:
                await follower.wait_ready(self.timeout)
                try:
                    before: dict[str, Any] | None = await fresh_latency(path, int(time.time() * 1000))
                except TimeoutError as exc:     # no split then, but the per-task stages still stand
                    before, self.latency_window = None, {"error": str(exc)}
                await drive(recording, tasks, self.rate)
                try:
                    await asyncio.wait_for(self._all_folded.wait(), self.timeout)
                except TimeoutError:
                    self.notes.append(f"read model folded a decision for {len(self.applied)} of "
                                      f"{len(self.task_ids)} tasks within {self.timeout:.0f} s")
                if before is not None:
                    try:
                        self.latency_window = worker_window(before, await self._latency_counting(path, before))
                    except (RuntimeError, TimeoutError) as exc:     # a restarted or silent scheduler
                        self.latency_window = {"error": str(exc)}
            finally:
                await follower.stop()

    async def _latency_counting(self, path: Any, before: dict[str, Any]) -> dict[str, Any]:
        """The first scheduler write (after now) whose TaskSubmitted count since ``before`` covers
        every task: each submission is answered once (TaskPlaced, TaskPending, ...). Bounded: after
        a few writes without it, the last one, with a note."""
        from suanli.bench.urgent_latency import fresh_latency
        from suanli.streams.app import LATENCY_SECONDS

        def counted(w: dict[str, Any]) -> int:
            def n(doc: dict[str, Any]) -> int:
                return sum(doc.get("kinds", {}).get("TaskSubmitted", {}).get("decided_ms", {}).values())
            return n(w) - (n(before) if w.get("pid") == before.get("pid") else 0)

        deadline = time.monotonic() + 5 * LATENCY_SECONDS + 5
        latest = await fresh_latency(path, int(time.time() * 1000))
        while counted(latest) < len(self.task_ids) and time.monotonic() < deadline:
            latest = await fresh_latency(path, int(latest["updated_ms"]))
        if counted(latest) < len(self.task_ids):
            self.notes.append(f"the scheduler's histogram counted {counted(latest)} of {len(self.task_ids)} "
                              "submissions")
        return latest

    async def collect(self) -> dict[str, Any]:
        """Read the phase's records (from the noted offsets up to the end offsets) and compute."""
        from suanli.schemas.codec import Codec
        from suanli.schemas.registry import RegistryClient
        from suanli.streams.topics import TopicNames

        s = self.settings
        names = TopicNames(s.namespace)
        topics = (names.raw_tasks, names.cell_log, names.decisions)
        ends = await topic_ends(s.bootstrap_servers, topics)
        spans = {tp: (self.starts.get(tp, 0), end) for tp, end in ends.items()}
        records = await read_spans(s.bootstrap_servers, spans)
        ids = {t.encode() for t in self.task_ids}
        cell_key = self.cell.encode()
        # raw tasks are keyed by task id, the cell log and decisions by cell: filter before decoding
        with RegistryClient(s.registry_url) as registry:
            stamped = decode(Codec(registry), records,
                             lambda r: r.key in ids if r.topic == names.raw_tasks else r.key == cell_key)
        by_topic: dict[str, list[Stamped]] = {t: [] for t in topics}
        for r in stamped:
            by_topic[r.topic].append(r)
        times = join(self.task_ids, self.cell, by_topic[names.raw_tasks], by_topic[names.cell_log],
                     by_topic[names.decisions], self.acked, self.applied)
        out = figures(times)
        out["timestamp_types"] = {role: sorted({"CreateTime" if r.timestamp_type == CREATE_TIME else "LogAppendTime"
                                                for r in by_topic[topic]})
                                  for role, topic in (("raw", names.raw_tasks), ("cell_log", names.cell_log),
                                                      ("decisions", names.decisions))}
        out["scheduler"] = scheduler_split(self.latency_window)
        out["notes"] = self.notes
        return out


def markdown_rows(e2e: dict[str, Any], phases: tuple[str, ...] = ("low_load", "half_load")) -> list[str]:
    """Table rows: one per stage, p50 / p99 (ms) of each measured phase side by side."""
    present = [e2e[p] for p in phases if isinstance(e2e.get(p), dict) and "stages" in e2e[p]]
    if not present:
        return []
    at = "; ".join(f"{p['offered_rate']:g}/s" for p in present)
    rows = []
    labels = [s["stage"] for s in present[0]["stages"]["stages"]]
    for i, label in enumerate(labels):
        cells = "; ".join(f"{p['stages']['stages'][i]['p50']} / {p['stages']['stages'][i]['p99']}" for p in present)
        rows.append(f"| E2E stage {label}: p50 / p99 ms at {at} offered | {cells} | |")
    split_labels = [r["stage"] for r in present[0]["stages"]["scheduler"].get("rows", [])]
    for i, label in enumerate(split_labels):
        cells = "; ".join(f"{p['stages']['scheduler']['rows'][i]['p50']} / {p['stages']['scheduler']['rows'][i]['p99']}"
                          if "rows" in p["stages"]["scheduler"] else "n/a" for p in present)
        rows.append(f"| E2E scheduler's own {label} (histogram): p50 / p99 ms at {at} offered | {cells} | |")
    return rows


def missing_figures(e2e: dict[str, Any], phases: tuple[str, ...] = ("low_load", "half_load")) -> list[str]:
    """Stage figures not produced (NaN or no tasks measured), for ``suite.check_complete``."""
    out = []
    for p in phases:
        st = (e2e.get(p) or {}).get("stages")
        if not st:
            out.append(f"e2e stages ({p})")
            continue
        if any(s["n"] == 0 or s["p50"] != s["p50"] or s["p99"] != s["p99"] for s in st["stages"]):
            out.append(f"e2e stage latencies ({p})")
        if "rows" not in st["scheduler"] or any(r["p50"] is None for r in st["scheduler"]["rows"]):
            out.append(f"e2e scheduler split ({p})")
    return out
