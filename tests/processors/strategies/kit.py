"""Builders for the strategy tests: a cell fed through ``decide`` with node meta and task labels."""
from __future__ import annotations

from suanli.processors import CellState, decide

TOPIC = "cell.kit"


class Cell:
    def __init__(self, strategy: str, config: dict | None = None):
        self.state = CellState("kit")
        self.offset = 0
        self.outputs: list = []
        self.send("PolicyChanged", {"cell": "kit", "strategy": strategy, "config": {"seed": 1, **(config or {})},
                                    "at": 0})

    def send(self, kind, event):
        self.state, outs = decide(self.state, kind, event, (TOPIC, 0, self.offset))
        self.offset += 1
        self.outputs.extend(outs)
        return outs

    def node(self, nid, cpu=32000, mem=65536, gpus=0, model="T4", **meta):
        acc = [{"kind": "GPU", "model": model, "count": gpus, "memory_mib": 16384}] if gpus else []
        return self.send("NodeRegistered", {"node_id": nid, "cell": "kit", "cpu_milli": cpu, "memory_mib": mem,
                                            "accelerators": acc, "registered_at": 0, **meta})

    def task(self, tid, cpu=1000, mem=1024, gpus=0, milli=0, models=(), labels=None, qos="SILVER", priority=0):
        return self.send("TaskSubmitted", {
            "task_id": tid, "tenant": "t", "cell": "kit", "submitted_at": 1,
            "resources": {"cpu_milli": cpu, "memory_mib": mem, "gpu_count": gpus, "gpu_milli": milli,
                          "gpu_models": list(models)},
            "qos_tier": qos, "priority": priority, "labels": labels or {}})

    def placed(self, tid):
        for k, p in reversed(self.outputs):
            if k == "TaskPlaced" and p["task_id"] == tid:
                return p
        return None

    def node_of(self, tid):
        p = self.placed(tid)
        return p and p["node_id"]

    def done(self, tid):
        t = self.state.tasks[tid]
        return self.send("TaskStatusChanged", {"task_id": tid, "cell": "kit", "node_id": t.get("node") or "",
                                               "status": "COMPLETED", "at": 2})
