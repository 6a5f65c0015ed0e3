"""Task lifecycle read model: where every task stands, folded from the log.

Sources: the cell log (submissions, cancellations, connector status), the decisions topic
(placed, pending, unschedulable, released) and the dead-letter topic. The fold is pure
and idempotent: an event id seen before is ignored, so redelivered duplicates (which the
at-least-once workers may produce) never count twice.

Lifecycle: SUBMITTED -> PENDING -> PLACED -> DISPATCHED -> RUNNING -> COMPLETED | FAILED |
CANCELLED, or UNSCHEDULABLE when no node of the cell could ever hold the task. A task whose
node went DOWN is LOST (``TaskLost``): the resources it held on that node are returned, it is
PENDING again, and a later ``TaskPlaced`` puts it elsewhere (``lost`` counts these).

Preemption (``TaskPreempted``, about the victim): what the victim held is returned at once,
its status becomes PREEMPTED and its node is cleared; ``preempted_by`` names the preemptor
and ``requeue_at`` (decision time + ``grace_ms``, cell clock) when it is queued again, which
the ``TaskPending`` that follows makes it (PENDING). ``preemptions`` keeps every one of them.

Migration (``TaskMigrated``): the task holds its place on ``to_node`` (status PLACED there,
the amounts its placement had, GPU devices from the decision) and ``migrations`` records
from -> to, cause and elapsed time. A plain move returns the old place at once. A
reserve-first move keeps the old copy's place held until that copy is over, as the core
does: the new copy reports RUNNING, the old one reports an end (COMPLETED, FAILED,
CANCELLED) from its node, its node goes DOWN, or the task is released or lost.

Connector statuses are matched to a placement by node, as the core does, and, when a status's
event id follows the kit's ``{dispatch_id}:{status}`` convention with a dispatch id of this
cell (the placement's decision id), by copy: a status from a node the task was lost from,
preempted from or moved off is a stale copy's and is ignored (``stale_statuses``), so is one
of an earlier copy; a status from a node (or of a copy) the task is not (yet) on waits for
that placement, because the cell log (where statuses travel) can be read before the
decisions. (Without the dispatch-id convention, statuses of two copies on one node cannot be
told apart, and an old copy's end read before its move keeps a reserve-first hold until the
new copy runs.)

A status of a task the fold does not know (neither its submission nor a decision read) makes
no task: a status names no tenant, and a task that never comes (a forged or misrouted status,
or one whose submission left the log by retention) would stay open and unowned for good. It
waits, for the newest ``orphans_kept`` such tasks, and is applied as if just read when the
task's submission or first decision is; the oldest beyond those are dropped with their
event ids (``orphans_dropped``).

Nodes carry their health from ``NodeHealthChanged`` (READY, SUSPECT, DOWN) and their status
from ``NodeStatusChanged`` (READY, CORDONED, DRAINING, DOWN: what the operator or the
connector said, e.g. ``suanli nodes drain``).

Policies: ``policies`` holds each cell's policy in force (:class:`PolicyView`), from the
``PolicyChanged`` records of the cell log, checked as the scheduler checks them
(``processors.core.policy_of``): one the scheduler refuses (and dead-letters) leaves the
previous policy in force, as it does in the core. A cell with none runs ``default`` with
its defaults. :meth:`LifecycleView.pending` ages each cell's queue by its policy's
``qos.aging_ms``.

Jobs (issue 22): a task submitted with ``job_id`` is a member of that job; ``jobs`` indexes
member task ids by job id in submission order (:meth:`LifecycleView.job_tasks`), and each
:class:`TaskView` carries its ``job_id`` (also taken from a decision that names it, should a
decision be read before its submission). A job's rounds (``JobRound``, from the cell log:
a federated job's accuracy, loss and bytes per round) are kept by job and round
(:meth:`LifecycleView.rounds_of`).

Forgetting (:meth:`LifecycleView.forget_finished`, which the API's read model calls): a
long-lived fold would hold every task its topics ever carried. The oldest finished tasks
(TERMINAL, in the order they finished) beyond a number to keep are dropped with everything
kept about them (a job whole, below); each leaves a
tombstone (its tenant and last status) for the newest ``keep_ids`` of them, and any later
event about a tombstoned task (a redelivered duplicate, a stale report) is ignored. The
tallies of :meth:`LifecycleView.counts` still count forgotten tasks.

A job goes whole: once every member it has has finished, its members are forgotten together
at the place of the last to finish, with its rounds and resizes, and the job id leaves a
tombstone of its own (``forgotten_jobs``: its members' tenants) among the newest
``keep_ids``. A late round or resize of a forgotten job is ignored. A member that arrives
after its job was forgotten (a job id used again) starts the job anew.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from sys import intern
from typing import Any, Optional

from suanli.errors import NotFoundError, ValidationError

ACTIVE = ("PLACED", "DISPATCHED", "RUNNING")
TERMINAL = ("COMPLETED", "FAILED", "CANCELLED", "UNSCHEDULABLE")
ENDED = ("COMPLETED", "FAILED", "CANCELLED")          # a copy's own end, as its connector reports it
ORPHANS_KEPT = 10_000                  # tasks whose statuses wait for the task to be known (LifecycleView)
_ORDER = {s: i for i, s in enumerate(("SUBMITTED", "PENDING", "PLACED", "DISPATCHED", "RUNNING"))}


@dataclass(slots=True)
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
    scheduling: str = ""                 # the label ``scheduling`` (urgent | normal | batch), if any
    path: list[str] = field(default_factory=list)   # decision path of the latest decision
    strategy: str = ""
    lost: int = 0                        # times its node went DOWN under it (TaskLost)
    lost_from: list[str] = field(default_factory=list)   # those nodes, in order
    preempted: int = 0                   # times it was preempted (TaskPreempted)
    preempted_by: str = ""               # the latest preemptor's task id
    requeue_at: int = 0                  # while PREEMPTED: when its grace ends and it is queued again (cell clock)
    preemptions: list[dict[str, Any]] = field(default_factory=list)   # each: at, node_id, by, reason, grace_ms, ...
    migrations: list[dict[str, Any]] = field(default_factory=list)    # each: at, from, to, cause, elapsed_ms, ...
    moving_from: str = ""                # a reserve-first move's old node while its old copy still holds it
    dispatch_id: str = ""                # the current copy's: the decision id of its TaskPlaced / TaskMigrated
    job_id: str = ""                     # the job it is a member of (TaskSubmitted.job_id), "" for none


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
    status: str = "READY"                # READY | CORDONED | DRAINING | DOWN (NodeStatusChanged)
    status_reason: str = ""
    site: str = ""                       # from its registration (placement of a job's tasks by site)


@dataclass(frozen=True)
class PolicyView:
    """A cell's policy in force: the ``PolicyChanged`` that set it, its configuration parsed,
    the digest its decisions cite (``provenance.strategy.config_digest``) and the queue's aging step."""
    cell: str
    strategy: str
    config: dict[str, Any]
    digest: str
    aging_ms: int
    event_id: str
    changed_by: str
    at: int

    @property
    def set(self) -> bool:
        """Whether a PolicyChanged set it (False: :meth:`default`)."""
        return bool(self.event_id)

    @classmethod
    def default(cls, cell: str) -> "PolicyView":
        """What a cell that no policy has reached runs: ``default`` with its defaults."""
        from suanli.processors.qos import QosArgs
        from suanli.processors.strategies import config_digest

        return cls(cell, "default", {}, config_digest({}), QosArgs().aging_ms, "", "", 0)


