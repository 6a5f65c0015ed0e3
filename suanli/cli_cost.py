"""``suanli cost``: what each tier's (tenant's, pricing model's) work cost, from the log.

``suanli cost [--tenant T] [--by tier|tenant|pricing] [--cell C] [--json]``

Reads the namespace's cell log (node registrations and task submissions: prices, sizes,
tiers) and then its decisions, each topic **up to the end offsets it has when the command
starts** (never "until quiet"), and folds them with ``projections/cost.py``. Intervals
still running are priced up to the latest decision time the log shows (``as_of``).
Records of other kinds are skipped by their schema id without decoding, and, with
``--cell``, records keyed by another cell without even that (both topics are keyed by cell).

Exit status: 0 with a report; 2 (one line on stderr) when Kafka or the registry cannot be
reached, or a topic is missing (wrong ``SUANLI_NAMESPACE``?).
"""
from __future__ import annotations

import argparse
import asyncio
import json
from dataclasses import dataclass, field
from typing import Any, AsyncIterator, Iterable, Optional

from suanli.streams.kafka_security import client_options
from suanli.config import Settings, settings
from suanli.errors import DecodeError, RegistryError, SuanliError, UnavailableError

INPUT_KINDS = frozenset({"NodeRegistered", "TaskSubmitted"})


@dataclass
class ReadStats:
    """What a read went through: records per topic up to the end offsets, decoded, bad."""
    ends: dict[str, dict[int, int]] = field(default_factory=dict)
    scanned: int = 0
    decoded: int = 0
    undecodable: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {"end_offsets": {t: {str(p): o for p, o in e.items()} for t, e in self.ends.items()},
                "scanned": self.scanned, "decoded": self.decoded, "undecodable": self.undecodable}


async def scan_to_end(bootstrap: str, topic: str, codec: Any, kinds: Iterable[str], *, key: Optional[bytes] = None,
                      stats: Optional[ReadStats] = None, timeout: float = 600.0) -> AsyncIterator[tuple[str, dict[str, Any]]]:
    """``(kind, payload)`` of every record of ``kinds`` (and key ``key``, if given) in
    ``topic``, partition by partition, from the beginning up to the end offsets read when the
    scan starts. :class:`SuanliError` when the topic does not exist; :class:`UnavailableError`
    when the scan has not reached those offsets after ``timeout`` seconds."""
    import time

    from aiokafka import AIOKafkaConsumer, TopicPartition

    wanted = frozenset(kinds)
    kind_of = codec.kind_of
    stats = stats if stats is not None else ReadStats()
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, **client_options(bootstrap), group_id=None, enable_auto_commit=False,
                                auto_offset_reset="earliest", max_partition_fetch_bytes=4 << 20)
    await consumer.start()
    try:
        parts = consumer.partitions_for_topic(topic)
        if not parts:
            await consumer._client.force_metadata_update()  # noqa: SLF001 - first metadata fetch
            parts = consumer.partitions_for_topic(topic)
        if not parts:
            raise SuanliError(f"topic {topic} does not exist (wrong SUANLI_NAMESPACE, or nothing ran yet?)")
        tps = [TopicPartition(topic, p) for p in sorted(parts)]
        ends = await consumer.end_offsets(tps)
        stats.ends[topic] = {tp.partition: ends[tp] for tp in tps}
        deadline = time.monotonic() + timeout
        for tp in tps:
            end = ends[tp]
            consumer.assign([tp])
            await consumer.seek_to_beginning(tp)
            while await consumer.position(tp) < end:
                if time.monotonic() > deadline:
                    raise UnavailableError(f"reading {topic}[{tp.partition}] up to offset {end} did not finish "
                                           f"in {timeout:.0f} s (broker too slow or gone?)")
                fetched = await consumer.getmany(tp, timeout_ms=1000, max_records=5000)
                for r in fetched.get(tp, []):
                    if r.offset >= end:
                        break
                    stats.scanned += 1
                    if key is not None and r.key != key:
                        continue
                    if kind_of(r.value) not in wanted:
                        continue
                    try:
                        kind, payload = codec.decode(r.value, topic=r.topic, partition=r.partition, offset=r.offset)
                    except DecodeError:
                        stats.undecodable += 1
                        continue
                    stats.decoded += 1
                    yield kind, payload
    finally:
        await consumer.stop()


def _check_reachable(s: Settings) -> None:
    from suanli.deploy import kafka_broker

    if not kafka_broker.is_ready(s.bootstrap_servers, timeout=5):
        raise UnavailableError(f"Kafka at {s.bootstrap_servers} is not reachable: start the stack "
                               "(`suanli stack up`, or `suanli up`) or point SUANLI_KAFKA at your cluster")


