"""A small synthetic cell log, encoded with the real codec and an offline registry.

``live_run`` plays the part of the scheduler worker: the production ``CellRunner`` over
the whole partition (several cells interleaved), starting from the default policy with no
PolicyChanged, exactly as a live cell starts. Its decision records are "what was recorded".
"""
from __future__ import annotations

import random
from pathlib import Path

from suanli.bench.recorded_log import offline_codec  # noqa: F401  (the tests import it from here)
from suanli.schemas.codec import Codec
from suanli.streams.cell_runner import CellRunner
from suanli.streams.records import RawRecord
from suanli.streams.topics import TopicNames
from suanli.config import load_settings
from suanli.replay.export import build_logdir

TOPICS = TopicNames("t")              # the synthetic log's namespace
CELL_LOG = TOPICS.cell_log            # "t.cells"
DECISIONS_TOPIC = TOPICS.decisions    # "t.decisions"




def inputs(cell: str = "c1", n_nodes: int = 6, n_tasks: int = 80, seed: int = 7,
           other_cell: str | None = "c2") -> list[tuple[str, str, dict]]:
    """(cell, kind, payload) in log order: nodes, then tasks with completions."""
    rnd = random.Random(seed)
    out: list[tuple[str, str, dict]] = []
    for i in range(n_nodes):
        gpus = (2, 4, 8)[i % 3]
        out.append((cell, "NodeRegistered", {
            "event_id": f"{cell}/n{i}", "node_id": f"n{i}", "cell": cell, "site": "s", "region": "r",
            "zone": "", "tier": "cloud", "arch": "x86_64", "cpu_milli": 32000, "memory_mib": 131072,
            "accelerators": [{"kind": "GPU", "model": "T4" if i % 2 else "G2", "count": gpus, "memory_mib": 0}],
            "pricing": "ON_DEMAND", "price_per_hour": 0.0, "pue": 1.0, "carbon_g_per_kwh": 0.0,
            "connector": "sim", "labels": {}, "registered_at": 0}))
    running: list[str] = []
    t = 1000
    for k in range(n_tasks):
        t += rnd.randint(1, 500)
        shape = rnd.choice([(1, 250), (1, 500), (1, 1000), (2, 1000), (0, 0), (1, 300)])
        tid = f"{cell}-task{k}"
        out.append((cell, "TaskSubmitted", {
            "event_id": f"{cell}/submit/{k}", "task_id": tid, "tenant": "t", "cell": cell, "submitted_at": t,
            "resources": {"cpu_milli": rnd.choice([1000, 4000, 8000]), "memory_mib": 2048,
                          "gpu_count": shape[0], "gpu_milli": shape[1], "gpu_models": [], "gpu_memory_mib": 0,
                          "accelerators": []},
            "qos_tier": rnd.choice(["GOLD", "SILVER", "BRONZE"]), "priority": 0, "labels": {},
            "deadline": None, "duration_estimate_ms": None, "command": None}))
        running.append(tid)
        if other_cell and k % 10 == 0:
            out.append((other_cell, "TaskSubmitted", {
                "event_id": f"{other_cell}/submit/{k}", "task_id": f"{other_cell}-task{k}", "tenant": "t",
                "cell": other_cell, "submitted_at": t,
                "resources": {"cpu_milli": 1000, "memory_mib": 10, "gpu_count": 0, "gpu_milli": 0, "gpu_models": [],
                              "gpu_memory_mib": 0, "accelerators": []},
                "qos_tier": "SILVER", "priority": 0, "labels": {}, "deadline": None,
                "duration_estimate_ms": None, "command": None}))
        if k % 3 == 2 and running:
            done = running.pop(rnd.randrange(len(running)))
            out.append((cell, "TaskStatusChanged", {
                "event_id": f"{done}/done", "task_id": done, "cell": cell, "node_id": "", "status": "COMPLETED",
                "at": t + 1, "exit_code": 0, "message": "", "usage": None}))
    return out


def encode_log(codec: Codec, items: list[tuple[str, str, dict]], partition: int = 0) -> list[RawRecord]:
    return [RawRecord(CELL_LOG, partition, off, 1_700_000_000_000 + off, cell.encode(), codec.encode(kind, payload))
            for off, (cell, kind, payload) in enumerate(items)]


def live_run(codec: Codec, records: list[RawRecord], redeliver_every: int = 0) -> list[RawRecord]:
    """Decision records as the worker would have written them (keyed by cell).

    ``redeliver_every`` > 0 writes every n-th input's decisions twice (at-least-once
    redelivery after a crash), as duplicates with the same event ids.
    """
    runner = CellRunner(codec, TOPICS)
    out: list[RawRecord] = []
    for i, rec in enumerate(records):
        produced = [r for r in runner.apply(rec) if r.topic == DECISIONS_TOPIC]
        copies = 2 if redeliver_every and i % redeliver_every == 0 else 1
        for _ in range(copies):
            for r in produced:
                out.append(RawRecord(DECISIONS_TOPIC, 0, len(out), rec.timestamp, r.key, r.value))
    return out


# The openb trace: ../shared/data/openb beside the checkout, or SUANLI_OPENB_DIR.
DATA = load_settings().openb_dir


def make_logdir(out: Path, *, lo: int = 0, n_tasks: int = 200, redeliver_every: int = 0) -> Path:
    """A log directory of cell c1 built from a synthetic partition (cells c1 and c2)."""
    codec, registry = offline_codec()
    records = encode_log(codec, inputs(n_tasks=n_tasks))
    decisions = live_run(codec, records, redeliver_every=redeliver_every)
    key = b"c1"
    build_logdir(out, codec, registry, cell="c1", namespace=TOPICS.namespace, cell_log_topic=CELL_LOG, partition=0,
                 lo=lo, hi=len(records), prefix=[r for r in records[:lo] if r.key == key],
                 inputs=[r for r in records[lo:] if r.key == key],
                 decision_candidates=[r for r in decisions if r.key == key], log=lambda _m: None)
    return out
