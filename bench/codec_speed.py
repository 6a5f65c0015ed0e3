"""The codec's compiled Avro program against fastavro, alternating in one process.

``python -m suanli.bench.codec_speed [--rounds 3] [--replay-nodes N --replay-tasks M] --json F``

Per record kind, microseconds to encode and to decode one record the plane really moves:
a ``TaskPlaced`` with its provenance (decided on a 5,000-node cell), the ``TaskSubmitted``
and ``NodeRegistered`` the synthetic workload sends, a ``NodeHeartbeat`` and the
``DispatchCommand`` a placement becomes. Both sides run ``schemas.codec.Codec``, one with
``compiled=False`` (fastavro alone, as before the program), in alternating rounds; every
record is checked to come out the same either way (bytes when encoding, values when
decoding) before it is timed. Then the replay path (``bench/replay_speed.py``,
``replay.log_replay.regenerate``: decode, decide, encode) runs the same synthetic log with
each codec, alternating, so the program's share of a replay shows as a ratio within one run.
Last, the audit index's queries on raw rows (rows kept as the records' bytes, read when a
query returns them: ``projections/audit.py``), with the program and without it
(``SUANLI_CODEC_COMPILED``), alternating. Registries and stores are in memory: no services.
"""
from __future__ import annotations

import argparse
import json
import time
from typing import Any, Callable

from suanli.bench import replay_speed, synthetic
from suanli.replay.dir_registry import DirRegistry
from suanli.schemas.codec import Codec
from suanli.streams.cell_runner import CellRunner
from suanli.streams.records import RawRecord
from suanli.streams.topics import TopicNames


def sample_records(nodes: int = 5000, tasks: int = 200) -> dict[str, list[dict[str, Any]]]:
    """Payloads per kind, as the plane moves them: the synthetic cell log run through the
    scheduler's ``CellRunner`` (placements decided on a ``nodes`` cell, and the dispatch
    commands they become), read back from the records it produced."""
    codec = Codec(DirRegistry({}))
    runner = CellRunner(codec, TopicNames("bench"))
    registered = list(synthetic.nodes(nodes))
    submitted = list(synthetic.tasks(tasks))
    produced: dict[str, list[dict[str, Any]]] = {}
    for i, (kind, payload) in enumerate([("NodeRegistered", n) for n in registered] +
                                        [("TaskSubmitted", t) for t in submitted]):
        for out in runner.apply(RawRecord("bench.cells", 0, i, 0, b"bench", codec.encode(kind, payload))):
            kind_out, value = codec.decode(out.value)
            produced.setdefault(kind_out, []).append(value)
    beats = [{"event_id": f"bench/hb/{i}", "node_id": f"node-{i:05d}", "cell": "bench", "seq": 1, "at": 2_000_000 + i}
             for i in range(200)]
    return {"TaskPlaced": produced["TaskPlaced"], "DispatchCommand": produced["DispatchCommand"],
            "TaskSubmitted": submitted, "NodeRegistered": registered[:200], "NodeHeartbeat": beats}


def _per_record_us(fn: Callable[[Any], Any], items: list[Any], repeat: int) -> float:
    """Best of ``repeat`` passes over ``items``: microseconds per item."""
    best = float("inf")
    for _ in range(repeat):
        started = time.perf_counter()
        for x in items:
            fn(x)
        best = min(best, time.perf_counter() - started)
    return best / len(items) * 1e6


def _check_same(fast: Codec, slow: Codec, kind: str, payloads: list[dict[str, Any]]) -> list[bytes]:
    """The wire records of ``payloads``, after checking both codecs write and read them alike."""
    wires = []
    for p in payloads:
        a, b = fast.encode(kind, p), slow.encode(kind, p)
        if a[5:] != b[5:]:
            raise AssertionError(f"{kind}: the compiled program wrote other bytes than fastavro")
        if fast.decode(a) != slow.decode(a):
            raise AssertionError(f"{kind}: the compiled program read another value than fastavro")
        wires.append(a)
    return wires


def codec_rounds(records: dict[str, list[dict[str, Any]]], rounds: int, repeat: int = 5) -> dict[str, Any]:
    """Per kind and side, encode and decode microseconds per record, best over ``rounds``
    alternating rounds (each the best of ``repeat`` passes)."""
    registry = DirRegistry({})
    fast, slow = Codec(registry), Codec(registry, compiled=False)
    if not fast.compiled:
        raise SystemExit("the kernels are not built: run ./bin/suanli once (it builds them)")
    out: dict[str, Any] = {}
    for kind, payloads in records.items():
        wires = _check_same(fast, slow, kind, payloads)
        fig: dict[str, list[float]] = {"fastavro_encode_us": [], "compiled_encode_us": [],
                                       "fastavro_decode_us": [], "compiled_decode_us": []}
        for _ in range(rounds):
            for side, codec in (("fastavro", slow), ("compiled", fast)):
                fig[f"{side}_encode_us"].append(_per_record_us(lambda p, c=codec: c.encode(kind, p), payloads, repeat))
                fig[f"{side}_decode_us"].append(_per_record_us(codec.decode, wires, repeat))
        best = {k: round(min(v), 2) for k, v in fig.items()}
        out[kind] = {**best, "records": len(payloads), "mean_bytes": round(sum(map(len, wires)) / len(wires), 1),
                     "encode_speedup": round(best["fastavro_encode_us"] / best["compiled_encode_us"], 2),
                     "decode_speedup": round(best["fastavro_decode_us"] / best["compiled_decode_us"], 2),
                     "rounds": {k: [round(x, 2) for x in v] for k, v in fig.items()}}
    return out


