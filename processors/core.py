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
    counts as applied; nothing else changes): the runner dead-letters it.

Inputs and decisions are the typed values of ``model.py``; the codec converts them to
and from Avro at the edge. Both functions mutate ``state`` in place and return it (see
``state.py``).
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any, Optional

import numpy as np

from suanli.errors import ModelError, RejectedInput, StrategyError

from . import matching, rng
from . import model as m
from .framework import Code, CycleContext, CycleResult, Status, default_devices, run_cycle
from .frag import shape_key
from .model import Request
from .sandbox import SandboxError
from .state import (CANCELLED, COMPLETED, DOWN, FAILED, HOLDING, PENDING, PLACED, READY, SUSPECT, TERMINAL,
                    UNSCHEDULABLE, CellState, TaskRecord)
from .strategies import Strategy, config_digest, fallback_of, get_strategy, strategy_for_rule, validate_policy

Position = tuple[str, int, int]

# A lost task goes back to the front of its priority: its queue sequence becomes its
# re-queue order minus this (arrival sequences are positive, so it sorts first).
LOST_FIRST = 10 ** 12


# ============================================================================ evolve
def _node_registered(s: CellState, e: m.NodeRegistered) -> None:
    node = m.Node.of(e)
    if e.node_id in s.node_index:     # re-registration: refresh descriptive fields, mark ready
        s.update_node(replace(node, cpu_milli=s.nodes[e.node_id].cpu_milli,
                              memory_mib=s.nodes[e.node_id].memory_mib,
                              gpu_count=s.nodes[e.node_id].gpu_count, gpu_model=s.nodes[e.node_id].gpu_model))
        s.set_node_status(e.node_id, READY)
        return
    s.add_node(e.node_id, node.cpu_milli, node.memory_mib, node.gpu_count, node.gpu_model, node)


def _node_status(s: CellState, e: m.NodeStatusChanged) -> None:
    if e.node_id in s.node_index and e.status in ("READY", "CORDONED", "DOWN"):
        s.set_node_status(e.node_id, e.status)


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
    if e.task_id in s.tasks:
        return
    task = m.Task.of(e)
    s.seq += 1
    s.add_task(TaskRecord(task, s.seq))
    r = task.request
    k = shape_key(r.cpu, r.gpu_count, r.gpu_milli, r.models)
    s.class_counts[k] = s.class_counts.get(k, 0) + 1


def _task_status(s: CellState, e: m.TaskStatusChanged) -> None:
    t = s.tasks.get(e.task_id)
    if t is None or t.status in TERMINAL:
        return
    if e.status in ("DISPATCHED", "RUNNING") and t.status in HOLDING:
        t.status = e.status
    # COMPLETED / FAILED are applied by the TaskReleased decision that follows them


def _heartbeat(s: CellState, e: m.NodeHeartbeat) -> None:
    row = s.node_index.get(e.node_id)
    if row is not None and e.at > s.last_heartbeat[row]:
        s.last_heartbeat[row] = e.at


def _condition(s: CellState, e: m.NodeConditionChanged) -> None:
    if e.node_id in s.node_index:
        s.set_condition(e.node_id, e.condition)


def _link(s: CellState, e: m.LinkMetrics) -> None:
    s.topology.observe_link(e)


def _health(s: CellState, e: m.NodeHealthChanged) -> None:
    s.set_health(e.node_id, e.status)


def _lost(s: CellState, e: m.TaskLost) -> None:
    t = s.tasks[e.task_id]
    if t.status not in HOLDING:
        return
    r = t.task.request
    s.free(t.node, t.devices, r.gpu_milli, r.cpu, r.mem)
    s.seq += 1
    t.status, t.node, t.devices, t.seq = PENDING, None, (), s.seq - LOST_FIRST
    s.enqueue(e.task_id)


