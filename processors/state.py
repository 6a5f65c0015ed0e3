"""The state of one scheduler cell: nodes, GPU devices, allocations, tasks, pending queue.

Designed for speed: per-node quantities live in numpy arrays indexed by a node *row*
(``node_index[node_id] -> row``), so filters and scores are vectorised over all nodes.
GPUs are individual devices: ``gpu_free[row, d]`` is the free milli of device ``d``
(1000 = whole GPU free), padded with -1 where a node has fewer devices than the widest
node. One node carries one GPU model (``model_idx[row]`` into ``models``; -1 = no GPU).
Each per-row array is a view of the first ``n_nodes`` rows of a buffer with spare rows
(doubled when full), so registering a node costs O(1) amortised, not a copy of every array.

Other accelerators (C1: NPU, FPGA, ASIC, QPU, OTHER) are counted, not addressed: one column
per ``(kind, model)`` the cell has seen (``accel_keys``, first-seen order), with
``accel_cap[row, j]`` devices registered and ``accel_free[row, j]`` not held by a task. A
node may hold several kinds and models. A task holds ``TaskRecord.accels`` (``(kind, model,
count)``) on its node, chosen at placement by :meth:`CellState.accel_choice`; every path
that frees a task's CPU frees them with it. A cell whose nodes register none has zero
columns, and its snapshot is what it was before accelerators were kept.

Mutation contract: the core mutates a ``CellState`` in place (copying 10^3-row arrays per
event would cost more than deciding). Use :meth:`copy` or a snapshot when the previous
state must survive. Everything that is not derivable lives in :meth:`to_snapshot`, a
plain JSON-able dict; :meth:`from_snapshot` rebuilds an equal state. Caches in
``_derived`` are pure functions of the snapshot and are never persisted.

Invariants (checked by :meth:`check`): 0 <= free <= capacity for CPU, memory, every
GPU device and every accelerator column; a task's allocation is recorded exactly once on
exactly one node.
"""
from __future__ import annotations

import bisect
import itertools
import json
from array import array
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Optional, Sequence

import numpy as np

from .elastic import ELASTIC_LABEL
from .federated import CLIENT, job_of, role_of
from .forgotten_clients import ClientView
from .model import GPU_MILLI, AccelAsk, AccelHeld, Node, Policy, Task
from .model_cache import ModelCache
from .profiler import Profiler
from .topology import Topology

READY, CORDONED, DOWN = "READY", "CORDONED", "DOWN"
NODE_STATUSES = (READY, CORDONED, DOWN, "DRAINING")
# health from heartbeats (NodeHealthChanged); a node takes new work only when both its
# status (operator, connector) and its health are READY
SUSPECT = "SUSPECT"
NORMAL = "NORMAL"          # telemetry condition (NodeConditionChanged): HOT, CONGESTED, DEGRADED otherwise

# task lifecycle
PENDING, PLACED, DISPATCHED, RUNNING = "PENDING", "PLACED", "DISPATCHED", "RUNNING"
COMPLETED, FAILED, CANCELLED, UNSCHEDULABLE = "COMPLETED", "FAILED", "CANCELLED", "UNSCHEDULABLE"
PREEMPTED = "PREEMPTED"     # evicted for a higher tier: not holding, not queued until its grace ends
DRAINING = "DRAINING"       # node status: no new work; gold tasks move off reserve-first
HOLDING = frozenset({PLACED, DISPATCHED, RUNNING})          # statuses that hold resources
TERMINAL = frozenset({COMPLETED, FAILED, CANCELLED, UNSCHEDULABLE})

SNAPSHOT_VERSION = 4        # 4: reservation tokens hold GPUs in gpu_free; 3: QoS; older ones are refused: replay
# arrivals whose shapes the state logs at least (CellState.note_arrival_shape); FGD's
# ``refresh_every`` may not exceed it, so an epoch's cutoff is always within the log
SHAPE_LOG_KEEP = 100_000
TOUCHED_KEEP = 4096           # rows CellState.touched holds before it is cut

_I64 = np.int64

def _forgettable(task: Task) -> bool:
    """Whether the task may be forgotten once finished (``retention.py``): every task but the
    one carrying a job's elastic policy (the ``elastic`` label), which the policy reads at
    each round. A member of a job leaves its job's indexes; a forgotten federated client
    leaves what later tasks of its job read of it (``ClientView.forgotten``); a finished gang
    member simply goes, since the gang rule reads only waiting members."""
    return job_of(task) is None or ELASTIC_LABEL not in (task.labels or {})


# the groups of tasks the state indexes (CellState._group): a gang label, a job id, and a
# federated job (its ``job_id``, else its ``job`` label: ``federated.job_of``)
_GROUPS: dict[str, Callable[[Task], Optional[str]]] = {
    "gang": lambda task: task.labels.get("gang"),
    "job": lambda task: task.job_id,
    "federated-job": job_of,
}


_UNCACHED = object()      # what the derived caches hold for a key not computed yet


def _empty(n: int = 0) -> np.ndarray:
    return np.zeros(n, dtype=_I64)


@dataclass(slots=True)
class TaskRecord:
    """A task in the cell: what it asked for (immutable), its arrival number, and where it
    is in its life. ``node`` and ``devices`` are set while it holds resources.

    ``queued_at``: cell clock when it arrived (aging); ``placed_at``: when it last took its
    place (work lost on preemption); ``key``: its place in the queue while queued
    (``qos.queue_key``); ``requeue_at``: when a PREEMPTED task's grace ends;
    ``moving_from``: ``(node, devices)`` of the old copy during a reserve-first move (it
    holds its resources until the new copy runs). ``accels`` / ``moving_accels``: the
    non-GPU accelerators ``(kind, model, count)`` it holds on ``node`` / on the old copy's
    node (C1; empty for tasks that ask none)."""
    task: Task
    seq: int
    status: str = "SUBMITTED"
    node: Optional[str] = None
    devices: tuple[int, ...] = ()
    queued_at: int = 0
    placed_at: int = 0
    key: Optional[list] = None
    requeue_at: int = 0
    moving_from: Optional[tuple[str, tuple[int, ...]]] = None
    accels: tuple[AccelHeld, ...] = ()
    moving_accels: tuple[AccelHeld, ...] = ()

    def to_json(self, task_json: dict[str, Any] | None = None) -> dict[str, Any]:
        """``task_json``: ``self.task.to_json()`` when the caller has it already."""
        d = {"task": self.task.to_json() if task_json is None else task_json, "seq": self.seq, "status": self.status, "node": self.node,
             "devices": list(self.devices), "queued_at": self.queued_at, "placed_at": self.placed_at,
             "key": self.key, "requeue_at": self.requeue_at,
             "moving_from": [self.moving_from[0], list(self.moving_from[1])] if self.moving_from else None}
        if self.accels:                   # only when held: other tasks snapshot as before
            d["accels"] = [list(a) for a in self.accels]
        if self.moving_accels:
            d["moving_accels"] = [list(a) for a in self.moving_accels]
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "TaskRecord":
        mv = d["moving_from"]
        return cls(Task.from_json(d["task"]), int(d["seq"]), d["status"], d["node"], tuple(d["devices"]),
                   int(d["queued_at"]), int(d["placed_at"]), d["key"], int(d["requeue_at"]),
                   (mv[0], tuple(mv[1])) if mv else None,
                   tuple((k, mdl, int(c)) for k, mdl, c in d.get("accels") or ()),
                   tuple((k, mdl, int(c)) for k, mdl, c in d.get("moving_accels") or ()))


