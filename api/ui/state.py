"""What the dashboard adds to the API's read model: node places, conditions, per-tenant
counts and change logs, kept up to date by a listener on :class:`ReadModel.apply`.

The lifecycle view (``projections/lifecycle.py``) already holds each node's capacity,
allocation per GPU, health and status, and each task's status. It does not keep a node's
region, zone and site (NodeRegistered has them), nor its telemetry condition
(NodeConditionChanged), and it answers counts by a scan of every task. This listener keeps
those, and two append-only change logs, so that the live stream (``routes.py``) sends each
browser only what changed since its last message:

* ``node_changes``: the keys ``(cell, node_id)`` of nodes whose allocation, health,
  status or condition may have changed, in order;
* ``task_seq`` / ``tenant_seq`` / ``queue_seq``: the sequence number of the latest change of
  a task, of any task of a tenant, and of any cell's queue (a task entering or leaving
  PENDING), so a page knows when to re-read its part;
* ``reservation_seq``: of the latest bid, reservation decision or claim (the reservations page).

Everything runs on the API's event loop, called synchronously from ``ReadModel.apply``.
"""
from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)

# Kinds that change a task (they carry ``task_id``), and the payload fields naming nodes.
TASK_KINDS = frozenset({"TaskSubmitted", "TaskCancelled", "TaskStatusChanged", "TaskPlaced", "TaskPending",
                        "TaskUnschedulable", "TaskReleased", "TaskLost", "TaskPreempted", "TaskMigrated"})
NODE_KINDS = frozenset({"NodeRegistered", "NodeHealthChanged", "NodeStatusChanged", "NodeConditionChanged"})
NODE_FIELDS = ("node_id", "from_node", "to_node")
RESERVATION_KINDS = frozenset({"ReservationBid", "ReservationGranted", "ReservationRejected", "ReservationExpired",
                               "ReservationReleased"})
ACTIVE = ("PLACED", "DISPATCHED", "RUNNING")
# The change log keeps at most this many entries; a browser further behind gets everything again.
MAX_LOG = 200_000


@dataclass(frozen=True)
class Place:
    """Where a node is (from its NodeRegistered)."""

    region: str = ""
    zone: str = ""
    site: str = ""
    rack: str = ""
    tier: str = ""


