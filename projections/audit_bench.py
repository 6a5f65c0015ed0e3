"""Synthetic decision histories and the audit index benchmark.

:func:`synthetic_decisions` makes schema-valid decision events (TaskPending, TaskPlaced,
TaskReleased, TaskUnschedulable, TaskPreempted, TaskMigrated) with full provenance, as a
scheduler cell would write them: deterministic for a seed, several tenants, strategies and
nodes. The unit tests fold them; the benchmark folds 100,000 of them into the RocksDB
index (directly, and from a Kafka topic they were produced to with the real codec) and
times queries.

    python -m suanli.projections.audit_bench --decisions 100000 [--kafka [--no-previous]] [--json out.json]

With ``--kafka`` the rebuild runs twice on the same topic: as the follower now folds
(``rebuild``: decisions indexed from their bytes) and as it folded before issue 16
(``rebuild_previous``: each record decoded, then folded), so the two figures compare on
one machine at one time; both print events/s.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import tempfile
import time
import uuid
import zlib
from pathlib import Path
from typing import Any, Iterator

from suanli.projections.audit import AuditIndex, AuditQuery, SourceRecord
from suanli.streams.topics import TopicNames

STRATEGIES = (("fgd", "1.2.0"), ("bestfit", "1.0.1"), ("default", "2.0.0"))
REASONS = ("Insufficient GPU", "Insufficient CPU", "GPU model mismatch", "node not ready")


def _prov(rnd: random.Random, cell_log: str, offset: int, at: int, strategy: tuple[str, str],
          nodes: list[str], path: list[str], with_candidates: bool) -> dict[str, Any]:
    cands = []
    if with_candidates:
        picks = rnd.sample(nodes, k=min(5, len(nodes)))
        scores = sorted((round(rnd.random() * 100, 3) for _ in picks), reverse=True)
        cands = [{"node_id": n, "score": s, "rank": i + 1} for i, (n, s) in enumerate(zip(picks, scores))]
    filtered = [{"reason": r, "nodes": rnd.randint(1, 300), "sample": rnd.sample(nodes, k=min(3, len(nodes)))}
                for r in rnd.sample(REASONS, k=2)]
    return {"input": {"topic": cell_log, "partition": 0, "offset": offset},
            "strategy": {"name": strategy[0], "version": strategy[1], "config_digest": f"{zlib.crc32(strategy[0].encode()):08x}"},
            "candidates": cands, "filtered": filtered, "path": path, "decided_at": at, "matched_rule": None,
            "profile": None, "notes": []}


def synthetic_decisions(n: int, *, tenants: int = 8, nodes: int = 500, cell: str = "bench",
                        seed: int = 1, start_ms: int = 1_750_000_000_000,
                        cell_log: str = TopicNames("bench").cell_log) -> Iterator[tuple[str, dict[str, Any]]]:
    """``n`` ``(kind, payload)`` decisions in log order; about 2.3 decisions per task."""
    rnd = random.Random(seed)
    node_ids = [f"node-{i:05d}" for i in range(nodes)]
    emitted, offset, at, task = 0, 0, start_ms, 0
    while emitted < n:
        task += 1
        tid = f"{cell}-task-{task:07d}"
        tenant = f"tenant-{task % tenants}"
        strategy = STRATEGIES[task % len(STRATEGIES)]
        offset += 1
        at += rnd.randint(1, 40)
        script: list[str]
        roll = rnd.random()
        if roll < 0.05:
            script = ["TaskUnschedulable"]
        elif roll < 0.30:
            script = ["TaskPending", "TaskPlaced", "TaskReleased"]
        elif roll < 0.34:
            script = ["TaskPlaced", "TaskMigrated", "TaskReleased"]
        elif roll < 0.38:
            script = ["TaskPlaced", "TaskPreempted", "TaskReleased"]
        else:
            script = ["TaskPlaced", "TaskReleased"]
        node = rnd.choice(node_ids)
        for seq, kind in enumerate(script):
            if emitted >= n:
                return
            if seq:
                offset += rnd.randint(1, 5)
                at += rnd.randint(5, 400)
            did = f"{cell}/{cell_log}/0/{offset}/{seq}"
            base = {"event_id": f"{did}/{kind}", "decision_id": did, "task_id": tid, "tenant": tenant, "cell": cell}
            if kind == "TaskPlaced":
                p = _prov(rnd, cell_log, offset, at, strategy, node_ids,
                          ["submitted" if seq == 0 else "retry from queue", "filter", "score", f"bind {node}"], True)
                p["candidates"][0]["node_id"] = node
                payload = {**base, "node_id": node, "gpu_devices": [rnd.randint(0, 7)], "gpu_milli": 500,
                           "cpu_milli": 4000, "memory_mib": 8192, "provenance": p}
            elif kind == "TaskPending":
                p = _prov(rnd, cell_log, offset, at, strategy, node_ids, ["submitted", "filter", "queued"], False)
                payload = {**base, "reasons": [{"reason": f["reason"], "nodes": f["nodes"]} for f in p["filtered"]],
                           "queue_position": rnd.randint(1, 50), "provenance": p}
            elif kind == "TaskUnschedulable":
                p = _prov(rnd, cell_log, offset, at, strategy, node_ids, ["submitted", "filter", "unschedulable"], False)
                payload = {**base, "reasons": [{"reason": "no node has GPU model A100", "nodes": nodes}],
                           "provenance": p}
            elif kind == "TaskMigrated":
                to = rnd.choice(node_ids)
                p = _prov(rnd, cell_log, offset, at, strategy, node_ids, ["defragment", f"move {node} -> {to}"], True)
                payload = {**base, "from_node": node, "to_node": to, "gpu_devices": [0], "reason": "defragmentation",
                           "provenance": p}
                node = to
            elif kind == "TaskPreempted":
                p = _prov(rnd, cell_log, offset, at, strategy, node_ids, ["higher priority arrived", f"evict {node}"], False)
                payload = {**base, "node_id": node, "preempted_by": f"{cell}-task-{task + 1:07d}",
                           "reason": "priority", "provenance": p}
            else:
                cause = "PREEMPTED" if script[seq - 1] == "TaskPreempted" else "COMPLETED"
                p = _prov(rnd, cell_log, offset, at, strategy, node_ids, [cause.lower(), f"release {node}"], False)
                payload = {**base, "node_id": node, "cause": cause, "gpu_devices": [0], "provenance": p}
            emitted += 1
            yield kind, payload


def as_records(decisions: Iterator[tuple[str, dict[str, Any]]], topic: str = TopicNames("bench").decisions,
               partitions: int = 1) -> Iterator[SourceRecord]:
    """Lay decisions out on a topic as the scheduler does (keyed by cell: one partition)."""
    offsets = [0] * partitions
    for kind, payload in decisions:
        part = zlib.crc32(payload["cell"].encode()) % partitions
        yield SourceRecord(topic, part, offsets[part], kind, payload)
        offsets[part] += 1


def _p95(samples: list[float]) -> float:
    return statistics.quantiles(samples, n=100)[94] if len(samples) >= 20 else max(samples)


def time_queries(index: AuditIndex, task_ids: list[str], node_ids: list[str], rounds: int = 500,
                 seed: int = 3) -> dict[str, Any]:
    rnd = random.Random(seed)
    out: dict[str, Any] = {}
    for name, pool, make in (
        ("why_by_task", task_ids, lambda v: index.why(v)),
        ("list_by_task", task_ids, lambda v: index.query(AuditQuery(task=v))),
        ("list_by_node", node_ids, lambda v: index.query(AuditQuery(node=v, limit=200))),
        ("list_by_node_and_tenant", node_ids, lambda v: index.query(AuditQuery(node=v, tenant="tenant-1", limit=200))),
    ):
        samples, sizes = [], []
        for _ in range(rounds):
            value = rnd.choice(pool)
            t0 = time.perf_counter()
            answer = make(value)
            samples.append((time.perf_counter() - t0) * 1000)
            sizes.append(len(answer["decisions"]) if isinstance(answer, dict) else len(answer))
        out[name] = {"p50_ms": round(statistics.median(samples), 3), "p95_ms": round(_p95(samples), 3),
                     "mean_rows": round(statistics.mean(sizes), 1), "queries": rounds}
    return out


def bench_direct(n: int, workdir: Path) -> dict[str, Any]:
    """Fold ``n`` synthetic decisions straight into a RocksDB index; time the queries."""
    from suanli.projections.audit_store import RocksStore

    decisions = list(synthetic_decisions(n))
    task_ids = sorted({p["task_id"] for _k, p in decisions})
    node_ids = sorted({p.get("node_id") or p.get("to_node") for _k, p in decisions if p.get("node_id") or p.get("to_node")})
    store = RocksStore(workdir / "direct")
    index = AuditIndex(store)
    records = list(as_records(iter(decisions)))
    t0 = time.perf_counter()
    for i in range(0, len(records), 5000):
        index.apply(records[i:i + 5000])
    fold_s = time.perf_counter() - t0
    result = {"decisions": index.count(), "tasks": len(task_ids), "nodes": len(node_ids),
              "fold_seconds": round(fold_s, 2), "fold_events_per_s": round(n / fold_s, 1),
              "queries": time_queries(index, task_ids, node_ids)}
    store.close()
    return result


async def bench_kafka(n: int, workdir: Path, bootstrap: str, registry_url: str, partitions: int = 4,
                      previous: bool = False, out: Any = None) -> dict[str, Any]:
    """Produce ``n`` synthetic decisions with the codec to a fresh topic, then rebuild from it.

    ``rebuild`` is the follower as it runs (decisions indexed from their bytes,
    ``AuditIndex.apply_raw``). With ``previous``, the same topic is also rebuilt the way
    it was before issue 16 (every record decoded by the codec, then ``AuditIndex.apply``,
    5,000-record batches, 4 MiB fetches) into a second index, right after, and both indexes
    are compared: ``rebuild_previous`` and ``identical`` (:func:`same_answers`). ``out``:
    called with one line per rebuild as it finishes.
    """
    from suanli.projections.audit_follower import AuditFollower
    from suanli.projections.audit_store import RocksStore
    from suanli.schemas.codec import Codec
    from suanli.schemas.registry import RegistryClient
    from suanli.streams.kafka_io import EventProducer, ensure_topics
    from suanli.streams.topics import TopicSpec

    topic = TopicNames(f"bench-{uuid.uuid4().hex[:8]}").decisions
    await ensure_topics(bootstrap, [TopicSpec(topic, partitions)])
    result: dict[str, Any] = {"topic": topic, "partitions": partitions}
    with RegistryClient(registry_url) as registry:
        codec = Codec(registry)
        t0 = time.perf_counter()
        async with EventProducer(bootstrap, codec, linger_ms=20) as producer:
            futures = []
            for i, (kind, payload) in enumerate(synthetic_decisions(n)):
                # Several cells, one partition each (the key), like a multi-cell plane.
                futures.append(await producer.send(topic, kind, payload, key=f"cell-{i % 16}"))
            await producer.flush()
            await asyncio.gather(*futures)
        result["produce_seconds"] = round(time.perf_counter() - t0, 2)
        runs = [("rebuild", "kafka", {})]
        if previous:
            runs.append(("rebuild_previous", "kafka-previous",
                         {"raw": False, "max_records": 5000, "max_partition_fetch_bytes": 4 << 20}))
        stores = {}
        for name, folder, options in runs:
            store = stores[name] = RocksStore(workdir / folder)
            stats = await AuditFollower(bootstrap, topic, AuditIndex(store), codec, **options).catch_up()
            result[name] = stats.as_dict()
            if out is not None:
                out(f"{name}: {stats.records} decisions from {partitions} partitions in {stats.seconds:.2f} s = "
                    f"{stats.rate:,.1f} events/s ({stats.records / max(stats.cpu_seconds, 1e-9):,.1f} per CPU second)")
        if previous:
            decisions = list(synthetic_decisions(n))
            task_ids = sorted({p["task_id"] for _k, p in decisions})
            node_ids = sorted({p.get("node_id") or p.get("to_node") for _k, p in decisions} - {None, ""})
            t0 = time.perf_counter()
            result["identical"] = same_answers(AuditIndex(stores["rebuild"]), AuditIndex(stores["rebuild_previous"]),
                                               task_ids)
            if out is not None:
                out(f"identical answers from both indexes: {result['identical']} "
                    f"(checked in {time.perf_counter() - t0:.1f} s)")
            # Raw rows are decoded when read: what that costs a query, against JSON rows.
            for name in ("rebuild", "rebuild_previous"):
                result[name]["queries"] = time_queries(AuditIndex(stores[name]), task_ids, node_ids, rounds=200)
            if out is not None:
                for q in result["rebuild"]["queries"]:
                    out(f"query {q} p50/p95 ms: {result['rebuild']['queries'][q]['p50_ms']} / "
                        f"{result['rebuild']['queries'][q]['p95_ms']} (raw rows); "
                        f"{result['rebuild_previous']['queries'][q]['p50_ms']} / "
                        f"{result['rebuild_previous']['queries'][q]['p95_ms']} (JSON rows)")
            result["speedup"] = round(result["rebuild"]["events_per_s"] / result["rebuild_previous"]["events_per_s"], 2)
        for store in stores.values():
            store.close()
    return result


def same_answers(a: AuditIndex, b: AuditIndex, task_ids: list[str], sample: int = 300) -> bool:
    """True if both indexes answer alike: count, positions, the newest 1,000 rows of
    ``list``, and ``why`` (every row with all its fields) for ``sample`` of the tasks,
    spread evenly (all of them would take longer than the rebuilds)."""
    if a.count() != b.count() or a.positions() != b.positions():
        return False
    if a.query(AuditQuery()) != b.query(AuditQuery()):
        return False
    tasks = list(dict.fromkeys(task_ids))
    step = max(1, len(tasks) // sample)
    return all(a.why(t) == b.why(t) for t in tasks[::step])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--decisions", type=int, default=100_000)
    parser.add_argument("--kafka", action="store_true", help="also rebuild from a Kafka topic (needs the stack)")
    parser.add_argument("--no-previous", action="store_true",
                        help="with --kafka: skip the rebuild the pre-issue-16 way (decode every record) for comparison")
    parser.add_argument("--kafka-only", action="store_true", help="with --kafka: skip the direct fold and queries")
    parser.add_argument("--json", help="write the figures to this file")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="suanli-audit-bench-") as tmp:
        figures: dict[str, Any] = {}
        if not (args.kafka and args.kafka_only):
            figures["direct"] = bench_direct(args.decisions, Path(tmp))
            print(json.dumps(figures["direct"], indent=2), flush=True)
        if args.kafka:
            from suanli.config import settings

            s = settings()
            figures["kafka"] = asyncio.run(bench_kafka(args.decisions, Path(tmp), s.bootstrap_servers, s.registry_url,
                                                       previous=not args.no_previous, out=print))
            print(json.dumps(figures["kafka"], indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
