"""The gang planner (plugins/topology.py plan_gang): all N members inside one rack, else one
zone, else across the fewest zones, all or nothing; table-driven cases and a brute-force
check on tiny clusters that it finds a single-domain plan whenever one exists."""
import itertools
import random

import pytest

from suanli.processors import CellState, get_strategy
from suanli.processors.model import Node, Request, Task
from suanli.processors.plugins.topology import POLICY, plan_gang, plan_gang_detail, substate
from suanli.processors.state import TaskRecord


def cell(spec):
    """``spec``: [(node id, zone, rack, gpus, cpu, model)]; every node 64 GiB."""
    s = CellState("g")
    for nid, zone, rack, gpus, cpu, model in spec:
        node = Node(node_id=nid, cpu_milli=cpu, memory_mib=65536, gpu_count=gpus, gpu_model=model if gpus else None,
                    site="s", region="r", zone=zone, labels={"rack": rack} if rack else {})
        s.add_node(nid, cpu, 65536, gpus, model, node)
    return s


def whole(n=1, cpu=1000, models=()):
    return Request(cpu, 1024, n, 1000, tuple(models))


def shared(milli, cpu=1000):
    return Request(cpu, 1024, 1, milli)


def cpu_only(cpu):
    return Request(cpu, 1024, 0, 0)


def apply(s, reqs, plan):
    """Allocate a plan on a copy of the state (``allocate`` refuses what does not fit)."""
    assert len(plan) == len(reqs)
    c = s.copy()
    for i, (r, (row, devs)) in enumerate(zip(reqs, plan)):
        assert len(devs) == (0 if r.kind == "cpu" else r.gpu_count)
        assert c.ready[row]
        c.allocate(f"m{i}", c.node_ids[row], devs, r.gpu_milli, r.cpu, r.mem)
    assert (c.cpu_free >= 0).all() and (c.mem_free >= 0).all()
    return c


LAYOUT = [  # z1: rack a (2 x 2 GPU), rack b (1 x 8 GPU); z2: rack c (2 x 4 GPU); z3: one 8-GPU V100 node
    ("a1", "z1", "a", 2, 32000, "T4"), ("a2", "z1", "a", 2, 32000, "T4"),
    ("b1", "z1", "b", 8, 64000, "T4"),
    ("c1", "z2", "c", 4, 32000, "T4"), ("c2", "z2", "c", 4, 32000, "T4"),
    ("v1", "z3", "v", 8, 64000, "V100"),
]

CASES = [
    # (name, requests, level, domains)
    ("tightest rack that holds it", [whole()] * 4, "rack", ["rack:z1/a"]),
    ("one rack before one zone", [whole()] * 8, "rack", ["rack:z1/b"]),
    ("a zone when no rack holds it", [whole()] * 12, "zone", ["zone:z1"]),
    ("fewest zones when no zone holds it", [whole()] * 20, "zones", None),
    ("model constraint", [whole(models=("V100",))] * 4, "rack", ["rack:z3/v"]),
    ("multi-GPU members (equal racks: by name)", [whole(4)] * 2, "rack", ["rack:z1/b"]),
    ("shared members one per GPU", [shared(600)] * 4, "rack", ["rack:z1/a"]),
    ("cpu-only members", [cpu_only(30000)] * 2, "rack", ["rack:z1/a"]),
    ("mixed members", [whole(2), shared(300), shared(800), cpu_only(8000)], "rack", ["rack:z1/a"]),
]


@pytest.mark.parametrize("guide", [POLICY, None], ids=["strategy", "packing"])
@pytest.mark.parametrize("name,reqs,level,domains", CASES, ids=[c[0] for c in CASES])
def test_plans(name, reqs, level, domains, guide):
    s = cell(LAYOUT)
    plan = plan_gang_detail(s, reqs, guide=guide)
    assert plan is not None and plan.level == level
    assert plan.placed_by == ("default" if guide else "packing")
    if domains is not None:
        assert plan.domains == domains
    apply(s, reqs, plan.placements)
    if level == "rack":
        assert len({s.topology.domain_of(s.node_ids[r], "rack") for r, _ in plan.placements}) == 1
    assert plan_gang(s, reqs, guide=guide) == plan.placements
    assert "gang of" in plan.describe(s)