@dataclass(frozen=True)
class _Hold:
    """What one copy of a task holds on a node."""

    cell: str
    node_id: str
    devices: tuple[int, ...]
    gpu_milli: int
    cpu_milli: int
    memory_mib: int
    dispatch_id: str


ACK_STATUS = ":ack:status"      # intake's status made of a connector's DispatchAck (streams/intake.py)


def copy_of(status: dict[str, Any], cell: str) -> str | None:
    """The dispatch id a connector status belongs to, when its event id follows the kit's
    ``{dispatch_id}:{status}`` convention, or intake's ``{dispatch_id}:ack:status`` for an
    acknowledgement (accepted: DISPATCHED; refused: FAILED with the connector's reason), with
    a dispatch id of ``cell`` (decision ids start with ``cell/``); None otherwise (then only
    its node says which copy it is)."""
    event_id = status.get("event_id") or ""
    if event_id.endswith(ACK_STATUS):
        head, sep = event_id[: -len(ACK_STATUS)], True
    else:
        head, sep, _ = event_id.rpartition(":")
    return head if sep and cell and head.startswith(f"{cell}/") else None


class LifecycleView:
    """The fold. Feed it ``(kind, payload)`` pairs from any of its source topics."""

    def __init__(self, orphans_kept: int = ORPHANS_KEPT) -> None:
        self.tasks: dict[str, TaskView] = {}
        self.jobs: dict[str, list[str]] = {}      # job id -> member task ids, in submission order
        self.job_rounds: dict[str, dict[int, dict[str, Any]]] = {}   # job id -> round -> its JobRound
        self.job_resizes: dict[str, list[dict[str, Any]]] = {}       # job id -> its JobResized, in log order
        self.nodes: dict[tuple[str, str], NodeView] = {}   # (cell, node_id): ids repeat across cells
        self.policies: dict[str, PolicyView] = {}  # cell -> its policy in force (none: default, defaults)
        self.dead_letters = 0
        self.dead_letter_reasons: dict[str, int] = {}
        self.violations: list[str] = []
        self.lost = 0                    # TaskLost decisions
        self.preempted = 0               # TaskPreempted decisions
        self.migrated = 0                # TaskMigrated decisions
        self.stale_statuses = 0          # statuses of a copy the task no longer is (lost, preempted, moved)
        self._seen: set[str] = set()
        # Connector statuses travel on another topic than decisions and can be read before
        # the placement they follow; they wait here until it arrives.
        self._early: dict[str, list[dict[str, Any]]] = {}
        # Statuses of a task neither submitted nor decided (yet): no view is made of them, for
        # a status names no tenant and a task that never comes would stay open for good. They
        # wait here, the newest ``orphans_kept`` tasks' worth, for the task's first submission
        # or decision; older ones are dropped with their event ids (``orphans_dropped``).
        self._orphans: dict[str, list[dict[str, Any]]] = {}
        self.orphans_kept = orphans_kept
        self.orphans_dropped = 0         # statuses dropped that way
        self._seq = 0
        self._requests: dict[str, tuple[int, int, int]] = {}   # task -> (cpu milli, memory MiB, GPU milli per device)
        self._left: dict[str, set[str]] = {}        # task -> nodes it was taken off (lost, preempted, moved)
        self._copies: dict[str, set[str]] = {}      # task -> dispatch ids of its placements so far
        self._ended: set[str] = set()               # dispatch ids whose copy reported its end
        self._moving: dict[str, _Hold] = {}         # task -> the old copy's hold of a reserve-first move
        # Indexes of the tasks, so that a query reads the tasks it is about rather than the
        # whole history (an API holding 200,000 tasks spent 31 ms on a pending task and 466
        # ms on a list, walking them all: bench/read_model_growth.py): kept from the tasks
        # each input touched (every change to a task goes through :meth:`_task`), once the
        # input is folded (:meth:`_reindex`).
        self._open: dict[str, TaskView] = {}        # tasks not TERMINAL, first seen first
        self._of_tenant: dict[str, dict[str, TaskView]] = {}   # tenant -> its tasks, first seen first
        self._by_status: dict[str, int] = {}        # status -> tasks
        self._placed_once = 0                       # tasks placed at least once
        self._known = 0                             # tasks whose submission or a decision was read
        self._touched: dict[str, tuple[TaskView, Optional[tuple[str, str, bool, bool]]]] = {}
        # Forgetting (see the module docstring): the finished tasks in the order they finished,
        # each task's event ids (so that forgetting it frees them), and the tombstones.
        self._finished: dict[str, None] = {}
        self._events_of: dict[str, list[str]] = {}
        self.forgotten: dict[str, tuple[str, str]] = {}   # task id -> (tenant, last status), oldest first
        self.forgotten_jobs: dict[str, frozenset[str]] = {}   # job id -> its members' tenants, oldest first
        self._job_events: dict[str, list[str]] = {}       # job id -> event ids of its rounds and resizes
        # what the forgotten tasks still add to the tallies (checked by :meth:`check`)
        self._gone_status: dict[str, int] = {}
        self._gone_placed = self._gone_known = 0
        self._tombs: dict[tuple[str, str], tuple[str, str]] = {}

    def apply(self, kind: str, p: dict[str, Any]) -> None:
        handler = getattr(self, f"_on_{kind}", None)
        if handler is None:
            return                       # a kind the fold does not read (ticks, heartbeats): no id kept
        task_id = p.get("task_id")
        if task_id is not None and task_id in self.forgotten:
            return                       # a duplicate or a stale report of a task forgotten
        job_level = kind in ("JobRound", "JobResized")
        if job_level and p["job_id"] in self.forgotten_jobs and p["job_id"] not in self.jobs:
            return                       # a late round or resize of a job forgotten
        event_id = p.get("event_id")
        if event_id is not None:
            if event_id in self._seen:
                return
            self._seen.add(event_id)
            if job_level:                # freed when the job goes (a resize names its head task too)
                self._job_events.setdefault(p["job_id"], []).append(event_id)
            elif task_id is not None:
                self._events_of.setdefault(task_id, []).append(event_id)
        try:
            handler(p)
            if task_id is not None and task_id in self._orphans and task_id in self.tasks:
                for status in self._orphans.pop(task_id):      # the task is known now
                    self._on_TaskStatusChanged(status)
        finally:
            self._reindex()

    @staticmethod
    def _facts(view: TaskView) -> tuple[str, str, bool, bool]:
        """What the indexes hold of a task: its tenant, status, placed once, known."""
        return view.tenant, view.status, view.placed_once, bool(view.submitted_at or view.decision_id)

    def _reindex(self) -> None:
        """Move the tasks the last input touched to their places in the indexes."""
        for task_id, (view, was) in self._touched.items():
            now = self._facts(view)
            if now == was:
                continue
            tenant, status, placed, known = now
            if was is not None:
                self._by_status[was[1]] -= 1
                self._placed_once -= was[2]
                self._known -= was[3]
                if was[0] != tenant:
                    self._of_tenant[was[0]].pop(task_id, None)
            self._by_status[status] = self._by_status.get(status, 0) + 1
            self._placed_once += placed
            self._known += known
            self._of_tenant.setdefault(tenant, {})[task_id] = view
            if status in TERMINAL:
                self._open.pop(task_id, None)
                self._finished[task_id] = None
            else:
                self._open[task_id] = view
                self._finished.pop(task_id, None)
        self._touched.clear()

    def forget_finished(self, keep: int, keep_ids: int) -> list[str]:
        """Forget the finished tasks beyond the newest ``keep``, leaving a tombstone of each,
        and keep the newest ``keep_ids`` tombstones; a job goes whole once all its members
        have finished, at its last member's place (see the module docstring), so a pass may
        forget up to a job's size less one more than asked. Returns the ids forgotten, oldest
        finished first (a job's members together)."""
        over = len(self._finished) - keep
        gone: list[str] = []
        finished_of: dict[str, int] = {}       # job -> its members met so far in finishing order
        jobs_gone: list[str] = []
        for task_id in self._finished if over > 0 else ():
            if len(gone) >= over:
                break
            job = self.tasks[task_id].job_id
            if not job:
                gone.append(task_id)
                continue
            finished_of[job] = finished_of.get(job, 0) + 1
            if finished_of[job] == len(self.jobs[job]):      # every member has finished, this one last
                gone += self.jobs[job]
                jobs_gone.append(job)
        for job in jobs_gone:
            self.forgotten_jobs[job] = frozenset(self.tasks[t].tenant for t in self.jobs.pop(job))
            self.job_rounds.pop(job, None)
            self.job_resizes.pop(job, None)
            for event_id in self._job_events.pop(job, ()):
                self._seen.discard(event_id)
        for task_id in gone:
            del self._finished[task_id]
            view = self.tasks.pop(task_id)
            tenant, status, placed, known = self._facts(view)
            self._of_tenant[tenant].pop(task_id, None)
            self._gone_status[status] = self._gone_status.get(status, 0) + 1
            self._gone_placed += placed
            self._gone_known += known
            for event_id in self._events_of.pop(task_id, ()):
                self._seen.discard(event_id)
            for copy in self._copies.pop(task_id, ()):
                self._ended.discard(copy)
            for table in (self._requests, self._left, self._early, self._moving):
                table.pop(task_id, None)
            pair = (tenant, status)
            self.forgotten[task_id] = self._tombs.setdefault(pair, pair)   # one tuple per distinct pair
        for tombs in (self.forgotten, self.forgotten_jobs):
            extra = len(tombs) - keep_ids
            for key in list(itertools.islice(tombs, max(0, extra))):
                del tombs[key]
        return gone

    def finished_held(self) -> int:
        """Finished tasks the view holds (job members and all)."""
        return len(self._finished)

    # ----------------------------------------------------------------- inputs
    def _task(self, p: dict[str, Any]) -> TaskView:
        view = self.tasks.get(p["task_id"])
        if view is None:
            view = self.tasks[p["task_id"]] = TaskView(p["task_id"], intern(p.get("tenant", "")),
                                                       intern(p.get("cell", "")))
            from suanli.processors.qos import primary_of     # the core, imported when first used (as below)
            primary = self.tasks.get(primary_of(view.task_id) or "")
            if primary is not None:       # a gold standby copy has no submission: its task's tier
                view.qos_tier = primary.qos_tier
            self._touched.setdefault(view.task_id, (view, None))
        elif view.task_id not in self._touched:
            self._touched[view.task_id] = (view, self._facts(view))
        job = p.get("job_id")
        if job and not view.job_id:
            view.job_id = job
            self.jobs.setdefault(job, []).append(view.task_id)
        return view

    def job_tasks(self, job_id: str, tenant: str | None = None) -> list[TaskView]:
        """The member tasks of ``job_id`` (of ``tenant``, if given), in submission order
        (members whose submission has not been read yet last)."""
        views = [self.tasks[t] for t in self.jobs.get(job_id, ())]
        if tenant is not None:
            views = [v for v in views if v.tenant == tenant]
        return sorted(views, key=lambda v: (v.seq == 0, v.seq))

    def _on_JobRound(self, p: dict[str, Any]) -> None:
        """A job's round (``JobRound``): the newest report of each round number is kept."""
        self.job_rounds.setdefault(p["job_id"], {})[p["round"]] = p

    def _on_JobResized(self, p: dict[str, Any]) -> None:
        """The elastic policy resized a job (``JobResized``; duplicates dropped by event id)."""
        self.job_resizes.setdefault(p["job_id"], []).append(p)

    def resizes_of(self, job_id: str, tenant: str | None = None) -> list[dict[str, Any]]:
        """The JobResized payloads of ``job_id`` (of ``tenant``, if given), in log order."""
        return [p for p in self.job_resizes.get(job_id, ()) if tenant is None or p["tenant"] == tenant]

    def rounds_of(self, job_id: str, tenant: str | None = None) -> list[dict[str, Any]]:
        """The JobRound payloads of ``job_id`` (of ``tenant``, if given), by round number."""
        rounds = self.job_rounds.get(job_id, {})
        return [rounds[r] for r in sorted(rounds) if tenant is None or rounds[r]["tenant"] == tenant]

    def _on_TaskSubmitted(self, p: dict[str, Any]) -> None:
        view = self._task(p)
        # first seen in a decision read before it? keep what that said of tenant and cell
        view.tenant, view.cell = view.tenant or intern(p.get("tenant", "")), view.cell or intern(p.get("cell", ""))
        r = p["resources"]
        view.submitted_at = p["submitted_at"]
        view.gpu_request = r.get("gpu_count", 0) * r.get("gpu_milli", 0)
        view.priority = p.get("priority", 0)
        view.qos_tier = intern(p.get("qos_tier", ""))
        from suanli.processors.qos import standby_id     # the core, imported when first used
        copy = self.tasks.get(standby_id(view.task_id))
        if copy is not None:              # its gold standby copy, decided before this was read
            copy.qos_tier = view.qos_tier
        view.scheduling = intern((p.get("labels") or {}).get("scheduling", ""))
        self._requests[view.task_id] = (r.get("cpu_milli", 0), r.get("memory_mib", 0),
                                        r.get("gpu_milli", 0) if r.get("gpu_count", 0) else 0)
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
            last_heartbeat_at=old.last_heartbeat_at if old else 0, site=p.get("site") or "")

    def _on_TaskStatusChanged(self, p: dict[str, Any]) -> None:
        if p["task_id"] not in self.tasks:
            self._hold_orphan(p)
            return
        view = self._task(p)
        status = intern(p["status"])
        copy = copy_of(p, p.get("cell") or view.cell)
        if copy is not None and status in ENDED:
            self._ended.add(copy)
        if view.status in TERMINAL:
            return
        node = p.get("node_id") or ""
        moving = self._moving.get(view.task_id)
        if moving is not None and node == moving.node_id and copy in (None, moving.dispatch_id):
            if status in ENDED:          # the old copy of a reserve-first move is over
                self._end_move(view)
            return
        if copy is not None and copy != view.dispatch_id and copy in self._copies.get(view.task_id, ()):
            self.stale_statuses += 1     # an earlier copy's
            return
        if node and node in self._left.get(view.task_id, ()) and not (view.status in ACTIVE and view.node_id == node):
            self.stale_statuses += 1     # a copy on a node it was taken off: never this placement's
            return
        if (view.status not in ACTIVE or (node and node != view.node_id)
                or (copy is not None and view.dispatch_id and copy != view.dispatch_id)):
            self._early.setdefault(view.task_id, []).append(p)   # for a placement not read yet
            return
        if status in ("DISPATCHED", "RUNNING") and _ORDER.get(status, 0) > _ORDER.get(view.status, 0):
            view.status = status
        if status == "RUNNING" and moving is not None:
            self._end_move(view)         # reserve-first: the new copy runs, the old place goes
        view.message = p.get("message", "") or view.message
        if p.get("exit_code") is not None:
            view.exit_code = p["exit_code"]

    def _hold_orphan(self, p: dict[str, Any]) -> None:
        """Keep a status of a task not known yet (see ``_orphans``), dropping the oldest
        task's statuses beyond ``orphans_kept`` tasks."""
        waiting = self._orphans.pop(p["task_id"], [])
        waiting.append(p)
        self._orphans[p["task_id"]] = waiting        # newest last
        while len(self._orphans) > self.orphans_kept:
            task_id = next(iter(self._orphans))
            self.orphans_dropped += len(self._orphans.pop(task_id))
            for event_id in self._events_of.pop(task_id, ()):
                self._seen.discard(event_id)

    def orphans_held(self) -> int:
        """Statuses held for tasks not known yet."""
        return sum(len(v) for v in self._orphans.values())

    # ----------------------------------------------------------------- decisions
    def _decided(self, view: TaskView, p: dict[str, Any]) -> None:
        view.decision_id = p["decision_id"]
        view.decided_at = p["provenance"]["decided_at"]
        view.path = [intern(step) for step in p["provenance"].get("path") or ()]
        view.strategy = intern((p["provenance"].get("strategy") or {}).get("name", ""))
        view.tenant = intern(p.get("tenant", view.tenant))
        view.cell = intern(p.get("cell", view.cell))

    def _on_TaskPlaced(self, p: dict[str, Any]) -> None:
        view = self._task(p)
        self._decided(view, p)
        if view.status in ACTIVE:
            self.violations.append(f"{view.task_id}: placed again ({p['decision_id']}) while holding "
                                   f"{view.node_id} ({view.decision_id})")
            return
        view.status, view.node_id = "PLACED", intern(p["node_id"])
        view.gpu_devices, view.gpu_milli = list(p["gpu_devices"]), p["gpu_milli"]
        view.cpu_milli, view.memory_mib = p["cpu_milli"], p["memory_mib"]
        view.reasons, view.queue_position, view.placed_once = [], 0, True
        self._new_copy(view, p["decision_id"])
        self._hold(view, +1, p["decision_id"])
        self._take_early(view)

    def _new_copy(self, view: TaskView, dispatch_id: str) -> None:
        view.dispatch_id = dispatch_id
        self._copies.setdefault(view.task_id, set()).add(dispatch_id)

    def _take_early(self, view: TaskView) -> None:
        """Apply the statuses that waited for the task's current placement (its node, and its
        copy when the status names one)."""
        waiting = self._early.pop(view.task_id, [])
        mine = [s for s in waiting if (s.get("node_id") or view.node_id) == view.node_id
                and copy_of(s, s.get("cell") or view.cell) in (None, view.dispatch_id)]
        later = [s for s in waiting if not any(s is x for x in mine)]
        if later:
            self._early[view.task_id] = later
        for status in mine:
            self._on_TaskStatusChanged(status)

    def _drop_early(self, view: TaskView, node_id: str, dispatch_id: str) -> None:
        """Forget waiting statuses of a copy that is gone (by copy when they name one, else by node)."""
        keep = []
        for s in self._early.pop(view.task_id, []):
            copy = copy_of(s, s.get("cell") or view.cell)
            if copy == dispatch_id or (copy is None and s.get("node_id") == node_id):
                continue
            keep.append(s)
        if keep:
            self._early[view.task_id] = keep

    def _leave(self, view: TaskView, node_id: str) -> None:
        self._left.setdefault(view.task_id, set()).add(node_id)

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
        self._end_move(view)
        view.status = intern(p["cause"]) if p["cause"] in TERMINAL else "CANCELLED"

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
        self._end_move(view)
        self._leave(view, p["node_id"])
        self._drop_early(view, p["node_id"], view.dispatch_id)
        view.status, view.node_id, view.gpu_devices, view.message = "PENDING", "", [], p.get("reason", "")

    def _on_TaskPreempted(self, p: dict[str, Any]) -> None:
        """Evicted (this is the victim): its place is returned at once; PREEMPTED until the
        TaskPending that ends its grace (``requeue_at``)."""
        view = self._task(p)
        if view.status in TERMINAL:
            return
        self._decided(view, p)
        self.preempted += 1
        view.preempted += 1
        at = view.decided_at
        grace = int(p.get("grace_ms") or 0)
        view.preempted_by = p.get("preempted_by") or ""
        view.preemptions.append({
            "decision_id": p["decision_id"], "at": at, "node_id": p["node_id"], "by": view.preempted_by,
            "reason": p.get("reason", ""), "grace_ms": grace, "requeue_at": at + grace,
            "work_lost_ms": int(p.get("work_lost_ms") or 0), "victims": list(p.get("victims") or [])})
        if view.status not in ACTIVE:
            return                       # held nothing (the core never preempts such a task): history only
        if view.node_id == p["node_id"]:
            self._hold(view, -1, p["decision_id"])
        else:
            self.violations.append(f"{view.task_id}: preempted from {p['node_id']} ({p['decision_id']}) while "
                                   f"placed on {view.node_id}")
            self._hold(view, -1, p["decision_id"])
        self._leave(view, p["node_id"])
        self._drop_early(view, p["node_id"], view.dispatch_id)
        view.status, view.node_id, view.gpu_devices = "PREEMPTED", "", []
        view.requeue_at = at + grace

    def _on_TaskMigrated(self, p: dict[str, Any]) -> None:
        """Moved from ``from_node`` to ``to_node`` (a new copy, dispatched under this decision's id)."""
        view = self._task(p)
        if view.status in TERMINAL:
            return
        self._decided(view, p)
        self.migrated += 1
        src, dst = p["from_node"], p["to_node"]
        reserve_first = bool(p.get("reserve_first"))
        view.migrations.append({
            "decision_id": p["decision_id"], "at": view.decided_at, "from": src, "to": dst,
            "cause": p.get("cause", ""), "reason": p.get("reason", ""), "since": int(p.get("since") or 0),
            "elapsed_ms": int(p.get("elapsed_ms") or 0), "reserve_first": reserve_first,
            "preempted": list(p.get("preempted") or [])})
        if view.status in ACTIVE:
            if view.node_id != src:
                self.violations.append(f"{view.task_id}: moved from {src} ({p['decision_id']}) while placed on "
                                       f"{view.node_id}")
            old = _Hold(view.cell, view.node_id, tuple(view.gpu_devices), view.gpu_milli, view.cpu_milli,
                        view.memory_mib, view.dispatch_id)
            self._end_move(view)         # a move of a move: the first old copy is given up
            if reserve_first and view.node_id == src and old.dispatch_id not in self._ended:
                self._moving[view.task_id] = old          # held until the old copy is over
                view.moving_from = src
            else:
                self._hold(view, -1, p["decision_id"])
                self._leave(view, view.node_id)
        cpu, mem, milli = self._requests.get(view.task_id, (view.cpu_milli, view.memory_mib, view.gpu_milli))
        devices = list(p.get("gpu_devices") or [])
        view.status, view.node_id, view.gpu_devices = "PLACED", intern(dst), devices
        view.gpu_milli = (milli or view.gpu_milli) if devices else 0
        view.cpu_milli, view.memory_mib = cpu or view.cpu_milli, mem or view.memory_mib
        view.reasons, view.queue_position, view.placed_once = [], 0, True
        self._new_copy(view, p["decision_id"])
        self._hold(view, +1, p["decision_id"])
        self._take_early(view)

    def _end_move(self, view: TaskView) -> None:
        """The old copy of a reserve-first move is over: give its place back."""
        old = self._moving.pop(view.task_id, None)
        if old is None:
            return
        self._apply(old, -1, old.dispatch_id)
        self._leave(view, old.node_id)
        view.moving_from = ""

    def _on_NodeHealthChanged(self, p: dict[str, Any]) -> None:
        node = self.nodes.get((p["cell"], p["node_id"]))
        if node is not None:
            node.health = p["status"]
            node.last_heartbeat_at = p.get("last_heartbeat_at", 0)
        if p["status"] == "DOWN":
            self._node_gone(p["cell"], p["node_id"])

    def _on_PolicyChanged(self, p: dict[str, Any]) -> None:
        from suanli.errors import RejectedInput
        from suanli.processors import model as m
        from suanli.processors.core import policy_of
        from suanli.processors.strategies import validate_policy

        event = m.PolicyChanged(event_id=p["event_id"], cell=p["cell"], strategy=p["strategy"],
                                config_json=p.get("config_json") or "{}", changed_by=p.get("changed_by") or "",
                                at=p.get("at") or 0)
        try:
            policy = policy_of(event)
        except RejectedInput:
            return                       # dead-lettered by the scheduler: the previous one stays in force
        aging = validate_policy(policy.strategy, policy.config).qos.aging_ms
        self.policies[event.cell] = PolicyView(event.cell, policy.strategy, policy.config, policy.digest, aging,
                                               event.event_id, event.changed_by, event.at)

    def policy(self, cell: str) -> PolicyView:
        """The policy in force in ``cell``: :meth:`PolicyView.default` (``set`` False) when no
        valid PolicyChanged has reached it."""
        policy = self.policies.get(cell)
        return PolicyView.default(cell) if policy is None else policy

    def _on_NodeStatusChanged(self, p: dict[str, Any]) -> None:
        node = self.nodes.get((p["cell"], p["node_id"]))
        if node is not None:
            node.status, node.status_reason = p["status"], p.get("reason", "")
        if p["status"] == "DOWN":
            self._node_gone(p["cell"], p["node_id"])

    def _node_gone(self, cell: str, node_id: str) -> None:
        """Old copies of moves die with their node (the core frees their places)."""
        for task_id, old in list(self._moving.items()):
            if old.cell == cell and old.node_id == node_id:
                self._end_move(self.tasks[task_id])

    def _hold(self, view: TaskView, sign: int, decision_id: str) -> None:
        """Add (+1) or return (-1) the current placement's resources (see :meth:`_apply`)."""
        self._apply(_Hold(view.cell, view.node_id, tuple(view.gpu_devices), view.gpu_milli, view.cpu_milli,
                          view.memory_mib, view.dispatch_id), sign, decision_id)

    def _apply(self, hold: _Hold, sign: int, decision_id: str) -> None:
        """Add (+1) or return (-1) one copy's resources; audit capacity on every add.

        This is the capacity audit: it uses only node registrations and the decisions, never
        the scheduler's own state, so a scheduler bug cannot hide an over-commitment.
        """
        node = self.nodes.get((hold.cell, hold.node_id))
        if node is None:
            self.violations.append(f"{decision_id}: placed on unregistered node {hold.node_id}")
            return
        node.cpu_used += sign * hold.cpu_milli
        node.memory_used += sign * hold.memory_mib
        for d in hold.devices:
            if not 0 <= d < len(node.gpu_used):
                self.violations.append(f"{decision_id}: GPU {d} does not exist on {node.node_id} ({node.gpus} GPUs)")
                continue
            node.gpu_used[d] += sign * hold.gpu_milli
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
    def check(self) -> None:
        """Assert that the indexes hold what a walk of the tasks finds (for tests)."""
        assert not self._touched, "an input's touched tasks were not reindexed"
        tasks = self.tasks.values()
        assert list(self._open) == [t.task_id for t in tasks if t.status not in TERMINAL], "open tasks"
        assert sorted(self._finished) == sorted(t.task_id for t in tasks if t.status in TERMINAL), "finished tasks"
        assert not set(self.forgotten) & set(self.tasks), "a forgotten task is held"
        assert all(t in self.tasks for members in self.jobs.values() for t in members), "a job names a task not held"
        statuses: dict[str, int] = dict(self._gone_status)
        tenants: dict[str, list[str]] = {}
        for t in tasks:
            statuses[t.status] = statuses.get(t.status, 0) + 1
            tenants.setdefault(t.tenant, []).append(t.task_id)
        assert {k: n for k, n in self._by_status.items() if n} == statuses, (self._by_status, statuses)
        assert {k: sorted(v) for k, v in self._of_tenant.items() if v} == {k: sorted(v) for k, v in tenants.items()}, \
            "tasks by tenant"
        assert self._placed_once == sum(t.placed_once for t in tasks) + self._gone_placed
        assert self._known == sum(bool(t.submitted_at or t.decision_id) for t in tasks) + self._gone_known

    def open_tasks(self, cell: str | None = None) -> list[TaskView]:
        """The tasks not finished (not TERMINAL), of ``cell`` if given, first seen first."""
        return [t for t in self._open.values() if cell in (None, t.cell)]

    def tenant_tasks(self, tenant: str) -> list[TaskView]:
        """``tenant``'s tasks, first seen (as the tenant's) first."""
        return list(self._of_tenant.get(tenant, {}).values())

    def counts(self) -> dict[str, int]:
        """Tasks by status and the run's other tallies (from the indexes: no walk of the tasks)."""
        statuses = self._by_status.get
        return {
            "submitted": self._known,
            "placed": self._placed_once,
            "running": statuses("RUNNING", 0) + statuses("DISPATCHED", 0) + statuses("PLACED", 0),
            "completed": statuses("COMPLETED", 0),
            "failed": statuses("FAILED", 0),
            "cancelled": statuses("CANCELLED", 0),
            "pending": statuses("PENDING", 0),
            "unschedulable": statuses("UNSCHEDULABLE", 0),
            "dead_lettered": self.dead_letters,
            "capacity_violations": len(self.violations),
            "lost": self.lost,
            "preempted": self.preempted,
            "migrated": self.migrated,
            "in_grace": statuses("PREEMPTED", 0),
            "nodes_suspect": sum(1 for n in self.nodes.values() if n.health == "SUSPECT"),
            "nodes_down": sum(1 for n in self.nodes.values() if n.health == "DOWN"),
            "nodes_draining": sum(1 for n in self.nodes.values() if n.status == "DRAINING"),
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

    def pending(self, cell: str | None = None, aging_ms: int | None = None) -> list[TaskView]:
        """Pending tasks in the scheduler's queue order, with their current positions.

        The order is the core's (``processors/qos.queue_key``): scheduling tier (urgent
        first), QoS tier (gold first), priority aged by ``aging_ms`` (default: each cell's
        policy's ``qos.aging_ms``, :attr:`policies`), work that was lost or preempted first,
        then arrival. One thing is approximated: the submission time stands for the time the
        cell queued the task. ``queue_position`` is recomputed here per cell, so it reflects
        tasks placed since the pending decision (the TaskPending's own position was the
        core's at that decision).
        """
        from suanli.processors.qos import QosArgs, queue_key

        default = QosArgs().aging_ms

        def aging_of(cell: str) -> int:
            if aging_ms is not None:
                return aging_ms
            policy = self.policies.get(cell)
            return default if policy is None else policy.aging_ms

        def key(t: TaskView) -> tuple:
            return (t.cell, *queue_key(t.scheduling or "normal", t.qos_tier or "SILVER", t.priority, t.submitted_at,
                                       t.seq, t.task_id, aging_of(t.cell), bool(t.lost or t.preempted)))

        waiting = sorted((t for t in self._open.values() if t.status == "PENDING" and cell in (None, t.cell)),
                         key=key)
        position: dict[str, int] = {}
        for t in waiting:
            position[t.cell] = position.get(t.cell, 0) + 1
            t.queue_position = position[t.cell]
        return waiting

    def find_node(self, node_id: str, cell: str | None = None) -> NodeView:
        """The registered node ``node_id`` (of ``cell``, when given).

        :class:`NotFoundError` for an unknown cell or a node not registered (in that cell);
        :class:`ValidationError` when no cell is given and the id is registered in several.
        """
        if cell is not None:
            node = self.nodes.get((cell, node_id))
            if node is not None:
                return node
            if not any(c == cell for c, _n in self.nodes):
                raise NotFoundError(f"no cell {cell!r}: no node has registered in it")
            raise NotFoundError(f"no node {node_id!r} in cell {cell!r}")
        found = [n for (c, nid), n in sorted(self.nodes.items()) if nid == node_id]
        if not found:
            raise NotFoundError(f"no node {node_id!r} has registered")
        if len(found) > 1:
            raise ValidationError(f"node {node_id!r} is registered in cells {', '.join(n.cell for n in found)}: "
                                  "name its cell")
        return found[0]

    def preempted_waiting(self, cell: str | None = None) -> list[TaskView]:
        """Preempted tasks still in their grace (PREEMPTED), the soonest queued again first."""
        return sorted((t for t in self._open.values() if t.status == "PREEMPTED" and cell in (None, t.cell)),
                      key=lambda t: (t.cell, t.requeue_at, t.task_id))

    def gpu_allocation_pct(self) -> float:
        total = sum(n.gpus for n in self.nodes.values()) * 1000
        used = sum(sum(n.gpu_used) for n in self.nodes.values())
        return 100.0 * used / total if total else 0.0