async def load_ledger(s: Settings, *, cell: Optional[str] = None, codec: Any = None,
                      stats: Optional[ReadStats] = None) -> Any:
    """A :class:`~suanli.projections.cost.CostLedger` of the namespace (or one cell): the cell
    log's registrations and submissions first, then the decisions, each up to its end offsets."""
    from suanli.processors.model import DECISION_KINDS
    from suanli.projections.cost import CostLedger
    from suanli.schemas.codec import Codec
    from suanli.schemas.registry import RegistryClient
    from suanli.streams.topics import TopicNames

    names = TopicNames(s.namespace)
    key = cell.encode() if cell else None
    ledger = CostLedger()
    registry = None
    if codec is None:
        registry = RegistryClient(s.registry_url, timeout=10)
        codec = Codec(registry)
    try:
        for topic, kinds in ((names.cell_log, INPUT_KINDS), (names.decisions, DECISION_KINDS)):
            async for kind, payload in scan_to_end(s.bootstrap_servers, topic, codec, kinds, key=key, stats=stats):
                if cell is None or payload.get("cell") == cell:
                    ledger.apply_avro(kind, payload)
    except RegistryError as exc:
        raise UnavailableError(f"schema registry at {s.registry_url}: {exc}") from None
    finally:
        if registry is not None:
            registry.close()
    return ledger


def cost_report(ledger: Any, *, by: str = "tier", tenant: Optional[str] = None,
                cell: Optional[str] = None) -> dict[str, Any]:
    """The report as a JSON-able dict (rows, bronze vs silver, notes). Pure."""
    from suanli.projections.cost import bronze_vs_silver, report

    intervals = ledger.intervals(cell=cell, tenant=tenant)
    return {"by": by, "tenant": tenant, "cell": cell, "as_of": ledger.clock,
            "rows": [r.as_dict() for r in report(intervals, by=by)],
            "bronze_vs_silver": bronze_vs_silver(intervals).as_dict(),
            "bronze_without_idle_price": sum(1 for iv in intervals
                                             if iv.tier == "BRONZE" and iv.node.idle_price_per_hour <= 0),
            "unpriced_nodes": ledger.unpriced_nodes, "anomalies": ledger.anomalies[:20]}


def render(doc: dict[str, Any]) -> str:
    import datetime as dt

    when = dt.datetime.fromtimestamp(doc["as_of"] / 1000, dt.timezone.utc).isoformat(timespec="seconds") \
        if doc["as_of"] else "-"
    who = f"tenant {doc['tenant']}" if doc["tenant"] else "all tenants"
    where = f"cell {doc['cell']}" if doc["cell"] else "every cell"
    lines = [f"cost of {who} in {where}, by {doc['by']} (running work priced up to {when})",
             f"{doc['by']:<12} {'tasks':>6} {'hours':>10} {'GPU-hours':>10} {'cost':>12} {'per GPU-h':>10} "
             f"{'preempted':>9} {'work lost h':>11} {'lost':>5} {'migrated':>8}"]
    for r in doc["rows"]:
        per = f"{r['cost_per_gpu_hour']:.4f}" if r["cost_per_gpu_hour"] is not None else "-"
        lines.append(f"{r['key']:<12} {r['tasks']:>6} {r['hours']:>10.3f} {r['gpu_hours']:>10.3f} {r['cost']:>12.4f} "
                     f"{per:>10} {r['preemptions']:>9} {r['work_lost_hours']:>11.3f} {r['lost']:>5} "
                     f"{r['migrations']:>8}")
    b = doc["bronze_vs_silver"]
    if b["intervals"]:
        pct = lambda v: "-" if v is None else f"{v:.1f} % less"  # noqa: E731
        lines.append(f"bronze: {b['bronze_cost']:.4f} against {b['as_silver_cost']:.4f} for the same intervals at the "
                     f"silver rate ({pct(b['saving_pct'])}); against the silver price of the useful work only "
                     f"(minus {b['work_lost_hours']:.3f} h lost to preemption): {pct(b['effective_saving_pct'])}")
    if doc["bronze_without_idle_price"]:
        lines.append(f"note: {doc['bronze_without_idle_price']} bronze intervals ran on nodes that name no idle price "
                     "(idle_price_per_hour 0): they are billed the full price")
    if doc["unpriced_nodes"]:
        lines.append(f"note: {len(doc['unpriced_nodes'])} nodes without a registration in the log are priced 0: "
                     + ", ".join(doc["unpriced_nodes"][:5]))
    return "\n".join(lines)


def _cost(args: argparse.Namespace) -> int:
    from suanli.projections.cost import GROUPS

    if args.by not in GROUPS:
        raise SuanliError(f"--by must be one of {', '.join(GROUPS)}")
    s = settings()
    _check_reachable(s)
    stats = ReadStats()
    ledger = asyncio.run(load_ledger(s, cell=args.cell, stats=stats))
    doc = cost_report(ledger, by=args.by, tenant=args.tenant, cell=args.cell)
    doc["namespace"] = s.namespace
    doc["read"] = stats.as_dict()
    print(json.dumps(doc, indent=2) if args.json else render(doc))
    return 0


def add_commands(sub: argparse._SubParsersAction) -> None:
    """Register ``cost``."""
    from suanli.cli_services import STACK

    p = sub.add_parser("cost", help="what the work cost, by tier, tenant or pricing model (from the log)")
    p.add_argument("--tenant", help="only this tenant's tasks (default: every tenant)")
    p.add_argument("--by", default="tier", choices=("tier", "tenant", "pricing"), help="group rows by (default tier)")
    p.add_argument("--cell", help="only this cell (default: every cell of the namespace)")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.set_defaults(func=_cost, needs=STACK)
