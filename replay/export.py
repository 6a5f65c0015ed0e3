"""``suanli export``: a cell's input log and decisions, from Kafka into a log directory.

Range: ``[from_offset, to_offset)`` of the cell log partition that holds the cell, or the
offsets of ``[since, until)`` (record timestamps, via the broker's time index), or the
whole log. Inputs are the records of that range keyed by the cell (a partition can carry
several cells). Decisions are the decisions-topic records keyed by the cell whose
provenance input position lies in the range, in decisions-topic order, redelivered
duplicates included (``--verify`` drops them). When the range starts after the first
record of the cell, its earlier records are stored too (``prefix.avro``): a replay
re-applies them silently to rebuild the state (see ``logdir.py`` for why not a snapshot).

Export a range after the scheduler has decided it: decisions not yet on the topic are
missing from the directory, and a verify would report them.

Only :func:`export_cell` talks to Kafka, and it imports aiokafka when called: importing
this module (``build_logdir``, used by tests and tools) needs no broker and no Kafka client.
"""
from __future__ import annotations

import datetime as dt
import time
from pathlib import Path
from typing import Any

from suanli.streams.kafka_security import client_options
from suanli.config import Settings
from suanli.errors import ReplayError
from suanli.processors.state import CellState
from suanli.schemas.codec import Codec
from suanli.schemas.registry import RegistryClient
from suanli.streams.cell_runner import CellRunner
from suanli.streams.records import RawRecord
from suanli.streams.topics import TopicNames

from .logdir import schema_ids, write_logdir
from .progress import Progress
from .strategy_config import explicit

DECISION_SLACK_MS = 60_000   # decisions are read from this long before the first input


def parse_time(text: str) -> int:
    """Epoch milliseconds from ISO-8601 (``2026-05-01T12:00:00Z``) or an integer (ms)."""
    text = text.strip()
    if text.lstrip("-").isdigit():
        return int(text)
    try:
        t = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ReplayError(f"{text!r} is neither epoch milliseconds nor an ISO-8601 time") from None
    if t.tzinfo is None:
        t = t.replace(tzinfo=dt.timezone.utc)
    return int(t.timestamp() * 1000)


def _raw(r: Any) -> RawRecord:
    return RawRecord(r.topic, r.partition, r.offset, r.timestamp, r.key, r.value)


class _Offsets:
    """Beginning/end/time-index offsets of one topic (a short-lived consumer)."""

    def __init__(self, bootstrap: str):
        from aiokafka import AIOKafkaConsumer, TopicPartition  # Kafka only when exporting

        self.c = AIOKafkaConsumer(bootstrap_servers=bootstrap, **client_options(bootstrap), enable_auto_commit=False, group_id=None)
        self.tp = TopicPartition

    async def __aenter__(self) -> "_Offsets":
        await self.c.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.c.stop()

    async def partitions(self, topic: str) -> list[int]:
        parts = self.c.partitions_for_topic(topic)
        if not parts:
            await self.c._client.force_metadata_update()  # noqa: SLF001 - first metadata fetch
            parts = self.c.partitions_for_topic(topic)
        if not parts:
            raise ReplayError(f"topic {topic} does not exist (wrong --namespace?)")
        return sorted(parts)

    async def bounds(self, topic: str, partition: int) -> tuple[int, int]:
        tp = self.tp(topic, partition)
        begin = (await self.c.beginning_offsets([tp]))[tp]
        end = (await self.c.end_offsets([tp]))[tp]
        return begin, end

    async def at_time(self, topic: str, partition: int, ms: int) -> int:
        """First offset whose timestamp is >= ``ms`` (the end offset when none is)."""
        tp = self.tp(topic, partition)
        hit = (await self.c.offsets_for_times({tp: ms}))[tp]
        return hit.offset if hit is not None else (await self.c.end_offsets([tp]))[tp]


