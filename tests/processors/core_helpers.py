"""Tiny builders for core tests (imported by path-insensitive name).

Tests write inputs as Avro-shaped dicts and read decisions back as Avro-shaped dicts, as
the codec would at the edge: :func:`typed` fills the required fields a test does not
care about and builds the ``model`` value; outputs are ``(kind, to_avro(decision))``.
"""
from __future__ import annotations

from typing import Any

from suanli.processors import CellState, decide
from suanli.processors.model import PolicyChanged, canonical_json, from_avro, to_avro

TOPIC = "cell.test"

# Required fields of the inputs that no core test cares about.
_FILL: dict[str, dict[str, Any]] = {
    "NodeRegistered": {"event_id": "", "cell": "test", "site": "s", "region": "r", "zone": "z",
                       "tier": "onprem", "arch": "x86_64", "registered_at": 0},
    "NodeStatusChanged": {"event_id": "", "cell": "test", "at": 0},
    "TaskSubmitted": {"event_id": "", "tenant": "t", "cell": "test", "submitted_at": 0},
    "TaskCancelled": {"event_id": "", "tenant": "t", "cell": "test", "at": 0},
    "TaskStatusChanged": {"event_id": "", "cell": "test", "node_id": "", "at": 0},
    "PolicyChanged": {"event_id": "", "cell": "test", "at": 0},
    "CellTick": {"event_id": "", "cell": "test"},
    "NodeHeartbeat": {"event_id": "", "cell": "test", "seq": 0},
    "NodeConditionChanged": {"event_id": "", "cell": "test"},
}


def typed(kind: str, event: dict) -> Any:
    """The ``model`` value of an input written as a (partial) Avro dict; a ``config`` dict
    on a PolicyChanged becomes its ``config_json``."""
    if kind == "PolicyChanged" and "config" in event:
        event = {**{k: v for k, v in event.items() if k != "config"}, "config_json": canonical_json(event["config"])}
    return from_avro(kind, {**_FILL.get(kind, {}), **event})


def outputs(decisions: list) -> list[tuple[str, dict]]:
    """Decisions as the ``(kind, Avro dict)`` pairs a consumer of the decisions topic sees."""
    return [(d.KIND, to_avro(d)) for d in decisions]


class Feed:
    """Feeds inputs to ``decide`` with increasing offsets and records all outputs."""

    def __init__(self, cell: str = "test", strategy: str = "bestfit", config: dict | None = None):
        self.state = CellState(cell)
        self.offset = 0
        self.outputs: list = []
        self.send("PolicyChanged", {"cell": cell, "strategy": strategy, "config": config or {"seed": 1}, "at": 0})

    def send(self, kind: str, event: dict, offset: int | None = None):
        off = self.offset if offset is None else offset
        self.state, decisions = decide(self.state, typed(kind, event), (TOPIC, 0, off))
        outs = outputs(decisions)
        if offset is None:
            self.offset += 1
        self.outputs.extend(outs)
        return outs

    def node(self, nid: str, cpu=32000, mem=65536, gpus=0, model="T4", labels=None):
        acc = [{"kind": "GPU", "model": model, "count": gpus, "memory_mib": 16384}] if gpus else []
        return self.send("NodeRegistered", {"node_id": nid, "cell": "test", "cpu_milli": cpu, "memory_mib": mem,
                                             "accelerators": acc, "registered_at": 0, "labels": labels or {}})

    def task(self, tid: str, cpu=1000, mem=1024, gpus=0, milli=0, models=(), priority=0, at=1, qos="SILVER",
             labels=None):
        return self.send("TaskSubmitted", {"task_id": tid, "tenant": "t", "cell": "test", "submitted_at": at,
                                           "resources": {"cpu_milli": cpu, "memory_mib": mem, "gpu_count": gpus,
                                                         "gpu_milli": milli, "gpu_models": list(models)},
                                           "qos_tier": qos, "priority": priority, "labels": labels or {}})

    def status(self, tid: str, status: str, at=2):
        t = self.state.tasks.get(tid)
        return self.send("TaskStatusChanged", {"task_id": tid, "cell": "test", "node_id": (t and t.node) or "",
                                               "status": status, "at": at, "exit_code": 0, "message": ""})
