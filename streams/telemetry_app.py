"""The telemetry worker: every NodeMetrics in at full rate, only condition changes out.

``telemetry``  raw.nodes (NodeMetrics) -> processors.telemetry.observe -> NodeConditionChanged -> raw.nodes

It consumes the raw nodes topic (``TopicNames.raw_nodes``) and skips every other kind on it
(registrations, heartbeats, status changes, its own condition changes), telling them apart
by schema id alone (``Codec.kind_of``). It owns NodeMetrics: intake skips them undecoded
(at 5,000 nodes they are a few hundred records a second of ~14 KB each, about 1 ms each to
decode and validate), so a NodeMetrics that does not decode or validate is dead-lettered
here, with intake's reasons (UNDECODABLE, INVALID). For each sample it
loads the node's :class:`~suanli.processors.telemetry.NodeTelemetry`, applies the pure
evaluator and stores the node's row in the RocksDB-backed Faust table ``node-telemetry``
(changelogged, so a restarted worker gets it back before it consumes). A row
(:func:`pack_row` / :func:`unpack_row`) holds

- the evaluator's state (condition, hysteresis flags, the counters rates are taken from, the
  last change) as JSON, and
- the node's latest NodeMetrics, its producer's bytes (Confluent wire format: any reader
  decodes them with the codec) compressed with zlib level 1: 23 KB of an 8-GPU node's sample
  become 5 KB (64 us), which is what the changelog, RocksDB and the broker then carry.

One row per node, not a table for each half: every table write is a changelog message that
Faust produces one at a time, and at 100 samples/s that halves the worker's Kafka traffic.

**Where changes go.** A ``NodeConditionChanged`` is produced to the raw nodes topic keyed by
node id, like every other fact about a node, and *intake* forwards it to the cell log keyed by
cell. So intake stays the one writer of the cell log (architecture invariant 3): it decodes
and validates the change like any producer's record, dead-letters it if bad, and the change
is ordered in the cell log with the node's registration, heartbeats and statuses. The cost
is one more hop (tens of ms) on a path that fires only when a condition changes.

**Thresholds.** :class:`~suanli.processors.telemetry.TelemetryArgs` defaults, replaced per cell by
the ``telemetry`` object of that cell's latest PolicyChanged on the raw policy topic, read
without a consumer group from the beginning at start and followed after that. Only
policies the core accepts are followed (``thresholds_of`` runs ``validate_policy``), so the
worker and the scheduler always agree on the policy a cell has; today the strategies' common
arguments have no ``telemetry`` key, so a policy carrying one is refused by both and the
defaults apply until the core accepts the key.

**Delivery.** Like the other workers: micro-batches, every output produced and acknowledged by
the broker before the batch's offsets are acked. A redelivered sample is no newer than the
stored state: it changes nothing, and if it is the sample that made the last change, that
change is produced again with the same event id (the core applies a condition idempotently).

**Figures** for ``bench/telemetry.py``: every ``STATS_SECONDS`` the worker writes
``<home>/workers/<namespace>/telemetry/stats.json``: records and samples (typed fields + extended
series) ingested, changes produced, and a histogram of the lag from a sample's ``at`` to the
moment its batch's outputs were acknowledged (10 ms buckets).
"""
from __future__ import annotations

import asyncio
import json
import logging
import os
import time
import weakref
import zlib
from pathlib import Path
from typing import Any

import faust
from faust.streams import _current_event

from suanli.config import Settings
from suanli.errors import DecodeError
from suanli.processors import model as m
from suanli.processors.telemetry import DEFAULTS, NodeTelemetry, TelemetryArgs, observe, thresholds_of
from suanli.schemas.codec import Codec
from suanli.schemas.models import validate_event
from suanli.schemas.registry import RegistryClient
from suanli.streams.app import BATCH_WITHIN, _produce_all, _raw, make_app
from suanli.streams.batch_wait import MARKER, BatchWait
from suanli.streams.intake import dead_letter
from suanli.streams.metrics import TelemetryMetrics
from suanli.streams.raw_schema import RawSchema
from suanli.streams.records import OutRecord
from suanli.streams.topics import TopicNames

log = logging.getLogger("suanli.streams.telemetry")

