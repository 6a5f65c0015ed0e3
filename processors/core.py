"""The two pure entry points of the scheduling core.

``evolve(state, kind, event) -> state``
    Folds one *fact* into the state: an input fact (node registered / status changed,
    policy changed, task status changed, task cancelled) or one of the core's own
    decisions (TaskPlaced, TaskPending, TaskUnschedulable, TaskReleased). Rebuilding a
    cell is ``fold(evolve, inputs and decisions in log order)``.

``decide(state, kind, event, position) -> (state, [(kind, payload), ...])``
    The scheduler step for one input read at ``position = (topic, partition, offset)``.
    It folds the input, decides, and folds its own decisions, so the returned state
    already reflects them. Deterministic: no wall clock (``decided_at`` is the input's
    time), no I/O, randomness only from the strategy seed mixed with the position.
    Idempotent: an input at or below the last applied offset of its (topic, partition)
    is ignored and yields no outputs; so are a second submission of a known task id and
    a status for an unknown task.

Both mutate ``state`` in place and return it (see ``state.py``).
"""
from __future__ import annotations

import json
from typing import Any

from . import events as ev
from . import rng
from . import matching
from .framework import Code, CycleContext, CycleResult, Request, Status, default_devices, run_cycle
from .frag import shape_key
from .state import (CANCELLED, COMPLETED, FAILED, HOLDING, PENDING, PLACED, READY, TERMINAL,
                    UNSCHEDULABLE, CellState)
from .sandbox import SandboxError
from .strategies import Strategy, config_digest, get_blend, get_strategy

Output = tuple[str, dict[str, Any]]
Position = tuple[str, int, int]


# ============================================================================ evolve
def _node_registered(s: CellState, e: dict) -> None:
    nid = e["node_id"]
    gpus = [a for a in (e.get("accelerators") or []) if a.get("kind", "GPU") == "GPU"]
    count = sum(int(a.get("count", 0)) for a in gpus)
    model = max(gpus, key=lambda a: int(a.get("count", 0)))["model"] if gpus else None
    meta = {k: e[k] for k in ("site", "region", "zone", "arch", "tier", "pricing", "price_per_hour",
                              "pue", "carbon_g_per_kwh", "connector", "labels", "registered_at",
                              "accelerators") if k in e}
    if nid in s.node_index:       # re-registration: refresh descriptive fields, mark ready
        s.node_meta[nid].update(meta)
        s.meta_changed()
        s.set_node_status(nid, READY)
        return
    s.add_node(nid, int(e.get("cpu_milli", 0)), int(e.get("memory_mib", 0)), count, model, meta)


def _node_status(s: CellState, e: dict) -> None:
    if e.get("node_id") in s.node_index and e.get("status") in ("READY", "CORDONED", "DOWN"):
        s.set_node_status(e["node_id"], e["status"])


def _policy(s: CellState, e: dict) -> None:
    cfg = e.get("config")
    if cfg is None:
        cfg = json.loads(e.get("config_json") or "{}")
    s.policy = {"strategy": e["strategy"], "config": cfg, "digest": config_digest(cfg)}


def _task_submitted(s: CellState, e: dict) -> None:
    tid = e["task_id"]
    if tid in s.tasks:
        return
    r = Request.from_resources(e.get("resources") or {})
    s.seq += 1
    s.tasks[tid] = {"tenant": e.get("tenant", ""), "status": "SUBMITTED", "seq": s.seq,
                    "priority": int(e.get("priority") or 0), "qos": e.get("qos_tier", "SILVER"),
                    "cpu": r.cpu, "mem": r.mem, "gpu_count": r.gpu_count, "gpu_milli": r.gpu_milli,
                    "models": list(r.models), "submitted_at": int(e.get("submitted_at") or 0),
                    "labels": dict(e.get("labels") or {}),
                    "command": list(e["command"]) if e.get("command") else None,
                    "env": dict(e.get("env") or {}),
                    "duration_ms": e.get("duration_estimate_ms"),
                    "node": None, "devices": []}
    k = shape_key(r.cpu, r.gpu_count, r.gpu_milli, r.models)
    s.class_counts[k] = s.class_counts.get(k, 0) + 1