class DashboardState:
    """The dashboard's additions to ``model`` (a :class:`suanli.api.readmodel.ReadModel`).

    Create it before the model is fed (``suanli api serve`` does): it registers itself in
    ``model.listeners``. Created over a model that already holds records, it takes the nodes
    and tasks as they are (places and conditions of nodes registered before are unknown).
    """

    def __init__(self, model: Any):
        self.model = model
        self.places: dict[tuple[str, str], Place] = {}
        self.conditions: dict[tuple[str, str], str] = {}
        self.index: dict[tuple[str, str], int] = {}          # node key -> small stable number (DOM ids)
        self.keys: list[tuple[str, str]] = []                # and back
        self.cell_seen: dict[str, int] = {}                  # cell -> seq of its latest event
        self.seq = 0
        self.node_changes: list[tuple[str, str]] = []
        self.node_base = 0                                   # seq-less index of node_changes[0]
        self.task_seq: dict[str, int] = {}
        self.tenant_seq: dict[str, int] = {}
        self.queue_seq = 0
        self.reservation_seq = 0
        self.counts: dict[str, Counter] = {}                 # tenant -> status -> tasks (and "placed")
        self._task: dict[str, tuple[str, str, bool]] = {}    # task -> (tenant, status, placed once)
        self._moving: dict[str, tuple[str, str]] = {}        # task -> old node of a reserve-first move
        self.faults = 0
        for key in list(model.lifecycle.nodes):
            self._node(key)
        for task_id in list(model.lifecycle.tasks) + list(model.submissions):
            self._refresh(task_id)
        model.listeners.append(self.observe)
        model.forget_listeners.append(self.forget)

    # ------------------------------------------------------------------ the listener
    def observe(self, role: str, kind: str, p: dict[str, Any], *_position: Any) -> None:
        """Called by ``ReadModel.apply`` after each record. Never raises: a fault here must not
        stop the API's read model (it is logged, and the dashboard may then lag behind)."""
        try:
            self._observe(kind, p)
        except Exception:   # noqa: BLE001 - see the docstring
            self.faults += 1
            if self.faults <= 10:
                log.exception("dashboard: cannot follow %s %s", kind, p.get("event_id"))

    def _observe(self, kind: str, p: dict[str, Any]) -> None:
        reservations = getattr(self.model, "reservations", None)
        if kind in RESERVATION_KINDS or (kind == "TaskPlaced" and reservations is not None
                                         and reservations.labelled(p.get("task_id") or "")):
            self.seq += 1
            self.reservation_seq = self.seq
        if kind in TASK_KINDS:
            task_id = p.get("task_id")
            if not task_id:
                return
            cell = p.get("cell") or ""
            for f in NODE_FIELDS:
                if p.get(f):
                    self._node((cell, p[f]))
            view = self.model.lifecycle.tasks.get(task_id)
            if view is not None:
                cell = view.cell or cell
                if view.node_id:
                    self._node((cell, view.node_id))
                old = self._moving.pop(task_id, None)
                if old is not None:
                    self._node(old)
                if view.moving_from:
                    self._moving[task_id] = (cell, view.moving_from)
                    self._node((cell, view.moving_from))
            self._refresh(task_id)
            if cell:
                self.cell_seen[cell] = self.seq
        elif kind in NODE_KINDS:
            key = (p.get("cell") or "", p.get("node_id") or "")
            if kind == "NodeRegistered":
                labels = p.get("labels") or {}
                self.places[key] = Place(p.get("region", ""), p.get("zone", ""), p.get("site", ""),
                                         labels.get("rack", ""), str(p.get("tier", "")))
            elif kind == "NodeConditionChanged":
                self.conditions[key] = p.get("condition") or "NORMAL"
            self._node(key)
            self.cell_seen[key[0]] = self.seq

    def forget(self, task_ids: list[str]) -> None:
        """The read model forgot these finished tasks: drop their marks (the per-tenant
        counts keep counting them, as the lifecycle's tallies do)."""
        for task_id in task_ids:
            self._task.pop(task_id, None)
            self.task_seq.pop(task_id, None)

    def _node(self, key: tuple[str, str]) -> None:
        self.seq += 1
        if key not in self.index:
            self.index[key] = len(self.keys)
            self.keys.append(key)
        self.node_changes.append(key)
        if len(self.node_changes) > MAX_LOG:
            drop = MAX_LOG // 2
            del self.node_changes[:drop]
            self.node_base += drop

    def _refresh(self, task_id: str) -> None:
        """Re-count one task after a change (its tenant's counts, the change marks)."""
        lifecycle = self.model.lifecycle
        view = lifecycle.tasks.get(task_id)
        if view is not None:
            now = (view.tenant, view.status, view.placed_once)
        else:
            sub = self.model.submissions.get(task_id)
            if sub is None:
                return
            now = (sub.tenant, "SUBMITTED", False)
        before = self._task.get(task_id)
        self.seq += 1
        self.task_seq[task_id] = self.seq
        if now[0]:
            self.tenant_seq[now[0]] = self.seq
        if before == now:
            if now[1] == "PENDING":      # new reasons or position
                self.queue_seq = self.seq
            return
        if before is not None:
            c = self.counts.setdefault(before[0], Counter())
            c[before[1]] -= 1
            c["placed"] -= before[2]
            if before[0] != now[0]:
                self.tenant_seq[before[0]] = self.seq
        c = self.counts.setdefault(now[0], Counter())
        c[now[1]] += 1
        c["placed"] += now[2]
        self._task[task_id] = now
        if "PENDING" in (now[1], before[1] if before else "") or "PREEMPTED" in (now[1], before[1] if before else ""):
            self.queue_seq = self.seq

    # ------------------------------------------------------------------ reads
    def tenant_counts(self, tenant: str) -> dict[str, int]:
        """The tenant's tasks by status, as the summary cards show them."""
        c = self.counts.get(tenant, Counter())
        return {"placed": c["placed"], "pending": c["PENDING"], "running": sum(c[s] for s in ACTIVE),
                "completed": c["COMPLETED"], "failed": c["FAILED"], "cancelled": c["CANCELLED"],
                "unschedulable": c["UNSCHEDULABLE"], "preempted": c["PREEMPTED"], "submitted": c["SUBMITTED"],
                "total": sum(v for k, v in c.items() if k != "placed")}

    def cells(self) -> list[str]:
        """Cells with nodes, the most recently active first."""
        cells = {c for c, _n in self.model.lifecycle.nodes}
        return sorted(cells, key=lambda c: (-self.cell_seen.get(c, 0), c))

    def condition(self, key: tuple[str, str]) -> str:
        return self.conditions.get(key, "NORMAL")

    def place(self, key: tuple[str, str]) -> Place:
        return self.places.get(key) or Place()

    def changed_nodes(self, since: int) -> tuple[list[tuple[str, str]] | None, int]:
        """Node keys changed since log position ``since`` (None: fell behind, send all) and
        the new position."""
        end = self.node_base + len(self.node_changes)
        if since < self.node_base:
            return None, end
        return list(dict.fromkeys(self.node_changes[since - self.node_base:])), end

    def node_log_end(self) -> int:
        return self.node_base + len(self.node_changes)