def _placed(s: CellState, e: m.TaskPlaced) -> None:
    t = s.tasks[e.task_id]
    if t.status in HOLDING:
        return
    s.allocate(e.task_id, e.node_id, e.gpu_devices, e.gpu_milli, e.cpu_milli, e.memory_mib)
    s.dequeue(e.task_id)
    t.status, t.node, t.devices = PLACED, e.node_id, tuple(e.gpu_devices)


def _pending(s: CellState, e: m.TaskPending) -> None:
    s.tasks[e.task_id].status = PENDING
    s.enqueue(e.task_id)


def _unschedulable(s: CellState, e: m.TaskUnschedulable) -> None:
    s.tasks[e.task_id].status = UNSCHEDULABLE
    s.dequeue(e.task_id)


def _released(s: CellState, e: m.TaskReleased) -> None:
    t = s.tasks.get(e.task_id)
    if t is None or t.status in TERMINAL:
        return
    if t.status in HOLDING:
        r = t.task.request
        s.free(t.node, t.devices, r.gpu_milli, r.cpu, r.mem)
    s.dequeue(e.task_id)
    t.status = e.cause if e.cause in (COMPLETED, FAILED, CANCELLED) else CANCELLED


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
}


def evolve(state: CellState, event: Any) -> CellState:
    """Fold one fact into ``state`` (in place) and return it. Other kinds are ignored."""
    fn = _EVOLVE.get(type(event))
    if fn is not None:
        fn(state, event)
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
    """The time an input carries: its ``at``, ``submitted_at`` or ``registered_at``."""
    if isinstance(e, m.TaskSubmitted):
        return e.submitted_at
    if isinstance(e, m.NodeRegistered):
        return e.registered_at
    return getattr(e, "at", 0) or 0