STATS_SECONDS = 2.0
LAG_BUCKET_MS = 10
TYPED_SCALARS = 7          # cpu_util, memory_used_mib, load1, disk_iops, net_rx_mbps, net_tx_mbps, power_w
POLICY_WAIT_S = 10.0       # how long the first batch waits for the policies already on the log
TELEMETRY_BATCH = 250      # events per micro-batch: a sample's lag counts to the end of its batch, and a batch
                           # with no condition change costs nothing to close, so small batches are cheap


ROW_MAGIC = b"T1"


def pack_row(state: NodeTelemetry, metrics: bytes) -> bytes:
    """A ``node-telemetry`` table row: magic, state JSON length (4 bytes), state JSON, zlib(metrics)."""
    body = state.to_json()
    return ROW_MAGIC + len(body).to_bytes(4, "big") + body + zlib.compress(metrics, 1)


def unpack_state(row: bytes) -> NodeTelemetry:
    """The evaluator state of a row (the metrics are not decompressed)."""
    if row[:2] != ROW_MAGIC:
        raise ValueError("not a node-telemetry row")
    n = int.from_bytes(row[2:6], "big")
    return NodeTelemetry.from_json(row[6:6 + n])


def unpack_row(row: bytes) -> tuple[NodeTelemetry, bytes]:
    """``(state, latest NodeMetrics bytes)`` of a row."""
    n = int.from_bytes(row[2:6], "big")
    return unpack_state(row), zlib.decompress(row[6 + n:])


class TelemetryStats:
    """Cumulative figures of one worker process, written as JSON for the bench."""

    def __init__(self, path: Path):
        self.path = path
        self.started_ms = int(time.time() * 1000)
        self.records = self.samples = self.changes = self.skipped = 0
        self.lag: dict[int, int] = {}
        self.written = 0.0

    def record(self, now_ms: int, done: list[tuple[int, int]], changes: int) -> None:
        for at, samples in done:
            self.records += 1
            self.samples += samples
            bucket = max(0, now_ms - at) // LAG_BUCKET_MS * LAG_BUCKET_MS
            self.lag[bucket] = self.lag.get(bucket, 0) + 1
        self.changes += changes

    def maybe_write(self) -> None:
        if time.monotonic() - self.written >= STATS_SECONDS:
            self.write()

    def write(self) -> None:
        self.written = time.monotonic()
        body = {"pid": os.getpid(), "started_ms": self.started_ms, "updated_ms": int(time.time() * 1000),
                "records": self.records, "samples": self.samples, "changes": self.changes, "skipped": self.skipped,
                "lag_bucket_ms": LAG_BUCKET_MS, "lag_ms": {str(k): v for k, v in sorted(self.lag.items())}}
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(body))
        tmp.replace(self.path)


def stats_path(settings: Settings) -> Path:
    return settings.home / "workers" / settings.namespace / "telemetry" / "stats.json"


class PolicyThresholds:
    """The telemetry thresholds of each cell, from the PolicyChanged records on the raw policy topic."""

    def __init__(self, settings: Settings, codec: Codec, topics: TopicNames):
        self.settings, self.codec, self.topics = settings, codec, topics
        self.by_cell: dict[str, TelemetryArgs] = {}
        self.ready = asyncio.Event()

    def args(self, cell: str) -> TelemetryArgs:
        return self.by_cell.get(cell, DEFAULTS)

    def apply(self, kind: str | None, payload: dict[str, Any] | None) -> None:
        if kind != "PolicyChanged" or payload is None:
            return
        policy = m.from_avro("PolicyChanged", payload)
        args = thresholds_of(policy)
        if args is None:
            log.warning("telemetry: policy %s of cell %s refused; the cell keeps its thresholds",
                        policy.event_id, policy.cell)
            return
        self.by_cell[policy.cell] = args

    async def follow(self) -> None:
        """Read the policies already on the log (then ``ready``), then follow new ones. Each
        (re)start reads the topic from the beginning, without a consumer group: policies are few."""
        from suanli.streams.kafka_io import EventConsumer

        while True:
            try:
                async with EventConsumer(self.settings.bootstrap_servers, self.codec,
                                         [self.topics.raw_policy]) as consumer:
                    for r in await consumer.read_until_end():
                        self.apply(r.kind, r.payload)
                    self.ready.set()
                    async for batch in consumer.batches(timeout_ms=1000):
                        for r in batch:
                            self.apply(r.kind, r.payload)
            except asyncio.CancelledError:
                raise
            except Exception:  # noqa: BLE001 - thresholds must not stop the metrics
                log.exception("telemetry: reading the policies failed; retrying in 5 s")
                self.ready.set()
                await asyncio.sleep(5)