def _serves(held: dict[tuple[str, str], int], asks: Iterable[AccelAsk], memory: dict[tuple[str, str], int]) -> bool:
    """For :meth:`CellState.check`: the devices ``held`` ((kind, model) -> count) can be shared
    out among ``asks``: a named ask gets its model, an any-model ask all its devices from one
    model of its kind, and every ask only devices with at least its memory (``memory``: MiB per
    device of each (kind, model) on the node). Every choice of models is tried: two asks of
    one kind may split the held devices between them (a random test found a task holding an 8 GiB FPGA
    for its any-model ask and a 0 MiB one for its named ask, which a per-ask check refused)."""
    named: dict[tuple[str, str], int] = {}
    anys = []
    for kind, model, count, mem in asks:
        if model:
            if memory.get((kind, model), 0) < mem:
                return False
            named[(kind, model)] = named.get((kind, model), 0) + count
        else:
            anys.append((kind, count, mem))
    options = [[key for key in held if key[0] == kind and memory.get(key, 0) >= mem] for kind, _, mem in anys]
    for choice in itertools.product(*options):
        need = dict(named)
        for (_, count, _), key in zip(anys, choice):
            need[key] = need.get(key, 0) + count
        if all(held.get(key, 0) >= n for key, n in need.items()):
            return True
    return False