class _Decider:
    """Builds the outputs of one input; keeps the per-input sequence for decision ids."""
    __slots__ = ("s", "strategy", "pos", "at", "outs", "n", "topic_seed")

    def __init__(self, s: CellState, pos: Position, at: int):
        self.s = s
        pol = s.policy
        self.strategy: Strategy = get_strategy(pol.strategy, dict(pol.config), pol.digest)
        self.pos = pos
        self.at = at
        self.outs: list[Any] = []
        self.n = 0
        self.topic_seed = rng.str_seed(pos[0])

    def _ids(self, kind: str) -> tuple[str, str]:
        t, p, o = self.pos
        did = f"{self.s.cell}/{t}/{p}/{o}/{self.n}"
        self.n += 1
        return f"{did}/{kind}", did

    def provenance(self, res: CycleResult | None, path: list[str], strategy: Strategy | None = None,
                   matched_rule: str | None = None) -> m.Provenance:
        s = self.s
        t, p, o = self.pos
        cands: tuple[m.Candidate, ...] = ()
        filt: tuple[m.FilterOutcome, ...] = ()
        if res is not None:
            ids = s.node_ids
            cands = tuple(m.Candidate(node_id=ids[r], score=sc, rank=i + 1) for i, (r, sc) in enumerate(res.candidates))
            filt = tuple(m.FilterOutcome(reason=reason, nodes=k, sample=tuple(ids[r] for r in sample.tolist()))
                         for reason, k, sample in res.filtered)
        ref = (strategy or self.strategy).ref()
        return m.Provenance(input=m.LogPosition(topic=t, partition=p, offset=o),
                            strategy=m.StrategyRef(name=ref["name"], version=ref["version"],
                                                   config_digest=ref["config_digest"]),
                            candidates=cands, filtered=filt, path=tuple(path), decided_at=self.at,
                            matched_rule=matched_rule)

    def emit(self, decision: Any) -> None:
        evolve(self.s, decision)
        self.outs.append(decision)

    def choose(self, t: TaskRecord) -> tuple[Strategy, Optional[str], list[str]]:
        """The strategy for this task: the first label rule that matches (policy config
        ``rules``), else the cell's strategy."""
        rules = self.strategy.args.rules
        if not rules:
            return self.strategy, None, []
        hit = matching.match(rules, t, t.task.request.kind)
        if hit is None:
            return self.strategy, None, [f"match: no rule -> {self.strategy.name}"]
        i, rule = hit
        desc = matching.describe(i, rule)
        return strategy_for_rule(rule, self.strategy.seed), desc, [f"match: {desc}"]


    def _placed(self, task_id: str, t: TaskRecord, node_id: str, devices: list[int],
                prov: m.Provenance) -> None:
        req = t.task.request
        eid, did = self._ids(m.TaskPlaced.KIND)
        self.emit(m.TaskPlaced(event_id=eid, decision_id=did, task_id=task_id, tenant=t.task.tenant,
                               cell=self.s.cell, node_id=node_id, gpu_devices=tuple(devices),
                               gpu_milli=req.gpu_milli if devices else 0, cpu_milli=req.cpu,
                               memory_mib=req.mem, provenance=prov))

    def schedule(self, task_id: str, retry: bool) -> bool:
        """Run one cycle for a known task; emit Placed / Pending / Unschedulable."""
        s, t = self.s, self.s.tasks[task_id]
        gang = gang_of(t.task)
        if gang is not None:
            return self.schedule_gang(task_id, *gang, retry=retry)
        req = t.task.request
        strategy, rule, mpath = self.choose(t)
        seed = rng.mix(strategy.seed, self.topic_seed, self.pos[1], self.pos[2], self.n)
        ctx = CycleContext(s, req, task_id, seed, strategy.config)
        try:
            res = run_cycle(strategy.profile, ctx)
        except SandboxError as exc:
            fb = fallback_of(self.strategy)     # the cell policy says what replaces a failed strategy
            note = f"fallback: {strategy.name} failed in the sandbox ({exc.reason}) -> {fb.name}"
            mpath = mpath + [note]
            rule = f"{rule}; {note}" if rule else note
            strategy = fb
            ctx = CycleContext(s, req, task_id, seed, strategy.config)
            res = run_cycle(strategy.profile, ctx)
        path = ["retry from queue" if retry else "submitted", *mpath, *res.path]
        if ctx.scratch.get("batch_note"):
            path.insert(len(path) - 1 if res.plan is not None else len(path), ctx.scratch["batch_note"])
        s.decisions += 1
        if res.plan is not None:
            self._placed(task_id, t, res.plan.node_id, res.plan.devices,
                         self.provenance(res, path, strategy, rule))
            for other, row in ctx.scratch.get("joint") or []:
                self.place_joint(other, row, task_id, strategy, rule)
            return True
        if retry:
            return False          # still pending: no new event (its last TaskPending stands)
        reasons = tuple(m.PendingReason(reason=r, nodes=k) for r, k, _ in res.filtered)
        if res.status.code == Code.UNRESOLVABLE:
            eid, did = self._ids(m.TaskUnschedulable.KIND)
            self.emit(m.TaskUnschedulable(
                event_id=eid, decision_id=did, task_id=task_id, tenant=t.task.tenant, cell=s.cell,
                reasons=(m.PendingReason(reason=res.status.reason, nodes=s.n_nodes),),
                provenance=self.provenance(res, path + ["unschedulable"], strategy, rule)))
            return False
        if not reasons:
            reasons = (m.PendingReason(reason=res.status.reason or "no nodes", nodes=s.n_nodes),)
        self.pend(task_id, reasons, self.provenance(res, path + ["queued"], strategy, rule))
        return False

    def pend(self, task_id: str, reasons: tuple[m.PendingReason, ...], provenance: m.Provenance) -> None:
        """Emit TaskPending, with the task's queue position after it is queued."""
        s = self.s
        eid, did = self._ids(m.TaskPending.KIND)
        pending = m.TaskPending(event_id=eid, decision_id=did, task_id=task_id, tenant=s.tasks[task_id].task.tenant,
                                cell=s.cell, reasons=reasons, queue_position=0, provenance=provenance)
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
            plan = plan_gang_detail(s, [s.tasks[tid].task.request for tid in waiting], waiting)
        if plan is None:
            if retry:
                return False
            reason = (f"gang {gang}: {len(waiting)} of {size} members arrived" if len(waiting) < size
                      else f"gang {gang}: its {size} tasks do not fit together now (all or nothing)")
            s.decisions += 1
            self.pend(task_id, (m.PendingReason(reason=reason, nodes=s.n_nodes),),
                      self.provenance(None, ["submitted", reason, "queued"]))
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
            self._placed(tid, s.tasks[tid], node, list(devices), self.provenance(res, path))
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
        node = s.node_ids[row]
        path = ["retry from queue", f"batch window: placed jointly with {with_task} by {strategy.name}",
                f"reserve gpu{devices} {req.gpu_milli} milli" if devices else "no GPU", f"bind {node}"]
        res = CycleResult(Status(), None, [], [(row, 1.0)], 1, [])
        self._placed(task_id, t, node, devices, self.provenance(res, path, strategy, rule))

    # ------------------------------------------------------------------ time and health
    def tick(self) -> None:
        """On the cell clock: judge watched nodes' heartbeats, retry the queue periodically."""
        s, a = self.s, self.strategy.args
        retry = False
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
        if a.retry_every_ms and s.now >= s.next_retry_at:
            s.next_retry_at = s.now + a.retry_every_ms
            retry = True
        if retry:
            self.retry_pending()

    def health(self, row: int, status: str, reason: str, lost: tuple[str, ...] = ()) -> None:
        s = self.s
        nid = s.node_ids[row]
        eid, did = self._ids(m.NodeHealthChanged.KIND)
        path = [f"cell clock {s.now}", f"{nid}: {s.health[row]} -> {status}: {reason}"]
        if lost:
            path.append(f"{len(lost)} tasks lost, queued again first in their priority")
        self.emit(m.NodeHealthChanged(event_id=eid, decision_id=did, node_id=nid, cell=s.cell, status=status,
                                      previous=s.health[row], reason=reason,
                                      last_heartbeat_at=max(0, int(s.last_heartbeat[row])), lost_tasks=lost,
                                      provenance=self.provenance(None, path)))

    def node_down(self, row: int, gap: int) -> None:
        """DOWN: the node's tasks are lost (freed, queued again first) and placed again later."""
        s, a = self.s, self.strategy.args
        nid = s.node_ids[row]
        lost = tuple(s.holding(nid))
        reason = f"no heartbeat for {gap / 1000:g} s (down after {a.down_after_ms / 1000:g} s)"
        self.health(row, DOWN, reason, lost)
        for tid in lost:
            t = s.tasks[tid]
            eid, did = self._ids(m.TaskLost.KIND)
            self.emit(m.TaskLost(event_id=eid, decision_id=did, task_id=tid, tenant=t.task.tenant, cell=s.cell,
                                 node_id=nid, gpu_devices=t.devices, reason=f"node {nid} DOWN: {reason}",
                                 provenance=self.provenance(None, [f"node {nid} DOWN", f"lost {tid}",
                                                                   "queued again first in its priority"])))

    def stop_stale(self, e: m.TaskStatusChanged, t: TaskRecord) -> None:
        """A node that is not the task's reports it running: tell its connector to stop it."""
        s = self.s
        node = s.nodes.get(e.node_id)
        if node is None:
            return
        where = (f"placed on {t.node}" if t.status in HOLDING else
                 f"{t.status.lower()} on {t.node}" if t.node else f"queued ({t.status})")
        self.outs.append(m.StopCommand(event_id=f"{s.cell}/{self.pos[0]}/{self.pos[1]}/{self.pos[2]}/stop",
                                       task_id=e.task_id, cell=s.cell, node_id=e.node_id,
                                       connector=node.connector or "sim",
                                       reason=f"stale copy: the task is {where}", issued_at=self.at))

    def retry_pending(self) -> None:
        budget = self.strategy.retry_budget
        for item in list(self.s.queue[:budget]):
            if self.s.tasks[item[2]].status == PENDING:     # a gang or a joint plan may have placed it meanwhile
                self.schedule(item[2], retry=True)

    def release(self, task_id: str, cause: str) -> None:
        s, t = self.s, self.s.tasks[task_id]
        eid, did = self._ids(m.TaskReleased.KIND)
        node = t.node if t.status in HOLDING else ""
        path = [f"{cause.lower()}", f"release {node}" if node else "drop from queue"]
        self.emit(m.TaskReleased(event_id=eid, decision_id=did, task_id=task_id, tenant=t.task.tenant,
                                 cell=s.cell, node_id=node, cause=cause,
                                 gpu_devices=tuple(t.devices) if node else (),
                                 provenance=self.provenance(None, path)))


