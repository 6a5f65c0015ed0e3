"""Choosing victims, in the Kubernetes manner: who must make room for a task that does not fit.

Pure: reads a :class:`~.state.CellState`, changes nothing; the core turns a
:class:`Preemption` into ``TaskPreempted`` decisions and a placement.

**Who may be a victim.** A task holding resources whose QoS tier is lower than the
preemptor's and listed in ``qos.preemptible`` (default: BRONZE only), that is not a gang
member (a gang runs all or nothing), is not in the middle of a reserve-first move, and is
not on the GPUs of a reservation token that holds them (that work is *lent* those GPUs:
freeing them would give them back to the token, not to the preemptor; ``reservations.py``).
So a gold or silver task is never a victim of a lower tier.

**Gold standby copies** (``qos.gold_standby``, qos.py) are victims of one more kind: a gold
task out of service (``evict_standbys``: it ran before, and neither it nor its own copy runs
now, as when its node failed and it must move) may evict another task's standby copy,
after bronze: its importance is :data:`STANDBY_LEVEL`, between bronze and silver. Evicting
a copy costs its task redundancy, not service (the task runs on), while the preemptor is
out of service until it is placed; the evicted copy is queued again after its grace like
any victim. A task placed for the first time never evicts a copy: it was not in service
yet, and taking another task's copy would trade that task's protection for nothing.

**Which victims.** Among the nodes where the task would fit once some victims are gone
(every other filter passed: the caller gives the row mask), the set with the smallest
:data:`cost`, compared in this order:

1. the most important victim in the set is as unimportant as possible: lowest tier, then
   lowest priority ("lowest tier and priority first");
2. the fewest victims;
3. the least work lost: the sum of how long each victim has held its place (cell clock);
4. ties: the smaller node id, then the victims' ids.

On one node the search is exact: the smallest importance level whose victims, all evicted,
make room fixes (1) (evicting more never hurts a fit); then subsets of those candidates are
tried by increasing size, the least work lost winning within a size. More than
``max_victim_search`` candidates make that exponential, so then victims are chosen as the
Kubernetes scheduler does: evict them all, then reprieve (keep) each one, most important
first, whose return still leaves room.
"""
from __future__ import annotations

from dataclasses import dataclass
from itertools import combinations
from typing import Optional

import numpy as np

from .model import GPU_MILLI, Request
from .qos import GOLD, TIER_RANK, is_standby, outranks
from .state import HOLDING, CellState

Importance = tuple[float, int]        # (tier: 0 bronze .. 2 gold, priority); larger = more important
STANDBY_LEVEL = 0.5                   # a gold standby copy as a victim: after bronze, before silver


@dataclass(frozen=True, slots=True)
class Victim:
    task_id: str
    importance: Importance
    work_lost_ms: int
    cpu: int
    mem: int
    devices: tuple[int, ...]
    gpu_milli: int
    accels: tuple[tuple[str, str, int], ...] = ()     # the non-GPU accelerators it holds (C1)


@dataclass(frozen=True, slots=True)
class Preemption:
    """Evict ``victims`` from ``node_id`` (row ``row``); the task then takes ``devices`` there."""
    row: int
    node_id: str
    victims: tuple[Victim, ...]
    devices: list[int]
    cost: tuple

    @property
    def victim_ids(self) -> tuple[str, ...]:
        return tuple(v.task_id for v in self.victims)


def importance(tier: str, priority: int) -> Importance:
    return (2 - TIER_RANK.get(tier, 1), priority)


def cost(victims: tuple[Victim, ...]) -> tuple:
    """The comparison key of a victim set (see the module docstring), smaller is better."""
    return (max(v.importance for v in victims), len(victims), sum(v.work_lost_ms for v in victims))


def candidates(state: CellState, preemptor_tier: str, preemptible: tuple[str, ...],
               evict_standbys: bool = False) -> dict[int, list[Victim]]:
    """Per node row, the tasks a task of ``preemptor_tier`` may evict there (and gold standby
    copies, with ``evict_standbys``). Cached until the next allocation change
    (``state.clock``) or clock tick: one scan of the tasks serves every retry of an input
    that places nothing."""
    return state.derived(("victims", state.clock, state.now, preemptor_tier, preemptible, evict_standbys),
                         lambda: _scan(state, preemptor_tier, preemptible, evict_standbys))


def _scan(state: CellState, preemptor_tier: str, preemptible: tuple[str, ...],
          evict_standbys: bool = False) -> dict[int, list[Victim]]:
    for key in [k for k in state._derived if isinstance(k, tuple) and k and k[0] == "victims"]:
        del state._derived[key]                 # only the newest scan is worth keeping
    out: dict[int, list[Victim]] = {}
    from .reservations import promised_devices
    promised = promised_devices(state)   # bronze on a token's GPUs is lent: freeing them serves the token
    # only the holders of the tiers it may evict (state.holders); the order of a node's list
    # does not matter: every reader sorts it or takes min / max / sums
    tasks = state.tasks
    ids = [tid for tier in dict.fromkeys(preemptible) if outranks(preemptor_tier, tier)
           for tid in state.holders(tier)]
    if evict_standbys:
        ids += [tid for tid in state.holders(GOLD) if is_standby(tid)]
    for tid in ids:
        t = tasks[tid]
        if t.status not in HOLDING or t.node is None or t.moving_from is not None:
            continue
        if promised and t.devices and promised.get(t.node, set()).intersection(t.devices):
            continue
        task = t.task
        if task.labels.get("gang"):
            continue
        r = task.request
        level = (STANDBY_LEVEL, task.priority) if is_standby(tid) else importance(task.qos_tier,
                                                                                                task.priority)
        out.setdefault(state.node_index[t.node], []).append(Victim(
            tid, level, max(0, state.now - t.placed_at),
            r.cpu, r.mem, tuple(t.devices), r.gpu_milli if t.devices else 0, t.accels))
    return out


