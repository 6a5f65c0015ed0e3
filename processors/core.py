"""The two pure entry points of the scheduling core.

``evolve(state, event) -> state``
    Folds one *fact* into the state: an input fact (node registered / status changed,
    policy changed, task status changed, task cancelled) or one of the core's own
    decisions (TaskPlaced, TaskPending, TaskUnschedulable, TaskReleased). Rebuilding a
    cell is ``fold(evolve, inputs and decisions in log order)``.

``decide(state, event, position) -> (state, [decision, ...])``
    The scheduler step for one input read at ``position = (topic, partition, offset)``.
    It folds the input, decides, and folds its own decisions, so the returned state
    already reflects them. Deterministic: no wall clock (``decided_at`` is the input's
    time), no I/O, randomness only from the strategy seed mixed with the position.
    Idempotent: an input at or below the last applied offset of its (topic, partition)
    is ignored and yields no outputs; so are a second submission of a known task id and
    a status for an unknown task. A PolicyChanged naming an unknown strategy or argument,
    or a value out of range, raises :class:`~suanli.errors.RejectedInput` (its offset
    counts as applied; nothing else changes): the runner dead-letters it. So does a
    TaskSubmitted asking accelerators or a GPU memory that no node registered in the cell
    could ever provide (``accelerators.refusal``; a task asking neither is never refused):
    one that arrives before such a node registers is refused too, and must be sent again.

Inputs and decisions are the typed values of ``model.py``; the codec converts them to
and from Avro at the edge. Both functions mutate ``state`` in place and return it (see
``state.py``).
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any, Optional

import numpy as np

from suanli.errors import ModelError, RejectedInput, StrategyError

import bisect

from . import auction, matching, preemption, reservations, rng
from . import elastic_jobs, model_cache, prewarm
from .accelerators import fits_devices, refusal
from . import model as m
from .framework import Code, CycleContext, CycleResult, Status, default_devices, run_cycle
from .frag import shape_key
from .model import Request
from .profiler import Profiler
from .reservation_args import ReservationArgs
from .qos import (BATCH, GOLD, LANE_RANK, SILVER, STANDBY_SUFFIX, URGENT, QosArgs, gold_pool, is_standby, lane_of,
                  outranks, primary_of, queue_key, standby_id)
from .sandbox import SandboxError
from .state import (CANCELLED, COMPLETED, DOWN, DRAINING, FAILED, HOLDING, PENDING, PLACED, PREEMPTED, READY,
                    RUNNING, SUSPECT, TERMINAL, UNSCHEDULABLE, CellState, TaskRecord)
from .strategies import Strategy, config_digest, fallback_of, get_strategy, strategy_for_rule, validate_policy

Position = tuple[str, int, int]


def policy_strategy(s: CellState) -> Strategy:
    """The strategy of the cell's policy, kept in the derived cache while the same policy
    object is in force (a PolicyChanged replaces it): building its lookup key hashes the
    config's canonical JSON, which every input, heartbeats included, would pay otherwise."""
    pol = s.policy
    hit = s._derived.get("policy-strategy")
    if hit is None or hit[0] is not pol:
        hit = s._derived["policy-strategy"] = (pol, get_strategy(pol.strategy, dict(pol.config), pol.digest))
    return hit[1]


def qos_of(s: CellState) -> QosArgs:
    """The cell policy's QoS arguments (``qos.py``)."""
    return policy_strategy(s).args.qos


def reservation_args_of(s: CellState) -> ReservationArgs:
    """The cell policy's reservation arguments (``reservation_args.py``)."""
    return policy_strategy(s).args.reservations


def profiler_of(s: CellState) -> Optional[Profiler]:
    """The cell's task profiler while its policy turns profiles on (made on first use; its
    history stays in the state if they are turned off and on again), else None."""
    args = policy_strategy(s).args.profiles
    if not args.enabled:
        return None
    if s.profiler is None:
        s.profiler = Profiler(args.max_signatures)
    return s.profiler


def _profiler_for(s: CellState, task: m.Task) -> Optional[Profiler]:
    """The profiler, for a task's history; None for a gold standby copy (qos.py): a copy is
    not a run of its own, and counting it would double the gold tasks' history."""
    return None if is_standby(task.task_id) else profiler_of(s)


def _key(s: CellState, t: TaskRecord, lost: bool) -> list:
    task = t.task
    return queue_key(lane_of(task.labels), task.qos_tier, task.priority, t.queued_at, t.seq, task.task_id,
                     qos_of(s).aging_ms, lost)


def _free_old_copy(s: CellState, t: TaskRecord) -> None:
    """The old copy of a reserve-first move is gone: give its place back."""
    if t.moving_from is not None:
        node, devices = t.moving_from
        r = t.task.request
        s.free(node, devices, r.gpu_milli, r.cpu, r.mem, t.moving_accels)
        t.moving_from, t.moving_accels = None, ()


def _accels_on(s: CellState, t: TaskRecord, node_id: str) -> tuple[m.AccelHeld, ...]:
    """The non-GPU accelerators ``t`` takes on ``node_id`` (``CellState.accel_choice``: the
    same answer when the decision is made and when it is folded, in replay too)."""
    asks = t.task.request.accels
    if not asks:
        return ()
    held = s.accel_choice(s.node_index[node_id], asks)
    if held is None:
        raise ValueError(f"{t.task.task_id}: accelerators do not fit on {node_id}: {asks}")
    return held


def _release_accels(s: CellState, t: TaskRecord) -> tuple[m.AccelHeld, ...]:
    """What ``t`` holds on its node, now given back by the caller's ``free``."""
    held, t.accels = t.accels, ()
    return held


# ============================================================================ evolve
def _node_registered(s: CellState, e: m.NodeRegistered) -> None:
    node = m.Node.of(e)
    if e.node_id in s.node_index:     # re-registration: refresh descriptive fields, mark ready
        old = s.nodes[e.node_id]
        if old.accel_capacity or node.accel_capacity:
            # resources stay as first registered: its non-GPU accelerators too (the state's
            # columns and what a snapshot rebuilds them from)
            node = replace(node, accelerators=(*(a for a in node.accelerators if a.kind == "GPU"),
                                               *(a for a in old.accelerators if a.kind != "GPU")))
        s.update_node(replace(node, cpu_milli=s.nodes[e.node_id].cpu_milli,
                              memory_mib=s.nodes[e.node_id].memory_mib,
                              gpu_count=s.nodes[e.node_id].gpu_count, gpu_model=s.nodes[e.node_id].gpu_model))
        s.set_node_status(e.node_id, READY)
        model_cache.node_gone(s, e.node_id)     # a re-registered node's disk is not to be trusted
        return
    s.add_node(e.node_id, node.cpu_milli, node.memory_mib, node.gpu_count, node.gpu_model, node)


def _node_status(s: CellState, e: m.NodeStatusChanged) -> None:
    if e.node_id in s.node_index and e.status in ("READY", "CORDONED", "DOWN", DRAINING):
        s.set_node_status(e.node_id, e.status)
        if e.status == DOWN:
            model_cache.node_gone(s, e.node_id)
            for tid in s.moving_off(e.node_id):      # old copies of moves die with their node
                _free_old_copy(s, s.tasks[tid])


def policy_of(e: m.PolicyChanged) -> m.Policy:
    """The policy a PolicyChanged sets, validated: :class:`RejectedInput` names what is wrong
    (an unknown strategy, an unknown argument, a value out of range)."""
    try:
        cfg = e.config()
        validate_policy(e.strategy, cfg)
    except KeyError:
        from .strategies import names
        raise RejectedInput(f"PolicyChanged for cell {e.cell!r}: unknown strategy {e.strategy!r}; "
                            f"known: {', '.join(names())}") from None
    except (StrategyError, ModelError, ValueError, TypeError) as exc:
        raise RejectedInput(f"PolicyChanged for cell {e.cell!r}, strategy {e.strategy!r}: {exc}") from None
    return m.Policy(strategy=e.strategy, config=cfg, digest=config_digest(cfg))


def _policy(s: CellState, e: m.PolicyChanged) -> None:
    s.policy = policy_of(e)


def _task_submitted(s: CellState, e: m.TaskSubmitted) -> None:
    if e.task_id in s.tasks or e.task_id in s.forgotten:
        return
    task = m.Task.of(e)
    s.seq += 1
    s.add_task(TaskRecord(task, s.seq, queued_at=s.now))
    r = task.request
    k = shape_key(r.cpu, r.gpu_count, r.gpu_milli, r.models)
    s.class_counts[k] = s.class_counts.get(k, 0) + 1
    s.note_arrival_shape(k)
    prof = profiler_of(s)
    if prof is not None:
        prof.submitted(task, s.now)


def _task_status(s: CellState, e: m.TaskStatusChanged) -> None:
    t = s.tasks.get(e.task_id)
    if t is None or t.status in TERMINAL:
        return
    if t.moving_from is not None and e.node_id == t.moving_from[0]:
        if e.status in (COMPLETED, FAILED, CANCELLED):
            _free_old_copy(s, t)                    # the old copy of a move ended on its own
        return
    if e.status in ("DISPATCHED", "RUNNING") and t.status in HOLDING:
        s.set_status(t, e.status)
        if e.status == RUNNING and e.node_id == t.node:
            _free_old_copy(s, t)                    # reserve-first: the new copy runs, the old one goes
    # COMPLETED / FAILED are applied by the TaskReleased decision that follows them