async def _candidates(off: _Offsets, topic: str, cell: str, given: int | None) -> list[int]:
    """Partitions to look for the cell in, most likely first."""
    parts = await off.partitions(topic)
    if given is not None:
        if given not in parts:
            raise ReplayError(f"{topic} has no partition {given} (it has {parts})")
        return [given]
    # Producers key the cell log by cell with Kafka's default (murmur2) partitioner.
    from aiokafka.partitioner import murmur2

    hint = (murmur2(cell.encode()) & 0x7FFFFFFF) % len(parts)
    return [hint] + [q for q in parts if q != hint]


async def export_cell(settings: Settings, cell: str, out: Path, *, from_offset: int | None = None,
                      to_offset: int | None = None, since: str | None = None, until: str | None = None,
                      partition: int | None = None, nodes_source: str | None = None,
                      log=print, progress: bool = False) -> dict[str, Any]:
    """Export ``cell`` from Kafka (see the module docstring). Returns ``cell.json``'s content.
    ``progress``: bars over the offsets read, then over the records decoded (``progress.py``)."""
    from suanli.streams.kafka_io import read_range  # aiokafka: only an export reads Kafka

    names = TopicNames(settings.namespace)
    bootstrap = settings.bootstrap_servers
    key = cell.encode()
    t0 = time.perf_counter()
    since_ms = parse_time(since) if since else None
    until_ms = parse_time(until) if until else None
    with Progress(0, "export: read", unit="rec", enabled=progress) as bar:   # total: as ranges are found

        async def read(topic: str, part: int, start: int, stop: int) -> list[Any]:
            bar.add_total(max(0, stop - start))
            return await read_range(bootstrap, topic, part, start, stop, on_read=bar.update)

        async with _Offsets(bootstrap) as off:
            for p in await _candidates(off, names.cell_log, cell, partition):
                begin, end = await off.bounds(names.cell_log, p)
                lo = begin if from_offset is None else max(begin, from_offset)
                hi = end if to_offset is None else min(end, to_offset)
                if since_ms is not None:
                    lo = max(lo, await off.at_time(names.cell_log, p, since_ms))
                if until_ms is not None:
                    hi = min(hi, await off.at_time(names.cell_log, p, until_ms))
                inputs = [_raw(r) for r in await read(names.cell_log, p, lo, hi) if r.key == key] if hi > lo else []
                if inputs:
                    break
            else:
                raise ReplayError(f"no record of cell {cell!r} in the requested range of {names.cell_log} "
                                  f"(namespace {settings.namespace!r}; --partition to name one)")
            log(f"export: {len(inputs):,} inputs of cell {cell} from {names.cell_log}[{p}] offsets [{lo}, {hi})")
            prefix = [_raw(r) for r in await read(names.cell_log, p, begin, lo) if r.key == key] if lo > begin else []
            candidates: list[RawRecord] = []
            first_ts = min(r.timestamp for r in inputs)
            for dp in await off.partitions(names.decisions):
                d_begin, d_end = await off.bounds(names.decisions, dp)
                start = max(d_begin, await off.at_time(names.decisions, dp, first_ts - DECISION_SLACK_MS))
                candidates.extend(_raw(r) for r in await read(names.decisions, dp, start, d_end) if r.key == key)
    with RegistryClient(settings.registry_url) as registry:
        meta = build_logdir(
            out, Codec(registry), registry, cell=cell, namespace=settings.namespace,
            cell_log_topic=names.cell_log, partition=p, lo=lo, hi=hi, prefix=prefix, inputs=inputs,
            decision_candidates=candidates, nodes_source=nodes_source, log=log, progress=progress,
            source={"bootstrap": bootstrap, "registry": settings.registry_url, "since": since, "until": until})
    log(f"export: wrote {out} in {time.perf_counter() - t0:.1f}s")
    return meta