def test_the_strategy_places_inside_the_domain_and_the_packing_backs_it_up():
    # one rack: A (8 cores, 1 GPU) and B (8 cores, no GPU); a CPU-only member and a GPU member
    s = cell([("A", "z", "r", 1, 8000, "T4"), ("B", "z", "r", 0, 8000, "T4")])
    reqs = [cpu_only(7000), whole(1, cpu=7000)]
    plan = plan_gang_detail(s, reqs)                      # default: CPU-only work onto the GPU-less node
    assert plan.placed_by == "default" and [s.node_ids[r] for r, _ in plan.placements] == ["B", "A"]
    plan = plan_gang_detail(s, reqs, guide=get_strategy("first-fit"))
    # first fit puts the CPU-only member on A, and then the GPU member finds no room: the packing stands
    assert plan.placed_by == "packing" and [s.node_ids[r] for r, _ in plan.placements] == ["B", "A"]
    assert "(by packing)" in plan.describe(s)


def test_a_place_label_orders_the_domains():
    s = cell(LAYOUT)
    for i in range(4):
        s.tasks[f"m{i}"] = TaskRecord(Task(task_id=f"m{i}", tenant="t", request=whole(),
                                           labels={"data-site": "z2"}), i + 1)
    plan = plan_gang_detail(s, [whole()] * 4, [f"m{i}" for i in range(4)])
    assert plan.domains == ["rack:z2/c"] and plan.near == "data-site=z2"      # not the tighter rack a
    assert "nearest to data-site=z2" in plan.describe(s)


def test_substate_is_a_scratch_copy():
    s = cell(LAYOUT)
    s.allocate("x", "c1", [0], 1000, 1000, 1024)
    s.tasks["x"] = TaskRecord(Task(task_id="x", tenant="t", request=whole()), 1, "PLACED", "c1", (0,))
    sub = substate(s, [3, 4])
    assert sub.node_ids == ["c1", "c2"] and sub.gpu_free[0].tolist()[:4] == [0, 1000, 1000, 1000]
    assert list(sub.tasks) == ["x"] and sub.n_nodes == 2
    sub.allocate("y", "c2", [0], 1000, 1000, 1024)
    assert s.gpu_free[4, 0] == 1000 and sub.gpu_free[1, 0] == 0   # the original is untouched


def test_fewest_zones_takes_the_roomiest_first():
    s = cell(LAYOUT)
    plan = plan_gang_detail(s, [whole()] * 20)
    # z1 has 12 T4 GPUs, z2 8, z3 8 V100: 20 fit in z1 + one of the others
    assert plan.level == "zones" and len(plan.domains) == 2 and plan.domains[0] == "zone:z1"


def test_all_or_nothing():
    s = cell(LAYOUT)
    before = s.to_snapshot()
    assert plan_gang(s, [whole()] * 29) is None          # 28 GPUs in the cell
    assert plan_gang(s, [whole(models=("V100",))] * 9) is None
    assert plan_gang(s, [cpu_only(70000)]) is None
    assert s.to_snapshot() == before                     # pure
    assert plan_gang(s, []) == []


def test_respects_readiness_and_current_load():
    s = cell(LAYOUT)
    s.set_node_status("a2", "CORDONED")
    plan = plan_gang_detail(s, [whole()] * 4)
    assert plan.domains != ["rack:z1/a"]                 # rack a has only 2 usable GPUs now
    s.set_node_status("a2", "READY")
    s.allocate("x", "c1", [0, 1, 2], 1000, 1000, 1024)
    plan = plan_gang_detail(s, [whole()] * 5)
    assert plan.level == "rack" and plan.domains == ["rack:z2/c"]   # 1 + 4 free: the tightest that holds 5
    assert all(s.node_ids[r] != "c1" or devs == [3] for r, devs in plan.placements)


def test_prefers_normal_nodes_and_falls_back_to_bad_ones():
    s = cell(LAYOUT)
    s.set_condition("a1", "HOT")
    plan = plan_gang_detail(s, [whole()] * 4)
    assert plan.domains != ["rack:z1/a"] and plan.normal_only
    for nid in s.node_ids:
        if nid != "a1":
            s.set_condition(nid, "HOT" if nid != "a2" else "NORMAL")
    plan = plan_gang_detail(s, [whole()] * 4)
    assert plan is not None and plan.domains == ["rack:z1/a"] and not plan.normal_only


def test_no_racks_or_zones_plans_across_the_cell():
    s = CellState("flat")
    for i in range(3):
        s.add_node(f"n{i}", 8000, 8000, 2, "T4")
    plan = plan_gang_detail(s, [whole()] * 5)
    assert plan.level == "cell" and len(plan.placements) == 5


def test_racks_without_zones():
    s = cell([("a1", "", "a", 2, 8000, "T4"), ("b1", "", "b", 2, 8000, "T4"), ("b2", "", "b", 2, 8000, "T4")])
    assert plan_gang_detail(s, [whole()] * 3).domains == ["rack:r/b"]
    plan = plan_gang_detail(s, [whole()] * 5)
    assert plan.level == "racks" and len(plan.domains) == 2


