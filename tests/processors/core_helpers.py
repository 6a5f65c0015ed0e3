"""Tiny builders for core tests (imported by path-insensitive name)."""
from __future__ import annotations

from suanli.processors import CellState, decide

TOPIC = "cell.test"


class Feed:
    """Feeds inputs to ``decide`` with increasing offsets and records all outputs."""

    def __init__(self, cell: str = "test", strategy: str = "bestfit", config: dict | None = None):
        self.state = CellState(cell)
        self.offset = 0
        self.outputs: list = []
        self.send("PolicyChanged", {"cell": cell, "strategy": strategy, "config": config or {"seed": 1}, "at": 0})

    def send(self, kind: str, event: dict, offset: int | None = None):
        off = self.offset if offset is None else offset
        self.state, outs = decide(self.state, kind, event, (TOPIC, 0, off))
        if offset is None:
            self.offset += 1
        self.outputs.extend(outs)
        return outs

    def node(self, nid: str, cpu=32000, mem=65536, gpus=0, model="T4"):
        acc = [{"kind": "GPU", "model": model, "count": gpus, "memory_mib": 16384}] if gpus else []
        return self.send("NodeRegistered", {"node_id": nid, "cell": "test", "cpu_milli": cpu, "memory_mib": mem,
                                             "accelerators": acc, "registered_at": 0})

    def task(self, tid: str, cpu=1000, mem=1024, gpus=0, milli=0, models=(), priority=0, at=1):
        return self.send("TaskSubmitted", {"task_id": tid, "tenant": "t", "cell": "test", "submitted_at": at,
                                           "resources": {"cpu_milli": cpu, "memory_mib": mem, "gpu_count": gpus,
                                                         "gpu_milli": milli, "gpu_models": list(models)},
                                           "qos_tier": "SILVER", "priority": priority, "labels": {}})

    def status(self, tid: str, status: str, at=2):
        t = self.state.tasks.get(tid, {})
        return self.send("TaskStatusChanged", {"task_id": tid, "cell": "test", "node_id": t.get("node") or "",
                                               "status": status, "at": at, "exit_code": 0, "message": ""})