def _heartbeat(s: CellState, e: m.NodeHeartbeat) -> None:
    for node_id in e.alive:                  # nodes the cell does not know are ignored
        row = s.node_index.get(node_id)
        if row is not None and e.at > s.last_heartbeat[row]:
            s.last_heartbeat[row] = e.at


def _condition(s: CellState, e: m.NodeConditionChanged) -> None:
    if e.node_id in s.node_index:
        s.set_condition(e.node_id, e.condition)


def _link(s: CellState, e: m.LinkMetrics) -> None:
    s.topology.observe_link(e)


def _health(s: CellState, e: m.NodeHealthChanged) -> None:
    s.set_health(e.node_id, e.status)
    if e.status == DOWN:
        model_cache.node_gone(s, e.node_id)
        for tid in s.moving_off(e.node_id):          # old copies of moves die with their node
            _free_old_copy(s, s.tasks[tid])


def _lost(s: CellState, e: m.TaskLost) -> None:
    """Freed and queued again at the front of its tier and priority (lost work first)."""
    t = s.tasks[e.task_id]
    if t.status not in HOLDING:
        return
    r = t.task.request
    s.free(t.node, t.devices, r.gpu_milli, r.cpu, r.mem, _release_accels(s, t))
    _free_old_copy(s, t)
    s.set_status(t, PENDING)
    t.node, t.devices = None, ()
    s.enqueue(e.task_id, _key(s, t, lost=True))
    prof = _profiler_for(s, t.task)
    if prof is not None:
        prof.requeued(t.task)


def _placed(s: CellState, e: m.TaskPlaced) -> None:
    t = s.tasks[e.task_id]
    if t.status in HOLDING:
        return
    reservations.on_placed(s, e)        # GPUs a token holds go to its claimant, or are lent to bronze
    accels = _accels_on(s, t, e.node_id)
    s.allocate(e.task_id, e.node_id, e.gpu_devices, e.gpu_milli, e.cpu_milli, e.memory_mib, accels)
    t.accels = accels
    s.dequeue(e.task_id)
    s.set_status(t, PLACED, node=e.node_id)
    t.devices, t.key, t.placed_at = tuple(e.gpu_devices), None, s.now
    model_cache.on_placed(s, e.node_id, t.task)     # its model is on the node's disk from now on
    prof = _profiler_for(s, t.task)
    if prof is not None:
        prof.placed(t.task, t.queued_at, s.now)


def _pending(s: CellState, e: m.TaskPending) -> None:
    t = s.tasks[e.task_id]
    if t.status == PREEMPTED:                       # its grace ended: back in the queue, lost work first
        s.grace = [g for g in s.grace if g[1] != e.task_id]
        t.key, t.node = _key(s, t, lost=True), None
    elif t.key is None:
        t.key = _key(s, t, lost=False)
    s.set_status(t, PENDING)
    s.enqueue(e.task_id)


def _preempted(s: CellState, e: m.TaskPreempted) -> None:
    """Evicted: its place is free at once; it waits out its grace, then is queued again."""
    t = s.tasks[e.task_id]
    if t.status not in HOLDING:
        return
    r = t.task.request
    s.free(t.node, t.devices, r.gpu_milli, r.cpu, r.mem, _release_accels(s, t))
    # ``node`` stays: the old copy may still finish there during its grace (see decide)
    s.set_status(t, PREEMPTED)
    t.devices, t.key = (), None
    t.requeue_at = s.now + e.grace_ms
    prof = _profiler_for(s, t.task)
    if prof is not None:
        prof.requeued(t.task)
    bisect.insort(s.grace, [t.requeue_at, e.task_id, e.preempted_by or ""])


def _migrated(s: CellState, e: m.TaskMigrated) -> None:
    """Moved: the new place is taken; the old one is given back now, or — reserve-first —
    when the new copy reports RUNNING (``moving_from`` holds it until then)."""
    t = s.tasks[e.task_id]
    r = t.task.request
    if t.status in HOLDING and t.node == e.from_node:
        if e.reserve_first:
            t.moving_from, t.moving_accels = (t.node, t.devices), _release_accels(s, t)
            s.move_started(t)
        else:
            s.free(t.node, t.devices, r.gpu_milli, r.cpu, r.mem, _release_accels(s, t))
    reservations.on_arrival(s, e.task_id, e.to_node, e.gpu_devices)    # as a placement: holds there make way
    accels = _accels_on(s, t, e.to_node)
    s.allocate(e.task_id, e.to_node, e.gpu_devices, r.gpu_milli if e.gpu_devices else 0, r.cpu, r.mem, accels)
    if s.reservations.get("by_node", {}).get(e.to_node):
        reservations.fill(s, e.to_node)          # evolve fills the node it left; this is the one it came to
    t.accels = accels
    s.dequeue(e.task_id)
    s.set_status(t, PLACED, node=e.to_node)
    t.devices, t.key, t.placed_at = tuple(e.gpu_devices), None, s.now
    model_cache.on_placed(s, e.to_node, t.task)


def _unschedulable(s: CellState, e: m.TaskUnschedulable) -> None:
    s.set_status(s.tasks[e.task_id], UNSCHEDULABLE)
    s.dequeue(e.task_id)


def _released(s: CellState, e: m.TaskReleased) -> None:
    t = s.tasks.get(e.task_id)
    if t is None or t.status in TERMINAL:
        return
    if t.status in HOLDING:
        r = t.task.request
        s.free(t.node, t.devices, r.gpu_milli, r.cpu, r.mem, _release_accels(s, t))
    _free_old_copy(s, t)
    if t.status == PREEMPTED:
        s.grace = [g for g in s.grace if g[1] != e.task_id]
    s.dequeue(e.task_id)
    s.set_status(t, e.cause if e.cause in (COMPLETED, FAILED, CANCELLED) else CANCELLED)
    prof = _profiler_for(s, t.task)
    if prof is not None:
        prof.ended(t.task)


_EVOLVE: dict[type, Any] = {
    m.NodeRegistered: _node_registered,
    m.NodeStatusChanged: _node_status,
    m.PolicyChanged: _policy,
    m.TaskSubmitted: _task_submitted,
    m.TaskStatusChanged: _task_status,
    m.TaskCancelled: lambda s, e: None,   # the TaskReleased decision carries the effect
    m.TaskPlaced: _placed,
    m.TaskPending: _pending,
    m.TaskUnschedulable: _unschedulable,
    m.TaskReleased: _released,
    m.NodeHeartbeat: _heartbeat,
    m.NodeConditionChanged: _condition,
    m.LinkMetrics: _link,
    m.NodeHealthChanged: _health,
    m.TaskLost: _lost,
    m.TaskPreempted: _preempted,
    m.TaskMigrated: _migrated,
    m.ReservationGranted: lambda s, e: reservations.granted(s, e, reservation_args_of(s)),
    m.ReservationReleased: lambda s, e: reservations.released(s, e),
    m.ReservationExpired: lambda s, e: reservations.expired(s, e),
    m.JobRound: elastic_jobs.fold_round,
    m.JobResized: elastic_jobs.fold_resize,
}

# facts that may free GPUs on a node (or leave part of one free beside new work), and which
# node: tokens holding there take what is free first
_FREES: dict[type, str] = {m.TaskPlaced: "node_id", m.TaskReleased: "node_id", m.TaskPreempted: "node_id", m.TaskLost: "node_id",
                           m.TaskMigrated: "from_node", m.TaskStatusChanged: "node_id",
                           m.NodeStatusChanged: "node_id", m.NodeHealthChanged: "node_id"}


def evolve(state: CellState, event: Any) -> CellState:
    """Fold one fact into ``state`` (in place) and return it. Other kinds are ignored."""
    fn = _EVOLVE.get(type(event))
    if fn is not None:
        fn(state, event)
        where = _FREES.get(type(event))
        if where is not None and state.reservations.get("by_node"):
            node = getattr(event, where)
            if node in state.reservations["by_node"]:
                reservations.fill(state, node)
    return state


# ============================================================================ decide
def gang_of(task: m.Task) -> Optional[tuple[str, int]]:
    """``(gang id, size)`` of a gang member (labels ``gang`` and ``gang-size``), else None.
    A size that is not a positive integer counts as 1 (the task starts on its own)."""
    gang = task.labels.get("gang")
    if not gang:
        return None
    try:
        size = int(task.labels.get("gang-size", "1"))
    except ValueError:
        size = 1
    return (gang, size) if size > 1 else None


def event_time(e: Any) -> int:
    """The time an input carries (``model.time_field``: its ``at``, ``submitted_at`` or
    ``registered_at``; 0 when it has none)."""
    return getattr(e, m.time_field(e.KIND), 0) or 0