def _task_status(s: CellState, e: dict) -> None:
    t = s.tasks.get(e.get("task_id"))
    st = e.get("status")
    if t is None or t["status"] in TERMINAL:
        return
    if st in ("DISPATCHED", "RUNNING") and t["status"] in HOLDING:
        t["status"] = st
    # COMPLETED / FAILED are applied by the TaskReleased decision that follows them


def _placed(s: CellState, e: dict) -> None:
    t = s.tasks[e["task_id"]]
    if t["status"] in HOLDING:
        return
    s.allocate(e["task_id"], e["node_id"], e["gpu_devices"], e["gpu_milli"], e["cpu_milli"], e["memory_mib"])
    s.dequeue(e["task_id"])
    t.update(status=PLACED, node=e["node_id"], devices=list(e["gpu_devices"]))


def _pending(s: CellState, e: dict) -> None:
    t = s.tasks[e["task_id"]]
    t["status"] = PENDING
    s.enqueue(e["task_id"])


def _unschedulable(s: CellState, e: dict) -> None:
    s.tasks[e["task_id"]]["status"] = UNSCHEDULABLE
    s.dequeue(e["task_id"])


def _released(s: CellState, e: dict) -> None:
    t = s.tasks.get(e["task_id"])
    if t is None or t["status"] in TERMINAL:
        return
    if t["status"] in HOLDING:
        s.free(t["node"], t["devices"], t["gpu_milli"], t["cpu"], t["mem"])
    s.dequeue(e["task_id"])
    t["status"] = e["cause"] if e["cause"] in (COMPLETED, FAILED, CANCELLED) else CANCELLED


_EVOLVE = {
    ev.NODE_REGISTERED: _node_registered,
    ev.NODE_STATUS_CHANGED: _node_status,
    ev.POLICY_CHANGED: _policy,
    ev.TASK_SUBMITTED: _task_submitted,
    ev.TASK_STATUS_CHANGED: _task_status,
    ev.TASK_CANCELLED: lambda s, e: None,   # the TaskReleased decision carries the effect
    ev.TASK_PLACED: _placed,
    ev.TASK_PENDING: _pending,
    ev.TASK_UNSCHEDULABLE: _unschedulable,
    ev.TASK_RELEASED: _released,
}


def evolve(state: CellState, kind: str, event: dict[str, Any]) -> CellState:
    """Fold one fact into ``state`` (in place) and return it. Unknown kinds are ignored."""
    fn = _EVOLVE.get(kind)
    if fn is not None:
        fn(state, event)
    return state


# ============================================================================ decide
def _event_time(kind: str, e: dict) -> int:
    for k in ("at", "submitted_at", "registered_at"):
        v = e.get(k)
        if v is not None:
            return int(v)
    return 0


