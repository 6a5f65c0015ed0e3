"""Replay speed: events/s through the production replay path, and one FGD experiment.

``replay_events_per_second`` encodes a synthetic cell log (node registrations, then task
submissions) to wire-format records and re-runs it with ``replay.log_replay.regenerate``:
decode, core ``decide`` with provenance, encode — the path ``suanli replay`` takes.
"""
from __future__ import annotations

import time
from typing import Any

from suanli.bench import synthetic
from suanli.replay.log_replay import regenerate
from suanli.schemas.codec import Codec
from suanli.streams.records import RawRecord


def replay_events_per_second(codec: Codec, node_count: int, task_count: int) -> dict[str, Any]:
    events = [("NodeRegistered", n) for n in synthetic.nodes(node_count)] + \
             [("TaskSubmitted", t) for t in synthetic.tasks(task_count)]
    records = [RawRecord("bench.cells", 0, i, 0, b"bench", codec.encode(kind, payload))
               for i, (kind, payload) in enumerate(events)]
    started = time.perf_counter()
    decisions = regenerate(codec, records)
    seconds = time.perf_counter() - started
    return {"events": len(records), "decisions": len(decisions), "seconds": round(seconds, 3),
            "events_per_s": round(len(records) / seconds, 1)}


def fgd_experiment(nodes_csv: str, pods_csv: str, policy: str, seed: int = 42) -> dict[str, Any]:
    from suanli.replay.fgd_protocol import run_experiment

    started = time.perf_counter()
    result = run_experiment(nodes_csv, pods_csv, policy, seed)
    return {"policy": policy, "seed": seed, "seconds": round(time.perf_counter() - started, 3),
            "unallocated_gpu_pct": result.get("unallocated_gpu_pct")}
