"""The gold-availability what-if (replay/qos_whatif.py): failure injection, tiers, prices, the
availability accounting on hand-made intervals, and a tiny trace through the real core whose
answer is worked out by hand."""
from __future__ import annotations

import pytest

from suanli.errors import ReplayError
from suanli.projections.cost import Interval, NodePrice
from suanli.replay import qos_whatif as q
from suanli.replay.timed import Cluster, TimedWorkload

S = 1000   # ms


# ------------------------------------------------------------------ failures, tiers, prices
def test_failures_are_seeded_spread_over_the_window_and_detected_late():
    ids = [f"n{i}" for i in range(200)]
    a = q.plan_failures(ids, 0.05, 10 * S, 110 * S, seed=3, down_after_ms=15 * S, repair_ms=600 * S)
    assert a == q.plan_failures(ids, 0.05, 10 * S, 110 * S, seed=3, down_after_ms=15 * S, repair_ms=600 * S)
    assert a != q.plan_failures(ids, 0.05, 10 * S, 110 * S, seed=4, down_after_ms=15 * S, repair_ms=600 * S)
    assert len(a) == 10 and len({f.node_id for f in a}) == 10
    slot = 100 * S / 10
    for i, f in enumerate(a):     # one failure in each tenth of the window, in time order
        assert 10 * S + i * slot <= f.fail_at < 10 * S + (i + 1) * slot
        assert f.detect_at == f.fail_at + 15 * S and f.repair_at == f.fail_at + 600 * S
    assert len(q.plan_failures(ids, 0.01, 0, S, 0, 0, 1)) == 2
    assert len(q.plan_failures(ids[:20], 0.01, 0, S, 0, 0, 1)) == 1      # at least one when asked for any
    assert q.plan_failures(ids, 0.0, 0, S, 0, 0, 1) == ()


def test_tiers_are_drawn_per_task_by_seed():
    tasks = [{"task_id": f"t{i}", "qos_tier": "GOLD"} for i in range(10_000)]
    a, b = q.assign_tiers(tasks, 1), q.assign_tiers(tasks, 2)
    assert a == q.assign_tiers(tasks, 1) and a != b
    assert tasks[0]["qos_tier"] == "GOLD"                            # copies: the input is untouched
    share = {t: sum(x["qos_tier"] == t for x in a) / len(a) for t in q.TIERS}
    assert share["GOLD"] == pytest.approx(0.25, abs=0.02) and share["SILVER"] == pytest.approx(0.5, abs=0.02)
    assert share["BRONZE"] == pytest.approx(0.25, abs=0.02)


def test_prices_follow_the_simulated_clusters_table_and_the_idle_factor():
    from suanli.connectors.simulated import GPU_PRICE, IDLE_PRICE_SHARE

    assert q.GPU_PRICE == GPU_PRICE and q.IDLE_FACTOR == IDLE_PRICE_SHARE
    node = {"node_id": "x", "cpu_milli": 96000, "memory_mib": 786432,
            "accelerators": [{"kind": "GPU", "model": "A100", "count": 8, "memory_mib": 0}]}
    (priced,) = q.price_nodes([node], idle_factor=0.3)
    assert priced["price_per_hour"] == pytest.approx(96 * 0.04 + 768 * 0.005 + 8 * 3.0)
    assert priced["idle_price_per_hour"] == pytest.approx(0.3 * priced["price_per_hour"])


def test_scenarios_refuse_nonsense():
    with pytest.raises(ReplayError, match="repair time"):
        q.Scenario(repair_ms=10 * S, down_after_ms=15 * S).check()
    with pytest.raises(ReplayError, match="tier mix"):
        q.Scenario(tier_mix=(0.5, 0.5, 0.5)).check()
    with pytest.raises(ReplayError, match="window"):
        q.Scenario(window=(0.9, 0.1)).check()


