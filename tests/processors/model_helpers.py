"""Builders for the model-cache and prewarm tests: edge nodes with caches, tasks with models."""
from __future__ import annotations

from core_helpers import Feed

GIB = 1024


def edge_node(f: Feed, nid: str, site: str, cache_gib: int = 100, gpus: int = 4, tier: str = "edge"):
    return f.send("NodeRegistered", {
        "node_id": nid, "cell": "test", "site": site, "region": f"{site}-r", "zone": f"{site}-z", "tier": tier, "cpu_milli": 64000, "memory_mib": 262144,
        "accelerators": [{"kind": "GPU", "model": "L4", "count": gpus, "memory_mib": 24576}],
        "registered_at": 0, "model_cache_mib": cache_gib * GIB})


def model_task(f: Feed, tid: str, arch: str | None, size_gib: int = 10, at: int = 1, site: str | None = None,
               gpus: int = 1):
    profile = {"model_arch": arch, "model_uri": f"s3://models/{arch}", "model_size_mib": size_gib * GIB} if arch \
        else None
    return f.send("TaskSubmitted", {
        "task_id": tid, "tenant": "t", "cell": "test", "submitted_at": at,
        "resources": {"cpu_milli": 4000, "memory_mib": 16384, "gpu_count": gpus, "gpu_milli": 1000},
        "labels": {"user-site": site} if site else {}, "profile": profile})


def tick(f: Feed, at: int):
    return f.send("CellTick", {"at": at, "period_ms": 1000})