def _accels_fit(s: CellState, reqs: list[Request], placements: list[tuple[int, list[int]]]) -> bool:
    """Whether the members' accelerators fit where a gang plan puts them, members on one
    node taking them in turn (the packing search counts CPU, memory and GPUs only)."""
    left = s.accel_free.copy()
    for r, (row, _) in zip(reqs, placements):
        held = s.accel_choice(row, r.accels, left)
        if held is None:
            return False
        for kind, model, count in held:
            left[row, s.accel_keys.index((kind, model))] -= count
    return True


class _Decider:
    """Builds the outputs of one input; keeps the per-input sequence for decision ids."""
    __slots__ = ("s", "strategy", "pos", "at", "outs", "n", "topic_seed", "note")

    def __init__(self, s: CellState, pos: Position, at: int):
        self.s = s
        self.strategy: Strategy = policy_strategy(s)
        self.pos = pos
        self.at = at
        self.outs: list[Any] = []
        self.n = 0
        self.topic_seed = rng.str_seed(pos[0])
        self.note: Optional[str] = None       # why a task's reservation could not serve it (its path says so)

    def _ids(self, kind: str) -> tuple[str, str]:
        t, p, o = self.pos
        did = f"{self.s.cell}/{t}/{p}/{o}/{self.n}"
        self.n += 1
        return f"{did}/{kind}", did

    def provenance(self, res: CycleResult | None, path: list[str], strategy: Strategy | None = None,
                   matched_rule: str | None = None, task_id: str | None = None) -> m.Provenance:
        """Why a decision was made; ``task_id``: the task it decides, whose profile it carries
        while the policy has profiles on (profiler.py)."""
        s = self.s
        t, p, o = self.pos
        cands: tuple[m.Candidate, ...] = ()
        filt: tuple[m.FilterOutcome, ...] = ()
        if res is not None:
            ids = s.node_ids
            # lists, not generators: a decision builds these on every placement
            cands = tuple([m.Candidate(node_id=ids[r], score=sc, rank=i)
                           for i, (r, sc) in enumerate(res.candidates, 1)])
            filt = tuple([m.FilterOutcome(reason=reason, nodes=k, sample=tuple([ids[r] for r in sample]))
                          for reason, k, sample in res.filtered])
        return m.Provenance(input=m.LogPosition(topic=t, partition=p, offset=o),
                            strategy=(strategy or self.strategy).decision_ref,
                            candidates=cands, filtered=filt, path=tuple(path), decided_at=self.at,
                            matched_rule=matched_rule, profile=self.profile_of(task_id))

    def profile_of(self, task_id: str | None) -> Optional[m.TaskProfile]:
        """The task's profile when profiles are on, else None."""
        if task_id is None:
            return None
        prof = profiler_of(self.s)
        t = self.s.tasks.get(task_id)
        return prof.profile(t.task, self.s) if prof is not None and t is not None else None

    def emit(self, decision: Any) -> None:
        evolve(self.s, decision)
        self.outs.append(decision)

    @property
    def qos(self) -> QosArgs:
        return self.strategy.args.qos

    @property
    def rargs(self) -> ReservationArgs:
        return self.strategy.args.reservations

    def choose(self, t: TaskRecord) -> tuple[Strategy, Optional[str], list[str]]:
        """The strategy for this task: the urgent tier's bounded one for an urgent task, the
        batch strategy for a batch task; else the first label rule that matches (policy
        config ``rules``), else the cell's strategy."""
        lane = lane_of(t.task.labels)
        if lane in (URGENT, BATCH):
            name = self.qos.urgent_strategy if lane == URGENT else self.qos.batch_strategy
            cfg: dict[str, Any] = {"seed": self.strategy.seed}
            if lane == BATCH and name == "batch":
                cfg["window"] = self.qos.batch_chunk
            return get_strategy(name, cfg), None, [f"{lane} tier -> {name}"]
        rules = self.strategy.args.rules
        if not rules:
            return self.strategy, None, []
        hit = matching.match(rules, t, t.task.request.kind)
        if hit is None:
            return self.strategy, None, [f"match: no rule -> {self.strategy.name}"]
        i, rule = hit
        desc = matching.describe(i, rule)
        return strategy_for_rule(rule, self.strategy.seed), desc, [f"match: {desc}"]

    def gold_pool(self) -> Optional[np.ndarray]:
        """Row mask of the gold pool, None when the cell has none."""
        s, q = self.s, self.qos

        def pool() -> Optional[np.ndarray]:
            mask = gold_pool(s.node_ids, [s.nodes[n].labels for n in s.node_ids], s.model_idx, q)
            return mask if mask.any() else None
        return s.derived(("gold_pool", s.n_nodes, s.node_gen, q.pool_label, q.gold_share), pool)

    def pool_passes(self, tier: str) -> list[tuple[Optional[np.ndarray], str, Optional[str]]]:
        """The cycles a task of ``tier`` runs, in order: (allowed rows, reason for the rest,
        a note for the path). Gold tries its pool, then the shared pool; silver never enters
        the gold pool; bronze may go anywhere (it is preemptible)."""
        pool = self.gold_pool()
        if pool is None:
            return [(None, "", None)]
        if tier == GOLD:
            return [(pool, "outside the gold pool (QoS)", "qos: gold pool first"),
                    (None, "", "qos: gold pool full -> shared pool")]
        if tier == SILVER:
            return [(~pool, "gold pool (QoS: gold and bronze only)", None)]
        return [(None, "", None)]

    def eligible(self, t: TaskRecord, exclude: Optional[int]) -> np.ndarray:
        """Rows a task could use if resources allowed: ready, large enough, its GPU model, its
        pool (the basic filters; the preemption search runs only on these)."""
        s, req = self.s, t.task.request
        ok = s.ready & (s.cpu_cap >= req.cpu) & (s.mem_cap >= req.mem)
        if req.kind != "cpu":
            ok &= s.gpu_count >= (1 if req.kind == "shared" else req.gpu_count)
            if req.models:
                ids = [i for i, name in enumerate(s.models) if name in req.models]
                ok &= np.isin(s.model_idx, np.array(ids, dtype=np.int64))
        if req.has_device_needs:       # GPUs with the memory it asks, enough accelerators registered
            if req.gpu_mem:
                ok &= s.gpu_memory_mask(req.gpu_mem)
            if req.accels:
                ok &= s.accel_mask(req.accels, s.accel_cap)
        pool = self.gold_pool()
        if pool is not None and t.task.qos_tier == SILVER:
            ok &= ~pool
        avoid, _why = self.avoid(t.task.task_id, exclude)
        if avoid:
            ok[avoid] = False
        return ok

    def avoid(self, task_id: str, exclude: Optional[int]) -> tuple[list[int], str]:
        """Rows a placement of ``task_id`` may not use, and why: ``exclude`` (the node it
        leaves), and with a gold standby (qos.py) the node(s) its other copy holds, so that
        one node's failure never takes both copies."""
        s = self.s
        rows = [] if exclude is None else [exclude]
        other = s.tasks.get(primary_of(task_id) or standby_id(task_id))
        if other is None or other.status not in HOLDING or other.node is None:
            return rows, "the node it leaves"
        rows.append(s.node_index[other.node])
        if other.moving_from is not None:
            rows.append(s.node_index[other.moving_from[0]])
        why = "the node it leaves, or its other copy's (gold standby)" if exclude is not None \
            else "its other copy's node (gold standby)"
        return rows, why

    def find_place(self, task_id: str, t: TaskRecord, retry: bool, exclude: Optional[int] = None,
                   window_ids: Optional[list[str]] = None):
        """Run the task's cycles (pool passes); returns ``(res, ctx, strategy, rule, path)`` of
        the cycle that placed it, or of the last one tried."""
        s, req = self.s, t.task.request
        strategy, rule, mpath = self.choose(t)
        seed = rng.mix(strategy.seed, self.topic_seed, self.pos[1], self.pos[2], self.n)
        notes: list[str] = []
        res = ctx = None
        avoid, why_not = self.avoid(task_id, exclude)
        for allowed, reason, note in self.pool_passes(t.task.qos_tier):
            if avoid:
                allowed = np.ones(s.n_nodes, dtype=bool) if allowed is None else allowed.copy()
                allowed[avoid] = False
                reason = reason or why_not
            ctx = CycleContext(s, req, task_id, seed, strategy.config, allowed=allowed, allowed_reason=reason)
            if window_ids is not None:
                ctx.scratch["window_ids"] = window_ids
            try:
                res = run_cycle(strategy.profile, ctx)
            except SandboxError as exc:
                fb = fallback_of(self.strategy)     # the cell policy says what replaces a failed strategy
                fnote = f"fallback: {strategy.name} failed in the sandbox ({exc.reason}) -> {fb.name}"
                mpath = mpath + [fnote]
                rule = f"{rule}; {fnote}" if rule else fnote
                strategy = fb
                ctx = CycleContext(s, req, task_id, seed, strategy.config, allowed=allowed, allowed_reason=reason)
                res = run_cycle(strategy.profile, ctx)
            if note:
                notes.append(note)
            if res.plan is not None:
                break
        if res.plan is None and t.task.qos_tier == "BRONZE" and self.rargs.lend_bronze \
                and (reservations.held_devices(s) or reservations.held_cpu_mem(s)):
            undone = reservations.unhold_all(s)      # bronze may borrow GPUs tokens hold, until claimed
            try:
                lctx = CycleContext(s, req, task_id, seed, strategy.config)
                lres = run_cycle(strategy.profile, lctx)
            finally:
                reservations.rehold(s, undone)
            if lres.plan is not None:
                res, ctx = lres, lctx
                notes.append("reservation: lent GPUs a token holds (preempted when its owner claims them)")
        path = ["retry from queue" if retry else "submitted", *mpath, *notes, *res.path]
        if self.note:
            path.insert(1, self.note)
            self.note = None
        if ctx.scratch.get("batch_note"):
            path.insert(len(path) - 1 if res.plan is not None else len(path), ctx.scratch["batch_note"])
        return res, ctx, strategy, rule, path

    def preempt_for(self, task_id: str, t: TaskRecord, path: list[str], strategy: Strategy, rule: Optional[str],
                    exclude: Optional[int] = None, in_service: bool = False) -> Optional[preemption.Preemption]:
        """If lower-tier work blocks ``t``, evict the cheapest victims (``preemption.py``):
        TaskPreempted for each (its place freed now, queued again after its grace) and a
        StopCommand to its connector. Returns the plan (the caller takes the place), or None."""
        s, q, tier = self.s, self.qos, t.task.qos_tier
        # with a gold standby, a gold task out of service (it ran before, so its copy exists, and
        # that copy is not running; ``in_service``: a reserve-first move, whose old copy runs)
        # may evict other tasks' copies, after bronze: they lose redundancy, not service
        copy = s.tasks.get(standby_id(task_id)) if q.gold_standby and tier == GOLD and not in_service else None
        standbys = copy is not None and copy.status not in HOLDING and primary_of(task_id) is None
        if not q.preempt or not (standbys or any(outranks(tier, v) for v in q.preemptible)):
            return None
        plan = preemption.plan(s, t.task.request, tier, self.eligible(t, exclude), q.preemptible,
                               q.max_victim_search, standbys)
        if plan is None:
            return None
        worst = max(v.importance for v in plan.victims)
        lost_s = sum(v.work_lost_ms for v in plan.victims) / 1000
        why = (f"{task_id} ({tier} priority {t.task.priority}) did not fit; on {plan.node_id} evicting "
               f"{len(plan.victims)} task(s) of at most "
               + (f"tier rank {worst[0]} priority {worst[1]} " if worst[0] != preemption.STANDBY_LEVEL
                  else f"a gold standby copy of priority {worst[1]} ") +
               f"({lost_s:g} s of work lost) makes room: lowest tier and priority first, then fewest, "
               f"then least work lost")
        victims = plan.victim_ids
        self.evict([(v.task_id, v.work_lost_ms) for v in plan.victims], task_id, f"preempted by {task_id} ({tier})",
                   f"preempted by {task_id} ({tier} priority {t.task.priority})", why, strategy, rule)
        path.append(f"preempt: {why}; victims {', '.join(victims)}")
        return plan

    def evict(self, victims: list[tuple[str, int]], by: str, head: str, reason: str, why: str,
              strategy: Strategy | None = None, rule: Optional[str] = None) -> None:
        """TaskPreempted for each ``(task id, work lost ms)`` (its place freed now, queued
        again after its grace) and a StopCommand to its connector."""
        s, q = self.s, self.qos
        ids = tuple(v for v, _ in victims)
        for vid, lost_ms in victims:
            vt = s.tasks[vid]
            node = vt.node
            eid, did = self._ids(m.TaskPreempted.KIND)
            vpath = [head, why, f"victims: {', '.join(ids)}", f"grace {q.grace_ms} ms, then queued again"]
            self.emit(m.TaskPreempted(event_id=eid, decision_id=did, task_id=vid, tenant=vt.task.tenant,
                                      cell=s.cell, node_id=node, preempted_by=by, reason=f"{reason} on {node}",
                                      provenance=self.provenance(None, vpath, strategy, rule), grace_ms=q.grace_ms,
                                      work_lost_ms=lost_ms, victims=ids, job_id=vt.task.job_id))
            conn = s.nodes[node].connector or "sim"
            self.outs.append(m.StopCommand(event_id=f"{did}/stop", task_id=vid, cell=s.cell, node_id=node,
                                           connector=conn, reason=f"preempted by {by}", issued_at=self.at,
                                           grace_ms=q.grace_ms))

    def _placed(self, task_id: str, t: TaskRecord, node_id: str, devices: list[int],
                prov: m.Provenance) -> None:
        note = model_cache.placement_note(self.s, t.task, node_id)    # before the fold: where its model is
        if note is not None:
            prov = replace(prov, notes=(*prov.notes, note))
        req = t.task.request
        eid, did = self._ids(m.TaskPlaced.KIND)
        self.emit(m.TaskPlaced(event_id=eid, decision_id=did, task_id=task_id, tenant=t.task.tenant,
                               cell=self.s.cell, node_id=node_id, gpu_devices=tuple(devices),
                               gpu_milli=req.gpu_milli if devices else 0, cpu_milli=req.cpu,
                               memory_mib=req.mem, provenance=prov, job_id=t.task.job_id))
        self.standby_for(task_id, t)

    def standby_for(self, task_id: str, t: TaskRecord) -> None:
        """Gold standby (qos.py): after a plain gold task's first placement, its standby copy
        is made (same task, id ``standby_id``) and scheduled: placed on another node, or
        queued as any gold task (TaskPending)."""
        s, task = self.s, t.task
        if not self.qos.gold_standby or task.qos_tier != GOLD or primary_of(task_id) is not None:
            return
        if task.job_id or gang_of(task) is not None or task.labels.get(reservations.LABEL):
            return
        sid = standby_id(task_id)
        if sid in s.tasks or sid in s.forgotten:
            return
        s.seq += 1
        s.add_task(TaskRecord(replace(task, task_id=sid), s.seq, queued_at=s.now))
        self.schedule(sid, retry=False)

    def schedule(self, task_id: str, retry: bool, window_ids: Optional[list[str]] = None) -> bool:
        """Run one cycle for a known task; emit Placed / Pending / Unschedulable (or wait for
        the batch window). A gold or silver task that does not fit may preempt (qos)."""
        s, t = self.s, self.s.tasks[task_id]
        label = t.task.labels.get(reservations.LABEL)
        self.note = None
        if label:
            claimed = self.claim(task_id, t, label, retry)
            if claimed is not None:
                return claimed
        gang = gang_of(t.task)
        if gang is not None:
            return self.schedule_gang(task_id, *gang, retry=retry)
        if not retry and lane_of(t.task.labels) == BATCH and self.qos.batch_window_ms:
            return self.batch_wait(task_id)
        res, ctx, strategy, rule, path = self.find_place(task_id, t, retry, window_ids=window_ids)
        s.decisions += 1
        if res.plan is not None:
            self._placed(task_id, t, res.plan.node_id, res.plan.devices,
                         self.provenance(res, path, strategy, rule, task_id))
            for other, row in ctx.scratch.get("joint") or []:
                self.place_joint(other, row, task_id, strategy, rule)
            return True
        if res.status.code == Code.UNSCHEDULABLE:
            plan = self.preempt_for(task_id, t, path, strategy, rule)
            if plan is not None:
                path.append(f"bind {plan.node_id}")
                self._placed(task_id, t, plan.node_id, plan.devices,
                             self.provenance(res, path, strategy, rule, task_id))
                self.requeue_preempted()         # victims with no grace go back to the queue now
                return True
        if retry:
            return False          # still pending: no new event (its last TaskPending stands)
        reasons = tuple(m.PendingReason(reason=r, nodes=k) for r, k, _ in res.filtered)
        if res.status.code == Code.UNRESOLVABLE:
            eid, did = self._ids(m.TaskUnschedulable.KIND)
            self.emit(m.TaskUnschedulable(
                event_id=eid, decision_id=did, task_id=task_id, tenant=t.task.tenant, cell=s.cell,
                reasons=(m.PendingReason(reason=res.status.reason, nodes=s.n_nodes),),
                provenance=self.provenance(res, path + ["unschedulable"], strategy, rule, task_id),
                job_id=t.task.job_id))
            return False
        if not reasons:
            reasons = (m.PendingReason(reason=res.status.reason or "no nodes", nodes=s.n_nodes),)
        self.pend(task_id, reasons, self.provenance(res, path + ["queued"], strategy, rule, task_id))
        return False

    # ------------------------------------------------------------------ reservations (C4)
    def claim(self, task_id: str, t: TaskRecord, label: str, retry: bool) -> Optional[bool]:
        """A task naming a token: before its window it waits (pending, no cycle); in its window
        it takes the token's GPUs at once — held ones, then free ones, then those lent to
        bronze work (preempted) — and, with ``release_unused``, what it leaves goes back to
        the pool. None: the token cannot serve it (unknown, another tenant's, its node not
        ready, its GPUs busy with other work): it is scheduled like any task."""
        s = self.s
        tok = reservations.find(s, label)
        if tok is None or tok["tenant"] != t.task.tenant:
            self.note = (f"reservation {label}: no live token of tenant {t.task.tenant} by that name "
                         "-> scheduled as any task")
            return None
        rid = tok["rid"]
        if s.now < tok["start"]:
            if task_id not in tok["waiting"]:
                tok["waiting"].append(task_id)
            if not retry:
                why = f"waiting for its reservation {rid}: the window opens at {tok['start']}"
                self.pend(task_id, (m.PendingReason(reason=why, nodes=0),),
                          self.provenance(None, ["submitted", f"reservation {rid} on {tok['node']}", why]))
            return False
        req = t.task.request
        g = req.gpu_count if req.kind == "whole" else 1 if req.kind == "shared" else 0
        row = s.node_index[tok["node"]]
        # in its window: until it claims, the token is not idle (see the purge in reservation_clock)
        if task_id not in tok.setdefault("queued", []):
            tok["queued"].append(task_id)
        if not s.ready[row] or s.health[row] != READY:
            self.note = (f"reservation {rid}: its node {tok['node']} is {s.node_status[row]}/{s.health[row]} "
                         "-> scheduled as any task")
            return None
        if req.has_device_needs and not fits_devices(s, row, req):
            self.note = (f"reservation {rid}: its node {tok['node']} lacks the GPU memory or the free "
                         "accelerators the task asks -> scheduled as any task")
            return None
        users: dict[int, list[str]] = {}
        for tid in s.holding(tok["node"]):
            for d in s.tasks[tid].devices:
                users.setdefault(d, []).append(tid)
        in_use = {d for c in tok["claimed_by"] for d in users if c in users[d]}
        mine = [d for d in tok["devices"] if d not in in_use]
        held = [d for d in mine if tok["held"].get(str(d), 0) >= 1000]
        free = [d for d in mine if str(d) not in tok["held"] and d not in users and s.gpu_free[row, d] == 1000]
        # GPUs of the token that only bronze work uses (lent, or placed there before the hold)
        borrowed = [d for d in mine if d in users and all(s.tasks[u].task.qos_tier == "BRONZE" for u in users[d])]
        chosen = (held + free + borrowed)[:g]
        if len(chosen) < g:
            busy = {d: users.get(d) for d in mine if d not in chosen}
            self.note = (f"reservation {rid}: {len(chosen)} of the {g} GPUs asked are free on {tok['node']} "
                         f"(token gpu{tok['devices']}, held {tok['held']}, others busy: {busy}) "
                         "-> scheduled as any task")
            return None
        victims = sorted({v for d in chosen for v in users.get(d, ())}, key=lambda v: s.tasks[v].seq)
        # what the token holds besides GPUs is the claimant's (given to it at its placement)
        cpu = s.cpu_free[row] + tok.get("held_cpu", 0) + sum(s.tasks[v].task.request.cpu for v in victims)
        mem = s.mem_free[row] + tok.get("held_mem", 0) + sum(s.tasks[v].task.request.mem for v in victims)
        if cpu < req.cpu or mem < req.mem:
            # more than the token holds (or bronze borrowed it): the rest comes from bronze
            # work on the node, the most recently placed first (the least work lost)
            others = sorted((tid for tid in s.holding(tok["node"]) if tid not in victims
                             and s.tasks[tid].task.qos_tier == "BRONZE"),
                            key=lambda tid: (-s.tasks[tid].placed_at, tid))
            for tid in others:
                if cpu >= req.cpu and mem >= req.mem:
                    break
                victims.append(tid)
                cpu += s.tasks[tid].task.request.cpu
                mem += s.tasks[tid].task.request.mem
            if cpu < req.cpu or mem < req.mem:
                self.note = (f"reservation {rid}: not enough CPU or memory on {tok['node']} even without its "
                             "bronze work -> scheduled as any task")
                return None
        path = ["retry from queue" if retry else "submitted",
                f"reservation {rid}: claimed gpu{sorted(chosen)} on {tok['node']} "
                f"(window {tok['start']}..{tok['end']}, paid {tok['price']:g} per GPU-hour)"]
        if victims:
            why = f"the owner of reservation {rid} claims the GPUs lent to them"
            self.evict([(v, max(0, s.now - s.tasks[v].placed_at)) for v in victims], task_id,
                       f"preempted by {task_id} (reservation {rid})", f"reservation {rid} claimed by {task_id}", why)
            self.requeue_preempted()
            path.append(f"preempted lent work: {', '.join(victims)}")
        path.append(f"bind {tok['node']}")
        s.decisions += 1
        self._placed(task_id, t, tok["node"], sorted(chosen), self.provenance(None, path, task_id=task_id))
        unused = [d for d in tok["devices"] if d not in in_use and d not in chosen]
        if unused and self.rargs.release_unused:
            eid, did = self._ids(m.ReservationReleased.KIND)
            self.emit(m.ReservationReleased(
                event_id=eid, reservation_id=rid, cell=s.cell, at=s.now, gpu_devices=tuple(unused),
                node_id=tok["node"], claimed_by=task_id,
                reason=f"unused by its claimant {task_id}: reserved {len(tok['devices'])} GPUs, runs on {g}",
                provenance=self.provenance(None, [f"reservation {rid} claimed by {task_id}",
                                                  f"gpu{unused} unused: back to the pool at once"])))
        return True

    def clear_bids(self) -> None:
        """The clearing: this period's bids through ``auction.clear``; a ReservationGranted or
        ReservationRejected for each, with its provenance."""
        s, a = self.s, self.rargs
        bids = reservations.take_bids(s, a)
        if not bids:
            return
        by_id = {b.bid_id: b for b in bids}
        mech = f"{a.mechanism} clearing at {s.now} ({len(bids)} bids)"
        for o in auction.clear(reservations.plan_of(s), bids, s.now, a):
            b = by_id[o.bid_id]
            if isinstance(o, auction.Grant):
                eid, _ = self._ids(m.ReservationGranted.KIND)
                rid = reservations.rid_of(b.bid_id)
                hold_from = max(s.now, o.start - a.hold_ahead_ms)
                purge_at = o.start + a.purge_idle_ms if a.purge_idle_ms else None
                path = [mech, o.note, f"token {rid}: gpu{list(o.devices)} on {o.node_id}, window {o.start}..{o.end}",
                        f"holds from {hold_from}; " + (f"expires unclaimed at {purge_at}" if purge_at else
                                                       "lasts its window")]
                self.emit(m.ReservationGranted(
                    event_id=eid, reservation_id=rid, bid_id=b.bid_id, tenant=b.tenant, cell=s.cell,
                    node_id=o.node_id, gpu_devices=o.devices, start_at=o.start, end_at=o.end,
                    clearing_price=round(o.price, 6), provenance=self.provenance(None, path), bid_price=b.price,
                    wanted_gpus=b.gpus, cpu_milli=b.cpu, memory_mib=b.mem, purge_at=purge_at,
                    hold_from=hold_from))
            else:
                eid, _ = self._ids(m.ReservationRejected.KIND)
                self.emit(m.ReservationRejected(
                    event_id=eid, bid_id=b.bid_id, tenant=b.tenant, cell=s.cell, reason=o.reason,
                    needed_price=o.needed_price, at=s.now, provenance=self.provenance(None, [mech, o.reason])))

    def reservation_clock(self) -> bool:
        """On the cell clock: clear due bids, start holds, serve claimants whose window opened,
        expire unclaimed tokens, close claimed ones whose window ended. True if GPUs went back."""
        s, a = self.s, self.rargs
        b = reservations.book(s)
        if b["next_clear"] and s.now >= b["next_clear"]:
            self.clear_bids()
        freed = False
        for rid in sorted(b["tokens"], key=lambda r: (b["tokens"][r]["start"], r)):
            tok = b["tokens"].get(rid)
            if tok is None:
                continue
            if tok["status"] == reservations.GRANTED and s.now >= tok["hold_from"]:
                reservations.begin_hold(s, rid, a.lend_bronze)
            if tok["waiting"] and s.now >= tok["start"]:
                for tid in list(tok["waiting"]):
                    tok["waiting"].remove(tid)
                    if s.tasks[tid].status == PENDING:
                        self.schedule(tid, retry=True)
            unclaimed = tok["status"] != reservations.CLAIMED
            # a claimant that came in the window and could not claim yet (its node's CPU still
            # busy, say) and still waits: the token is not idle, only its window's end ends it
            waited = any(s.tasks[tid].status == PENDING for tid in tok.get("queued", ()) if tid in s.tasks)
            purge = tok["purge_at"] is not None and s.now >= tok["purge_at"] and not waited
            if unclaimed and (s.now >= tok["end"] or purge):
                why = ("its window ended unclaimed" if s.now >= tok["end"] else
                       f"unclaimed {(s.now - tok['start']) / 1000:g} s after its window opened "
                       f"(purge after {a.purge_idle_ms / 1000:g} s)")
                eid, _ = self._ids(m.ReservationExpired.KIND)
                self.emit(m.ReservationExpired(
                    event_id=eid, reservation_id=rid, cell=s.cell, at=s.now, reason=why,
                    gpu_devices=tuple(tok["devices"]), node_id=tok["node"],
                    provenance=self.provenance(None, [f"cell clock {s.now}", f"reservation {rid}: {why}",
                                                      "its GPUs go back to the pool"])))
                freed = True
            elif not unclaimed and s.now >= tok["end"]:
                if tok["held"]:
                    eid, _ = self._ids(m.ReservationReleased.KIND)
                    self.emit(m.ReservationReleased(
                        event_id=eid, reservation_id=rid, cell=s.cell, at=s.now,
                        gpu_devices=tuple(sorted(int(k) for k in tok["held"])),
                        node_id=tok["node"], claimed_by=",".join(tok["claimed_by"]),
                        reason="its window ended: GPUs its claimants did not use go back",
                        provenance=self.provenance(None, [f"cell clock {s.now}", f"reservation {rid} window ended"])))
                    freed = True
                reservations.close(s, rid)
        return freed

    # ------------------------------------------------------------------ QoS: moves, grace, batch
    def migrate(self, task_id: str, cause: str, since: int, reserve_first: bool) -> bool:
        """Move a task off its node now (TaskMigrated), preempting if it must; False when no
        place exists (the caller decides what then)."""
        s, t = self.s, self.s.tasks[task_id]
        from_node = t.node
        row = s.node_index[from_node]
        res, ctx, strategy, rule, path = self.find_place(task_id, t, retry=True, exclude=row)
        path[0] = f"move off {from_node}: {cause}"
        if res.plan is not None:
            node, devices, victims = res.plan.node_id, res.plan.devices, ()
        else:
            plan = self.preempt_for(task_id, t, path, strategy, rule, exclude=row, in_service=reserve_first) \
                if res.status.code == Code.UNSCHEDULABLE else None
            if plan is None:
                return False
            node, devices, victims = plan.node_id, plan.devices, plan.victim_ids
            path.append(f"bind {node}")
        s.decisions += 1
        how = "the old copy runs until the new one does (reserve-first)" if reserve_first else "its node is gone"
        eid, did = self._ids(m.TaskMigrated.KIND)
        self.emit(m.TaskMigrated(event_id=eid, decision_id=did, task_id=task_id, tenant=t.task.tenant, cell=s.cell,
                                 from_node=from_node, to_node=node, gpu_devices=tuple(devices),
                                 reason=f"{cause}: {from_node} -> {node}; {how}",
                                 provenance=self.provenance(res, path + [how], strategy, rule, task_id), cause=cause,
                                 since=since, elapsed_ms=max(0, s.now - since), reserve_first=reserve_first,
                                 preempted=tuple(victims), job_id=t.task.job_id))
        if victims:
            self.requeue_preempted()
        return True

    def move_gold_off(self, row: int, cause: str, since: int) -> None:
        """Reserve-first moves of the gold tasks on a draining or DEGRADED node."""
        s = self.s
        if not self.qos.migrate_gold:
            return
        for tid in s.holding(s.node_ids[row]):
            t = s.tasks[tid]
            if t.task.qos_tier == GOLD and t.moving_from is None and gang_of(t.task) is None:
                self.migrate(tid, cause, since, reserve_first=True)

    def retry_moves(self) -> None:
        """Gold tasks still on a draining or DEGRADED node (no place earlier): try again."""
        s = self.s
        for row in range(s.n_nodes):
            if s.node_status[row] == DRAINING:
                self.move_gold_off(row, "DRAIN", s.evac_since.get(s.node_ids[row], s.now))
            elif s.condition[row] == "DEGRADED":
                self.move_gold_off(row, "NODE_DEGRADED", s.evac_since.get(s.node_ids[row], s.now))

    def requeue_preempted(self) -> None:
        """Victims whose grace has ended on the cell clock go back to the queue (TaskPending)."""
        s = self.s
        while s.grace and s.grace[0][0] <= s.now:
            at, tid, by = s.grace[0]
            reason = f"preempted by {by}; queued again when its grace ended" if by else "preempted; grace ended"
            s.decisions += 1
            self.pend(tid, (m.PendingReason(reason=reason, nodes=0),),
                      self.provenance(None, [f"cell clock {s.now}", reason, "queued"], task_id=tid))
            if s.tasks[tid].status == PENDING:
                self.schedule(tid, retry=True)

    def batch_wait(self, task_id: str) -> bool:
        """A batch task waits for its window to close (opened by the first one to arrive)."""
        s, q = self.s, self.qos
        if not s.batch_close_at:
            s.batch_close_at = s.now + q.batch_window_ms
        reason = f"batch window: placed jointly when it closes at {s.batch_close_at}"
        s.decisions += 1
        self.pend(task_id, (m.PendingReason(reason=reason, nodes=0),),
                  self.provenance(None, ["submitted", "batch tier", reason, "queued"], task_id=task_id))
        return False

    def run_batch(self) -> None:
        """At window close, the queued batch tasks are placed jointly, ``batch_chunk`` per solve and
        ``batch_solves_per_tick`` solves per tick; a new window opens for those left over."""
        s, q = self.s, self.qos
        if s.batch_close_at and s.now >= s.batch_close_at:
            s.batch_close_at = 0
            s.batch_due = [item[-1] for item in s.queue if item[0] == LANE_RANK[BATCH]]
        solves = 0
        while s.batch_due and solves < q.batch_solves_per_tick:
            chunk = [tid for tid in s.batch_due[:q.batch_chunk] if s.tasks[tid].status == PENDING]
            del s.batch_due[:q.batch_chunk]
            if not chunk:
                continue
            solves += 1
            self.schedule(chunk[0], retry=True, window_ids=chunk[1:])
            if not s.batch_due and not s.batch_close_at and any(item[0] == LANE_RANK[BATCH] for item in s.queue):
                s.batch_close_at = s.now + q.batch_window_ms

    def pend(self, task_id: str, reasons: tuple[m.PendingReason, ...], provenance: m.Provenance) -> None:
        """Emit TaskPending, with the task's queue position after it is queued."""
        s = self.s
        eid, did = self._ids(m.TaskPending.KIND)
        pending = m.TaskPending(event_id=eid, decision_id=did, task_id=task_id, tenant=s.tasks[task_id].task.tenant,
                                cell=s.cell, reasons=reasons, queue_position=0, provenance=provenance,
                                job_id=s.tasks[task_id].task.job_id)
        evolve(s, pending)               # enqueue first: the position is the one after queueing
        self.outs.append(replace(pending, queue_position=s.queue_position(task_id)))

    def schedule_gang(self, task_id: str, gang: str, size: int, retry: bool) -> bool:
        """A gang (``labels: gang=<job>, gang-size=<N>``) starts all or nothing: its members
        wait (pending) until all N arrived, then the topology planner puts them inside one
        rack, else one zone, else across the fewest domains — or nowhere, and they wait."""
        from .plugins.topology import plan_gang_detail

        s = self.s
        waiting = [tid for tid in s.gang_members(gang) if s.tasks[tid].status in ("SUBMITTED", PENDING)]
        plan = None
        if len(waiting) >= size:
            waiting = waiting[:size]
            reqs = [s.tasks[tid].task.request for tid in waiting]
            plan = plan_gang_detail(s, reqs, waiting)
            if plan is not None and any(r.accels for r in reqs) and not _accels_fit(s, reqs, plan.placements):
                plan = None      # members sharing a node would want more accelerators than it has free
        if plan is None:
            if retry:
                return False
            reason = (f"gang {gang}: {len(waiting)} of {size} members arrived" if len(waiting) < size
                      else f"gang {gang}: its {size} tasks do not fit together now (all or nothing)")
            s.decisions += 1
            self.pend(task_id, (m.PendingReason(reason=reason, nodes=s.n_nodes),),
                      self.provenance(None, ["submitted", reason, "queued"], task_id=task_id))
            return False
        where = plan.describe(s)
        for tid, (row, devices) in zip(waiting, plan.placements):
            s.decisions += 1
            node = s.node_ids[row]
            path = ["retry from queue" if retry or tid != task_id else "submitted",
                    f"gang {gang}: all {size} members here; {where}" + ("" if plan.normal_only else
                                                                       " (some nodes in a bad condition)"),
                    f"reserve gpu{list(devices)} {s.tasks[tid].task.request.gpu_milli} milli" if devices else "no GPU",
                    f"bind {node}"]
            res = CycleResult(Status(), None, [], [(row, 1.0)], 1, [])
            self._placed(tid, s.tasks[tid], node, list(devices), self.provenance(res, path, task_id=tid))
        return True

    def place_joint(self, task_id: str, row: int, with_task: str, strategy: Strategy, rule: str | None) -> None:
        """Place a queued task that a joint (batch) plan put on ``row``, if it still fits."""
        s = self.s
        t = s.tasks.get(task_id)
        if t is None or t.status != PENDING:
            return
        req = t.task.request
        if not (s.ready[row] and s.cpu_free[row] >= req.cpu and s.mem_free[row] >= req.mem):
            return
        devices = default_devices(s, row, req)
        if req.kind != "cpu" and len(devices) != (1 if req.kind == "shared" else req.gpu_count):
            return
        if req.models and (s.model_idx[row] < 0 or s.models[s.model_idx[row]] not in req.models):
            return
        if req.has_device_needs and not fits_devices(s, row, req):
            return
        node = s.node_ids[row]
        path = ["retry from queue", f"batch window: placed jointly with {with_task} by {strategy.name}",
                f"reserve gpu{devices} {req.gpu_milli} milli" if devices else "no GPU", f"bind {node}"]
        res = CycleResult(Status(), None, [], [(row, 1.0)], 1, [])
        self._placed(task_id, t, node, devices, self.provenance(res, path, strategy, rule, task_id))

    # ------------------------------------------------------------------ time and health
    def tick(self) -> None:
        """On the cell clock: re-queue victims whose grace ended, judge watched nodes'
        heartbeats, close the batch window, retry the queue (and stalled moves) periodically."""
        s, a = self.s, self.strategy.args
        self.requeue_preempted()
        retry = bool(s.reservations) and self.reservation_clock()
        watched = np.flatnonzero(s.last_heartbeat >= 0)
        if watched.size:
            silent = s.now - s.last_heartbeat[watched]
            for row, gap in zip(watched[silent >= a.suspect_after_ms].tolist(),
                                silent[silent >= a.suspect_after_ms].tolist()):
                if gap >= a.down_after_ms and s.health[row] != DOWN:
                    self.node_down(row, int(gap))
                    retry = True
                elif gap < a.down_after_ms and s.health[row] == READY:
                    self.health(row, SUSPECT, f"no heartbeat for {gap / 1000:g} s "
                                              f"(suspect after {a.suspect_after_ms / 1000:g} s)")
        self.run_batch()
        if a.retry_every_ms and s.now >= s.next_retry_at:
            s.next_retry_at = s.now + a.retry_every_ms
            retry = True
            if s.evac_since:
                self.retry_moves()
        if retry:
            self.retry_pending()
        pw = a.prewarm
        if pw.enabled and s.now >= s.prewarm.get("next_at", 0):     # once a period, never per event
            self.outs.extend(prewarm.plan(s, pw, self.pos))

    def health(self, row: int, status: str, reason: str, lost: tuple[str, ...] = ()) -> None:
        s = self.s
        nid = s.node_ids[row]
        eid, did = self._ids(m.NodeHealthChanged.KIND)
        path = [f"cell clock {s.now}", f"{nid}: {s.health[row]} -> {status}: {reason}"]
        if lost:
            path.append(f"{len(lost)} tasks lost: gold ones move now, the others are queued again first "
                        "in their tier and priority")
        self.emit(m.NodeHealthChanged(event_id=eid, decision_id=did, node_id=nid, cell=s.cell, status=status,
                                      previous=s.health[row], reason=reason,
                                      last_heartbeat_at=max(0, int(s.last_heartbeat[row])), lost_tasks=lost,
                                      provenance=self.provenance(None, path)))

    def node_down(self, row: int, gap: int) -> None:
        """DOWN: the node's tasks lose their place; gold ones move at once (TaskMigrated),
        the others are lost (freed, queued again first) and placed again later."""
        s, a = self.s, self.strategy.args
        nid = s.node_ids[row]
        lost = tuple(s.holding(nid))
        reason = f"no heartbeat for {gap / 1000:g} s (down after {a.down_after_ms / 1000:g} s)"
        self.health(row, DOWN, reason, lost)
        self.evacuate(nid, lost, reason, since=int(s.last_heartbeat[row]))

    def evacuate(self, nid: str, lost: tuple[str, ...], reason: str, since: int) -> None:
        """The node is gone: gold tasks first, each moved now if a place exists (preempting
        bronze if needed); every other task, and gold ones with no place, TaskLost."""
        s = self.s
        gold = [tid for tid in lost if s.tasks[tid].task.qos_tier == GOLD and gang_of(s.tasks[tid].task) is None]
        moved = set()
        if self.qos.migrate_gold:
            for tid in gold:
                if self.migrate(tid, "NODE_DOWN", since, reserve_first=False):
                    moved.add(tid)
        for tid in lost:
            if tid in moved:
                continue
            t = s.tasks[tid]
            eid, did = self._ids(m.TaskLost.KIND)
            self.emit(m.TaskLost(event_id=eid, decision_id=did, task_id=tid, tenant=t.task.tenant, cell=s.cell,
                                 node_id=nid, gpu_devices=t.devices, reason=f"node {nid} DOWN: {reason}",
                                 provenance=self.provenance(None, [f"node {nid} DOWN", f"lost {tid}",
                                                                   "queued again first in its tier and priority"]),
                                 job_id=t.task.job_id))

    def stop_stale(self, e: m.TaskStatusChanged, t: TaskRecord | tuple[str, Optional[str]]) -> None:
        """A node that is not the task's reports it running: tell its connector to stop it.
        ``t``: the task, or the tombstone ``(status, node)`` of a forgotten one."""
        s = self.s
        node = s.nodes.get(e.node_id)
        if node is None:
            return
        status, on = (t.status, t.node) if isinstance(t, TaskRecord) else t
        where = (f"placed on {on}" if status in HOLDING else
                 f"{status.lower()} on {on}" if on else f"queued ({status})")
        self.outs.append(m.StopCommand(event_id=f"{s.cell}/{self.pos[0]}/{self.pos[1]}/{self.pos[2]}/stop",
                                       task_id=e.task_id, cell=s.cell, node_id=e.node_id,
                                       connector=node.connector or "sim",
                                       reason=f"stale copy: the task is {where}", issued_at=self.at))

    def stop_cancelled(self, e: m.TaskCancelled, node_id: str) -> None:
        """A cancelled task that held ``node_id`` was dispatched there (or is about to be):
        its connector stops the process; the scheduler has already given its resources back."""
        s = self.s
        node = s.nodes.get(node_id)
        if node is None:
            return
        self.outs.append(m.StopCommand(event_id=f"{s.cell}/{self.pos[0]}/{self.pos[1]}/{self.pos[2]}/stop-cancelled",
                                       task_id=e.task_id, cell=s.cell, node_id=node_id,
                                       connector=node.connector or "sim",
                                       reason=f"cancelled: {e.reason}" if e.reason else "cancelled",
                                       issued_at=self.at))

    def stop_old_copy(self, task_id: str, node_id: str, reason: str) -> None:
        """The old copy of a reserve-first move is no longer needed: stop it."""
        s = self.s
        self.outs.append(m.StopCommand(event_id=f"{s.cell}/{self.pos[0]}/{self.pos[1]}/{self.pos[2]}/stop-old",
                                       task_id=task_id, cell=s.cell, node_id=node_id,
                                       connector=s.nodes[node_id].connector or "sim", reason=reason,
                                       issued_at=self.at))

    def retry_pending(self) -> None:
        """Retry the head of the queue (``retry_budget`` tasks); batch tasks wait for their window.

        A task that asks exactly what a task already retried in this pass asked (same request,
        tiers and labels) while nothing changed in between (``state.clock``) would fail the
        same way, so it is not run again: a queue of thousands of alike tasks costs one cycle."""
        s = self.s
        budget = self.strategy.retry_budget
        failed: set = set()
        clock = s.clock
        for item in list(s.queue[:budget]):
            if item[0] == LANE_RANK[BATCH]:
                break
            t = s.tasks[item[-1]]
            if t.status != PENDING:          # a gang or a joint plan may have placed it meanwhile
                continue
            if s.clock != clock:
                failed.clear()
                clock = s.clock
            # a gold standby's copies avoid each other's node: that is part of what it asks
            alike = (t.task.request, t.task.qos_tier, tuple(sorted(t.task.labels.items())),
                     tuple(self.avoid(item[-1], None)[0]))
            if alike in failed:
                continue
            if not self.schedule(item[-1], retry=True) and s.clock == clock:
                failed.add(alike)

    def resize_job(self, e: m.JobRound) -> None:
        """The elastic policy's step after an elastic job's round: a ``JobResized`` when the
        job's size or batch size changes (elastic_jobs.py); nothing otherwise."""
        step = elastic_jobs.next_step(self.s, e)
        if step is None or not step.changes:
            return
        eid, did = self._ids(m.JobResized.KIND)
        path = [step.inputs, f"{step.decision.action}: {step.decision.reason}"]
        self.emit(elastic_jobs.resized(step, event_id=eid, decision_id=did, cell=self.s.cell, at=self.s.now,
                                       provenance=self.provenance(None, path, task_id=step.head.task.task_id)))

    def release(self, task_id: str, cause: str, why: Optional[str] = None) -> None:
        """TaskReleased: the task ended (``cause``); its gold standby, if it has one, goes too."""
        s, t = self.s, self.s.tasks[task_id]
        eid, did = self._ids(m.TaskReleased.KIND)
        node = t.node if t.status in HOLDING else ""
        path = [why or f"{cause.lower()}", f"release {node}" if node else
                f"the preempted copy finished on {t.node} during its grace" if t.status == PREEMPTED and not why
                else f"its preempted copy on {t.node} stops in its grace" if t.status == PREEMPTED else
                "drop from queue"]
        if t.moving_from is not None:
            self.stop_old_copy(task_id, t.moving_from[0], f"the task ended ({cause.lower()}) during its move")
        self.emit(m.TaskReleased(event_id=eid, decision_id=did, task_id=task_id, tenant=t.task.tenant,
                                 cell=s.cell, node_id=node, cause=cause,
                                 gpu_devices=tuple(t.devices) if node else (),
                                 provenance=self.provenance(None, path), job_id=t.task.job_id))
        sid = standby_id(task_id)
        st = s.tasks.get(sid)
        if st is not None and st.status not in TERMINAL:
            where = st.node if st.status in HOLDING else ""
            self.release(sid, CANCELLED, f"standby of {task_id}, which ended ({cause.lower()})")
            if where:
                self.outs.append(m.StopCommand(
                    event_id=f"{s.cell}/{self.pos[0]}/{self.pos[1]}/{self.pos[2]}/stop-standby",
                    task_id=sid, cell=s.cell, node_id=where, connector=s.nodes[where].connector or "sim",
                    reason=f"standby of {task_id}, which ended ({cause.lower()})", issued_at=self.at))