# ------------------------------------------------------------------ availability by hand
def _node(nid: str) -> NodePrice:
    return NodePrice("c", nid, 8000, 1, price_per_hour=1.0, idle_price_per_hour=0.25)


def _iv(tid: str, nid: str, a: int, b: int, ended_by: str, tier: str = "GOLD", lost: int = 0) -> Interval:
    return Interval(task_id=tid, tenant="t", cell="c", tier=tier, node=_node(nid), start=a * S, end=b * S,
                    n_devices=1, gpu_milli=1000, cpu_milli=1000, ended_by=ended_by, work_lost_ms=lost * S,
                    open=ended_by == "OPEN")


def test_availability_counts_from_the_failure_not_its_detection():
    """n0 fails at 20 s (reported at 35 s, back at 300 s); n2 fails at 90 s (reported after the window).
    A: on n0 0-35 (lost), back on n1 40-100 (departs at 100): asked 100, runs 20 + 60 = 80, one 20 s gap.
    B: on n1 10-100, departs at 200 (after the window end, 100): asked 90, runs 90.
    C: placed on the dead n0 at 25, lost at 35, departs at 80 before it is back: asked 55, runs 0.
    D: on n2 from 0, open at the window end: asked 100, runs 90, out at the window end.
    S: a silver task on n0: not gold, not counted."""
    failures = [q.NodeFailure("n0", 20 * S, 35 * S, 300 * S), q.NodeFailure("n2", 90 * S, 105 * S, 700 * S)]
    intervals = [_iv("A", "n0", 0, 35, "LOST"), _iv("A", "n1", 40, 100, "COMPLETED"),
                 _iv("B", "n1", 10, 100, "OPEN"), _iv("C", "n0", 25, 35, "LOST"), _iv("D", "n2", 0, 100, "OPEN"),
                 _iv("S", "n0", 0, 35, "LOST", tier="SILVER")]
    departs = {"A": 100 * S, "B": 200 * S, "C": 80 * S, "D": None, "S": 50 * S}
    gold = q.availability(intervals, departs, failures, (0, 100 * S))
    assert gold.tasks == 4
    assert gold.asked_ms == (100 + 90 + 55 + 100) * S
    assert gold.running_ms == (80 + 90 + 0 + 90) * S
    assert gold.availability == pytest.approx(260 / 345)
    assert gold.interrupted_tasks == 3 and gold.gaps == [20 * S]
    assert gold.not_back_before_departure == 1 and gold.out_at_window_end == 1
    d = gold.as_dict()
    assert d["downtime_s"] == 85.0 and d["gap_s"]["max"] == 20.0
    silver = q.availability(intervals, departs, failures, (0, 100 * S), tier="SILVER")
    assert silver.asked_ms == 50 * S and silver.running_ms == 20 * S and silver.not_back_before_departure == 1


