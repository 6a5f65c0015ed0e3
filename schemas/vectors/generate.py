#!/usr/bin/env python3
"""Writes the cross-language test vectors of the event contract (idempotent).

For every vector below it writes ``schemas/vectors/<name>.json``::

    {"name": ..., "description": ..., "subject": "io.suanli.events.TaskSubmitted",
     "event": {...JSON, see README.md...}, "avro_hex": "<Avro binary body, no wire header>"}

and, for every subject used, ``schemas/vectors/schemas/<subject>.avsc``: the expanded,
self-contained schema exactly as the control plane registers it (compact JSON, sorted
keys), so clients can check vectors without a registry.

The bytes come from fastavro and the expanded schema of ``suanli.schemas.catalog``, with
map entries in the canonical order (sorted by key). Every client must reproduce them.

    .venv/bin/python schemas/vectors/generate.py           # (re)write the files
    .venv/bin/python schemas/vectors/generate.py --check   # exit 1 if a file is stale
"""
from __future__ import annotations

import argparse
import copy
import io
import json
import sys
from pathlib import Path
from typing import Any

import fastavro

from suanli.schemas.catalog import catalog
from suanli.schemas.codec import parse_plain

HERE = Path(__file__).resolve().parent
SCHEMA_DIR = HERE / "schemas"
T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z, epoch millis


def _resources(**kw: Any) -> dict[str, Any]:
    base = {"cpu_milli": 1000, "memory_mib": 1024, "gpu_count": 0, "gpu_milli": 0, "gpu_models": [],
            "gpu_memory_mib": 0, "accelerators": []}
    base.update(kw)
    return base


def _task(task_id: str, **kw: Any) -> dict[str, Any]:
    event = {"event_id": f"submit/{task_id}", "task_id": task_id, "tenant": "vision", "cell": "openb",
             "submitted_at": T0, "resources": _resources(), "qos_tier": "SILVER", "priority": 0, "labels": {},
             "deadline": None, "duration_estimate_ms": None, "command": None, "profile": None, "env": {},
             "job_id": None}
    event.update(kw)
    return event