class _Decider:
    """Builds the outputs of one input; keeps the per-input sequence for decision ids."""
    __slots__ = ("s", "strategy", "pos", "at", "outs", "n", "topic_seed")

    def __init__(self, s: CellState, pos: Position, at: int):
        self.s = s
        pol = s.policy
        self.strategy: Strategy = get_strategy(pol["strategy"], pol.get("config"), pol.get("digest"))
        self.pos = pos
        self.at = at
        self.outs: list[Output] = []
        self.n = 0
        self.topic_seed = rng.str_seed(pos[0])

    def _ids(self, kind: str) -> tuple[str, str]:
        t, p, o = self.pos
        did = f"{self.s.cell}/{t}/{p}/{o}/{self.n}"
        self.n += 1
        return f"{did}/{kind}", did

    def provenance(self, res: CycleResult | None, path: list[str], strategy: Strategy | None = None,
                   matched_rule: str | None = None) -> dict[str, Any]:
        s = self.s
        t, p, o = self.pos
        cands, filt = [], []
        if res is not None:
            ids = s.node_ids
            cands = [{"node_id": ids[r], "score": sc, "rank": i + 1} for i, (r, sc) in enumerate(res.candidates)]
            filt = [{"reason": reason, "nodes": k, "sample": [ids[r] for r in sample.tolist()]}
                    for reason, k, sample in res.filtered]
        return {"input": {"topic": t, "partition": p, "offset": o},
                "strategy": (strategy or self.strategy).ref(),
                "candidates": cands, "filtered": filt, "path": path, "decided_at": self.at,
                "matched_rule": matched_rule}

    def emit(self, kind: str, payload: dict[str, Any]) -> None:
        evolve(self.s, kind, payload)
        self.outs.append((kind, payload))

    def choose(self, t: dict[str, Any], req: Request) -> tuple[Strategy, str | None, list[str]]:
        """The strategy for this task: the first label rule that matches (policy config
        ``rules``), else the cell's strategy."""
        rules = self.strategy.config.get("rules")
        if not rules:
            return self.strategy, None, []
        hit = matching.match(rules, t, req.kind)
        if hit is None:
            return self.strategy, None, [f"match: no rule -> {self.strategy.name}"]
        i, rule = hit
        desc = matching.describe(i, rule)
        seed = self.strategy.seed
        if "blend" in rule:
            st = get_blend(rule["blend"], seed)
        else:
            st = get_strategy(rule["strategy"], {"seed": seed, **(rule.get("config") or {})})
        return st, desc, [f"match: {desc}"]

    def fallback(self) -> Strategy:
        cfg = self.strategy.config
        name = cfg.get("fallback_strategy", "default")
        if name == self.strategy.name:
            return self.strategy
        return get_strategy(name, {"seed": self.strategy.seed, **(cfg.get("fallback_config") or {})})

    def schedule(self, task_id: str, retry: bool) -> bool:
        """Run one cycle for a known task; emit Placed / Pending / Unschedulable."""
        s, t = self.s, self.s.tasks[task_id]
        req = Request(t["cpu"], t["mem"], t["gpu_count"], t["gpu_milli"], tuple(t["models"]))
        strategy, rule, mpath = self.choose(t, req)
        seed = rng.mix(strategy.seed, self.topic_seed, self.pos[1], self.pos[2], self.n)
        ctx = CycleContext(s, req, task_id, seed, strategy.config)
        try:
            res = run_cycle(strategy.profile, ctx)
        except SandboxError as exc:
            fb = self.fallback()
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
            eid, did = self._ids(ev.TASK_PLACED)
            self.emit(ev.TASK_PLACED, {
                "event_id": eid, "decision_id": did, "task_id": task_id, "tenant": t["tenant"],
                "cell": s.cell, "node_id": res.plan.node_id, "gpu_devices": res.plan.devices,
                "gpu_milli": req.gpu_milli if res.plan.devices else 0, "cpu_milli": req.cpu,
                "memory_mib": req.mem, "provenance": self.provenance(res, path, strategy, rule)})
            for other, row in ctx.scratch.get("joint") or []:
                self.place_joint(other, row, task_id, strategy, rule)
            return True
        if retry:
            return False          # still pending: no new event (its last TaskPending stands)
        reasons = [{"reason": r, "nodes": k} for r, k, _ in res.filtered]
        if res.status.code == Code.UNRESOLVABLE:
            eid, did = self._ids(ev.TASK_UNSCHEDULABLE)
            self.emit(ev.TASK_UNSCHEDULABLE, {
                "event_id": eid, "decision_id": did, "task_id": task_id, "tenant": t["tenant"],
                "cell": s.cell, "reasons": [{"reason": res.status.reason, "nodes": s.n_nodes}],
                "provenance": self.provenance(res, path + ["unschedulable"], strategy, rule)})
            return False
        if not reasons:
            reasons = [{"reason": res.status.reason or "no nodes", "nodes": s.n_nodes}]
        eid, did = self._ids(ev.TASK_PENDING)
        payload = {"event_id": eid, "decision_id": did, "task_id": task_id, "tenant": t["tenant"],
                   "cell": s.cell, "reasons": reasons, "queue_position": 0,
                   "provenance": self.provenance(res, path + ["queued"], strategy, rule)}
        self.emit(ev.TASK_PENDING, payload)
        payload["queue_position"] = s.queue_position(task_id)
        return False

    def place_joint(self, task_id: str, row: int, with_task: str, strategy: Strategy, rule: str | None) -> None:
        """Place a queued task that a joint (batch) plan put on ``row``, if it still fits."""
        s = self.s
        t = s.tasks.get(task_id)
        if t is None or t["status"] != PENDING:
            return
        req = Request(t["cpu"], t["mem"], t["gpu_count"], t["gpu_milli"], tuple(t["models"]))
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
        eid, did = self._ids(ev.TASK_PLACED)
        res = CycleResult(Status(), None, [], [(row, 1.0)], 1, [])
        self.emit(ev.TASK_PLACED, {
            "event_id": eid, "decision_id": did, "task_id": task_id, "tenant": t["tenant"], "cell": s.cell,
            "node_id": node, "gpu_devices": devices, "gpu_milli": req.gpu_milli if devices else 0,
            "cpu_milli": req.cpu, "memory_mib": req.mem,
            "provenance": self.provenance(res, path, strategy, rule)})

    def retry_pending(self) -> None:
        budget = self.strategy.retry_budget
        for item in list(self.s.queue[:budget]):
            self.schedule(item[2], retry=True)

    def release(self, task_id: str, cause: str) -> None:
        s, t = self.s, self.s.tasks[task_id]
        eid, did = self._ids(ev.TASK_RELEASED)
        node = t["node"] if t["status"] in HOLDING else ""
        path = [f"{cause.lower()}", f"release {node}" if node else "drop from queue"]
        self.emit(ev.TASK_RELEASED, {
            "event_id": eid, "decision_id": did, "task_id": task_id, "tenant": t["tenant"],
            "cell": s.cell, "node_id": node, "cause": cause,
            "gpu_devices": list(t["devices"]) if node else [],
            "provenance": self.provenance(None, path)})