def decide(state: CellState, event: Any, position: Position) -> tuple[CellState, list[Any]]:
    """The scheduler step for one input. See the module docstring for the contract. After
    it, the oldest finished tasks beyond the policy's retention are forgotten
    (``retention.py``): a change of memory, never of a decision."""
    state, outs = _decide(state, event, position)
    if state.finished:
        keep = policy_strategy(state).args.retention
        if len(state.finished) > keep.finished_tasks + keep.batch() + state.finished_pinned:
            state.forget_finished(keep.finished_tasks, keep.forgotten_ids)
    return state, outs


def _submitted(state: CellState, event: m.TaskSubmitted, d: "_Decider") -> tuple[CellState, list[Any]]:
    """A submission: refused (RejectedInput) if no node could ever serve it, ignored if its
    task is known, else folded and scheduled."""
    if is_standby(event.task_id):
        raise RejectedInput(f"TaskSubmitted {event.task_id!r}: task ids ending in {STANDBY_SUFFIX!r} are "
                            "reserved for gold standby copies (qos.py); submit it under another id")
    if event.task_id in state.tasks or event.task_id in state.forgotten:
        return state, []
    res = event.resources
    if res.accelerators or res.gpu_memory_mib:     # only such asks can be refused: no Request built twice
        why = refusal(state, event, m.Request.of(res))
        if why is not None:
            raise RejectedInput(why)     # no registered node could ever serve it (accelerators.py)
    _task_submitted(state, event)        # evolve's fold of it (it frees nothing: no reservation refill)
    prewarm.on_submitted(state, state.tasks[event.task_id].task, d.strategy.args.prewarm)
    d.schedule(event.task_id, retry=False)
    return state, d.outs


