"""Placement on the cell's topology graph (``processors/topology.py``, ``state.topology``).

``TopologyNear`` (filter and scorer)
    A task whose label ``data-site`` / ``user-site`` (also ``users-site``; see
    ``TopologyNearArgs.labels``) names a place (a site, zone, rack or node name, or a vertex
    such as ``zone:z1``) goes to the feasible nodes with the shortest weighted path from that
    place (``Topology.distances``: hierarchy defaults, measured links, penalties of nodes in
    a bad condition, DOWN nodes cut off).

    * As a **filter** (last in the profile: it needs to know what is feasible, so it
      evaluates the filters named in ``feasible``, by default the standard ones, and, like
      the framework, prefers NORMAL nodes) it keeps the nodes within ``slack_ms`` of the
      nearest feasible one; the others are filtered with the reason ``farther than the
      nearest feasible node from data-site=X (1.25 ms)``, so the provenance shows it. The
      scorers then choose among the nearest nodes.
    * As a **scorer** (normalised 0..100) it gives minus the distance in microseconds
      (``unreachable_ms`` where the place cannot reach the node), for blends that trade
      distance against packing.

    Without the label (or when the label names nothing the graph knows) it does nothing:
    the filter returns no mask and the scorer all zeros, which normalise to 0. ``default``
    carries it as a filter: a filter that does nothing leaves no trace in the decision.

``plan_gang(state, requests)``
    A gang (N tasks that start together) placed all or nothing: inside one rack when that
    fits, else inside one zone, else across the fewest zones (then racks), else anywhere.
    An exact packing search decides *where* (which domain can hold all N); the cell's
    strategy then places the members one by one *inside* that domain, as it places any
    task (for ``default``: FGD's fragmentation gradient), on a scratch copy of the domain's
    rows; when its greedy choices would not fit them all, the packing is used. Pure: reads
    the state, changes nothing.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional, Sequence

import numpy as np

from suanli.errors import StrategyError

from ..args import arg
from ..framework import REGISTRY, CycleContext, Plugin, run_cycle
from ..model import Request
from ..state import CellState
from ..topology import UnknownVertex
from .basic import FILTERS

NEAR_LABELS = ("data-site", "user-site", "users-site")


@dataclass(frozen=True, slots=True)
class TopologyNearArgs:
    labels: tuple[str, ...] = arg(NEAR_LABELS, "task labels naming the place to be near (a site, zone, rack or "
                                  "node name, or a vertex such as zone:z1); the first one present counts")
    slack_ms: float = arg(0.0, "filter: also keep the nodes at most this many ms farther than the nearest "
                          "feasible one", ge=0)
    feasible: tuple[str, ...] = arg(tuple(FILTERS), "filter: the filters whose conjunction makes a node "
                                    "feasible (the ones that run before this one in the profile)")
    unreachable_ms: float = arg(1000.0, "scorer: the distance of a node the place cannot reach, ms", ge=0)


@REGISTRY.register
class TopologyNear(Plugin):
    """The feasible nodes with the shortest weighted path from the place a task label names
    (see the module docstring). Args: :class:`TopologyNearArgs`."""
    name = "TopologyNear"
    normalize = True
    Args = TopologyNearArgs
    args: TopologyNearArgs

    def __init__(self, args: Any = None, /, **kwargs: Any):
        super().__init__(args, **kwargs)
        self._feasible = [REGISTRY.create(n) for n in self.args.feasible if n != self.name]

    def target(self, ctx: CycleContext) -> Optional[tuple[str, str]]:
        """``(label, value)`` of the first place label the task carries."""
        lab = ctx.labels
        for k in self.args.labels:
            v = lab.get(k)
            if v:
                return k, v
        return None

    def distances(self, ctx: CycleContext) -> Optional[tuple[str, np.ndarray]]:
        t = self.target(ctx)
        if t is None:
            return None
        try:
            return f"{t[0]}={t[1]}", ctx.state.topology.distances(t[1])
        except UnknownVertex:
            return None

    def filter(self, ctx):
        hit = self.distances(ctx)
        if hit is None:
            return None
        what, d = hit
        s = ctx.state
        feas = np.ones(s.n_nodes, dtype=bool)
        for p in self._feasible:
            out = p.filter(ctx)
            if out is not None:
                feas &= out[0]
        ok = feas & s.condition_ok
        base = ok if ok.any() else feas
        near = d[base]
        near = near[np.isfinite(near)]
        if near.size == 0:
            return None                 # nothing feasible, or the place reaches none of it
        dmin = float(near.min())
        keep = d <= dmin + self.args.slack_ms + 1e-9
        return keep, f"farther than the nearest feasible node from {what} ({dmin:.3g} ms, topology)"

    def score(self, ctx, rows):
        hit = self.distances(ctx)
        if hit is None:
            return np.zeros(rows.size)
        d = hit[1][rows]
        d = np.where(np.isfinite(d), d, self.args.unreachable_ms)
        return -np.round(d * 1000.0)


# ============================================================================ gangs
GANG_LEVELS = ("rack", "zone")
DEFAULT_BUDGET = 50_000          # packing search steps per plan, all attempts together


@dataclass(slots=True)
class GangPlan:
    """Where each member of a gang goes, in the order of the requests."""
    placements: list[tuple[int, list[int]]]       # (row, GPU devices) per request
    level: str                                    # rack | zone | zones | racks | cell
    domains: list[str] = field(default_factory=list)   # the domain vertices used
    normal_only: bool = True                      # every node used is in a NORMAL condition
    placed_by: str = "packing"                    # the strategy that chose the nodes, or "packing"
    near: Optional[str] = None                    # the place label that ordered the domains

    def describe(self, state: CellState) -> str:
        n = len(self.placements)
        nodes = len({r for r, _ in self.placements})
        where = (f"inside {self.domains[0]}" if self.level in GANG_LEVELS
                 else f"across {len(self.domains)} {self.level}" if self.domains else "across the cell")
        by = "by packing" if self.placed_by == "packing" else f"placed by {self.placed_by}"
        near = f", nearest to {self.near}" if self.near else ""
        return f"gang of {n} on {nodes} node{'s' if nodes != 1 else ''} {where}{near} ({by})"


class _OutOfBudget(Exception):
    pass


def _device_options(r: Request, g: np.ndarray) -> list[list[int]]:
    """The GPU device choices worth trying for ``r`` on a node with free milli ``g``."""
    if r.kind == "cpu":
        return [[]]
    if r.kind == "shared":
        out, seen = [], set()
        for d in np.argsort(g, kind="stable").tolist():      # least free first (best fit)
            v = int(g[d])
            if v >= r.gpu_milli and v not in seen:
                seen.add(v)
                out.append([d])
        return out
    fit = np.flatnonzero(g >= r.gpu_milli)
    return [[int(x) for x in fit[: r.gpu_count]]] if fit.size >= r.gpu_count else []


_MANY = 1 << 40


def copies(r: Request, cpu: np.ndarray, mem: np.ndarray, gpu: np.ndarray) -> np.ndarray:
    """How many copies of ``r`` each row could host on its own, from its free CPU, memory
    and per-device GPU milli (``gpu``: rows x devices, -1 = no device). Exact for one
    shape: ``k`` whole tasks of ``c`` devices fit iff ``sum_d min(units_d, k) >= k * c``
    (``units_d``: how many ``gpu_milli`` device ``d`` holds)."""
    n = cpu.shape[0]
    out = cpu // r.cpu if r.cpu > 0 else np.full(n, _MANY, dtype=np.int64)
    if r.mem > 0:
        out = np.minimum(out, mem // r.mem)
    if r.kind == "shared":
        out = np.minimum(out, (np.maximum(gpu, 0) // r.gpu_milli).sum(axis=1))
    elif r.kind == "whole":
        units = np.maximum(gpu, 0) // r.gpu_milli
        g = np.zeros(n, dtype=np.int64)
        for k in range(1, int(units.sum(axis=1).max(initial=0)) // r.gpu_count + 1):
            ok = np.minimum(units, k).sum(axis=1) >= k * r.gpu_count
            if not ok.any():
                break
            g[ok] = k
        out = np.minimum(out, g)
    return out


@dataclass(slots=True)
class _Group:
    """Identical members (same request, same rows allowed)."""
    req: Request
    mask: np.ndarray
    members: list[int]


def _groups(reqs: Sequence[Request], masks: list[np.ndarray]) -> list[_Group]:
    out: dict[tuple, _Group] = {}
    for i, (r, m) in enumerate(zip(reqs, masks)):
        g = out.setdefault((r, m.tobytes()), _Group(r, m, []))
        g.members.append(i)
    return list(out.values())


class _Budget:
    """Packing search steps left for one plan (all its attempts)."""
    __slots__ = ("left",)

    def __init__(self, steps: int):
        self.left = steps


def _pack(state: CellState, reqs: Sequence[Request], masks: list[np.ndarray], rows: np.ndarray,
          rank: Optional[np.ndarray], budget: _Budget) -> Optional[list[tuple[int, list[int]]]]:
    """Place every request on ``rows``: a search over nodes and devices, biggest request
    first, best fit first, identical nodes tried once, cut wherever the nodes left cannot
    host the members left of some shape (:func:`copies`; so a gang of identical members
    never backtracks). ``masks``: per request, the rows it may use (static filters);
    ``rank``: per row, a preference (lower first). Exact unless the budget runs out (then
    None)."""
    n = len(reqs)
    R = rows
    cpu = state.cpu_free[R].copy()
    mem = state.mem_free[R].copy()
    gpu = state.gpu_free[R].copy()
    M = [m[R] for m in masks]
    pref = rank[R] if rank is not None else np.zeros(R.size, dtype=np.int64)
    # rows that look the same to every request are interchangeable: a static class per row
    classes: dict[tuple, int] = {}
    cls = np.array([classes.setdefault(tuple(bool(M[i][j]) for i in range(n)) + (int(pref[j]),), len(classes))
                    for j in range(R.size)], dtype=np.int64) if R.size else np.zeros(0, dtype=np.int64)
    order = sorted(range(n), key=lambda i: (-reqs[i].gpu_total, -reqs[i].cpu, -reqs[i].mem, i))
    groups = _groups(reqs, M)
    group_of = {i: gi for gi, g in enumerate(groups) for i in g.members}
    left = [len(g.members) for g in groups]
    out: list[Optional[tuple[int, list[int]]]] = [None] * n

    def room() -> bool:
        return all(not k or int(copies(g.req, cpu, mem, gpu)[g.mask].sum()) >= k for g, k in zip(groups, left))

    def dfs(k: int) -> bool:
        if k == n:
            return True
        budget.left -= 1
        if budget.left < 0:
            raise _OutOfBudget
        if not room():
            return False
        i = order[k]
        r = reqs[i]
        ok = M[i] & (cpu >= r.cpu) & (mem >= r.mem)
        if r.kind == "shared":
            ok &= (gpu >= r.gpu_milli).any(axis=1)
        elif r.kind == "whole":
            ok &= (gpu >= r.gpu_milli).sum(axis=1) >= r.gpu_count
        cand = np.flatnonzero(ok)
        if cand.size == 0:
            return False
        gleft = np.where(gpu[cand] >= 0, gpu[cand], 0).sum(axis=1) - r.gpu_total
        keys = np.lexsort((cand, cpu[cand] - r.cpu, gleft, pref[cand]))
        seen: set[tuple] = set()
        gi = group_of[i]
        left[gi] -= 1
        for j in cand[keys].tolist():
            sig = (int(cls[j]), int(cpu[j]), int(mem[j]), tuple(sorted(gpu[j].tolist())))
            if sig in seen:
                continue
            seen.add(sig)
            for devs in _device_options(r, gpu[j]):
                cpu[j] -= r.cpu
                mem[j] -= r.mem
                if devs:
                    gpu[j, devs] -= r.gpu_milli
                out[i] = (int(R[j]), devs)
                if dfs(k + 1):
                    return True
                cpu[j] += r.cpu
                mem[j] += r.mem
                if devs:
                    gpu[j, devs] += r.gpu_milli
        left[gi] += 1
        out[i] = None
        return False

    try:
        found = dfs(0)
    except _OutOfBudget:
        return None
    return [o for o in out if o is not None] if found else None


def _domain_room(state: CellState, groups: list[_Group], key: np.ndarray, n_domains: int,
                 rows_mask: np.ndarray) -> np.ndarray:
    """Per domain (``key``: each row's domain index, -1 none), whether its rows could host
    every group's members (:func:`copies`, summed): a necessary condition, exact for a
    gang of one shape."""
    ok = np.ones(n_domains, dtype=bool)
    for g in groups:
        c = copies(g.req, state.cpu_free, state.mem_free, state.gpu_free)
        use = rows_mask & g.mask & (key >= 0)
        tot = np.bincount(key[use], weights=np.minimum(c[use], len(g.members)).astype(np.float64),
                          minlength=n_domains)
        ok &= tot >= len(g.members)
    return ok


def _masks(state: CellState, reqs: Sequence[Request], task_ids: Optional[Sequence[str]],
           filters: Optional[Sequence[Plugin]]) -> list[np.ndarray]:
    plugins = list(filters) if filters is not None else [REGISTRY.create(n) for n in FILTERS]
    out = []
    for i, r in enumerate(reqs):
        ctx = CycleContext(state, r, task_ids[i] if task_ids else "", 0, {})
        m = np.ones(state.n_nodes, dtype=bool)
        for p in plugins:
            res = p.filter(ctx)
            if res is not None:
                m &= res[0]
        out.append(m)
    return out


def _nearest(dist: Optional[np.ndarray], rows_mask: np.ndarray) -> float:
    if dist is None or not rows_mask.any():
        return 0.0
    return float(np.round(dist[rows_mask].min(), 6))


def _plan(state: CellState, reqs: Sequence[Request], masks: list[np.ndarray], budget: _Budget,
          dist: Optional[np.ndarray] = None) -> Optional[GangPlan]:
    topo = state.topology
    union = np.zeros(state.n_nodes, dtype=bool)
    for m in masks:
        union |= m
    if not union.any():
        return None
    groups = _groups(reqs, masks)
    gpu_gang = any(r.kind != "cpu" for r in reqs)
    free = (state.gpu_free_total if gpu_gang else state.cpu_free).astype(np.float64)
    # 1-2: one rack, else one zone; among those with room for the gang, the nearest to its
    # place (when it names one), then the tightest
    for level in GANG_LEVELS:
        names, idx = topo.domain_index(level)
        if not names:
            continue
        inside = union & (idx >= 0)
        if not inside.any():
            continue
        tot = np.bincount(idx[inside], weights=free[inside], minlength=len(names))
        room = _domain_room(state, groups, idx, len(names), union)
        for d in sorted((d for d in set(idx[inside].tolist()) if room[d]),
                        key=lambda d: (_nearest(dist, union & (idx == d)), tot[d], names[d])):
            sol = _pack(state, reqs, masks, np.flatnonzero(union & (idx == d)), None, budget)
            if sol is not None:
                return GangPlan(sol, level, [names[d]])
    # 3: across the fewest zones (racks when there are no zones): the nearest, then the
    # roomiest first
    for level in ("zone", "rack"):
        names, idx = topo.domain_index(level)
        if not names or not (union & (idx >= 0)).any():
            continue
        key = np.where(idx >= 0, idx, len(names))            # nodes outside every domain: one more group
        tot = np.bincount(key[union], weights=free[union], minlength=len(names) + 1)
        order = sorted(set(key[union].tolist()), key=lambda d: (_nearest(dist, union & (key == d)), -tot[d], d))
        rank = np.full(state.n_nodes, len(order), dtype=np.int64)
        for pos, d in enumerate(order):
            rank[key == d] = pos
        for k in range(2, len(order) + 1):
            rows_mask = union & (rank < k)
            if not _domain_room(state, groups, np.where(rows_mask, 0, -1), 1, rows_mask)[0]:
                continue
            sol = _pack(state, reqs, masks, np.flatnonzero(rows_mask), rank, budget)
            if sol is not None:
                used = sorted({int(rank[r]) for r, _ in sol})
                doms = [names[order[u]] if order[u] < len(names) else "(none)" for u in used]
                return GangPlan(sol, level + "s", doms)
        return None
    # 4: no racks or zones at all: anywhere
    sol = _pack(state, reqs, masks, np.flatnonzero(union), None, budget)
    return GangPlan(sol, "cell") if sol is not None else None


POLICY = "policy"
"""``plan_gang(..., guide=POLICY)``: the cell's policy strategy places the members."""


def _place_label(state: CellState, task_ids: Optional[Sequence[str]]) -> Optional[tuple[str, str]]:
    if not task_ids:
        return None
    rec = state.tasks.get(task_ids[0])
    if rec is None:
        return None
    for k in NEAR_LABELS:
        v = rec.task.labels.get(k)
        if v:
            return k, v
    return None


def substate(state: CellState, rows: np.ndarray, task_ids: Sequence[str] = ()) -> CellState:
    """A scratch cell of ``rows`` only (their resources, status, health, condition, change
    stamps), holding the tasks placed on them and ``task_ids``: what a strategy needs to
    place tasks on those rows without touching ``state``. Its topology is empty."""
    rows = np.asarray(rows, dtype=np.int64)
    n = state.n_nodes
    sub = CellState(state.cell, max_gpus=state.max_gpus)
    for k, v in vars(state).items():                     # every row-aligned array
        if isinstance(v, np.ndarray) and v.ndim >= 1 and v.shape[0] == n:
            setattr(sub, k, v[rows].copy())
    sub.node_ids = [state.node_ids[r] for r in rows.tolist()]
    sub.node_index = {nid: i for i, nid in enumerate(sub.node_ids)}
    sub.nodes = {nid: state.nodes[nid] for nid in sub.node_ids}
    for k in ("node_status", "health", "condition"):
        src = getattr(state, k)
        setattr(sub, k, [src[r] for r in rows.tolist()])
    sub.models = list(state.models)
    sub.accel_keys = list(state.accel_keys)
    sub.clock, sub.now, sub.seq, sub.policy = state.clock, state.now, state.seq, state.policy
    sub.class_counts = dict(state.class_counts)
    keep = set(sub.node_ids)
    sub.tasks = {t.task.task_id: t for t in sorted(state.holding_records(), key=lambda t: t.seq) if t.node in keep}
    for tid in task_ids:
        if tid in state.tasks:
            sub.tasks[tid] = state.tasks[tid]
    return sub


def _guided(state: CellState, reqs: Sequence[Request], task_ids: Optional[Sequence[str]], rows: np.ndarray,
            strategy: Any, seed: int) -> Optional[list[tuple[int, list[int]]]]:
    """The members placed one by one by ``strategy`` on a scratch copy of ``rows``; None
    when one of them finds no room there."""
    from .. import rng

    ids = list(task_ids) if task_ids else [f"gang-member-{i}" for i in range(len(reqs))]
    sub = substate(state, rows, ids)
    out = []
    for i, (req, tid) in enumerate(zip(reqs, ids)):
        ctx = CycleContext(sub, req, tid, rng.mix(seed, i), strategy.config)
        res = run_cycle(strategy.profile, ctx)
        if res.plan is None:
            return None
        sub.allocate(tid, res.plan.node_id, res.plan.devices, req.gpu_milli if res.plan.devices else 0,
                     req.cpu, req.mem, sub.accel_choice(res.plan.row, req.accels) or ())
        out.append((int(rows[res.plan.row]), [int(d) for d in res.plan.devices]))
    return out


def _domain_rows(state: CellState, plan: GangPlan) -> np.ndarray:
    if plan.level == "cell":
        return np.arange(state.n_nodes)
    level = plan.level.rstrip("s") if plan.level not in GANG_LEVELS else plan.level
    names, idx = state.topology.domain_index(level)
    pos = [names.index(d) for d in plan.domains if d in names]
    return np.flatnonzero(np.isin(idx, pos) | ((idx < 0) & ("(none)" in plan.domains)))


def plan_gang_detail(state: CellState, requests: Sequence[Request], task_ids: Optional[Sequence[str]] = None,
                     filters: Optional[Sequence[Plugin]] = None, budget: int = DEFAULT_BUDGET,
                     guide: Any = POLICY, seed: Optional[int] = None) -> Optional[GangPlan]:
    """Plan a gang all or nothing (see :func:`plan_gang`), with where it went and how.

    Nodes in a NORMAL condition are tried first; nodes in a bad one only when the gang fits
    nowhere else (then ``normal_only`` is False). ``guide``: who places the members inside
    the chosen domain: :data:`POLICY` (the cell's policy strategy), a strategy (anything with
    ``profile``, ``config``, ``seed`` and ``name``), or None (the packing search's own
    best-fit choice). ``seed``: of the strategy's tie-break draws (default its seed)."""
    reqs = list(requests)
    if not reqs:
        return GangPlan([], "cell")
    masks = _masks(state, reqs, task_ids, filters)
    place = _place_label(state, task_ids)
    dist = None
    if place is not None:
        try:
            dist = state.topology.distances(place[1])
        except UnknownVertex:
            place = None
    ok = state.condition_ok
    plan = None
    steps = _Budget(budget)
    if not ok.all():
        plan = _plan(state, reqs, [m & ok for m in masks], steps, dist)
    if plan is None:
        plan = _plan(state, reqs, masks, steps, dist)
        if plan is not None and not ok.all():
            plan.normal_only = bool(all(ok[r] for r, _ in plan.placements))
    if plan is None:
        return None
    if place is not None:
        plan.near = f"{place[0]}={place[1]}"
    if guide is None:
        return plan
    try:
        if guide == POLICY:
            from ..strategies import get_strategy
            pol = state.policy
            guide = get_strategy(pol.strategy, dict(pol.config), pol.digest)
        placed = _guided(state, reqs, task_ids, _domain_rows(state, plan), guide,
                         guide.seed if seed is None else seed)
    except (StrategyError, KeyError, ValueError):
        placed = None                    # a strategy that cannot run here: the packing stands
    if placed is not None:
        plan.placements = placed
        plan.placed_by = guide.name
        if plan.level not in GANG_LEVELS and plan.level != "cell":     # the domains it really uses
            level = plan.level.rstrip("s")
            plan.domains = sorted({state.topology.domain_of(state.node_ids[r], level) or "(none)"
                                   for r, _ in placed})
        if not ok.all():
            plan.normal_only = bool(all(ok[r] for r, _ in placed))
    return plan


def plan_gang(state: CellState, requests: Sequence[Request], task_ids: Optional[Sequence[str]] = None,
              filters: Optional[Sequence[Plugin]] = None, budget: int = DEFAULT_BUDGET, guide: Any = POLICY,
              seed: Optional[int] = None) -> Optional[list[tuple[int, list[int]]]]:
    """Where to put a gang: ``[(row, devices), ...]`` in the order of ``requests``, or None
    when it cannot start now (all or nothing).

    *Where*: inside one rack when one holds it, else inside one zone, else across the
    fewest zones (the roomiest first; racks when the cell has no zones), else anywhere when
    the cell names no racks or zones. Among the racks (zones) that hold it: the nearest to
    the place its first member's ``data-site`` / ``user-site`` label names, then the fullest
    (to keep roomy ones for bigger gangs). Whether a domain holds it is decided by an exact
    packing search over nodes and GPU devices (biggest member first, identical nodes tried
    once, cut where the nodes left cannot host the members left of some shape), where every
    member passes ``filters`` (default: the standard ones: ready, GPU model and count, CPU,
    memory, GPU fit; ``task_ids`` give them the tasks' labels) and CPU, memory and devices
    are checked as members share nodes. A gang of one shape never backtracks; a mixed one
    may, and past ``budget`` search steps (all attempts together) the plan gives up.

    *Which nodes inside*: ``guide`` (default the cell's policy strategy) places the members
    one by one within the domain, as it would place any task; if its greedy choices leave a
    member without room, the packing's own placement is used."""
    plan = plan_gang_detail(state, requests, task_ids, filters, budget, guide, seed)
    return None if plan is None else plan.placements