class CellState:
    """Mutable state of one cell. See the module docstring for the contract."""

    def __init__(self, cell: str = "", max_gpus: int = 8):
        self.cell = cell
        # --- nodes (row-aligned) ---
        self.node_ids: list[str] = []
        self.node_index: dict[str, int] = {}
        self.nodes: dict[str, Node] = {}                 # what each node registered as
        self.node_status: list[str] = []
        self.models: list[str] = []                      # GPU model vocabulary, first-seen order
        self.cpu_cap = _empty()
        self.cpu_free = _empty()
        self.mem_cap = _empty()
        self.mem_free = _empty()
        self.gpu_count = _empty()
        self.model_idx = _empty()
        self.ready = np.zeros(0, dtype=bool)
        self.health: list[str] = []                      # READY | SUSPECT | DOWN, per row
        self.last_heartbeat = _empty()                   # ms of the last heartbeat; -1 = never (not watched)
        self.condition: list[str] = []                   # NORMAL | HOT | CONGESTED | DEGRADED, per row
        self.condition_ok = np.zeros(0, dtype=bool)      # condition == NORMAL
        self.condition_gen = 0          # bumped by every set_condition (a cache key, not persisted)
        self.gpu_free = np.full((0, max_gpus), -1, dtype=_I64)
        # derived per-row GPU summaries, maintained incrementally
        self.gpu_free_total = _empty()
        self.gpu_max_free = _empty()
        self.gpu_full_count = _empty()
        # non-GPU accelerators: a column per (kind, model) seen, devices registered and free
        self.accel_keys: list[tuple[str, str]] = []
        self.accel_cap = np.zeros((0, 0), dtype=_I64)
        self.accel_free = np.zeros((0, 0), dtype=_I64)
        self.accel_mem = np.zeros((0, 0), dtype=_I64)      # MiB per device, as registered
        # change stamps: stamp[row] = value of self.clock when the row last changed
        self.stamp = _empty()
        # the rows touch()ed since the list was last cut, in order (not persisted): a reader
        # (node_classes) that keeps its place in it finds the rows changed since without a
        # pass over the stamps; ``touched_cuts`` counts the cuts, after which it rescans
        self.touched: list[int] = []
        self.touched_cuts = 0
        # spare rows behind the per-row arrays above (name -> buffer): each array is a view of
        # its buffer's first n_nodes rows, so registering a node costs O(1) amortised, not a
        # copy of every array (which made a 20,000-node cell's registration quadratic)
        self._row_buffers: dict[str, np.ndarray] = {}
        self.clock = 0
        self.now = 0                                     # the cell clock: largest event time (ms) seen
        self.next_retry_at = 0                           # cell-clock time of the next periodic retry
        # --- tasks ---
        self.tasks: dict[str, TaskRecord] = {}
        self.queue: list[list] = []          # sorted [-priority, seq, task_id]
        self.seq = 0                          # arrival counter
        self.offsets: dict[str, int] = {}     # "topic/partition" -> last applied offset
        self.policy = Policy()
        self.class_counts: dict[str, int] = {}  # running histogram of submitted task shapes
        self.reservations: dict[str, Any] = {}  # bids and tokens (C4; reservations.py)
        self.grace: list[list] = []             # sorted [requeue_at, task_id] of PREEMPTED tasks
        self.batch_close_at = 0                 # cell clock when the open batch window closes; 0 = none open
        self.batch_due: list[str] = []          # batch tasks of a closed window still to be solved
        self.evac_since: dict[str, int] = {}    # node -> cell clock when its drain or DEGRADED began
        self.node_gen = 0                       # bumped when a node re-registers (cache key, not persisted)
        self.decisions = 0
        self.topology = Topology(self)          # the network graph (topology.py): nodes and measured links
        self.model_caches: dict[str, ModelCache] = {}   # node -> its model cache (model_cache.py), once it holds one
        self.prewarm: dict[str, Any] = {}       # the prewarm planner's book (prewarm.py): demand, budget, next run
        self.profiler: Optional[Profiler] = None  # task profiles (profiler.py): made while the policy turns them on
        self.elastic: dict[str, Any] = {}       # elastic jobs' books (elastic_jobs.py): losses, size, batch size
        self._derived: dict[Any, Any] = {}
        # QoS tier -> ids of the tasks that may hold resources (a superset: readers check the
        # status); built from ``tasks`` on first use, then kept by :meth:`set_status`. Not in
        # snapshots: a restored state builds it again. Why: the preemption scan ran over every
        # task the cell ever saw on each allocation change (4 ms at 12,000 tasks)
        self._holders: Optional[dict[str, dict[str, None]]] = None
        # node -> ids of the tasks holding resources on it, kept the same way (and by the
        # ``node`` argument of :meth:`set_status`). Why: a node's DOWN, a drain and every
        # reservation claim asked "who holds this node" by walking every task ever seen.
        self._on_node: Optional[dict[str, dict[str, None]]] = None
        # The indexes below are kept the same way, for the same reason: the cell keeps its
        # live tasks and thousands of finished ones (retention.py), so a walk of ``tasks``
        # costs far more than the answer (measured by ``bench/history_growth.py``). They
        # live outside ``_derived``, which a new GPU model clears, because nothing they
        # hold depends on the node rows.
        # kind (a key of ``_GROUPS``) -> group -> ids of its tasks in arrival order, each kind
        # built on first use and then kept by :meth:`add_task`
        self._groups: dict[str, dict[str, list[str]]] = {}
        # ids of the tasks whose ``moving_from`` was set (a superset: readers check it; kept by
        # :meth:`move_started`)
        self._moving: Optional[dict[str, None]] = None
        # every task in arrival order (kept by :meth:`add_task`), and caches of pure functions
        # of the tasks and registrations alone (not of node rows): like the indexes, a new GPU
        # model keeps them (dropping the snapshot's JSON memo of 60,000 tasks took ~50 ms)
        self._arrivals: Optional[list[TaskRecord]] = None
        self.task_cache: dict[Any, Any] = {}
        # --- forgetting finished tasks (retention.py) ---
        # ids of the finished tasks that may be forgotten (not those a job still reads: _forgettable),
        # oldest finish first
        self.finished: dict[str, None] = {}
        # tombstones: forgotten id -> (its last status, its node), oldest forgotten first
        self.forgotten: dict[str, tuple[str, Optional[str]]] = {}
        # job (``federated.job_of``) -> its forgotten clients, in arrival order: what the
        # job's later tasks read of them (ClientView.forgotten); each goes with its tombstone
        self.past_clients: dict[str, list[ClientView]] = {}
        self._past_job: dict[str, str] = {}          # forgotten client -> its job (kept with past_clients)
        self._past_labels: dict[tuple, dict[str, str]] = {}   # ClientView.forgotten's shared label sets
        # finished tasks the last pass had to keep beyond the retention (still named by the
        # queue, a grace, a batch window or a token): the next pass waits for a batch more
        # than these, so that many pinned tasks do not make every input try again
        self.finished_pinned = 0
        self._tombs: dict[tuple[str, Optional[str]], tuple[str, Optional[str]]] = {}   # one tuple per pair
        # the shape (``frag.shape_key``) of every arrival, as an index into ``shape_names``:
        # ``shape_log[i]`` is the arrival with ``seq == shape_base + i + 1``. FGD's observed
        # histogram at an epoch's cutoff is the running ``class_counts`` minus the shapes
        # that arrived after it (``shape_counts_through``), whether those tasks are still
        # remembered or not. Only the last ``SHAPE_LOG_KEEP`` arrivals or more are kept.
        self.shape_log = array("I")
        self.shape_base = 0
        self.shape_names: list[str] = []
        self._shape_ids: dict[str, int] = {}

    def derived_recent(self, group: str, key: Any, compute: Callable[[], Any], keep: int = 64) -> Any:
        """As :meth:`derived`, for values keyed by something that keeps changing (a typical
        distribution's digest, new every refresh epoch): ``group`` holds at most ``keep`` of
        them and forgets the oldest half when full, so a long run's cache stays bounded."""
        cache = self._derived.setdefault(group, {})
        value = cache.get(key, _UNCACHED)
        if value is _UNCACHED:
            if len(cache) >= keep:
                for old in list(cache)[: keep // 2]:
                    del cache[old]
            value = cache[key] = compute()
        return value

    def derived(self, key: Any, compute: Callable[[], Any]) -> Any:
        """The cached value under ``key`` in the derived cache, computed once by ``compute``
        (None is a value like any other). The key must hold everything the value depends on
        besides the state's own arrays (which clear the cache when their shape changes)."""
        value = self._derived.get(key, _UNCACHED)
        if value is _UNCACHED:
            value = self._derived[key] = compute()
        return value

    # ------------------------------------------------------------------ nodes
    @property
    def n_nodes(self) -> int:
        return len(self.node_ids)

    @property
    def max_gpus(self) -> int:
        return int(self.gpu_free.shape[1])

    def touch(self, row: int) -> None:
        self.clock += 1
        self.stamp[row] = self.clock
        touched = self.touched
        touched.append(row)
        if len(touched) > TOUCHED_KEEP:
            touched.clear()
            self.touched_cuts += 1

    def model_id(self, model: str) -> int:
        try:
            return self.models.index(model)
        except ValueError:
            self.models.append(model)
            self._derived.clear()
            return len(self.models) - 1

    def add_node(self, node_id: str, cpu_milli: int, memory_mib: int, gpu_count: int,
                 gpu_model: str | None, node: Node | None = None, status: str = READY) -> int:
        """Append a node row (all resources free). Returns its row. ``node`` is what the
        node registered as (a bare one with these resources when None); its non-GPU
        accelerators (``Node.accel_capacity``) become its accelerator columns."""
        if node_id in self.node_index:
            raise ValueError(f"node {node_id} already registered")
        inventory = node.accel_capacity if node is not None else {}
        memory = node.accel_memory if inventory else {}
        for key in inventory:
            if key not in self.accel_keys:
                self.accel_keys.append(key)
                zero = np.zeros((self.n_nodes, 1), dtype=_I64)
                self.accel_cap = np.concatenate([self.accel_cap, zero], axis=1)
                self.accel_free = np.concatenate([self.accel_free, zero], axis=1)
                self.accel_mem = np.concatenate([self.accel_mem, zero], axis=1)
        arow = [inventory.get(k, 0) for k in self.accel_keys]
        self._append_row("accel_cap", arow)
        self._append_row("accel_free", arow)
        self._append_row("accel_mem", [memory.get(k, 0) for k in self.accel_keys])
        if gpu_count > self.max_gpus:
            pad = np.full((self.n_nodes, gpu_count - self.max_gpus), -1, dtype=_I64)
            self.gpu_free = np.concatenate([self.gpu_free, pad], axis=1)
        row = self.n_nodes
        midx = self.model_id(gpu_model) if (gpu_count > 0 and gpu_model) else -1
        self.node_ids.append(node_id)
        self.node_index[node_id] = row
        self.nodes[node_id] = node or Node.bare(node_id, cpu_milli, memory_mib, gpu_count, gpu_model)
        self.node_status.append(status)
        app = self._append_row
        app("cpu_cap", cpu_milli)
        app("cpu_free", cpu_milli)
        app("mem_cap", memory_mib)
        app("mem_free", memory_mib)
        app("gpu_count", gpu_count)
        app("model_idx", midx)
        app("ready", status == READY)
        self.health.append(READY)
        app("last_heartbeat", -1)
        self.condition.append(NORMAL)
        app("condition_ok", True)
        g = np.full(self.max_gpus, -1, dtype=_I64)
        g[:gpu_count] = GPU_MILLI
        app("gpu_free", g)
        app("gpu_free_total", gpu_count * GPU_MILLI)
        app("gpu_max_free", GPU_MILLI if gpu_count else 0)
        app("gpu_full_count", gpu_count)
        app("stamp", 0)
        self.touch(row)
        self._derived.pop("capacity", None)
        self._derived.pop("meta", None)
        tags = self._derived.get("gpu_tags")
        if tags is not None:
            tags.append({})
        self.topology.add_node(self.nodes[node_id], row)
        return row

    def _append_row(self, name: str, value: Any) -> None:
        """Append one row holding ``value`` to the per-row array ``name`` (a view of the first
        rows of a buffer with spare rows, doubled when full). An array that is not a view of
        its buffer (replaced wholesale: a new column, a restored snapshot) gets a new buffer,
        so the view is always the truth and the buffer only its storage."""
        arr = getattr(self, name)
        n = arr.shape[0]
        buf = self._row_buffers.get(name)
        if buf is None or arr.base is not buf or buf.shape[0] == n or buf.shape[1:] != arr.shape[1:]:
            buf = np.empty((max(64, 2 * n), *arr.shape[1:]), dtype=arr.dtype)
            buf[:n] = arr
            self._row_buffers[name] = buf
        buf[n] = value
        setattr(self, name, buf[: n + 1])

    def set_node_status(self, node_id: str, status: str) -> None:
        row = self.node_index[node_id]
        self.node_status[row] = status
        self.ready[row] = status == READY and self.health[row] == READY
        self.touch(row)

    def set_health(self, node_id: str, health: str) -> None:
        row = self.node_index[node_id]
        self.health[row] = health
        self.ready[row] = self.node_status[row] == READY and health == READY
        self.touch(row)

    def set_condition(self, node_id: str, condition: str) -> None:
        row = self.node_index[node_id]
        self.condition[row] = condition
        self.condition_ok[row] = condition == NORMAL
        self.condition_gen += 1
        self.touch(row)

    def gang_members(self, gang: str) -> list[str]:
        """Ids of the tasks labelled ``gang=<gang>``, sorted by id: an order that does not
        depend on how the state was reached (a restored snapshot holds its tasks in id
        order). Built once from the tasks, then kept up by :meth:`add_task`."""
        return sorted(self._group("gang").get(gang, []))

    def job_tasks(self, job_id: str) -> list[TaskRecord]:
        """The tasks whose ``Task.job_id`` is ``job_id``, in arrival order (also after a
        restore, whose ``tasks`` are in id order). Built once, then kept up by :meth:`add_task`."""
        return [self.tasks[tid] for tid in self._group("job").get(job_id, ())]

    def job_clients(self, job: str, by_job_id: bool = False) -> list[ClientView]:
        """The federated clients (``federated-role=client``) of ``job`` (``federated.job_of``),
        remembered or forgotten, in arrival order. ``by_job_id``: only those whose
        ``Task.job_id`` names the job (as :meth:`job_tasks`), not the ``job`` label alone."""
        records = self.job_tasks(job) if by_job_id else [self.tasks[tid] for tid in self.group("federated-job", job)]
        kept = [ClientView.of(t) for t in records if role_of(t.task) == CLIENT]
        past = [c for c in self.past_clients.get(job, ()) if c.by_job_id or not by_job_id]
        if not past:
            return kept
        return sorted(kept + past, key=lambda c: c.seq)

    def group(self, kind: str, name: str) -> Sequence[str]:
        """Ids of the tasks of group ``name`` of ``kind`` (a key of ``_GROUPS``), in arrival
        order (also after a restore). Built once, then kept up by :meth:`add_task`; callers
        must not change it."""
        return self._group(kind).get(name, ())

    def _group(self, kind: str) -> dict[str, list[str]]:
        """Group -> ids of its tasks in arrival order, for a kind of ``_GROUPS``."""
        index = self._groups.get(kind)
        if index is None:
            index = self._groups[kind] = {}
            of = _GROUPS[kind]
            for t in self.arrivals():
                g = of(t.task)
                if g:
                    index.setdefault(g, []).append(t.task.task_id)
        return index

    def arrivals(self) -> list[TaskRecord]:
        """Every task in arrival (``seq``) order. Built once, then kept up by :meth:`add_task`."""
        if self._arrivals is None:
            self._arrivals = sorted(self.tasks.values(), key=lambda t: t.seq)
        return self._arrivals

    def arrived_through(self, after: int, through: int) -> list[TaskRecord]:
        """The tasks with ``after < seq <= through``, in arrival order (two bisections: the
        cost is the answer's length, not the cell's history)."""
        arr = self.arrivals()
        lo = bisect.bisect_right(arr, after, key=lambda t: t.seq)
        return arr[lo:bisect.bisect_right(arr, through, lo=lo, key=lambda t: t.seq)]

    def add_task(self, record: TaskRecord) -> None:
        """A newly submitted task (it arrives after every task the state holds)."""
        tid = record.task.task_id
        self.tasks[tid] = record
        if self._arrivals is not None:
            self._arrivals.append(record)
        for kind, index in self._groups.items():
            g = _GROUPS[kind](record.task)
            if g:
                index.setdefault(g, []).append(tid)

    def set_status(self, t: TaskRecord, status: str, node: Optional[str] = None) -> None:
        """Set a task's status, and its ``node`` when given (a placement or a move: the task
        holds that node from now on). Every status change of a task in the cell, and every
        change of the node it holds, goes through here, so that :meth:`holders` and
        :meth:`holding` stay exact."""
        tid = t.task.task_id
        on_node = self._on_node
        if on_node is not None and t.status in HOLDING and t.node is not None:
            on_node.get(t.node, {}).pop(tid, None)
        if node is not None:
            t.node = node
        t.status = status
        if status in TERMINAL:
            if _forgettable(t.task):
                self.finished[tid] = None
        elif tid in self.finished:
            del self.finished[tid]
        if on_node is not None and status in HOLDING and t.node is not None:
            on_node.setdefault(t.node, {})[tid] = None
        index = self._holders
        if index is None:
            return
        ids = index.setdefault(t.task.qos_tier, {})
        if status in HOLDING:
            ids[tid] = None
        else:
            ids.pop(tid, None)

    def holders(self, tier: str) -> Iterable[str]:
        """Ids of the tasks of QoS ``tier`` holding resources, and perhaps a few that did
        (a state built by hand, not through :meth:`set_status`): check each one's status."""
        return self._holder_index().get(tier, {}).keys()

    def _holder_index(self) -> dict[str, dict[str, None]]:
        if self._holders is None:
            index: dict[str, dict[str, None]] = {}
            for tid, t in self.tasks.items():
                if t.status in HOLDING:
                    index.setdefault(t.task.qos_tier, {})[tid] = None
            self._holders = index
        return self._holders

    def holding_records(self) -> list[TaskRecord]:
        """Every task holding resources, in no particular order (for readers whose answer
        does not depend on it: counts, maxima, flags)."""
        tasks = self.tasks
        return [t for ids in self._holder_index().values() for tid in ids
                if (t := tasks.get(tid)) is not None and t.status in HOLDING]

    def holding(self, node_id: str) -> list[str]:
        """Ids of the tasks holding resources on ``node_id``, in arrival order."""
        if self._on_node is None:
            index: dict[str, dict[str, None]] = {}
            for tid, t in self.tasks.items():
                if t.status in HOLDING and t.node is not None:
                    index.setdefault(t.node, {})[tid] = None
            self._on_node = index
        tasks = self.tasks
        # the same superset rule as holders(): check each one
        found = [tid for tid in self._on_node.get(node_id, ())
                 if (t := tasks.get(tid)) is not None and t.status in HOLDING and t.node == node_id]
        return sorted(found, key=lambda tid: tasks[tid].seq)

    def move_started(self, t: TaskRecord) -> None:
        """``t.moving_from`` was just set (a reserve-first move): keeps :meth:`moving_records` exact."""
        if self._moving is not None:
            self._moving[t.task.task_id] = None

    def moving_records(self) -> list[TaskRecord]:
        """The tasks whose old copy, in a reserve-first move, still holds its place."""
        tasks = self.tasks
        if self._moving is None:
            self._moving = {tid: None for tid, t in tasks.items() if t.moving_from}
        gone = [tid for tid in self._moving if (t := tasks.get(tid)) is None or t.moving_from is None]
        for tid in gone:
            del self._moving[tid]
        return [tasks[tid] for tid in self._moving]

    # ------------------------------------------------ forgetting finished tasks
    def note_arrival_shape(self, key: str) -> None:
        """The shape of the arrival just numbered ``self.seq`` (the core calls this for every
        submission it accepts). Keeps the log to its last ``SHAPE_LOG_KEEP`` arrivals or
        more, trimmed at multiples of it so that a restored state trims where a live one does."""
        i = self._shape_ids.get(key)
        if i is None:
            i = self._shape_ids[key] = len(self.shape_names)
            self.shape_names.append(key)
        if self.shape_base + len(self.shape_log) != self.seq - 1:
            return                       # a state built by hand, not by arrivals: no log (see shape_counts_after)
        self.shape_log.append(i)
        cut = (self.seq // SHAPE_LOG_KEEP - 1) * SHAPE_LOG_KEEP
        if cut > self.shape_base:
            del self.shape_log[: cut - self.shape_base]
            self.shape_base = cut

    def shape_counts_after(self, cutoff: int) -> Optional[dict[str, int]]:
        """The histogram of the shapes of the arrivals with ``seq <= cutoff``: ``class_counts``
        less the shapes logged after ``cutoff``. None when the log does not reach back to
        ``cutoff`` or does not end at ``seq`` (a scratch cell, a state built by hand)."""
        if not self.shape_base <= cutoff <= self.seq or self.shape_base + len(self.shape_log) != self.seq:
            return None
        counts = dict(self.class_counts)
        names = self.shape_names
        for i in self.shape_log[cutoff - self.shape_base:]:
            k = names[i]
            counts[k] -= 1
        return {k: c for k, c in counts.items() if c}

    def forget_finished(self, keep: int, keep_ids: int) -> int:
        """Forget the oldest finished tasks beyond ``keep`` (see ``retention.py``), leaving
        a tombstone of each, and keep the ``keep_ids`` newest tombstones. A task that the
        queue, a preemption's grace, a closed batch window or a reservation token still names
        is kept for now. Nothing is forgotten while the shape log does not cover every
        arrival (a state built by hand): FGD's histogram would lose the forgotten shapes.
        Sets ``finished_pinned``: how many it kept beyond ``keep``. Returns how many were
        forgotten."""
        if self.shape_base + len(self.shape_log) != self.seq:
            return 0
        over = len(self.finished) - keep
        gone: list[str] = []
        if over > 0:
            named = self._named_elsewhere()
            for tid in self.finished:
                if len(gone) == over:
                    break
                if tid not in named:
                    gone.append(tid)
        memo = self.task_cache.get(("json", "task"))
        for tid in gone:
            del self.finished[tid]
            t = self.tasks.pop(tid)
            pair = (t.status, t.node)
            self.forgotten[tid] = self._tombs.setdefault(pair, pair)
            if memo is not None:
                memo.pop(tid, None)
            for kind, index in self._groups.items():        # a gang, a job: it leaves each it was in
                g = _GROUPS[kind](t.task)
                if g and g in index:
                    index[g].remove(tid)
                    if not index[g]:
                        del index[g]
            job = job_of(t.task)
            if job is not None and role_of(t.task) == CLIENT:
                past = self.past_clients.setdefault(job, [])
                bisect.insort(past, ClientView.forgotten(t, self._past_labels), key=lambda c: c.seq)
                self._past_job[tid] = job
        if gone:
            self._arrivals = None        # built again, from the tasks kept, when next asked for
        self.finished_pinned = max(0, len(self.finished) - keep)
        extra = len(self.forgotten) - keep_ids
        if extra > 0:
            dropped: dict[str, set[str]] = {}
            for tid in list(itertools.islice(self.forgotten, extra)):
                del self.forgotten[tid]
                job = self._past_job.pop(tid, None)
                if job is not None:                  # a forgotten client goes with its tombstone
                    dropped.setdefault(job, set()).add(tid)
            for job, ids in dropped.items():
                left = [c for c in self.past_clients[job] if c.task_id not in ids]
                if left:
                    self.past_clients[job] = left
                else:
                    del self.past_clients[job]
            if len(self._past_labels) > max(1024, len(self._past_job)):     # mostly sets no client holds now
                self._past_labels = {tuple(c.labels.items()): c.labels for cs in self.past_clients.values() for c in cs}
        return len(gone)

    def _named_elsewhere(self) -> set[str]:
        """Ids that a structure other than ``tasks`` names and reads the task of."""
        named = {q[-1] for q in self.queue}
        named.update(g[1] for g in self.grace)
        named.update(self.batch_due)
        for tok in (self.reservations.get("tokens") or {}).values():
            named.update(tok.get("waiting") or ())
            named.update(tok.get("queued") or ())
        return named

    def moving_off(self, node_id: str) -> list[str]:
        """Ids of the tasks whose old copy, in a reserve-first move, still holds ``node_id``."""
        return sorted(t.task.task_id for t in self.moving_records() if t.moving_from and t.moving_from[0] == node_id)

    def _refresh_gpu_row(self, row: int, values: Optional[list[int]] = None) -> None:
        """Recompute the row's GPU summaries (from ``values``, its free milli per device as a
        list, when the caller has them)."""
        # a row holds a handful of devices: Python over its list beats numpy's per-call cost
        real = [g for g in (self.gpu_free[row].tolist() if values is None else values) if g >= 0]
        self.gpu_free_total[row] = sum(real)
        self.gpu_max_free[row] = max(real) if real else 0
        self.gpu_full_count[row] = real.count(GPU_MILLI)

    # ------------------------------------------------------------ allocations
    def allocate(self, task_id: str, node_id: str, devices: Iterable[int], gpu_milli: int,
                 cpu_milli: int, memory_mib: int, accels: tuple[AccelHeld, ...] = ()) -> None:
        """Take resources for a task on a node. Raises ValueError if they do not fit.
        ``accels``: the non-GPU accelerators it takes, ``(kind, model, count)`` (the
        models chosen: :meth:`accel_choice`)."""
        row = self.node_index[node_id]
        devices = list(devices)
        if self.cpu_free[row] < cpu_milli or self.mem_free[row] < memory_mib:
            raise ValueError(f"{task_id}: cpu/memory do not fit on {node_id}")
        cols = []
        for kind, model, count in accels:
            j = self.accel_keys.index((kind, model)) if (kind, model) in self.accel_keys else -1
            if j < 0 or self.accel_free[row, j] < count:
                raise ValueError(f"{task_id}: {count} {kind} {model!r} do not fit on {node_id}")
            cols.append((j, count))
        # the row's devices as a list: a handful of values, cheaper in Python than numpy indexing
        milli = self.gpu_free[row].tolist() if devices else []
        count_here = int(self.gpu_count[row])
        for d in devices:
            if d < 0 or d >= count_here or milli[d] < gpu_milli:
                raise ValueError(f"{task_id}: gpu[{d}] {gpu_milli} milli does not fit on {node_id}")
        if len(set(devices)) != len(devices):
            raise ValueError(f"{task_id}: duplicate devices {devices}")
        self.cpu_free[row] -= cpu_milli
        self.mem_free[row] -= memory_mib
        for j, count in cols:
            self.accel_free[row, j] -= count
        if devices:
            for d in devices:
                milli[d] -= gpu_milli
            self.gpu_free[row] = milli
            self._refresh_gpu_row(row, milli)
            self._tag_delta(row, len(devices), gpu_milli, +1)
        self.touch(row)

    def free(self, node_id: str, devices: Iterable[int], gpu_milli: int, cpu_milli: int,
             memory_mib: int, accels: tuple[AccelHeld, ...] = ()) -> None:
        """Give back what :meth:`allocate` took."""
        row = self.node_index[node_id]
        devices = list(devices)
        for kind, model, count in accels:
            j = self.accel_keys.index((kind, model))
            self.accel_free[row, j] = min(self.accel_free[row, j] + count, self.accel_cap[row, j])
        if devices:
            self._tag_delta(row, len(devices), gpu_milli, -1)
        self.cpu_free[row] = min(self.cpu_free[row] + cpu_milli, self.cpu_cap[row])
        self.mem_free[row] = min(self.mem_free[row] + memory_mib, self.mem_cap[row])
        if devices:
            milli = self.gpu_free[row].tolist()
            for d in dict.fromkeys(devices):        # each device once, as numpy's fancy assignment did
                milli[d] = min(milli[d] + gpu_milli, GPU_MILLI)
            self.gpu_free[row] = milli
            self._refresh_gpu_row(row, milli)
        self.touch(row)

    # ------------------------------------------------------- accelerators (C1)
    def accel_choice(self, row: int, asks: tuple[AccelAsk, ...],
                     counts: Optional[np.ndarray] = None) -> Optional[tuple[AccelHeld, ...]]:
        """The accelerators a request (``Request.accels``) takes on ``row``, ``(kind, model,
        count)`` sorted, or None when they do not fit. ``counts``: the per-column counts to
        fit in (default ``accel_free``; ``accel_cap`` asks whether they could ever fit).
        An ask with a memory takes only devices registered with at least that much on
        ``row``. Named models first; an any-model ask takes all its devices from one model:
        the one with the fewest left that still holds them (best fit), ties by model name."""
        if not asks:
            return ()
        return self.accel_choice_in((self.accel_free if counts is None else counts)[row], asks, row)

    def accel_choice_in(self, c: np.ndarray, asks: tuple[AccelAsk, ...],
                        row: int) -> Optional[tuple[AccelHeld, ...]]:
        """:meth:`accel_choice` in the counts ``c`` of ``row`` (a column per ``accel_keys``;
        the memory per device is ``row``'s)."""
        left = {k: int(c[j]) for j, k in enumerate(self.accel_keys) if c[j] > 0}
        mem = self.accel_mem[row]
        held: dict[tuple[str, str], int] = {}
        for kind, model, count, memory in sorted(asks, key=lambda a: (a[0], a[1] == "", a[1])):
            if model:
                key = (kind, model)
                if left.get(key, 0) < count or (memory and mem[self.accel_keys.index(key)] < memory):
                    return None
            else:
                fits = [(n, k[1], k) for k, n in left.items() if k[0] == kind and n >= count
                        and (not memory or mem[self.accel_keys.index(k)] >= memory)]
                if not fits:
                    return None
                key = min(fits)[2]
            left[key] -= count
            held[key] = held.get(key, 0) + count
        return tuple((k, mdl, n) for (k, mdl), n in sorted(held.items()))

    def accel_mask(self, asks: tuple[AccelAsk, ...], counts: Optional[np.ndarray] = None) -> np.ndarray:
        """Rows where :meth:`accel_choice` finds the asks a place (vectorised per ask; the
        exact choice only where one kind is asked by model and by any model at once)."""
        c = self.accel_free if counts is None else counts
        ok = np.ones(self.n_nodes, dtype=bool)
        named_kinds, any_kinds = set(), set()
        for kind, model, count, memory in asks:
            if model:
                named_kinds.add(kind)
                j = self.accel_keys.index((kind, model)) if (kind, model) in self.accel_keys else -1
                ok &= ((c[:, j] >= count) & (self.accel_mem[:, j] >= memory)) if j >= 0 else False
            else:
                any_kinds.add(kind)
                cols = [j for j, k in enumerate(self.accel_keys) if k[0] == kind]
                ok &= ((c[:, cols] >= count) & (self.accel_mem[:, cols] >= memory)).any(axis=1) if cols else False
        if named_kinds & any_kinds:
            for row in np.flatnonzero(ok).tolist():
                ok[row] = self.accel_choice(row, asks, c) is not None
        return ok

    def gpu_memory_mask(self, gpu_mem: int) -> np.ndarray:
        """Rows whose GPUs have at least ``gpu_mem`` MiB each (``Node.gpu_memory_mib``, as
        registered; a node that reports none counts as 0)."""
        return self.meta_array("gpu_memory_mib", 0, _I64) >= gpu_mem

    # ------------------------------------------------------------- node meta
    def meta_array(self, field: str, default: Any = 0.0, dtype: Any = np.float64) -> np.ndarray:
        """The nodes' attribute ``field`` (a :class:`Node` field) as a row-aligned array
        (cached; invalidated when a node registers or re-registers). Null or empty values
        become ``default``."""
        cache = self._derived.setdefault("meta", {})
        key = (field, default, str(dtype), self.n_nodes)
        a = cache.get(key)
        if a is None:
            vals = []
            for nid in self.node_ids:
                v = getattr(self.nodes[nid], field)
                vals.append(default if v is None or v == "" else v)
            a = cache[key] = np.array(vals, dtype=dtype) if dtype is not object else np.array(vals, dtype=object)
        return a

    def update_node(self, node: Node) -> None:
        """A re-registration: new descriptive fields (resources stay as first registered)."""
        self.nodes[node.node_id] = node
        self.node_gen += 1
        self._derived.pop("meta", None)
        self.topology.update_node(node)

    # ------------------------------------------------------- GPU affinity tags
    @staticmethod
    def gpu_tag(n_devices: int, gpu_milli: int) -> str:
        """The GPU "affinity" of a task shape: ``share`` (part of one GPU) or ``<n>-gpu``."""
        return "share" if n_devices == 1 and gpu_milli < GPU_MILLI else f"{n_devices}-gpu"

    def gpu_tags(self) -> list[dict[str, int]]:
        """Per row: how many GPU tasks of each affinity tag the node holds (derived from
        ``tasks``; built lazily, then maintained by :meth:`allocate` / :meth:`free`)."""
        tags = self._derived.get("gpu_tags")
        if tags is None:
            tags = [{} for _ in range(self.n_nodes)]
            held = [(t, t.node, t.devices) for t in self.holding_records()]
            # a reserve-first move holds both places
            held += [(t, *t.moving_from) for t in self.moving_records() if t.moving_from]
            for t, node, devices in held:
                if devices:
                    d = tags[self.node_index[node]]
                    k = self.gpu_tag(len(devices), t.task.request.gpu_milli)
                    d[k] = d.get(k, 0) + 1
            self._derived["gpu_tags"] = tags
        return tags

    def _tag_delta(self, row: int, n: int, milli: int, sign: int) -> None:
        tags = self._derived.get("gpu_tags")
        if tags is None:
            return
        d = tags[row]
        k = self.gpu_tag(n, milli)
        v = d.get(k, 0) + sign
        if v > 0:
            d[k] = v
        else:
            d.pop(k, None)

    # ------------------------------------------------------------------ queue
    def enqueue(self, task_id: str, key: Optional[list] = None) -> int:
        """Queue a task under ``key`` (``qos.queue_key``; default: its kept key, else by
        priority then arrival). Queued already: nothing changes."""
        t = self.tasks[task_id]
        if t.key is not None and key is not None and t.key != key:
            self.dequeue(task_id)
        if key is not None:
            t.key = key
        elif t.key is None:
            t.key = [1, 1, 1, -t.task.priority, t.seq, task_id]
        item = t.key
        i = bisect.bisect_left(self.queue, item)
        if i < len(self.queue) and self.queue[i] == item:
            return i
        self.queue.insert(i, item)
        return i

    def dequeue(self, task_id: str) -> bool:
        t = self.tasks.get(task_id)
        if t is None or t.key is None:
            return False
        item = t.key
        i = bisect.bisect_left(self.queue, item)
        if i < len(self.queue) and self.queue[i] == item:
            del self.queue[i]
            return True
        return False

    def queue_position(self, task_id: str) -> int:
        t = self.tasks[task_id]
        return bisect.bisect_left(self.queue, t.key) if t.key is not None else len(self.queue)

    # ------------------------------------------------------------- summaries
    def gpu_capacity_milli(self) -> int:
        return int(self.gpu_count.sum()) * GPU_MILLI

    def gpu_allocated_milli(self) -> int:
        return self.gpu_capacity_milli() - int(self.gpu_free_total.sum())

    def check(self) -> None:
        """Assert the capacity invariants (for tests and debugging)."""
        for tid in self.finished:          # forgetting (retention.py)
            t = self.tasks[tid]
            assert t.status in TERMINAL and _forgettable(t.task), (tid, t.status)
        assert not self.forgotten.keys() & self.tasks.keys(), "a forgotten task is still held"
        past = {c.task_id: job for job, cs in self.past_clients.items() for c in cs}
        assert past == self._past_job and past.keys() <= self.forgotten.keys(), "past clients without tombstones"
        assert all(cs and [c.seq for c in cs] == sorted(c.seq for c in cs) for cs in self.past_clients.values())
        for kind, groups in self._groups.items():
            for g, ids in groups.items():
                assert all(tid in self.tasks for tid in ids), (kind, g, "names a forgotten task")
        assert (self.cpu_free >= 0).all() and (self.cpu_free <= self.cpu_cap).all()
        assert (self.mem_free >= 0).all() and (self.mem_free <= self.mem_cap).all()
        assert self.accel_cap.shape == self.accel_free.shape == (self.n_nodes, len(self.accel_keys))
        assert (self.accel_free >= 0).all() and (self.accel_free <= self.accel_cap).all()
        for row in range(self.n_nodes):
            k = int(self.gpu_count[row])
            g = self.gpu_free[row]
            assert ((g[:k] >= 0) & (g[:k] <= GPU_MILLI)).all(), (self.node_ids[row], g)
            assert (g[k:] == -1).all()
        used_cpu = np.zeros_like(self.cpu_cap)
        used_gpu = np.zeros_like(self.gpu_free)
        used_acc = np.zeros_like(self.accel_cap)
        index = self._holders         # not built yet: nothing to check (building it here would prove nothing)
        on_node = self._on_node
        for t in self.tasks.values():
            if index is not None and t.status in HOLDING:
                assert t.task.task_id in index.get(t.task.qos_tier, {}), (t.task.task_id, "not in the holders index")
            if on_node is not None and t.status in HOLDING:
                assert t.task.task_id in on_node.get(t.node or "", {}), (t.task.task_id, t.node, "not in the node index")
            if self._moving is not None and t.moving_from:
                assert t.task.task_id in self._moving, (t.task.task_id, "not in the moving index")
            for kind, groups in self._groups.items():
                g = _GROUPS[kind](t.task)
                assert not g or t.task.task_id in groups.get(g, ()), (t.task.task_id, f"not in the {kind} index")
            held = [(t.node, t.devices, t.accels)] if t.status in HOLDING else []
            if t.status not in HOLDING:
                assert not t.accels, (t.task.task_id, t.status, t.accels)
            if t.moving_from:
                held.append((*t.moving_from, t.moving_accels))
            else:
                assert not t.moving_accels, t.task.task_id
            for node, devices, accels in held:
                row = self.node_index[node]
                used_cpu[row] += t.task.request.cpu
                for d in devices:
                    used_gpu[row, d] += t.task.request.gpu_milli
                for kind, model, count in accels:
                    used_acc[row, self.accel_keys.index((kind, model))] += count
            if t.status in HOLDING:       # it holds what it asked: as many per kind, the models it named
                per_kind: dict[str, int] = {}
                for k, _, c, _mem in t.task.request.accels:
                    per_kind[k] = per_kind.get(k, 0) + c
                got: dict[str, int] = {}
                for k, _, c in t.accels:
                    got[k] = got.get(k, 0) + c
                assert got == per_kind, (t.task.task_id, t.accels, t.task.request.accels)
                row = self.node_index[t.node]
                memory = {key: int(self.accel_mem[row, j]) for j, key in enumerate(self.accel_keys)}
                assert _serves({(k, mdl): c for k, mdl, c in t.accels}, t.task.request.accels, memory), \
                    (t.task.task_id, t.accels, t.task.request.accels)
        from .reservations import held_cpu_mem, held_pairs   # what reservation tokens hold counts as used
        for row, cpu, _mem in held_cpu_mem(self):
            used_cpu[row] += cpu
        assert (self.cpu_cap - self.cpu_free == used_cpu).all()
        assert (self.accel_cap - self.accel_free == used_acc).all(), (self.accel_cap, self.accel_free, used_acc)
        for row, d, milli in held_pairs(self):
            used_gpu[row, d] += milli
        real = self.gpu_free >= 0
        assert (np.where(real, GPU_MILLI - self.gpu_free, 0) == used_gpu).all()

    # -------------------------------------------------------------- snapshot
    def _json_of(self, kind: str, key: str, obj: Any) -> dict[str, Any]:
        """``obj.to_json()`` of an immutable registration or submission, memoised per key
        while the same object is held (snapshots repeat every few seconds, and encoding
        thousands of unchanged nodes and tasks each time was most of their cost). Callers
        must not mutate the returned dict."""
        cache = self.task_cache.setdefault(("json", kind), {})     # not rows: a new GPU model keeps it
        hit = cache.get(key)
        if hit is None or hit[0] is not obj:
            hit = cache[key] = (obj, obj.to_json())
        return hit[1]

    def to_snapshot(self) -> dict[str, Any]:
        """A plain JSON-able dict holding everything that is not derivable."""
        return {
            "version": SNAPSHOT_VERSION,
            "cell": self.cell,
            "models": list(self.models),
            "nodes": [
                {"node_id": nid, "status": self.node_status[r], "node": self._json_of("node", nid, self.nodes[nid]),
                 "health": self.health[r], "last_heartbeat": int(self.last_heartbeat[r]),
                 "condition": self.condition[r],
                 "cpu_cap": int(self.cpu_cap[r]), "cpu_free": int(self.cpu_free[r]),
                 "mem_cap": int(self.mem_cap[r]), "mem_free": int(self.mem_free[r]),
                 "gpu_count": int(self.gpu_count[r]),
                 "gpu_model": self.models[self.model_idx[r]] if self.model_idx[r] >= 0 else None,
                 "gpu_free": [int(x) for x in self.gpu_free[r, : int(self.gpu_count[r])]]}
                for r, nid in enumerate(self.node_ids)
            ],
            "max_gpus": self.max_gpus,
            "clock": self.clock,
            "now": self.now,
            "next_retry_at": self.next_retry_at,
            "stamps": [int(x) for x in self.stamp],
            "tasks": {tid: t.to_json(self._json_of("task", tid, t.task)) for tid, t in self.tasks.items()},
            "queue": [list(q) for q in self.queue],
            "seq": self.seq,
            "offsets": dict(self.offsets),
            "policy": self.policy.to_json(),
            "class_counts": dict(self.class_counts),
            "reservations": json.loads(json.dumps(self.reservations)),
            "grace": [list(g) for g in self.grace],
            "batch_close_at": self.batch_close_at,
            "batch_due": list(self.batch_due),
            "evac_since": dict(self.evac_since),
            "decisions": self.decisions,
            "topology": self.topology.to_snapshot(),
            # free accelerator counts (their capacity is the nodes' registrations) only when the
            # cell has any: other cells snapshot as before
            **({"accel_free": {nid: [[k, mdl, int(self.accel_free[r, j])]
                                     for j, (k, mdl) in enumerate(self.accel_keys) if self.accel_cap[r, j] > 0]
                               for r, nid in enumerate(self.node_ids) if self.accel_cap[r].any()}}
               if self.accel_keys else {}),
            # model caches and the prewarm book only when there are any: other cells snapshot as before
            **({"model_caches": {n: self.model_caches[n].to_json() for n in sorted(self.model_caches)}}
               if self.model_caches else {}),
            **({"prewarm": json.loads(json.dumps(self.prewarm))} if self.prewarm else {}),
            # only when it exists: a cell that never profiled snapshots as before
            **({"profiler": self.profiler.to_json()} if self.profiler is not None else {}),
            # elastic jobs' books only when there are any: other cells snapshot as before
            **({"elastic": json.loads(json.dumps(self.elastic, sort_keys=True))} if self.elastic else {}),
            # forgetting (retention.py): what may be forgotten, in order, and the tombstones
            **({"finished": list(self.finished)} if self.finished else {}),
            **({"finished_pinned": self.finished_pinned} if self.finished_pinned else {}),
            **({"forgotten": self._forgotten_json()} if self.forgotten else {}),
            **({"past_clients": {job: [c.to_json() for c in cs] for job, cs in sorted(self.past_clients.items())}}
               if self.past_clients else {}),
            **({"shape_log": {"base": self.shape_base, "names": list(self.shape_names),
                              "log": self.shape_log.tolist()}} if self.shape_names else {}),
        }

    def _forgotten_json(self) -> dict[str, Any]:
        pairs: dict[tuple[str, Optional[str]], int] = {}
        ids = [[tid, pairs.setdefault(pair, len(pairs))] for tid, pair in self.forgotten.items()]
        return {"pairs": [list(p) for p in pairs], "ids": ids}

    @classmethod
    def from_snapshot(cls, snap: dict[str, Any]) -> "CellState":
        if snap.get("version") != SNAPSHOT_VERSION:
            raise ValueError(f"unsupported snapshot version {snap.get('version')}")
        s = cls(snap["cell"], max_gpus=int(snap["max_gpus"]))
        for m in snap["models"]:
            s.models.append(m)
        for nd in snap["nodes"]:
            row = s.add_node(nd["node_id"], nd["cpu_cap"], nd["mem_cap"], nd["gpu_count"],
                             nd["gpu_model"], Node.from_json(nd["node"]), nd["status"])
            s.cpu_free[row] = nd["cpu_free"]
            s.mem_free[row] = nd["mem_free"]
            s.gpu_free[row, : nd["gpu_count"]] = nd["gpu_free"]
            s._refresh_gpu_row(row)
            s.last_heartbeat[row] = nd["last_heartbeat"]
            s.set_condition(nd["node_id"], nd["condition"])
            s.set_health(nd["node_id"], nd["health"])
        # accelerator capacity comes with each node's registration (add_node); free counts
        # from the snapshot. One written before they were kept has none: the core then never
        # allocated them, so all are free
        for nid, entries in (snap.get("accel_free") or {}).items():
            row = s.node_index[nid]
            for k, mdl, n in entries:
                s.accel_free[row, s.accel_keys.index((k, mdl))] = n
        s.clock = int(snap["clock"])
        s.now = int(snap["now"])
        s.next_retry_at = int(snap["next_retry_at"])
        s.stamp = np.array(snap["stamps"], dtype=_I64)
        s.tasks = {tid: TaskRecord.from_json(t) for tid, t in snap["tasks"].items()}
        s.queue = [list(q) for q in snap["queue"]]
        s.seq = int(snap["seq"])
        s.offsets = dict(snap["offsets"])
        s.policy = Policy.from_json(snap["policy"])
        s.class_counts = dict(snap["class_counts"])
        s.reservations = json.loads(json.dumps(snap["reservations"]))
        s.grace = [list(g) for g in snap["grace"]]
        s.batch_close_at = int(snap["batch_close_at"])
        s.batch_due = list(snap["batch_due"])
        s.evac_since = {k: int(v) for k, v in snap["evac_since"].items()}
        s.decisions = int(snap["decisions"])
        s.topology.restore(snap.get("topology"))
        s.model_caches = {n: ModelCache.from_json(c) for n, c in (snap.get("model_caches") or {}).items()}
        s.prewarm = json.loads(json.dumps(snap.get("prewarm") or {}))
        s.profiler = Profiler.from_json(snap["profiler"]) if snap.get("profiler") is not None else None
        s.elastic = json.loads(json.dumps(snap.get("elastic") or {}))
        s.past_clients = {job: [ClientView.from_json(c, s._past_labels) for c in cs]
                          for job, cs in (snap.get("past_clients") or {}).items()}
        s._past_job = {c.task_id: job for job, cs in s.past_clients.items() for c in cs}
        s._restore_forgetting(snap)
        s._derived = {}
        return s

    def _restore_forgetting(self, snap: dict[str, Any]) -> None:
        """The finished order, tombstones and shape log of a snapshot; for one written before
        cells forgot (none of the keys), built from its tasks, which are then all there. A
        snapshot written before job members could be forgotten lacks the finished ones that
        now may be: they come first (they finished before it was written), in arrival order."""
        done = [t for t in self.tasks.values() if t.status in TERMINAL and _forgettable(t.task)]
        if "finished" in snap:
            listed = {tid: None for tid in snap["finished"]}
            older = [t.task.task_id for t in sorted(done, key=lambda t: t.seq) if t.task.task_id not in listed]
            self.finished = {**dict.fromkeys(older), **listed}
        else:
            self.finished = {t.task.task_id: None for t in sorted(done, key=lambda t: t.seq)}
        self.finished_pinned = int(snap.get("finished_pinned", 0))
        gone = snap.get("forgotten")
        if gone:
            pairs = [(st, node) for st, node in gone["pairs"]]
            for p in pairs:
                self._tombs[p] = p
            self.forgotten = {tid: pairs[k] for tid, k in gone["ids"]}
        log = snap.get("shape_log")
        if log is not None:
            self.shape_base = int(log["base"])
            self.shape_names = list(log["names"])
            self.shape_log = array("I", log["log"])
        elif not self.forgotten:
            from .frag import shape_key      # frag imports this module
            by_seq = sorted(self.tasks.values(), key=lambda t: t.seq)
            if [t.seq for t in by_seq] == list(range(1, self.seq + 1)):
                for t in by_seq:
                    r = t.task.request
                    key = shape_key(r.cpu, r.gpu_count, r.gpu_milli, r.models)
                    i = self._shape_ids.setdefault(key, len(self.shape_names))
                    if i == len(self.shape_names):
                        self.shape_names.append(key)
                    self.shape_log.append(i)
        self._shape_ids = {k: i for i, k in enumerate(self.shape_names)}

    def copy(self) -> "CellState":
        return CellState.from_snapshot(self.to_snapshot())