# ----------------------------------------------------------------------------- brute force
def _options(s, row, r, gpu):
    """Every way to put ``r`` on ``row`` given free GPU milli ``gpu`` (all device choices)."""
    k = int(s.gpu_count[row])
    if r.kind == "cpu":
        return [()]
    fit = [d for d in range(k) if gpu[d] >= r.gpu_milli]
    if r.kind == "shared":
        return [(d,) for d in fit]
    return list(itertools.combinations(fit, r.gpu_count))


def _brute(s, reqs):
    """The set of rows-sets of every complete assignment (ready nodes, any device choice)."""
    cpu, mem = s.cpu_free.copy(), s.mem_free.copy()
    gpu = s.gpu_free.copy()
    found = []

    def go(i, used):
        if i == len(reqs):
            found.append(frozenset(used))
            return
        r = reqs[i]
        for row in range(s.n_nodes):
            if not s.ready[row] or cpu[row] < r.cpu or mem[row] < r.mem:
                continue
            if r.models and (s.model_idx[row] < 0 or s.models[s.model_idx[row]] not in r.models):
                continue
            for devs in _options(s, row, r, gpu[row]):
                cpu[row] -= r.cpu
                mem[row] -= r.mem
                for d in devs:
                    gpu[row, d] -= r.gpu_milli
                go(i + 1, used + [row])
                cpu[row] += r.cpu
                mem[row] += r.mem
                for d in devs:
                    gpu[row, d] += r.gpu_milli
    go(0, [])
    return found


def _random_case(rnd):
    n = rnd.randint(2, 5)
    spec = []
    for i in range(n):
        spec.append((f"n{i}", f"z{rnd.randint(0, 1)}", f"r{rnd.randint(0, 1)}", rnd.choice([0, 1, 2, 4]),
                     rnd.choice([4000, 8000, 16000]), rnd.choice(["T4", "V100"])))
    s = cell(spec)
    for row in range(n):                       # some load already
        k = int(s.gpu_count[row])
        for d in range(k):
            if rnd.random() < 0.4:
                s.gpu_free[row, d] = rnd.choice([0, 200, 500, 800])
        s._refresh_gpu_row(row)
        s.cpu_free[row] = max(0, s.cpu_free[row] - rnd.choice([0, 2000, 4000]))
        if rnd.random() < 0.15:
            s.set_node_status(s.node_ids[row], "CORDONED")
    reqs = []
    for _ in range(rnd.randint(2, 4)):
        kind = rnd.random()
        if kind < 0.25:
            reqs.append(cpu_only(rnd.choice([1000, 3000, 6000])))
        elif kind < 0.6:
            reqs.append(shared(rnd.choice([200, 300, 500, 700]), cpu=rnd.choice([500, 2000])))
        else:
            reqs.append(whole(rnd.choice([1, 1, 2]), cpu=rnd.choice([500, 2000]),
                              models=rnd.choice([(), (), ("V100",)])))
    return s, reqs


@pytest.mark.parametrize("guide", [POLICY, None], ids=["strategy", "packing"])
@pytest.mark.parametrize("seed", range(300))
def test_brute_force_single_domain_whenever_one_exists(seed, guide):
    rnd = random.Random(seed)
    s, reqs = _random_case(rnd)
    sols = _brute(s, reqs)
    topo = s.topology
    rack = {r: topo.domain_of(nid, "rack") for r, nid in enumerate(s.node_ids)}
    zone = {r: topo.domain_of(nid, "zone") for r, nid in enumerate(s.node_ids)}
    one_rack = any(len({rack[r] for r in rows}) == 1 for rows in sols)
    one_zone = any(len({zone[r] for r in rows}) == 1 for rows in sols)
    plan = plan_gang_detail(s, reqs, guide=guide)
    if not sols:
        assert plan is None
        return
    assert plan is not None
    apply(s, reqs, plan.placements)
    rows = {r for r, _ in plan.placements}
    if one_rack:
        assert plan.level == "rack" and len({rack[r] for r in rows}) == 1
    elif one_zone:
        assert plan.level == "zone" and len({zone[r] for r in rows}) == 1
    else:
        assert plan.level == "zones" and len({zone[r] for r in rows}) == 2


# ----------------------------------------------------------------------------- copies and the search's cuts
def _max_copies(r, cpu, mem, gpu):
    """Exhaustive: the most copies of ``r`` one node holds (any devices)."""
    best = 0

    def go(k, cpu, mem, gpu):
        nonlocal best
        best = max(best, k)
        if cpu < r.cpu or mem < r.mem:
            return
        if r.kind == "cpu":
            go(k + 1, cpu - r.cpu, mem - r.mem, gpu)
            return
        fit = [d for d in range(len(gpu)) if gpu[d] >= r.gpu_milli]
        for devs in itertools.combinations(fit, 1 if r.kind == "shared" else r.gpu_count):
            g = list(gpu)
            for d in devs:
                g[d] -= r.gpu_milli
            go(k + 1, cpu - r.cpu, mem - r.mem, tuple(g))
            return          # devices are symmetric enough for a bound check: the first choice per level
    go(0, cpu, mem, gpu)
    return best


