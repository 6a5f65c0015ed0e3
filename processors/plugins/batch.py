"""``CpSatBatch``: places a window of queued tasks jointly with OR-Tools CP-SAT.

When a task is decided, the window is that task plus up to ``window - 1`` tasks waiting in
the cell's queue (queue order). Each task may go on one of its ``candidates`` best
feasible nodes (BestFit order) or stay queued. The model keeps every node within its free
CPU, memory, GPU milli and fully free GPUs, and maximises
``sum(placed x (1000 x (priority + 1) + gpu_milli / 10 + 1)) + sum(bestfit of the chosen
nodes) - open_penalty x (idle nodes brought into use)``.

Determinism: one search worker, fixed ``random_seed``, and a *deterministic* time limit
(``max_deterministic_time``, in CP-SAT's deterministic seconds, default 0.2) instead of a
wall-clock one, so the same input gives the same plan on any machine. Fallback: if the
solver finds no plan or leaves the current task out while a node fits it, the task is
scored by BestFit alone (noted in the decision path). The other tasks the plan places are
returned in ``ctx.scratch["joint"]``; the core re-checks and places them in the same
decision, each with its own provenance.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..args import arg
from ..framework import REGISTRY, CycleContext, Plugin, _normalize
from ..model import Request
from ..plugins.basic import BestFit
from ..state import GPU_MILLI, CellState, TaskRecord


@dataclass(frozen=True, slots=True)
class CpSatBatchArgs:
    window: int = arg(8, "tasks solved together: the arriving one and up to window - 1 queued", ge=1)
    candidates: int = arg(16, "best-fit candidate nodes per task", ge=1)
    open_penalty: int = arg(50, "objective cost of bringing an idle node into use", ge=0)
    max_deterministic_time: float = arg(0.2, "CP-SAT limit in deterministic seconds (not wall time)", gt=0)
    solver_seed: int = arg(0, "CP-SAT random_seed")


def feasible_rows(s: CellState, r: Request) -> np.ndarray:
    ok = s.ready & (s.cpu_free >= r.cpu) & (s.mem_free >= r.mem)
    if r.kind != "cpu":
        ok &= s.gpu_count >= r.gpu_count
        if r.models:
            ids = [i for i, m in enumerate(s.models) if m in r.models]
            ok &= np.isin(s.model_idx, ids)
        if r.kind == "shared":
            ok &= s.gpu_max_free >= r.gpu_milli
        else:
            ok &= (s.gpu_free >= r.gpu_milli).sum(axis=1) >= r.gpu_count
    return np.flatnonzero(ok)


def task_request(t: TaskRecord) -> Request:
    return t.task.request


@REGISTRY.register
class CpSatBatch(Plugin):
    """Args: :class:`CpSatBatchArgs`."""
    name = "CpSatBatch"
    Args = CpSatBatchArgs
    args: CpSatBatchArgs

    def _bestfit(self, ctx: CycleContext, req: Request, rows: np.ndarray) -> np.ndarray:
        sub = CycleContext(ctx.state, req, ctx.task_id, ctx.seed, ctx.config)
        return BestFit().score(sub, rows)

    def score(self, ctx: CycleContext, rows: np.ndarray) -> np.ndarray:
        from ortools.sat.python import cp_model

        s, a = ctx.state, self.args
        window, k_cand = a.window, a.candidates
        # the batch tier's chunk when the core gives one (qos.py), else the head of the queue
        window_ids = ctx.scratch.get("window_ids")
        pool = window_ids if window_ids is not None else [q[-1] for q in s.queue]
        others = [tid for tid in pool if tid != ctx.task_id][: max(window - 1, 0)]
        tasks = [(ctx.task_id, ctx.req, rows)] + [
            (tid, task_request(s.tasks[tid]), None) for tid in others]
        cand: list[tuple[str, Request, np.ndarray, np.ndarray]] = []
        for tid, req, rws in tasks:
            rws = feasible_rows(s, req) if rws is None else rws
            if rws.size == 0:
                continue
            bf = self._bestfit(ctx, req, rws)
            order = np.lexsort((rws, -bf))[:k_cand]
            cand.append((tid, req, rws[order], bf[order]))
        m = cp_model.CpModel()
        x: dict[tuple[int, int], Any] = {}
        per_node: dict[int, list[tuple[int, Request]]] = {}
        obj = []
        for i, (tid, req, rws, bf) in enumerate(cand):
            prio = s.tasks[tid].task.priority if tid in s.tasks else 0
            value = 1000 * (max(prio, 0) + 1) + req.gpu_total // 10 + 1
            vs = []
            for row, b in zip(rws.tolist(), bf.tolist()):
                v = m.NewBoolVar(f"x{i}_{row}")
                x[i, row] = v
                vs.append(v)
                per_node.setdefault(row, []).append((i, req))
                obj.append((value + int(b)) * v)
            m.Add(sum(vs) <= 1)
        open_pen = a.open_penalty
        for row, items in sorted(per_node.items()):
            vs = [x[i, row] for i, _ in items]
            m.Add(sum(r.cpu * v for (i, r), v in zip(items, vs)) <= int(s.cpu_free[row]))
            m.Add(sum(r.mem * v for (i, r), v in zip(items, vs)) <= int(s.mem_free[row]))
            m.Add(sum(r.gpu_total * v for (i, r), v in zip(items, vs)) <= int(s.gpu_free_total[row]))
            whole = [(r, v) for (i, r), v in zip(items, vs) if r.kind == "whole"]
            if whole:
                m.Add(sum(r.gpu_count * v for r, v in whole) <= int(s.gpu_full_count[row]))
            idle = s.cpu_free[row] == s.cpu_cap[row] and s.gpu_free_total[row] == s.gpu_count[row] * GPU_MILLI
            if idle and open_pen:
                used = m.NewBoolVar(f"open{row}")
                for v in vs:
                    m.AddImplication(v, used)
                obj.append(-open_pen * used)
        m.Maximize(sum(obj))
        solver = cp_model.CpSolver()
        solver.parameters.num_workers = 1
        solver.parameters.random_seed = a.solver_seed
        solver.parameters.max_deterministic_time = a.max_deterministic_time
        status = solver.Solve(m)
        ok = status in (cp_model.OPTIMAL, cp_model.FEASIBLE)
        chosen: dict[int, int] = {}
        if ok:
            for (i, row), v in sorted(x.items()):
                if solver.Value(v):
                    chosen[i] = row
        mine = chosen.get(0) if cand and cand[0][0] == ctx.task_id else None
        status_name = solver.StatusName(status)
        if mine is None:
            ctx.scratch["batch_note"] = (f"batch: CP-SAT {status_name} over {len(cand)} tasks left this task out;"
                                         " fallback BestFit")
            return _normalize(self._bestfit(ctx, ctx.req, rows))
        ctx.scratch["batch_note"] = (f"batch: CP-SAT {status_name} placed {len(chosen)}/{len(cand)} tasks of the window"
                                     f" (objective {solver.ObjectiveValue():g})")
        ctx.scratch["joint"] = [(cand[i][0], row) for i, row in sorted(chosen.items()) if i != 0]
        return np.where(rows == mine, 1.0, 0.0)