def decide(state: CellState, kind: str, event: dict[str, Any], position: Position) -> tuple[CellState, list[Output]]:
    """The scheduler step for one input. See the module docstring for the contract."""
    topic, partition, offset = position
    key = f"{topic}/{partition}"
    last = state.offsets.get(key)
    if last is not None and offset <= last:
        return state, []
    state.offsets[key] = offset
    if kind not in ev.INPUT_KINDS:
        return state, []
    d = _Decider(state, position, _event_time(kind, event)) if kind != ev.POLICY_CHANGED else None

    if kind == ev.TASK_SUBMITTED:
        tid = event["task_id"]
        if tid in state.tasks:
            return state, []
        evolve(state, kind, event)
        d.schedule(tid, retry=False)
        return state, d.outs

    if kind == ev.TASK_STATUS_CHANGED:
        t = state.tasks.get(event.get("task_id"))
        if t is None or t["status"] in TERMINAL:
            return state, []
        evolve(state, kind, event)
        st = event.get("status")
        if st in (COMPLETED, FAILED, CANCELLED) and t["status"] in HOLDING:
            d.release(event["task_id"], st)
            d.retry_pending()
        return state, d.outs

    if kind == ev.TASK_CANCELLED:
        t = state.tasks.get(event.get("task_id"))
        if t is None or t["status"] in TERMINAL:
            return state, []
        held = t["status"] in HOLDING
        d.release(event["task_id"], CANCELLED)
        if held:
            d.retry_pending()
        return state, d.outs

    evolve(state, kind, event)
    if kind == ev.POLICY_CHANGED:
        return state, []
    if kind == ev.NODE_REGISTERED or (kind == ev.NODE_STATUS_CHANGED and event.get("status") == READY):
        d.retry_pending()
    return state, d.outs