@pytest.mark.parametrize("seed", range(60))
def test_copies_matches_a_search_on_one_node(seed):
    import numpy as np

    from suanli.processors.plugins.topology import copies

    rnd = random.Random(seed)
    r = rnd.choice([cpu_only(3000), shared(300), shared(700), whole(1), whole(2), Request(1000, 1024, 2, 500)])
    gpu = tuple(rnd.choice([0, 200, 500, 700, 1000]) for _ in range(rnd.choice([0, 2, 4])))
    cpu, mem = rnd.choice([4000, 9000, 32000]), rnd.choice([2048, 8192])
    got = copies(r, np.array([cpu]), np.array([mem]), np.array([list(gpu) + [-1] * (4 - len(gpu))]))[0]
    if r.kind == "whole" and r.gpu_milli < 1000:
        assert got >= _max_copies(r, cpu, mem, gpu)          # the formula is exact; the search above is greedy
    else:
        assert got == _max_copies(r, cpu, mem, gpu)


def test_an_identical_gang_never_backtracks():
    # 96 racks of 16 two-GPU nodes (12 zones of 8 racks), every rack one GPU short of a
    # 32-member gang: the room check rejects every rack without searching, and a few search
    # steps per member place the gang in a zone, or across the fewest zones
    spec = [(f"n{i}", f"z{i // 128}", f"r{i // 16}", 2, 64000, "T4") for i in range(1536)]
    s = cell(spec)
    for i in range(0, 1536, 16):
        s.allocate(f"x{i}", s.node_ids[i], [0], 1000, 1000, 1024)
    plan = plan_gang_detail(s, [whole()] * 32, budget=40, guide=None)
    assert plan is not None and plan.level == "zone"
    plan = plan_gang_detail(s, [whole()] * 300, budget=400, guide=None)     # a zone has 8 x 31 = 248 GPUs
    assert plan is not None and plan.level == "zones" and len(plan.domains) == 2
    assert plan_gang_detail(s, [whole()] * 3000, budget=10, guide=None) is None   # 96 x 31 = 2,976 GPUs


def test_gang_bench_on_a_small_cluster(tmp_path):
    """bench/gangs.py end to end on 48 nodes and 300 pods: every gang arrives before the
    metric's moment, the core and the planner driven directly agree."""
    from suanli.bench.gangs import gangs_for, run_arm, sequence
    from suanli.replay.fgd_protocol import load_inputs

    nodes = tmp_path / "nodes.csv"
    nodes.write_text("sn,cpu_milli,memory_mib,gpu,model\n"
                     + "".join(f"n{i:03d},64000,262144,{(0, 2, 8)[i % 3]},{'V100M16' if i % 3 else ''}\n"
                               for i in range(48)))
    rnd = random.Random(5)
    pods = tmp_path / "pods.csv"
    rows = []
    for i in range(300):
        g, milli = rnd.choice([(0, 0), (1, 500), (1, 1000), (2, 1000)])
        rows.append(f"p{i},{rnd.choice([2000, 8000])},{4096},{g},{milli},,Running,LS,{i},{i + 100},{i}\n")
    pods.write_text("name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,pod_phase,qos,creation_time,"
                    "deletion_time,scheduled_time\n" + "".join(rows))
    _, plist, _, capacity = load_inputs(str(nodes), str(pods))
    gangs = gangs_for(plist, 42, n_gangs=5)
    assert all(4 <= len(g) <= 16 and {t["labels"]["gang-size"] for t in g} == {str(len(g))} for g in gangs)
    seq = sequence(plist, capacity, 42, gangs)
    arrived, seen = 0, 0
    for item in seq:
        if isinstance(item, list):
            seen += 1
            assert arrived + sum(t["resources"]["gpu_count"] * t["resources"]["gpu_milli"] for t in item) < capacity
        else:
            arrived += item["resources"]["gpu_count"] * item["resources"]["gpu_milli"]
    assert seen == 5
    out = {arm: run_arm(arm, 42, str(nodes), str(pods), n_gangs=5) for arm in ("blind", "core", "planner")}
    assert out["core"]["gangs_one_zone"] == out["planner"]["gangs_one_zone"] == out["core"]["gangs_placed"]
    assert out["core"]["unallocated_gpu_pct"] == pytest.approx(out["planner"]["unallocated_gpu_pct"])
    assert out["blind"]["gang_tasks"] == out["core"]["gang_tasks"]
