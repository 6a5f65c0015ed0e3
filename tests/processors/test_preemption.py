"""Victim choice against a brute-force search on small random cells (issue #14)."""
from itertools import chain, combinations

import numpy as np

from suanli.processors import preemption
from suanli.processors.model import Request, Task
from suanli.processors.state import CellState, TaskRecord

TIERS = ("GOLD", "SILVER", "BRONZE")
IMPORTANCE = {"BRONZE": 0, "SILVER": 1, "GOLD": 2}


def _cell(rng: np.random.Generator, standbys: bool = False) -> CellState:
    """Small random cells; with ``standbys``, about half the gold tasks are standby copies."""
    s = CellState("t")
    s.now = 100_000
    for n in range(int(rng.integers(1, 4))):
        s.add_node(f"n{n}", 8000, 32768, 4, "T4")
    k = 0
    for row in range(s.n_nodes):
        for _ in range(int(rng.integers(1, 6))):
            tier = TIERS[int(rng.integers(0, 3))]
            shape = int(rng.integers(0, 3))
            req = (Request(int(rng.integers(500, 3000)), 1024, 0, 0) if shape == 0 else
                   Request(1000, 1024, 1, int(rng.choice([250, 500, 700]))) if shape == 1 else
                   Request(1000, 1024, int(rng.integers(1, 3)), 1000))
            devices = _fit(s, row, req)
            if devices is None:
                continue
            tid = f"t{k}" + ("~standby" if standbys and tier == "GOLD" and rng.integers(0, 2) else "")
            k += 1
            s.tasks[tid] = TaskRecord(Task(task_id=tid, tenant="x", request=req, qos_tier=tier,
                                           priority=int(rng.integers(0, 3))), k, status="RUNNING",
                                      node=s.node_ids[row], devices=tuple(devices),
                                      placed_at=int(rng.integers(0, 100_000)))
            s.allocate(tid, s.node_ids[row], devices, req.gpu_milli, req.cpu, req.mem)
    return s


def _fit(s: CellState, row: int, req: Request):
    if s.cpu_free[row] < req.cpu or s.mem_free[row] < req.mem:
        return None
    g = s.gpu_free[row]
    if req.kind == "cpu":
        return []
    fit = [d for d in range(int(s.gpu_count[row])) if g[d] >= req.gpu_milli]
    if req.kind == "shared":
        return [min(fit, key=lambda d: (g[d], d))] if fit else None
    return fit[:req.gpu_count] if len(fit) >= req.gpu_count else None


def _fits_after(s: CellState, row: int, req: Request, victims) -> bool:
    """Independent of the module: free the victims on a copy, ask the plain fit."""
    c = s.copy()
    for tid in victims:
        t = c.tasks[tid]
        c.free(t.node, t.devices, t.task.request.gpu_milli if t.devices else 0, t.task.request.cpu,
               t.task.request.mem)
    return _fit(c, row, req) is not None


def _level(tid: str, t) -> tuple:
    return (0.5 if tid.endswith("~standby") else IMPORTANCE[t.task.qos_tier], t.task.priority)


def _brute_force(s: CellState, req: Request, tier: str, standbys: bool = False):
    best = None
    for row in range(s.n_nodes):
        cands = [tid for tid, t in s.tasks.items() if t.node == s.node_ids[row] and
                 ((t.task.qos_tier == "BRONZE" and IMPORTANCE[tier] > IMPORTANCE["BRONZE"])
                  or (standbys and tid.endswith("~standby")))]
        for subset in chain.from_iterable(combinations(cands, k) for k in range(1, len(cands) + 1)):
            if not _fits_after(s, row, req, subset):
                continue
            ts = [s.tasks[v] for v in subset]
            key = (max(_level(v, t) for v, t in zip(subset, ts)), len(ts),
                   sum(s.now - t.placed_at for t in ts))
            if best is None or key < best:
                best = key
    return best


def _request(shape: int) -> Request:
    return (Request(6000, 1024, 0, 0) if shape == 0 else Request(1000, 1024, 1, 800) if shape == 1
            else Request(2000, 2048, 3, 1000))


def test_victims_are_minimal_as_a_brute_force_search_finds():
    """300 random small cells where the task does not fit: the chosen victims cost exactly
    what the cheapest subset of all (found by brute force) costs, or there is none."""
    needed = found = 0
    for seed in range(300):
        rng = np.random.default_rng(seed)
        s = _cell(rng)
        tier = ("GOLD", "SILVER")[seed % 2]
        req = _request(seed % 3)
        if any(_fit(s, r, req) is not None for r in range(s.n_nodes)):
            continue                                  # fits without preemption: nothing to compare
        needed += 1
        plan = preemption.plan(s, req, tier, np.ones(s.n_nodes, dtype=bool), ("BRONZE",), 12)
        expected = _brute_force(s, req, tier)
        if expected is None:
            assert plan is None, seed
            continue
        found += 1
        assert plan is not None and plan.cost == expected, (seed, plan, expected)
        assert all(s.tasks[v].task.qos_tier == "BRONZE" for v in plan.victim_ids)
        assert _fits_after(s, plan.row, req, plan.victim_ids)
    assert needed >= 100 and found >= 40, (needed, found)      # the draws really exercise it


def test_with_standby_copies_evictable_victims_are_still_minimal_and_bronze_goes_first():
    """A gold task out of service may evict gold standby copies, after bronze (importance 0.5):
    the same brute-force comparison, over bronze and copies; never silver or a plain gold task."""
    needed = found = copies = 0
    for seed in range(300):
        rng = np.random.default_rng(10_000 + seed)
        s = _cell(rng, standbys=True)
        req = _request(seed % 3)
        if any(_fit(s, r, req) is not None for r in range(s.n_nodes)):
            continue
        needed += 1
        plan = preemption.plan(s, req, "GOLD", np.ones(s.n_nodes, dtype=bool), ("BRONZE",), 12, evict_standbys=True)
        expected = _brute_force(s, req, "GOLD", standbys=True)
        if expected is None:
            assert plan is None, seed
            continue
        found += 1
        assert plan is not None and plan.cost == expected, (seed, plan, expected)
        assert all(s.tasks[v].task.qos_tier == "BRONZE" or v.endswith("~standby") for v in plan.victim_ids)
        copies += any(v.endswith("~standby") for v in plan.victim_ids)
        assert _fits_after(s, plan.row, req, plan.victim_ids)
    assert needed >= 100 and found >= 40 and copies >= 10, (needed, found, copies)


def test_greedy_beyond_the_search_limit_still_makes_room():
    s = CellState("t")
    s.add_node("n0", 16000, 65536, 0, None)
    for i in range(16):
        s.tasks[f"b{i}"] = TaskRecord(Task(task_id=f"b{i}", tenant="x", request=Request(1000, 1024, 0, 0),
                                           qos_tier="BRONZE", priority=i % 4), i + 1, status="RUNNING", node="n0")
        s.allocate(f"b{i}", "n0", [], 0, 1000, 1024)
    plan = preemption.plan(s, Request(3000, 1024, 0, 0), "GOLD", np.ones(1, dtype=bool), ("BRONZE",), 4)
    assert plan is not None and len(plan.victims) == 3
    assert all(s.tasks[v].task.priority == 0 for v in plan.victim_ids)