VECTORS: list[tuple[str, str, str, dict[str, Any]]] = [
    ("task-shared-gpu", "TaskSubmitted", "A share (460 milli) of one GPU of two accepted models; one label.",
     _task("vec-shared-gpu", resources=_resources(cpu_milli=6000, memory_mib=12288, gpu_count=1, gpu_milli=460,
                                                  gpu_models=["V100M16", "V100M32"]),
           qos_tier="GOLD", labels={"workload": "training"}, duration_estimate_ms=7_200_000,
           env={"OMP_NUM_THREADS": "6"})),
    ("task-whole-gpus-full", "TaskSubmitted",
     "Four whole GPUs with model and memory constraints, an NPU request, several labels (non-ASCII, "
     "integer-like keys: map order is by key code point), every optional field set, a profile, an environment "
     "(keys out of order, a non-ASCII value, an empty value), a job id.",
     _task("vec-whole-gpus", tenant="视觉-team", resources=_resources(
               cpu_milli=32000, memory_mib=262144, gpu_count=4, gpu_milli=1000, gpu_models=["A100", "H800"],
               gpu_memory_mib=40960, accelerators=[{"kind": "NPU", "model": "Ascend910", "count": 2}]),
           qos_tier="GOLD", priority=-7,
           labels={"workload": "training", "team": "算力", "10": "ten", "2": "two", "app.kubernetes.io/name": "llm"},
           deadline=T0 + 86_400_000, duration_estimate_ms=36_000_000,
           command=["python", "train.py", "--epochs", "3", ""],
           profile={"duration_class": "long", "io_intensity": 0.25, "parallelism": 8, "sla_level": "gold",
                    "model_arch": "resnet50", "data_locations": ["site-a", "site-b"],
                    "extra": {"flops": 1.5e12, "mem_bw": 0.75, "zero": 0.0, "neg": -3.125}},
           env={"PYTHONUNBUFFERED": "1", "DATA_DIR": "/mnt/数据", "CUDA_VISIBLE_DEVICES": "", "A": "x=y"},
           job_id="fl-round-7")),
    ("task-optional-null", "TaskSubmitted",
     "CPU only: every optional field null, every array and map empty, defaults elsewhere.",
     _task("vec-optional-null", qos_tier="BRONZE", resources=_resources(cpu_milli=500, memory_mib=256))),
    ("task-edge-values", "TaskSubmitted",
     "Integer edges of the wire format: int min/max, longs at +-(2^53 - 1), the widest range every "
     "client holds exactly (JSON numbers in JavaScript; avsc's own long type is exact only to "
     "-2^52 and refuses 2^53 - 1, so the TypeScript client brings an exact one). Not a task intake "
     "would accept.",
     _task("vec-edge", priority=-2_147_483_648, resources=_resources(cpu_milli=2_147_483_647, memory_mib=0),
           submitted_at=0, deadline=9_007_199_254_740_991, duration_estimate_ms=-9_007_199_254_740_991,
           labels={"": "empty key", "k": ""}, command=[])),
    ("reservation-bid", "ReservationBid", "A bid for eight whole GPUs for four hours.",
     {"event_id": "bid/vec-bid-1", "bid_id": "vec-bid-1", "tenant": "vision", "cell": "openb",
      "resources": _resources(cpu_milli=64000, memory_mib=524288, gpu_count=8, gpu_milli=1000,
                              gpu_models=["A100"]),
      "start_at": T0 + 3_600_000, "duration_ms": 14_400_000, "price": 2.75, "at": T0}),
    ("reservation-bid-flexible", "ReservationBid",
     "A bid with a flexible start (any time in a two-hour span) that is not a gang: the auction may grant "
     "fewer than the four GPUs asked (at least one). A nullable timestamp set, a boolean false.",
     {"event_id": "bid/vec-bid-2", "bid_id": "vec-bid-2", "tenant": "vision", "cell": "openb",
      "resources": _resources(cpu_milli=16000, memory_mib=131072, gpu_count=4, gpu_milli=1000,
                              gpu_memory_mib=81920),
      "start_at": T0 + 3_600_000, "duration_ms": 7_200_000, "price": 1.5, "at": T0,
      "latest_start_at": T0 + 3 * 3_600_000, "gang": False}),
    ("reservation-rejected", "ReservationRejected",
     "A decision: a bid lost the auction, with the price it would have needed (a nullable double set) "
     "and a provenance (nested records, arrays of records, a null union).",
     {"event_id": "reject/vec-bid-2", "bid_id": "vec-bid-2", "tenant": "vision", "cell": "openb",
      "reason": "outbid: needs 1.75 per GPU-hour", "needed_price": 1.75, "at": T0 + 60_000,
      "provenance": {"input": {"topic": "suanli.cell.openb", "partition": 0, "offset": 42},
                     "strategy": {"name": "auction", "version": "1", "config_digest": "d41d8cd9"},
                     "candidates": [{"node_id": "vec-node-1", "score": 0.5, "rank": 1}],
                     "filtered": [{"reason": "gpu_model", "nodes": 3, "sample": ["n-1", "n-2"]}],
                     "path": ["bid vec-bid-2", "clearing at 2026-01-01T00:01:00Z", "lost"],
                     "decided_at": T0 + 60_000, "matched_rule": None}}),
    ("task-cancelled", "TaskCancelled", "The owner cancels a task.",
     {"event_id": "cancel/vec-shared-gpu", "task_id": "vec-shared-gpu", "tenant": "vision", "cell": "openb",
      "reason": "superseded", "at": T0 + 60_000}),
    ("node-registered", "NodeRegistered", "An edge node with two GPU models, spot pricing and labels.",
     {"event_id": "register/vec-node-1", "node_id": "vec-node-1", "cell": "openb", "site": "shenzhen-edge-3",
      "region": "cn-south", "zone": "cn-south-1b", "tier": "edge", "arch": "arm64", "cpu_milli": 96000,
      "memory_mib": 786432, "accelerators": [
          {"kind": "GPU", "model": "V100M32", "count": 4, "memory_mib": 32768},
          {"kind": "GPU", "model": "T4", "count": 2, "memory_mib": 16384},
          {"kind": "FPGA", "model": "", "count": 1, "memory_mib": 0}],
      "pricing": "SPOT", "price_per_hour": 12.5, "idle_price_per_hour": 5.0, "pue": 1.12, "carbon_g_per_kwh": 420.5, "connector": "sim",
      "labels": {"rack": "r12", "gpu.vendor": "nvidia"}, "registered_at": T0 - 1}),
]