def decide(state: CellState, event: Any, position: Position) -> tuple[CellState, list[Any]]:
    """The scheduler step for one input. See the module docstring for the contract."""
    topic, partition, offset = position
    key = f"{topic}/{partition}"
    last = state.offsets.get(key)
    if last is not None and offset <= last:
        return state, []
    state.offsets[key] = offset
    if type(event).__name__ not in m.CELL_INPUT_KINDS:
        return state, []
    at = event_time(event)
    if at > state.now:
        state.now = at                   # the cell clock: the largest event time the log has shown
    if isinstance(event, (m.NodeConditionChanged, m.LinkMetrics)):
        evolve(state, event)
        return state, []
    if isinstance(event, m.PolicyChanged):
        evolve(state, event)
        return state, []
    d = _Decider(state, position, event_time(event))

    if isinstance(event, m.TaskSubmitted):
        if event.task_id in state.tasks:
            return state, []
        evolve(state, event)
        d.schedule(event.task_id, retry=False)
        return state, d.outs

    if isinstance(event, m.CellTick):
        d.tick()
        return state, d.outs

    if isinstance(event, m.NodeHeartbeat):
        evolve(state, event)
        row = state.node_index.get(event.node_id)
        if row is not None and state.health[row] != READY:
            d.health(row, READY, "heartbeat again")
            d.retry_pending()
        return state, d.outs

    if isinstance(event, m.TaskStatusChanged):
        t = state.tasks.get(event.task_id)
        if t is None:
            return state, []
        if t.status in TERMINAL:
            if event.node_id and event.node_id != t.node and event.status in ("DISPATCHED", "RUNNING"):
                d.stop_stale(event, t)       # a stale copy of a task that has finished elsewhere
            return state, d.outs
        if event.node_id and (t.node != event.node_id if t.node is not None
                              else event.status in ("DISPATCHED", "RUNNING")):
            # a stale copy (its node was DOWN and the task went elsewhere): never let it
            # release the current placement; stop it if it still runs
            if event.status in ("DISPATCHED", "RUNNING"):
                d.stop_stale(event, t)
            return state, d.outs
        evolve(state, event)
        if event.status in (COMPLETED, FAILED, CANCELLED) and t.status in HOLDING:
            d.release(event.task_id, event.status)
            d.retry_pending()
        return state, d.outs

    if isinstance(event, m.TaskCancelled):
        t = state.tasks.get(event.task_id)
        if t is None or t.status in TERMINAL:
            return state, []
        held = t.status in HOLDING
        d.release(event.task_id, CANCELLED)
        if held:
            d.retry_pending()
        return state, d.outs

    evolve(state, event)
    if isinstance(event, m.NodeRegistered) or (isinstance(event, m.NodeStatusChanged) and event.status == READY):
        d.retry_pending()
    return state, d.outs
