"""Builders for the strategy tests: a cell fed through ``decide`` with node attributes and
task labels. Inputs are written as (partial) Avro dicts and turned into the core's typed
values; decisions come back as Avro dicts, as a consumer of the decisions topic sees them."""
from __future__ import annotations

from typing import Any

from suanli.processors import CellState, decide
from suanli.processors.model import canonical_json, from_avro, to_avro

TOPIC = "cell.kit"

# required fields no strategy test cares about (no site / region / zone unless a test sets them)
_FILL: dict[str, dict[str, Any]] = {
    "NodeRegistered": {"event_id": "", "cell": "kit", "site": "", "region": "", "zone": "", "tier": "onprem",
                       "arch": "x86_64", "registered_at": 0},
    "NodeStatusChanged": {"event_id": "", "cell": "kit", "at": 0},
    "TaskSubmitted": {"event_id": "", "tenant": "t", "cell": "kit", "submitted_at": 0},
    "TaskStatusChanged": {"event_id": "", "cell": "kit", "node_id": "", "at": 0},
    "PolicyChanged": {"event_id": "", "cell": "kit", "at": 0},
}


def typed(kind: str, event: dict) -> Any:
    """The core's value of an input written as a partial Avro dict (a PolicyChanged's
    ``config`` dict becomes its ``config_json``)."""
    if kind == "PolicyChanged" and "config" in event:
        event = {**{k: v for k, v in event.items() if k != "config"}, "config_json": canonical_json(event["config"])}
    return from_avro(kind, {**_FILL.get(kind, {}), **event})


class Cell:
    def __init__(self, strategy: str, config: dict | None = None):
        self.state = CellState("kit")
        self.offset = 0
        self.outputs: list = []
        self.send("PolicyChanged", {"cell": "kit", "strategy": strategy, "config": {"seed": 1, **(config or {})},
                                    "at": 0})

    def send(self, kind, event):
        self.state, decisions = decide(self.state, typed(kind, event), (TOPIC, 0, self.offset))
        self.offset += 1
        outs = [(d.KIND, to_avro(d)) for d in decisions]
        self.outputs.extend(outs)
        return outs

    def node(self, nid, cpu=32000, mem=65536, gpus=0, model="T4", **attrs):
        acc = [{"kind": "GPU", "model": model, "count": gpus, "memory_mib": 16384}] if gpus else []
        return self.send("NodeRegistered", {"node_id": nid, "cell": "kit", "cpu_milli": cpu, "memory_mib": mem,
                                            "accelerators": acc, "registered_at": 0, **attrs})

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
        return self.send("TaskStatusChanged", {"task_id": tid, "cell": "kit", "node_id": t.node or "",
                                               "status": "COMPLETED", "at": 2})