def build_logdir(out: Path, codec: Codec, registry: Any, *, cell: str, namespace: str, cell_log_topic: str,
                 partition: int, lo: int, hi: int, prefix: list[RawRecord], inputs: list[RawRecord],
                 decision_candidates: list[RawRecord], nodes_source: str | None = None,
                 source: dict[str, Any] | None = None, log=print, progress: bool = False) -> dict[str, Any]:
    """Write the log directory of ``cell`` for inputs ``[lo, hi)`` (no Kafka: records given).

    ``prefix``: the cell's records before ``lo`` (a replay rebuilds the state from them); ``decision_candidates``: decision records keyed by the cell, in topic
    order (those decided at an input in the range are kept); ``registry``: anything with
    ``schema_by_id`` and ``lookup`` (a RegistryClient, or a DirRegistry in tests).
    """
    initial = {"strategy": "default", "config": {}}
    if prefix:
        # The policy in force at the start of the range: fold the prefix (no outputs).
        runner = CellRunner(codec, TopicNames(namespace))
        runner.catch_up(prefix)
        state = runner.partition(partition).cells.get(cell) or CellState(cell)
        initial = {"strategy": state.policy.strategy, "config": dict(state.policy.config)}
        log(f"export: {len(prefix):,} earlier records of the cell kept to rebuild the state before offset {lo}")

    decisions: list[RawRecord] = []
    versions: dict[str, None] = {}
    with Progress(len(decision_candidates), "export: decode decisions", unit="rec", enabled=progress) as bar:
        for r in decision_candidates:
            bar.update()
            _, payload = codec.decode(r.value, topic=r.topic, partition=r.partition, offset=r.offset)
            prov = payload.get("provenance") or {}
            pos = prov.get("input") or {}
            if pos.get("topic") == cell_log_topic and pos.get("partition") == partition \
                    and lo <= pos.get("offset", -1) < hi:
                decisions.append(r)
                ref = prov.get("strategy") or {}
                versions.setdefault(f"{ref.get('name')}@{ref.get('version')}", None)
    if len({r.partition for r in decisions}) > 1:
        raise ReplayError(f"decisions of cell {cell} are spread over several partitions; their order cannot be recovered")
    log(f"export: {len(decisions):,} decision records")

    ids = schema_ids(inputs) | schema_ids(decisions)
    # Also the current id of every event the core may encode, so that the offline codec
    # encodes regenerated decisions (and dispatch commands) with the ids live used.
    for kind in sorted(codec.events):
        event = codec.events[kind]
        sid = registry.lookup(event.subject, event.schema)
        if sid is not None:
            ids.add(sid)
    schemas = {}
    for sid in sorted(ids):
        schema = registry.schema_by_id(sid)
        if schema is None:
            raise ReplayError(f"the registry does not know schema id {sid}, which the log references")
        schemas[sid] = schema

    kinds: dict[str, int] = {}
    connectors: set[str] = set()
    with Progress(len(inputs), "export: decode inputs", unit="rec", enabled=progress) as bar:
        for r in inputs:
            bar.update()
            try:
                kind, payload = codec.decode(r.value)
            except Exception:  # noqa: BLE001 - counted; a replay dead-letters it as live did
                kind, payload = "<undecodable>", {}
            kinds[kind] = kinds.get(kind, 0) + 1
            if kind == "NodeRegistered":
                connectors.add(payload.get("connector") or "")

    meta = {
        "cell": cell,
        "namespace": namespace,
        "exported_at": int(time.time() * 1000),
        "source": source or {},
        "inputs": {"topic": cell_log_topic, "partition": partition, "from_offset": lo, "to_offset": hi,
                   "kinds": dict(sorted(kinds.items()))},
        "decisions": {"partitions": sorted({r.partition for r in decisions}),
                      "topic": decisions[0].topic if decisions else None},
        "nodes": {"source": nodes_source, "registered_in_range": kinds.get("NodeRegistered", 0),
                  "connectors": sorted(connectors)},
        "initial_policy": initial,
        "policy_changes_in_range": kinds.get("PolicyChanged", 0),
        # which strategy code decided the recorded decisions (a replay on other code may differ)
        "strategies_recorded": list(versions),
    }
    write_logdir(out, cell_meta=meta, strategy=explicit(initial), inputs=inputs, decisions=decisions,
                 schemas=schemas, prefix=prefix)
    return meta