def canonical(schema: Any, value: Any, named: dict[str, Any]) -> Any:
    """``value`` with every Avro map's entries in canonical order (sorted by key code point)."""
    if isinstance(schema, str):
        schema = named.get(schema, named.get(f"io.suanli.events.{schema}", schema))
    if isinstance(schema, list):  # ["null", T]: the only unions in the contract
        if value is None:
            return None
        (branch,) = [s for s in schema if s != "null"]
        return canonical(branch, value, named)
    if not isinstance(schema, dict):
        return value
    kind = schema["type"]
    if kind in ("record", "enum", "fixed"):
        named[f"{schema.get('namespace', 'io.suanli.events')}.{schema['name']}"] = schema
    if kind == "record":  # a missing member with a default takes it, as every encoder does
        return {f["name"]: canonical(f["type"], value[f["name"]] if f["name"] in value or "default" not in f
                                     else copy.deepcopy(f["default"]), named)
                for f in schema["fields"]}
    if kind == "array":
        return [canonical(schema["items"], v, named) for v in value]
    if kind == "map":
        return {k: canonical(schema["values"], value[k], named) for k in sorted(value)}
    if isinstance(kind, (dict, list)):
        return canonical(kind, value, named)
    return value


def render() -> dict[Path, str]:
    """Every file this script owns, with its content."""
    events = catalog()
    files: dict[Path, str] = {}
    for name, kind, description, event in VECTORS:
        spec = events[kind]
        event = canonical(spec.schema, copy.deepcopy(event), {})
        parsed = parse_plain(spec.schema)
        body = io.BytesIO()
        fastavro.schemaless_writer(body, parsed, event)
        data = body.getvalue()
        back = fastavro.schemaless_reader(io.BytesIO(data), parsed, None)
        if back != event:
            raise SystemExit(f"{name}: fastavro does not read back what it wrote:\n{back}\n!=\n{event}")
        doc = {"name": name, "description": description, "subject": spec.subject, "event": event,
               "avro_hex": data.hex()}
        files[HERE / f"{name}.json"] = json.dumps(doc, indent=2, ensure_ascii=False) + "\n"
        files[SCHEMA_DIR / f"{spec.subject}.avsc"] = spec.canonical_json() + "\n"
    return files


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="report stale or missing files; write nothing")
    args = parser.parse_args(argv)
    files = render()
    owned = {p for p in HERE.glob("*.json")} | {p for p in SCHEMA_DIR.glob("*.avsc")}
    stale = sorted(owned - set(files))
    changed = [p for p, text in files.items() if not p.exists() or p.read_text() != text]
    if args.check:
        for path in changed:
            print(f"stale: {path.relative_to(HERE)}")
        for path in stale:
            print(f"not generated (remove it): {path.relative_to(HERE)}")
        return 1 if changed or stale else 0
    SCHEMA_DIR.mkdir(exist_ok=True)
    for path in changed:
        path.write_text(files[path])
        print(f"wrote {path.relative_to(HERE)}")
    for path in stale:
        path.unlink()
        print(f"removed {path.relative_to(HERE)}")
    if not changed and not stale:
        print(f"{len(files)} files up to date")
    return 0


if __name__ == "__main__":
    sys.exit(main())