def build_telemetry(settings: Settings, instance: int = 1) -> faust.App:
    app = make_app("telemetry", settings, instance)
    codec = Codec(RegistryClient(settings.registry_url))
    topics = TopicNames(settings.namespace)
    raw_nodes = app.topic(topics.raw_nodes, schema=RawSchema(), partitions=settings.partitions)
    rows = app.Table("node-telemetry", key_type=str, value_type=bytes, partitions=settings.partitions)
    policies = PolicyThresholds(settings, codec, topics)
    stats = TelemetryStats(stats_path(settings))
    metrics = TelemetryMetrics(settings.namespace, codec, [topics.raw_nodes]).attach(app)
    codec.schema_id("NodeConditionChanged")        # registered before the first change, not in the hot path

    def evaluate(event: Any, sample: m.NodeMetrics, value: bytes) -> m.NodeConditionChanged | None:
        # Faust writes a table row to the partition of the "current event"; point it at this one.
        token = _current_event.set(weakref.ref(event))
        try:
            stored = rows.get(sample.node_id)
            state = unpack_state(stored) if stored else None
            new, change = observe(state, sample, policies.args(sample.cell))
            if new is not state:
                rows[sample.node_id] = pack_row(new, value)
            return change
        finally:
            _current_event.reset(token)

    @app.agent(raw_nodes, name="telemetry")
    async def telemetry(stream: faust.StreamT) -> None:
        try:
            await asyncio.wait_for(policies.ready.wait(), POLICY_WAIT_S)
        except asyncio.TimeoutError:
            log.warning("telemetry: policies not read within %.0f s; default thresholds meanwhile", POLICY_WAIT_S)
        # a fixed window (BATCH_WITHIN), opened by a batch's first record: an idle stream sleeps
        # instead of waking every window to find nothing (streams/batch_wait.py)
        BatchWait(idle_s=BATCH_WITHIN, busy_s=BATCH_WITHIN).attach(stream)
        async for events in stream.take_events(TELEMETRY_BATCH, within=MARKER):
            outputs: list[OutRecord] = []
            done: list[tuple[int, int]] = []
            for event in events:
                if codec.kind_of(event.message.value) != "NodeMetrics":
                    continue                      # heartbeats, registrations, our own changes, bad bytes
                record = _raw(event.message)
                # this worker owns NodeMetrics (intake skips them undecoded): bad ones are
                # dead-lettered here, with intake's reasons
                try:
                    kind, payload = codec.decode(record.value, topic=record.topic, partition=record.partition,
                                                 offset=record.offset)
                except DecodeError as exc:
                    stats.skipped += 1
                    outputs.append(dead_letter(codec, record, topics, "UNDECODABLE", str(exc), exc.schema_id))
                    continue
                problem = validate_event(kind, payload)
                if problem is not None:
                    stats.skipped += 1
                    outputs.append(dead_letter(codec, record, topics, "INVALID",
                                               f"{problem} (at {record.topic}[{record.partition}]@{record.offset})"))
                    continue
                sample = m.from_avro("NodeMetrics", payload)
                change = evaluate(event, sample, bytes(record.value))
                if change is not None:
                    outputs.append(OutRecord(topics.raw_nodes, change.node_id.encode(),
                                             codec.encode("NodeConditionChanged", m.to_avro(change))))
                done.append((sample.at, TYPED_SCALARS + 2 * len(sample.gpu_util) + len(sample.extended)))
            await _produce_all(app, outputs)
            metrics.samples.inc(len(done))
            for record in outputs:
                if record.topic == topics.raw_nodes:                 # rare: changes only
                    metrics.changes.labels(codec.decode(record.value)[1]["condition"]).inc()
            metrics.batch_done(events, outputs)
            stats.record(int(time.time() * 1000), done, len(outputs))
            stats.maybe_write()

    @app.task
    async def follow_policies() -> None:
        await policies.follow()

    @app.timer(interval=STATS_SECONDS)
    async def write_stats() -> None:
        stats.maybe_write()

    return app