def _decide(state: CellState, event: Any, position: Position) -> tuple[CellState, list[Any]]:
    topic, partition, offset = position
    key = f"{topic}/{partition}"
    last = state.offsets.get(key)
    if last is not None and offset <= last:
        return state, []
    state.offsets[key] = offset
    kind = type(event)
    if kind is m.TaskSubmitted:          # the most common input first: one test, not six
        at = event.submitted_at or 0     # its event_time
        if at > state.now:
            state.now = at
        return _submitted(state, event, _Decider(state, position, at))
    if kind.__name__ not in m.CELL_INPUT_KINDS:
        return state, []
    if isinstance(event, m.JobRound):
        # a job's report: its ``at`` is the reporter's clock, not cell time, so the clock
        # stays (``model.OFF_CLOCK_KINDS``); an elastic job's round may resize it (elastic_jobs.py)
        evolve(state, event)
        d = _Decider(state, position, state.now)
        d.resize_job(event)
        return state, d.outs
    at = event_time(event)
    if at > state.now:
        state.now = at                   # the cell clock: the largest event time the log has shown
    if isinstance(event, m.LinkMetrics):
        evolve(state, event)
        return state, []
    if isinstance(event, m.NodeConditionChanged):
        evolve(state, event)
        row = state.node_index.get(event.node_id)
        if row is None:
            return state, []
        if event.condition == "DEGRADED":
            state.evac_since.setdefault(event.node_id, event.at)
            d = _Decider(state, position, event_time(event))
            d.move_gold_off(row, "NODE_DEGRADED", state.evac_since[event.node_id])
            return state, d.outs
        if state.node_status[row] != DRAINING:
            state.evac_since.pop(event.node_id, None)
        return state, []
    if isinstance(event, m.PolicyChanged):
        evolve(state, event)
        return state, []
    d = _Decider(state, position, event_time(event))

    if isinstance(event, m.CellTick):
        d.tick()
        return state, d.outs

    if isinstance(event, m.ReservationBid):
        reservations.add_bid(state, event, d.rargs)     # RejectedInput names what is wrong
        return state, []

    if isinstance(event, m.NodeHeartbeat):
        evolve(state, event)
        back = False
        for node_id in event.alive:
            row = state.node_index.get(node_id)
            if row is not None and state.health[row] != READY:
                d.health(row, READY, "heartbeat again")
                back = True
        if back:
            d.retry_pending()
        return state, d.outs

    if isinstance(event, m.TaskStatusChanged):
        t = state.tasks.get(event.task_id)
        if t is None:
            gone = state.forgotten.get(event.task_id)
            if gone is not None and event.node_id and event.node_id != gone[1] \
                    and event.status in ("DISPATCHED", "RUNNING"):
                d.stop_stale(event, gone)    # as for a finished task (below): it was one
            return state, d.outs
        if t.status in TERMINAL:
            if event.node_id and event.node_id != t.node and event.status in ("DISPATCHED", "RUNNING"):
                d.stop_stale(event, t)       # a stale copy of a task that has finished elsewhere
            return state, d.outs
        if t.status == PREEMPTED:
            # the evicted copy, in its grace: finishing there counts (the work is done); its
            # stop (FAILED) or anything else from it changes nothing
            if event.status == COMPLETED and event.node_id == t.node:
                d.release(event.task_id, COMPLETED)
            elif event.node_id and event.node_id != t.node and event.status in ("DISPATCHED", "RUNNING"):
                d.stop_stale(event, t)
            return state, d.outs
        moving = t.moving_from
        if moving is not None and event.node_id == moving[0]:
            evolve(state, event)             # the old copy of a move: only its end counts (frees it)
            return state, d.outs
        if event.node_id and (t.node != event.node_id if t.node is not None
                              else event.status in ("DISPATCHED", "RUNNING")):
            # a stale copy (its node was DOWN and the task went elsewhere): never let it
            # release the current placement; stop it if it still runs
            if event.status in ("DISPATCHED", "RUNNING"):
                d.stop_stale(event, t)
            return state, d.outs
        evolve(state, event)
        if moving is not None and t.moving_from is None and t.status not in TERMINAL:
            d.stop_old_copy(event.task_id, moving[0], f"moved to {t.node}, which runs it now (reserve-first)")
            d.retry_pending()
        if event.status in (COMPLETED, FAILED, CANCELLED) and t.status in HOLDING:
            prof = _profiler_for(state, t.task)
            if prof is not None and event.status != CANCELLED:
                node = state.nodes.get(t.node or "")
                prof.finished(t.task, event.status, event.exit_code, event.usage, state.now - t.placed_at,
                              node.gpu_memory_mib if node is not None else 0)
            d.release(event.task_id, event.status)
            d.retry_pending()
        return state, d.outs

    if isinstance(event, m.TaskCancelled):
        t = state.tasks.get(event.task_id)
        if t is None or t.status in TERMINAL:
            return state, []
        held = t.status in HOLDING
        node = t.node if held else ""
        d.release(event.task_id, CANCELLED)
        if node:
            d.stop_cancelled(event, node)
        if held:
            d.retry_pending()
        return state, d.outs

    if isinstance(event, m.NodeStatusChanged):
        row = state.node_index.get(event.node_id)
        was = state.node_status[row] if row is not None else None
        evolve(state, event)
        if row is None:
            return state, d.outs
        if event.status == DOWN and was != DOWN:
            lost = tuple(state.holding(event.node_id))
            d.evacuate(event.node_id, lost, f"reported DOWN ({event.reason or 'no reason given'})", since=event.at)
            d.retry_pending()
        elif event.status == DRAINING:
            state.evac_since.setdefault(event.node_id, event.at)
            d.move_gold_off(row, "DRAIN", state.evac_since[event.node_id])
        else:
            if state.condition[row] != "DEGRADED":
                state.evac_since.pop(event.node_id, None)
            if event.status == READY:
                d.retry_pending()
        return state, d.outs

    evolve(state, event)
    if isinstance(event, m.NodeRegistered):
        d.retry_pending()
    return state, d.outs
