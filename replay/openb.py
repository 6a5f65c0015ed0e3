"""Import the Alibaba GPU-sharing trace (openb, cluster-trace-gpu-v2023) as core events.

``read_nodes(path)`` -> NodeRegistered dicts; ``read_pods(path)`` -> TaskSubmitted dicts.
Mapping: cell "openb"; ``qos`` LS/Guaranteed -> GOLD, Burstable -> SILVER, BE -> BRONZE
(the original kept in ``labels["qos"]``); ``creation_time`` (s) -> ``submitted_at`` (ms);
``scheduled_time`` / ``deletion_time`` / ``pod_phase`` kept in labels, and
``duration_estimate_ms = (deletion_time - scheduled_time) * 1000`` when both are set.
``gpu_spec`` ('|'-separated, empty = any) -> ``resources.gpu_models``. Files without the
time/QoS columns (multigpu20) get submitted_at 0, qos BRONZE-free default SILVER.
"""
from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

CELL = "openb"
QOS_TIER = {"LS": "GOLD", "Guaranteed": "GOLD", "Burstable": "SILVER", "BE": "BRONZE"}


def _int(row: dict[str, str], key: str) -> int | None:
    v = row.get(key)
    if v is None or v == "":
        return None
    return int(float(v))


def read_nodes(path: str | Path, cell: str = CELL) -> list[dict[str, Any]]:
    out = []
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            gpu = _int(row, "gpu") or 0
            model = (row.get("model") or "").strip()
            acc = [{"kind": "GPU", "model": model or "unknown", "count": gpu, "memory_mib": 0}] if gpu > 0 else []
            out.append({
                "event_id": f"{cell}/node/{row['sn']}", "node_id": row["sn"], "cell": cell,
                "site": cell, "region": "cn", "zone": "", "tier": "cloud", "arch": "x86_64",
                "cpu_milli": _int(row, "cpu_milli") or 0, "memory_mib": _int(row, "memory_mib") or 0,
                "accelerators": acc, "pricing": "ON_DEMAND", "price_per_hour": 0.0, "pue": 1.0,
                "carbon_g_per_kwh": 0.0, "connector": "openb", "labels": {}, "registered_at": 0})
    return out


def read_pods(path: str | Path, cell: str = CELL, tenant: str = "openb") -> list[dict[str, Any]]:
    out = []
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            num = _int(row, "num_gpu") or 0
            milli = _int(row, "gpu_milli") or 0
            spec = (row.get("gpu_spec") or "").strip()
            qos = (row.get("qos") or "").strip()
            created, deleted, sched = (_int(row, k) for k in ("creation_time", "deletion_time", "scheduled_time"))
            labels = {"source": "openb"}
            if qos:
                labels["qos"] = qos
            for k in ("pod_phase", "creation_time", "deletion_time", "scheduled_time"):
                if row.get(k):
                    labels[k] = row[k]
            dur = (deleted - sched) * 1000 if deleted is not None and sched is not None and deleted >= sched else None
            out.append({
                "event_id": f"{cell}/task/{row['name']}", "task_id": row["name"], "tenant": tenant,
                "cell": cell, "submitted_at": (created or 0) * 1000,
                "resources": {"cpu_milli": _int(row, "cpu_milli") or 0, "memory_mib": _int(row, "memory_mib") or 0,
                              "gpu_count": num, "gpu_milli": milli if num > 0 else 0,
                              "gpu_models": [m for m in spec.split("|") if m], "gpu_memory_mib": 0,
                              "accelerators": []},
                "qos_tier": QOS_TIER.get(qos, "SILVER"), "priority": 0, "labels": labels,
                "deadline": None, "duration_estimate_ms": dur, "command": None})
    return out


def gpu_request(task: dict[str, Any]) -> int:
    """Total GPU milli a TaskSubmitted asks for."""
    r = task["resources"]
    return r["gpu_count"] * r["gpu_milli"] if r["gpu_count"] > 0 else 0