def devices_without(state: CellState, row: int, req: Request, victims: tuple[Victim, ...]) -> Optional[list[int]]:
    """The devices ``req`` would take on ``row`` once ``victims`` are gone (best fit, as
    ``framework.default_devices``), ``[]`` for a CPU task that fits, None if it does not fit."""
    if state.cpu_free[row] + sum(v.cpu for v in victims) < req.cpu:
        return None
    if state.mem_free[row] + sum(v.mem for v in victims) < req.mem:
        return None
    if req.accels:                      # non-GPU accelerators (C1): free ones plus the victims'
        left = state.accel_free[row].copy()
        for v in victims:
            for k, m, n in v.accels:
                left[state.accel_keys.index((k, m))] += n
        if state.accel_choice_in(left, req.accels, row) is None:
            return None
    if req.kind == "cpu":
        return []
    g = state.gpu_free[row].copy()
    for v in victims:
        for d in v.devices:
            g[d] = min(g[d] + v.gpu_milli, GPU_MILLI)
    fit = np.flatnonzero(g >= req.gpu_milli)
    if req.kind == "shared":
        return [int(fit[np.argmin(g[fit])])] if fit.size else None
    return [int(d) for d in fit[: req.gpu_count]] if fit.size >= req.gpu_count else None


def best_on_node(state: CellState, row: int, req: Request, cands: list[Victim],
                 max_search: int) -> Optional[tuple[tuple, tuple[Victim, ...], list[int]]]:
    """The cheapest victim set on one node: ``(cost, victims, devices)``, or None."""
    cands = sorted(cands, key=lambda v: (v.importance, v.task_id))
    levels = sorted({v.importance for v in cands})
    pool: list[Victim] = []
    for level in levels:
        pool = [v for v in cands if v.importance <= level]
        if devices_without(state, row, req, tuple(pool)) is not None:
            break
    else:
        return None
    if len(pool) > max_search:
        keep = list(pool)
        for v in sorted(pool, key=lambda v: (v.importance, -v.work_lost_ms, v.task_id), reverse=True):
            trial = tuple(x for x in keep if x is not v)
            if trial and devices_without(state, row, req, trial) is not None:
                keep = list(trial)
        chosen = tuple(sorted(keep, key=lambda v: v.task_id))
        return cost(chosen), chosen, devices_without(state, row, req, chosen) or []
    for k in range(1, len(pool) + 1):
        best: Optional[tuple[tuple, tuple[Victim, ...], list[int]]] = None
        for combo in combinations(pool, k):
            devs = devices_without(state, row, req, combo)
            if devs is None:
                continue
            ids = tuple(sorted(v.task_id for v in combo))
            key = (cost(combo), ids)
            if best is None or key < (best[0], tuple(v.task_id for v in best[1])):
                best = (cost(combo), tuple(sorted(combo, key=lambda v: v.task_id)), devs)
        if best is not None:
            return best
    return None


def bound(state: CellState, row: int, req: Request, cands: list[Victim]) -> tuple:
    """No victim set on ``row`` costs less than this: its most important victim is at least the
    least important candidate; a whole-GPU task needs at least enough victims to free the
    devices it lacks (each frees at most the most devices any candidate holds), and at least
    one; and those lose at least the least work of as many candidates."""
    need = 1
    if req.kind == "whole":
        free = int((state.gpu_free[row] >= req.gpu_milli).sum())
        most = max(len(v.devices) for v in cands) or 1
        need = max(1, -(-(req.gpu_count - free) // most))
    works = sorted(v.work_lost_ms for v in cands)
    return (min(v.importance for v in cands), need, sum(works[:need]))


def plan(state: CellState, req: Request, preemptor_tier: str, eligible: np.ndarray,
         preemptible: tuple[str, ...], max_search: int, evict_standbys: bool = False) -> Optional[Preemption]:
    """The preemption that makes room for ``req`` at the least cost, or None.

    ``eligible``: row mask of the nodes the task may use if resources allowed (ready, its
    pool, its GPU model, large enough); the caller computes it with the same rules as a
    normal placement. ``evict_standbys``: gold standby copies are candidates too (for a gold
    task out of service, with the policy's standby on: see the module docstring)."""
    by_row = candidates(state, preemptor_tier, preemptible, evict_standbys)
    # Nodes in order of a lower bound of their cost (:func:`bound`): the search stops at the
    # first node whose bound is no better than the best set found (all later ones are no better).
    order = sorted((bound(state, row, req, vs), state.node_ids[row], row)
                   for row, vs in by_row.items() if eligible[row])
    best: Optional[tuple[tuple, str, Preemption]] = None
    for low, node_id, row in order:
        if best is not None and (low, node_id) >= best[:2]:
            break
        found = best_on_node(state, row, req, by_row[row], max_search)
        if found is None:
            continue
        c, victims, devices = found
        key = (c, node_id)
        if best is None or key < best[:2]:
            best = (c, node_id, Preemption(row, node_id, victims, devices, c))
    return best[2] if best else None
