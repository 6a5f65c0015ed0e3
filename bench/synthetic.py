"""Deterministic synthetic clusters and workloads for the benchmarks.

Modelled on scheduler_perf's SchedulingBasic: uniform nodes, small pods. Our nodes carry
GPUs (the openb node shapes) and half the tasks ask for a share of one GPU, so the
GPU-aware path is exercised too.
"""
from __future__ import annotations

import csv
import random
from pathlib import Path
from typing import Any

# (cpu_milli, memory_mib, gpus, model) shapes from the openb GPU node list
NODE_SHAPES = [(96000, 786432, 8, "V100M32"), (64000, 262144, 2, "P100"), (96000, 393216, 8, "G2"),
               (128000, 786432, 8, "G3"), (64000, 262144, 4, "T4")]


def nodes(count: int, cell: str = "bench", seed: int = 1) -> list[dict[str, Any]]:
    rnd = random.Random(seed)
    out = []
    for i in range(count):
        cpu, mem, gpus, model = NODE_SHAPES[rnd.randrange(len(NODE_SHAPES))]
        out.append({"event_id": f"bench/node/{i}", "node_id": f"node-{i:05d}", "cell": cell, "site": "s1",
                    "region": "r1", "zone": f"z{i % 3}", "tier": "cloud", "arch": "x86_64",
                    "cpu_milli": cpu, "memory_mib": mem,
                    "accelerators": [{"kind": "GPU", "model": model, "count": gpus, "memory_mib": 0}],
                    "pricing": "ON_DEMAND", "price_per_hour": 1.0, "pue": 1.2, "carbon_g_per_kwh": 300.0,
                    "connector": "sim", "labels": {}, "registered_at": 0})
    return out


def tasks(count: int, cell: str = "bench", seed: int = 2, prefix: str = "task") -> list[dict[str, Any]]:
    rnd = random.Random(seed)
    out = []
    for i in range(count):
        shared = i % 2 == 0
        out.append({"event_id": f"bench/{prefix}/{i}", "task_id": f"{prefix}-{i:06d}", "tenant": "bench",
                    "cell": cell, "submitted_at": 1_000 + i,
                    "resources": {"cpu_milli": rnd.choice((500, 1000, 2000)), "memory_mib": rnd.choice((512, 1024)),
                                  "gpu_count": 1 if shared else 0, "gpu_milli": rnd.choice((100, 250)) if shared else 0,
                                  "gpu_models": [], "gpu_memory_mib": 0, "accelerators": []},
                    "qos_tier": "SILVER", "priority": 0, "labels": {}, "deadline": None,
                    "duration_estimate_ms": 3_600_000_000, "command": None, "profile": None})
    return out


def write_node_csv(path: Path, count: int, seed: int = 1) -> Path:
    """The same nodes in the openb CSV format (for `suanli up --nodes`)."""
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["sn", "cpu_milli", "memory_mib", "gpu", "model"])
        for n in nodes(count, seed=seed):
            acc = n["accelerators"][0]
            w.writerow([n["node_id"], n["cpu_milli"], n["memory_mib"], acc["count"], acc["model"]])
    return path


def write_pod_csv(path: Path, count: int, seed: int = 2) -> Path:
    """Small tasks in the openb pod CSV format (for `suanli up --pods`); they run for 1000 h."""
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli", "gpu_spec", "qos", "pod_phase",
                    "creation_time", "deletion_time", "scheduled_time"])
        for t in tasks(count, seed=seed):
            r = t["resources"]
            w.writerow([t["task_id"], r["cpu_milli"], r["memory_mib"], r["gpu_count"], r["gpu_milli"], "", "BE",
                        "Running", 0, 3_600_000, 0])
    return path
