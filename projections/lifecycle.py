"""Task lifecycle read model: where every task stands, folded from the log.

Sources: the cell log (submissions, cancellations, connector status), the decisions topic
(placed, pending, unschedulable, released) and the dead-letter topic. The fold is pure
and idempotent: an event id seen before is ignored, so redelivered duplicates (which the
at-least-once workers may produce) never count twice.

Lifecycle: SUBMITTED -> PENDING -> PLACED -> DISPATCHED -> RUNNING -> COMPLETED | FAILED |
CANCELLED, or UNSCHEDULABLE when no node of the cell could ever hold the task. A task whose
node went DOWN is LOST (``TaskLost``): the resources it held on that node are returned, it is
PENDING again, and a later ``TaskPlaced`` puts it elsewhere (``lost`` counts these).

Connector statuses are matched to a placement by node, as the core does: a status from a node
the task was lost from is a stale copy's and is ignored (``stale_statuses``); a status from a
node the task is not (yet) on waits for a placement on that node, because the cell log (where
statuses travel) can be read before the decisions.

Nodes carry their health from ``NodeHealthChanged`` (READY, SUSPECT, DOWN).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

ACTIVE = ("PLACED", "DISPATCHED", "RUNNING")
TERMINAL = ("COMPLETED", "FAILED", "CANCELLED", "UNSCHEDULABLE")
_ORDER = {s: i for i, s in enumerate(("SUBMITTED", "PENDING", "PLACED", "DISPATCHED", "RUNNING"))}


@dataclass
class TaskView:
    task_id: str
    tenant: str = ""
    cell: str = ""
    status: str = "SUBMITTED"
    node_id: str = ""
    gpu_devices: list[int] = field(default_factory=list)
    gpu_milli: int = 0
    gpu_request: int = 0                 # total GPU milli asked for
    cpu_milli: int = 0                   # held while placed
    memory_mib: int = 0
    reasons: list[dict[str, Any]] = field(default_factory=list)
    queue_position: int = 0
    decision_id: str = ""
    decided_at: int = 0
    submitted_at: int = 0
    placed_once: bool = False
    message: str = ""
    exit_code: Optional[int] = None      # the process's, as its connector reported it
    priority: int = 0
    seq: int = 0                         # submission order within the view
    qos_tier: str = ""
    path: list[str] = field(default_factory=list)   # decision path of the latest decision
    strategy: str = ""
    lost: int = 0                        # times its node went DOWN under it (TaskLost)
    lost_from: list[str] = field(default_factory=list)   # those nodes, in order


@dataclass
class NodeView:
    node_id: str
    cell: str
    cpu_milli: int
    memory_mib: int
    gpus: int
    gpu_model: str
    connector: str
    cpu_used: int = 0
    memory_used: int = 0
    gpu_used: list[int] = field(default_factory=list)   # milli used per device
    health: str = "READY"                # READY | SUSPECT | DOWN (NodeHealthChanged)
    last_heartbeat_at: int = 0           # as the latest health decision saw it


class LifecycleView:
    """The fold. Feed it ``(kind, payload)`` pairs from any of its source topics."""

    def __init__(self) -> None:
        self.tasks: dict[str, TaskView] = {}
        self.nodes: dict[tuple[str, str], NodeView] = {}   # (cell, node_id): ids repeat across cells
        self.dead_letters = 0
        self.dead_letter_reasons: dict[str, int] = {}
        self.violations: list[str] = []
        self.lost = 0                    # TaskLost decisions
        self.stale_statuses = 0          # statuses from a node the task had been lost from
        self._seen: set[str] = set()
        # Connector statuses travel on another topic than decisions and can be read before
        # the placement they follow; they wait here until it arrives.
        self._early: dict[str, list[dict[str, Any]]] = {}
        self._seq = 0

    def apply(self, kind: str, p: dict[str, Any]) -> None:
        event_id = p.get("event_id")
        if event_id is not None:
            if event_id in self._seen:
                return
            self._seen.add(event_id)
        handler = getattr(self, f"_on_{kind}", None)
        if handler is not None:
            handler(p)

    # ----------------------------------------------------------------- inputs
    def _task(self, p: dict[str, Any]) -> TaskView:
        view = self.tasks.get(p["task_id"])
        if view is None:
            view = self.tasks[p["task_id"]] = TaskView(p["task_id"], p.get("tenant", ""), p.get("cell", ""))
        return view

    def _on_TaskSubmitted(self, p: dict[str, Any]) -> None:
        view = self._task(p)
        r = p["resources"]
        view.submitted_at = p["submitted_at"]
        view.gpu_request = r.get("gpu_count", 0) * r.get("gpu_milli", 0)
        view.priority = p.get("priority", 0)
        view.qos_tier = p.get("qos_tier", "")
        self._seq += 1
        view.seq = self._seq

    def _on_NodeRegistered(self, p: dict[str, Any]) -> None:
        gpus = [a for a in p.get("accelerators", []) if a.get("kind") == "GPU"]
        count = sum(a["count"] for a in gpus)
        key = (p["cell"], p["node_id"])
        old = self.nodes.get(key)
        self.nodes[key] = NodeView(
            p["node_id"], p["cell"], p["cpu_milli"], p["memory_mib"], count,
            gpus[0]["model"] if gpus else "", p.get("connector", ""),
            cpu_used=old.cpu_used if old else 0, memory_used=old.memory_used if old else 0,
            gpu_used=old.gpu_used if old else [0] * count, health=old.health if old else "READY",
            last_heartbeat_at=old.last_heartbeat_at if old else 0)

    def _on_TaskStatusChanged(self, p: dict[str, Any]) -> None:
        view = self._task(p)
        status = p["status"]
        if view.status in TERMINAL:
            return
        node = p.get("node_id") or ""
        if node and node in view.lost_from and not (view.status in ACTIVE and view.node_id == node):
            self.stale_statuses += 1     # a copy on a node that went DOWN: never this placement's
            return
        if view.status not in ACTIVE or (node and node != view.node_id):
            self._early.setdefault(view.task_id, []).append(p)   # for a placement not read yet
            return
        if status in ("DISPATCHED", "RUNNING") and _ORDER.get(status, 0) > _ORDER.get(view.status, 0):
            view.status = status
        view.message = p.get("message", "") or view.message
        if p.get("exit_code") is not None:
            view.exit_code = p["exit_code"]

    # ----------------------------------------------------------------- decisions
    def _decided(self, view: TaskView, p: dict[str, Any]) -> None:
        view.decision_id = p["decision_id"]
        view.decided_at = p["provenance"]["decided_at"]
        view.path = list(p["provenance"].get("path") or [])
        view.strategy = (p["provenance"].get("strategy") or {}).get("name", "")
        view.tenant = p.get("tenant", view.tenant)
        view.cell = p.get("cell", view.cell)

    def _on_TaskPlaced(self, p: dict[str, Any]) -> None:
        view = self._task(p)
        self._decided(view, p)
        if view.status in ACTIVE:
            self.violations.append(f"{view.task_id}: placed again ({p['decision_id']}) while holding "
                                   f"{view.node_id} ({view.decision_id})")
            return
        view.status, view.node_id = "PLACED", p["node_id"]
        view.gpu_devices, view.gpu_milli = list(p["gpu_devices"]), p["gpu_milli"]
        view.cpu_milli, view.memory_mib = p["cpu_milli"], p["memory_mib"]
        view.reasons, view.queue_position, view.placed_once = [], 0, True
        self._hold(view, +1, p["decision_id"])
        waiting = self._early.pop(view.task_id, [])
        later = [s for s in waiting if (s.get("node_id") or view.node_id) != view.node_id]
        if later:
            self._early[view.task_id] = later
        for status in waiting:
            if (status.get("node_id") or view.node_id) == view.node_id:
                self._on_TaskStatusChanged(status)

    def _on_TaskPending(self, p: dict[str, Any]) -> None:
        view = self._task(p)
        self._decided(view, p)
        view.status, view.reasons, view.queue_position = "PENDING", list(p["reasons"]), p["queue_position"]

    def _on_TaskUnschedulable(self, p: dict[str, Any]) -> None:
        view = self._task(p)
        self._decided(view, p)
        view.status, view.reasons = "UNSCHEDULABLE", list(p["reasons"])

    def _on_TaskReleased(self, p: dict[str, Any]) -> None:
        view = self._task(p)
        self._decided(view, p)
        if view.status in ACTIVE:
            self._hold(view, -1, p["decision_id"])
        view.status = p["cause"] if p["cause"] in TERMINAL else "CANCELLED"

    def _on_TaskLost(self, p: dict[str, Any]) -> None:
        """Its node went DOWN: return what it held there (before any new placement is audited)."""
        view = self._task(p)
        if view.status in TERMINAL:
            return
        self._decided(view, p)
        self.lost += 1
        view.lost += 1
        view.lost_from.append(p["node_id"])
        if view.status in ACTIVE and view.node_id == p["node_id"]:
            self._hold(view, -1, p["decision_id"])
        elif view.status in ACTIVE:
            self.violations.append(f"{view.task_id}: lost from {p['node_id']} ({p['decision_id']}) while placed "
                                   f"on {view.node_id}")
        view.status, view.node_id, view.gpu_devices, view.message = "PENDING", "", [], p.get("reason", "")
        early = [s for s in self._early.get(view.task_id, []) if s.get("node_id") != p["node_id"]]
        self._early.pop(view.task_id, None)
        if early:
            self._early[view.task_id] = early

    def _on_NodeHealthChanged(self, p: dict[str, Any]) -> None:
        node = self.nodes.get((p["cell"], p["node_id"]))
        if node is not None:
            node.health = p["status"]
            node.last_heartbeat_at = p.get("last_heartbeat_at", 0)

    def _hold(self, view: TaskView, sign: int, decision_id: str) -> None:
        """Add (+1) or return (-1) a placement's resources; audit capacity on every add.

        This is the capacity audit: it uses only node registrations and the decisions, never
        the scheduler's own state, so a scheduler bug cannot hide an over-commitment.
        """
        node = self.nodes.get((view.cell, view.node_id))
        if node is None:
            self.violations.append(f"{decision_id}: placed on unregistered node {view.node_id}")
            return
        node.cpu_used += sign * view.cpu_milli
        node.memory_used += sign * view.memory_mib
        for d in view.gpu_devices:
            if not 0 <= d < len(node.gpu_used):
                self.violations.append(f"{decision_id}: GPU {d} does not exist on {node.node_id} ({node.gpus} GPUs)")
                continue
            node.gpu_used[d] += sign * view.gpu_milli
            if sign > 0 and node.gpu_used[d] > 1000:
                self.violations.append(f"{decision_id}: {node.node_id} GPU {d} at {node.gpu_used[d]} milli")
        if sign > 0 and node.cpu_used > node.cpu_milli:
            self.violations.append(f"{decision_id}: {node.node_id} CPU {node.cpu_used}/{node.cpu_milli} milli")
        if sign > 0 and node.memory_used > node.memory_mib:
            self.violations.append(f"{decision_id}: {node.node_id} memory {node.memory_used}/{node.memory_mib} MiB")

    def _on_DeadLetter(self, p: dict[str, Any]) -> None:
        self.dead_letters += 1
        self.dead_letter_reasons[p["error_kind"]] = self.dead_letter_reasons.get(p["error_kind"], 0) + 1

    # ----------------------------------------------------------------- queries
    def counts(self) -> dict[str, int]:
        statuses = [t.status for t in self.tasks.values()]
        return {
            "submitted": sum(1 for t in self.tasks.values() if t.submitted_at or t.decision_id),
            "placed": sum(1 for t in self.tasks.values() if t.placed_once),
            "running": statuses.count("RUNNING") + statuses.count("DISPATCHED") + statuses.count("PLACED"),
            "completed": statuses.count("COMPLETED"),
            "failed": statuses.count("FAILED"),
            "cancelled": statuses.count("CANCELLED"),
            "pending": statuses.count("PENDING"),
            "unschedulable": statuses.count("UNSCHEDULABLE"),
            "dead_lettered": self.dead_letters,
            "capacity_violations": len(self.violations),
            "lost": self.lost,
            "nodes_suspect": sum(1 for n in self.nodes.values() if n.health == "SUSPECT"),
            "nodes_down": sum(1 for n in self.nodes.values() if n.health == "DOWN"),
        }

    def health_counts(self, cell: str | None = None) -> dict[str, int]:
        """Nodes per health (READY, SUSPECT, DOWN), optionally of one cell."""
        out = {"READY": 0, "SUSPECT": 0, "DOWN": 0}
        for (c, _n), node in self.nodes.items():
            if cell in (None, c):
                out[node.health] = out.get(node.health, 0) + 1
        return out

    def undecided(self, task_ids: set[str] | None = None) -> list[str]:
        """Tasks with no decision yet (still SUBMITTED), optionally among ``task_ids``."""
        pool = self.tasks if task_ids is None else {t: self.tasks.get(t) for t in task_ids}
        return sorted(t for t, v in pool.items() if v is None or v.status == "SUBMITTED")

    def pending(self, cell: str | None = None) -> list[TaskView]:
        """Pending tasks in the scheduler's queue order, with their current positions.

        The core queues by priority (highest first), then arrival; ``queue_position`` is
        recomputed here per cell, so it reflects tasks placed since the pending decision.
        """
        waiting = sorted((t for t in self.tasks.values() if t.status == "PENDING" and cell in (None, t.cell)),
                         key=lambda t: (t.cell, -t.priority, t.seq, t.task_id))
        position: dict[str, int] = {}
        for t in waiting:
            position[t.cell] = position.get(t.cell, 0) + 1
            t.queue_position = position[t.cell]
        return waiting

    def gpu_allocation_pct(self) -> float:
        total = sum(n.gpus for n in self.nodes.values()) * 1000
        used = sum(sum(n.gpu_used) for n in self.nodes.values())
        return 100.0 * used / total if total else 0.0

