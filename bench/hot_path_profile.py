"""The hot-path figures quoted in BENCHMARKS.md "Where the time goes" (issue 16), reproduced.

``python -m suanli.bench.hot_path_profile`` (needs the stack for the codec's registry) prints:

- **rows**: for 3,000 decisions at 5,000 nodes, the rows FGD is asked to score
  (``rows_asked_for``: what a scorer without a cache evaluates) against the node classes
  it scores now (``classes_scored``);
- **snapshot**: ``CellState.to_snapshot`` of 5,000 nodes + 10,000 tasks, cold and warm
  (memoised registrations and submissions), then the JSON and zlib of the worker's format;
- **metrics**: intake's ``triage`` of a simulated NodeMetrics (decoded and validated before,
  skipped undecoded now) against ``Codec.decode`` + ``validate_event`` of the same record.

Wall-clock figures of one run on a shared machine: compare them within the run.
"""
from __future__ import annotations

import json
import time
import zlib
from typing import Any

from suanli.bench import synthetic
from suanli.bench.core import LOG
from suanli.processors.core import decide
from suanli.processors.model import NodeRegistered, TaskSubmitted, from_avro
from suanli.processors.state import CellState


def _cell(nodes: int, tasks: int) -> CellState:
    state, offset = CellState("bench"), 0
    for node in synthetic.nodes(nodes):
        decide(state, from_avro(NodeRegistered, node), (LOG, 0, offset))
        offset += 1
    for task in synthetic.tasks(tasks):
        decide(state, from_avro(TaskSubmitted, task), (LOG, 0, offset))
        offset += 1
    return state


def rows(nodes: int = 5000, tasks: int = 3000) -> dict[str, Any]:
    """Rows a per-row FGD scorer evaluates against the classes scored now. Counted on the
    numpy path (``_fill``), which scores the very classes the kernel path does
    (``fgd_class_scores``: each class not yet known, once). Without the kernels a cycle
    hands FGD every feasible row (with them, one row per node class:
    ``framework.class_scores``), so ``rows_asked_for`` is the per-row count."""
    from suanli.processors import compiled
    from suanli.processors.plugins import fgd

    seen = {"calls": 0, "rows": 0, "classes": 0}
    fill, score_states = fgd.FGD._fill, fgd.FGD._score_states

    def counting_fill(self, ctx, rows_, *rest):       # noqa: ANN001 - a pass-through
        seen["calls"] += 1
        seen["rows"] += int(rows_.size)
        return fill(self, ctx, rows_, *rest)

    def counting_states(self, s, tt, r, cpu, gpu, midx):   # noqa: ANN001
        seen["classes"] += int(cpu.size)
        return score_states(self, s, tt, r, cpu, gpu, midx)

    fgd.FGD._fill, fgd.FGD._score_states = counting_fill, counting_states
    kernels, compiled.KERNELS = compiled.KERNELS, None
    try:
        _cell(nodes, tasks)
    finally:
        fgd.FGD._fill, fgd.FGD._score_states = fill, score_states
        compiled.KERNELS = kernels
    return {"nodes": nodes, "decisions": tasks, "rows_asked_for": seen["rows"],
            "classes_scored": seen["classes"], "calls": seen["calls"]}


def snapshot(nodes: int = 5000, tasks: int = 10000) -> dict[str, Any]:
    state = _cell(nodes, tasks)
    out: dict[str, Any] = {"nodes": nodes, "tasks": tasks}
    for label in ("cold", "warm"):
        t0 = time.perf_counter()
        snap = state.to_snapshot()
        out[f"to_snapshot_ms_{label}"] = round(1000 * (time.perf_counter() - t0), 1)
    t0 = time.perf_counter()
    text = json.dumps({"cells": {"bench": snap}}, sort_keys=True, separators=(",", ":")).encode()
    out["json_ms"] = round(1000 * (time.perf_counter() - t0), 1)
    t0 = time.perf_counter()
    blob = zlib.compress(text, 3)
    out["zlib_ms"] = round(1000 * (time.perf_counter() - t0), 1)
    out["json_mb"], out["zlib_mb"] = round(len(text) / 1e6, 2), round(len(blob) / 1e6, 2)
    return out


def metrics(samples: int = 200) -> dict[str, Any]:
    from suanli.config import settings
    from suanli.connectors.sim_telemetry import TelemetryGenerator
    from suanli.schemas.codec import Codec
    from suanli.schemas.models import validate_event
    from suanli.schemas.registry import RegistryClient
    from suanli.streams.intake import triage
    from suanli.streams.records import RawRecord
    from suanli.streams.topics import TopicNames

    gen = TelemetryGenerator(seed=1)
    with RegistryClient(settings().registry_url) as registry:
        codec = Codec(registry)
        values = []
        for i, n in enumerate(synthetic.nodes(samples)):
            acc = n["accelerators"][0]
            node = {"node_id": n["node_id"], "cpu_milli": n["cpu_milli"], "memory_mib": n["memory_mib"],
                    "gpu_count": acc["count"], "gpu_model": acc["model"]}
            values.append(codec.encode("NodeMetrics", gen.node_metrics(node, [], 1000, 1, f"m{i}", "bench")))
        records = [RawRecord("bench.raw.nodes", 0, i, 0, b"k", v) for i, v in enumerate(values)]
        topics = TopicNames("bench")
        t0 = time.perf_counter()
        for value in values:
            kind, payload = codec.decode(value)
            validate_event(kind, payload)
        decoded = time.perf_counter() - t0
        t0 = time.perf_counter()
        for record in records:
            triage(codec, record, topics)
        skipped = time.perf_counter() - t0
    return {"samples": samples, "bytes_mean": round(sum(map(len, values)) / samples),
            "decode_and_validate_us": round(1e6 * decoded / samples, 1),
            "intake_triage_us": round(1e6 * skipped / samples, 1)}


def main() -> int:
    for name, step in (("rows", rows), ("snapshot", snapshot), ("metrics", metrics)):
        print(name, json.dumps(step()), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