def replay_rounds(nodes: int, tasks: int, rounds: int) -> dict[str, Any]:
    """``replay_speed.replay_events_per_second`` with each codec, alternating."""
    runs: dict[str, list[dict[str, Any]]] = {"fastavro": [], "compiled": []}
    for _ in range(rounds):
        for side, compiled in (("fastavro", False), ("compiled", True)):
            r = replay_speed.replay_events_per_second(Codec(DirRegistry({}), compiled=compiled), nodes, tasks,
                                                      heartbeat_rounds=0)
            runs[side].append({"events_per_s": r["events_per_s"], "events_per_cpu_s": r["events_per_cpu_s"],
                               "core_share": r["core_share"], "verify_identical": r["verify_identical"]})
    best = {side: max(r["events_per_cpu_s"] for r in rs) for side, rs in runs.items()}
    return {"nodes": nodes, "tasks": tasks, "runs": runs, "best_events_per_cpu_s": best,
            "speedup": round(best["compiled"] / best["fastavro"], 3)}


def audit_rounds(decisions: int, rounds: int, queries: int = 300) -> dict[str, Any]:
    """p95 ms of the audit index's queries over raw rows, the program off and on, alternating:
    ``decisions`` synthetic decisions folded raw (``AuditIndex.apply_raw``) into an
    in-memory index per run, the same queries each time (``audit_bench.time_queries``)."""
    import os
    from typing import NamedTuple

    from suanli.projections.audit import AuditIndex
    from suanli.projections.audit_bench import synthetic_decisions, time_queries
    from suanli.projections.audit_follower import WriterSchemas, source_record
    from suanli.projections.audit_store import MemoryStore

    class Rec(NamedTuple):              # what the fold reads of a consumer record
        topic: str
        partition: int
        offset: int
        value: bytes

    codec = Codec(DirRegistry({}))
    made = list(synthetic_decisions(decisions))
    records = [Rec("bench.decisions", 0, i, codec.encode(k, p)) for i, (k, p) in enumerate(made)]
    task_ids = sorted({p["task_id"] for _k, p in made})
    node_ids = sorted({p["node_id"] for _k, p in made if p.get("node_id")})

    runs: dict[str, list[dict[str, float]]] = {"fastavro": [], "compiled": []}
    before = os.environ.get("SUANLI_CODEC_COMPILED")
    try:
        for _ in range(rounds):
            for side, flag in (("fastavro", "0"), ("compiled", "1")):
                os.environ["SUANLI_CODEC_COMPILED"] = flag      # read when a query first meets a writer
                index = AuditIndex(MemoryStore())
                for i in range(0, len(records), 5000):
                    index.apply_raw(records[i:i + 5000], WriterSchemas(codec), lambda r: source_record(codec, r))
                q = time_queries(index, task_ids, node_ids, rounds=queries)
                runs[side].append({k: v["p95_ms"] for k, v in q.items()})
    finally:
        if before is None:
            os.environ.pop("SUANLI_CODEC_COMPILED", None)
        else:
            os.environ["SUANLI_CODEC_COMPILED"] = before
    best = {side: {k: min(r[k] for r in rs) for k in rs[0]} for side, rs in runs.items()}
    return {"decisions": decisions, "runs": runs, "best_p95_ms": best}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m suanli.bench.codec_speed", description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3, help="alternating rounds per side (default 3)")
    ap.add_argument("--replay-nodes", type=int, default=5000)
    ap.add_argument("--replay-tasks", type=int, default=20000, help="0 skips the replay comparison")
    ap.add_argument("--audit-decisions", type=int, default=20000, help="0 skips the audit query comparison")
    ap.add_argument("--json", help="write the figures here as JSON")
    args = ap.parse_args(argv)
    out: dict[str, Any] = {"codec": codec_rounds(sample_records(), args.rounds)}
    for kind, f in out["codec"].items():
        print(f"{kind:16} {f['mean_bytes']:7.0f} B  encode {f['fastavro_encode_us']:6.2f} -> {f['compiled_encode_us']:5.2f} us"
              f" (x{f['encode_speedup']})  decode {f['fastavro_decode_us']:6.2f} -> {f['compiled_decode_us']:5.2f} us"
              f" (x{f['decode_speedup']})")
    if args.replay_tasks > 0:
        out["replay"] = rep = replay_rounds(args.replay_nodes, args.replay_tasks, args.rounds)
        print(f"replay {args.replay_nodes} nodes + {args.replay_tasks} tasks, events per CPU second (best of "
              f"{args.rounds}): fastavro {rep['best_events_per_cpu_s']['fastavro']:,.0f}, compiled "
              f"{rep['best_events_per_cpu_s']['compiled']:,.0f} (x{rep['speedup']})")
    if args.audit_decisions > 0:
        out["audit"] = aud = audit_rounds(args.audit_decisions, args.rounds)
        for q in aud["best_p95_ms"]["fastavro"]:
            print(f"audit {q:24} p95 (best of {args.rounds}): fastavro {aud['best_p95_ms']['fastavro'][q]:.3f} ms, "
                  f"compiled {aud['best_p95_ms']['compiled'][q]:.3f} ms")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