def test_clip_keeps_the_window_part_and_the_lost_work_of_preemptions_inside_it():
    ivs = [_iv("a", "n0", 0, 50, "PREEMPTED", tier="BRONZE", lost=50), _iv("b", "n0", 90, 150, "OPEN"),
           _iv("c", "n0", 0, 5, "COMPLETED"), _iv("d", "n0", 30, 30, "PREEMPTED", tier="BRONZE")]
    got = {iv.task_id: (iv.start // S, iv.end // S, iv.work_lost_ms // S) for iv in q.clip(ivs, (10 * S, 100 * S))}
    assert got == {"a": (10, 50, 40), "b": (90, 100, 0), "d": (30, 30, 0)}


# ------------------------------------------------------------------ a tiny trace through the core
def _gpu_node(nid: str, gpus: int, labels: dict) -> dict:
    return {"event_id": f"reg/{nid}", "node_id": nid, "cell": "openb", "site": "s", "region": "r", "zone": "",
            "tier": "cloud", "arch": "x86_64", "cpu_milli": 8000, "memory_mib": 65536,
            "accelerators": [{"kind": "GPU", "model": "A100", "count": gpus, "memory_mib": 0}],
            "pricing": "ON_DEMAND", "price_per_hour": 0.0, "pue": 1.0, "carbon_g_per_kwh": 0.0,
            "connector": "openb", "labels": labels, "registered_at": 0}


def _task(tid: str, tier: str, at_s: int, cpu: int = 1000) -> dict:
    return {"event_id": f"sub/{tid}", "task_id": tid, "tenant": "t", "cell": "openb", "submitted_at": at_s * S,
            "resources": {"cpu_milli": cpu, "memory_mib": 1024, "gpu_count": 1, "gpu_milli": 1000,
                          "gpu_models": [], "gpu_memory_mib": 0, "accelerators": []},
            "qos_tier": tier, "priority": 0, "labels": {}, "deadline": None, "duration_estimate_ms": None,
            "command": None}


@pytest.fixture(scope="module")
def tiny_run():
    """n0 (2 GPUs, 8 cores, the gold pool) and n1 (1 GPU, 8 cores); every task takes one GPU.
    G (gold) arrives at 0 s and lands in the pool (n0); B (bronze, 7.5 cores: too many for n0
    beside G) at 1 s takes n1; n0 fails at 20 s, unseen until 35 s; G2 (gold) arrives at 25 s
    and is placed on the dead n0 (the core cannot know yet). At 35 s n0 is reported DOWN: G
    moves to n1 preempting B; G2 finds no place and is lost. B's grace ends at 40 s: queued,
    nowhere to go. n0 is back at 80 s: G2 goes there (B still does not fit beside it). G
    departs at 100 s and B takes n1 again. G2 departs at 150 s, B at 300 s; the window is 0-200 s."""
    nodes = [_gpu_node("n0", 2, {"pool": "gold"}), _gpu_node("n1", 1, {})]
    tasks = [_task("G", "GOLD", 0), _task("B", "BRONZE", 1, cpu=7500), _task("G2", "GOLD", 25)]
    events = sorted([(0, 1, 0), (1 * S, 1, 1), (25 * S, 1, 2), (100 * S, 0, 0), (300 * S, 0, 1), (150 * S, 0, 2)])
    w = TimedWorkload("tiny", Cluster(nodes, {}), tasks, events, [], 1.0)
    sc = q.Scenario(strategy="bestfit", down_after_ms=15 * S, repair_ms=60 * S, qos={"grace_ms": 5 * S})
    failures = [q.NodeFailure("n0", 20 * S, 35 * S, 80 * S)]
    return q.simulate(w, sc, tiers=False, failures=failures, window=(0, 200 * S)), nodes


def test_gold_availability_of_the_tiny_trace_by_hand(tiny_run):
    r, _ = tiny_run
    g = r["gold"]
    # G: asked 0-100, ran 0-20 (n0 dead from 20) and 35-100 on n1 -> 85 s, one 15 s gap
    # G2: asked 25-150, ran nothing on the dead n0 (25-35), then 80-150 on the repaired n0 -> 70 s, one 55 s gap
    assert g["tasks"] == 2
    assert g["asked_ms"] == (100 + 125) * S
    assert g["running_ms"] == (85 + 70) * S
    assert g["availability_pct"] == pytest.approx(100 * 155 / 225, abs=1e-4)
    assert g["interrupted_tasks"] == 2 and g["gap_s"]["n"] == 2
    assert (g["gap_s"]["p50"], g["gap_s"]["max"]) == (35.0, 55.0)      # gaps of 15 s and 55 s
    assert g["not_back_before_departure"] == 0 and g["out_at_window_end"] == 0


def test_bronze_preemption_and_cost_of_the_tiny_trace_by_hand(tiny_run):
    r, nodes = tiny_run
    b = r["bronze"]
    assert (b["tasks_run"], b["tasks_preempted"], b["preemptions"]) == (1, 1, 1)
    assert r["victims_by_tier"] == {"BRONZE": 1}
    # B ran 1-35 s on n1 (all of it lost to the preemption), then 100-200 s (window end) on n1 again,
    # its share of n1 1.0 (its one GPU; 7.5 of 8 cores); at the idle price, IDLE_FACTOR (0.4) x n1's price
    assert b["work_lost_hours"] * 3600 == pytest.approx(34)
    p1 = q.node_price(nodes[1])
    bronze_cost = q.IDLE_FACTOR * p1 * (34 + 100) / 3600
    c = r["cost"]
    assert c["bronze_cost"] == pytest.approx(bronze_cost, rel=1e-5)
    assert c["as_silver_cost"] == pytest.approx(bronze_cost / q.IDLE_FACTOR, rel=1e-5)
    assert c["saving_pct"] == pytest.approx(60.0)
    useful = p1 * 100 / 3600                 # the first stay was thrown away
    assert c["useful_as_silver_cost"] == pytest.approx(useful, rel=1e-5)
    assert c["effective_saving_pct"] == pytest.approx(100 * (1 - bronze_cost / useful), rel=1e-5)
    assert b["preemptions_per_gpu_hour"] == pytest.approx(1 / ((34 + 100) / 3600), rel=1e-5)


def test_the_aggregate_pools_seeds_and_renders_a_table(tiny_run):
    r, _ = tiny_run
    agg = q.aggregate([dict(r, seed=0), dict(r, seed=1)])
    a = agg["0.01"]
    assert a["runs"] == 2 and a["gold_availability_pct"] == pytest.approx(100 * 155 / 225, abs=1e-4)
    assert a["bronze_preempted_task_rate_pct"] == 100.0 and a["non_bronze_victims"] == 0
    table = q.render(agg)
    assert "1 %" in table and "gold avail" in table


def test_a_gold_standby_keeps_its_task_running_through_its_nodes_failure():
    """n0 (gold pool), n1, n2: one GPU each. G (gold, standby on) lands on n0 and its copy on
    another node; n0 fails at 20 s (reported at 35 s): G is moved, and its copy ran all along,
    so no gold time is lost. The copy's GPU-hours are reported beside the task's own."""
    nodes = [_gpu_node("n0", 1, {"pool": "gold"}), _gpu_node("n1", 1, {}), _gpu_node("n2", 1, {})]
    tasks = [_task("G", "GOLD", 0)]
    w = TimedWorkload("tiny-standby", Cluster(nodes, {}), tasks, [(0, 1, 0), (100 * S, 0, 0)], [], 1.0)
    failures = [q.NodeFailure("n0", 20 * S, 35 * S, 80 * S)]
    runs = {}
    for standby in (False, True):
        sc = q.Scenario(strategy="bestfit", down_after_ms=15 * S, repair_ms=60 * S,
                        qos={"grace_ms": 5 * S, "gold_standby": standby})
        runs[standby] = q.simulate(w, sc, tiers=False, failures=failures, window=(0, 200 * S))
    without, with_ = runs[False]["gold"], runs[True]["gold"]
    assert (without["tasks"], without["running_ms"], without["interrupted_tasks"]) == (1, 85 * S, 1)
    assert (with_["tasks"], with_["asked_ms"], with_["running_ms"]) == (1, 100 * S, 100 * S)
    assert with_["availability_pct"] == 100.0 and with_["interrupted_tasks"] == 0
    assert runs[False]["gold_standby_gpu_hours"] == 0
    assert runs[True]["gold_standby_gpu_hours"] * 3600 == pytest.approx(100)     # 0-100 s on one GPU
    assert runs[True]["gold_gpu_hours"] * 3600 == pytest.approx(100)             # n0 0-35 s, then 35-100 s
    agg = q.aggregate([runs[True]])["0.01"]
    assert agg["gold_availability_pct"] == 100.0 and agg["gold_standby_gpu_hours_pct"] == pytest.approx(100.0)
