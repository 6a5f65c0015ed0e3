"""The advance-reservations what-if (replay/reservations_whatif.py): the seeded rule, the
metrics' definitions, and a tiny trace through the real core whose answer is worked out by
hand (one 4-GPU node, four bronze fillers, one 4-GPU task that reserves an hour ahead)."""
from __future__ import annotations

import math

import numpy as np
import pytest

from suanli.errors import ReplayError
from suanli.processors import CellState, decide
from suanli.processors import model as m
from suanli.processors.frag import TypicalTasks, cluster_frag_milli
from suanli.replay import reservations_whatif as rw
from suanli.replay import timed

NODES_HEADER = "sn,cpu_milli,memory_mib,gpu,model"
PODS_HEADER = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time"
H = 3_600_000


def _write(tmp_path, nodes: list[str], pods: list[str]) -> tuple[str, str]:
    n, p = tmp_path / "nodes.csv", tmp_path / "pods.csv"
    n.write_text("\n".join([NODES_HEADER, *nodes]) + "\n")
    p.write_text("\n".join([PODS_HEADER, *pods]) + "\n")
    return str(n), str(p)


def _pod(name: str, gpus: int, milli: int, qos: str, created: int, deleted: int, cpu: int = 1000) -> str:
    return f"{name},{cpu},4096,{gpus},{milli},,{qos},Running,{created},{deleted},{created}"


@pytest.fixture()
def many(tmp_path):
    """20 multi-GPU tasks among 40 single-GPU ones, on two nodes."""
    pods = []
    for i in range(60):
        gpus = 2 + (i % 3) * 2 if i % 3 == 0 else 1
        pods.append(_pod(f"p{i:02d}", gpus, 1000, "Burstable", 100_000 + 600 * i, 100_000 + 600 * i + 300 + 7 * i))
    return timed.build(*_write(tmp_path, ["n0,64000,262144,8,G2", "n1,64000,262144,8,G2"], pods))


@pytest.fixture()
def tiny(tmp_path):
    """One 4-GPU node. Four bronze fillers (1 GPU each) arrive at 7000 s and leave at 10600 s;
    the 4-GPU task B arrives at 9600 s (a multiple of the 60 s slot) and lives 3600 s."""
    pods = [_pod(f"f{i}", 1, 1000, "BE", 7000, 10600) for i in range(4)]
    pods.append(_pod("B", 4, 1000, "Burstable", 9600, 13200, cpu=8000))
    return timed.build(*_write(tmp_path, ["n0,64000,262144,4,G2"], pods))


TINY_RULE = rw.Rule(share=1.0, lead_ms=(H, H), overrun=(1.0, 1.0), unclaimed=0.0)
NO_QOS_PREEMPT = {"qos": {"preempt": False}}     # only a claim may evict the fillers


# ------------------------------------------------------------------ the rule
def test_rule_parses_and_refuses():
    r = rw.Rule.parse("share=0.5,lead=10m-2h,overrun=1-1.5,unclaimed=0.2,latest=30m,price=2-3")
    assert r == rw.Rule(0.5, (600_000, 7_200_000), (1.0, 1.5), 0.2, 1_800_000, (2.0, 3.0))
    assert rw.Rule.parse("") == rw.Rule() == rw.Rule.parse(rw.Rule().text())
    assert rw.Rule.parse("share=0.1") == rw.Rule(share=0.1)
    for bad in ("share=2", "lead=6h-5m", "colour=red", "share", "lead=soon", "overrun=0.5-1"):
        with pytest.raises(ReplayError):
            rw.Rule.parse(bad)
    assert rw.parse_duration("90s") == 90_000 and rw.parse_duration("1.5h") == 5_400_000
    assert rw.parse_duration("250ms") == 250 and rw.parse_duration("30") == 30_000


def test_plan_is_seeded_nested_and_follows_the_rule(many):
    rule = rw.Rule(share=0.25, unclaimed=0.2)
    cand = rw.candidates(many)
    assert len(cand) == 20 and all(many.tasks[i]["resources"]["gpu_count"] > 1 for i in cand)
    a, b, c = rw.plan(many, rule, 42), rw.plan(many, rule, 42), rw.plan(many, rule, 43)
    assert a == b and a != c
    assert len(a) == 5 and [r.index for r in a] == sorted(r.index for r in a)
    assert sum(not r.claims for r in a) == 1                          # round(0.2 x 5) never claim
    small, big = rw.plan(many, rule.__class__(share=0.1), 42), rw.plan(many, rule.__class__(share=0.5), 42)
    assert {r.index for r in small} <= {r.index for r in a} <= {r.index for r in big}
    by = {r.index: r for r in big}
    for r in a:                                                       # a task's draws do not depend on the share
        assert (r.bid_at, r.duration_ms, r.price) == (by[r.index].bid_at, by[r.index].duration_ms, by[r.index].price)
    for r in big:
        t = many.tasks[r.index]
        assert r.arrival == t["submitted_at"]
        assert 5 * 60_000 <= r.arrival - r.bid_at <= 6 * H
        assert r.latest_start_at == r.arrival + 15 * 60_000
        assert r.real_ms <= r.duration_ms <= 2 * r.real_ms + 1
        assert 1.0 <= r.price <= 4.0 and r.price == round(r.price, 2)
        assert r.reservation_id == f"rsv-b-{t['task_id']}" and r.gpus == t["resources"]["gpu_count"]
        e = rw.bid_event(many, r)
        assert (e.start_at, e.latest_start_at, e.duration_ms, e.at, e.gang) == \
            (r.arrival, r.latest_start_at, r.duration_ms, r.bid_at, True)
        assert e.resources.gpu_count == r.gpus


# ------------------------------------------------------------------ metric helpers
def test_integral_is_time_weighted_and_clips_spans():
    it = rw.Integral({"w": (10, 30)})
    it.advance(0, 2.0)        # 2 on [0, 20)
    it.advance(20, 5.0)       # 5 on [20, 40)
    it.advance(40, 0.0)
    assert it.area["all"] == 2 * 20 + 5 * 20 and it.mean() == pytest.approx(3.5)
    assert it.area["w"] == 2 * 10 + 5 * 10 and it.mean("w") == pytest.approx(3.5)


def test_bootstrap_and_paired():
    b = rw.bootstrap([1.0, 2.0, 3.0, 4.0])
    assert b["mean"] == 2.5 and b["lo"] <= 2.5 <= b["hi"] and b["n"] == 4
    assert rw.bootstrap([7.0])["lo"] == 7.0 and rw.bootstrap([])["mean"] is None
    p = rw.paired([1.0, 2.0, 3.0], [2.0, 4.0, 6.0])
    assert p["diff"] == pytest.approx(-2.0) and p["rel"] == pytest.approx(-0.5)
    assert p["rel_lo"] == pytest.approx(-0.5) and p["rel_hi"] == pytest.approx(-0.5)   # the same ratio every seed
    assert rw.paired([1.0, None], [2.0, 3.0])["n"] == 1


def test_frag_meter_equals_the_cells_fragmentation_without_tokens(many):
    state = CellState("openb")
    for i, node in enumerate(many.cluster.nodes):
        state, _ = decide(state, m.from_avro(m.NodeRegistered, node), ("t", 0, i))
    tt = TypicalTasks.from_list(many.typical)
    meter = rw.FragMeter(tt, state)
    frag, idle = meter.measure(state)
    assert frag == pytest.approx(cluster_frag_milli(tt, state)) and idle == 16_000


# ------------------------------------------------------------------ through the core
def _run(w, arm, seed=42):
    plan = rw.plan(w, TINY_RULE, seed)
    return rw.simulate(w, "bestfit", arm, plan, seed, policy_extra=NO_QOS_PREEMPT)[""]


def test_tiny_trace_none_arm_is_worked_out_by_hand(tiny):
    r = _run(tiny, "none")
    # B arrives at 9600 s on a node the fillers fill until 10600 s: it waits 1000 s
    assert r["reserved"] == {"n": 1, "mean": 1000.0, "p50": 1000.0, "p95": 1000.0, "max": 1000.0}
    assert r["others"]["n"] == 4 and r["others"]["mean"] == 0.0
    assert r["bids"] == r["granted"] == 0 and r["reserved_gpu_h"] == 0 and r["reserved_idle_gpu_h"] == 0
    assert r["reserved_set"] == 1 and r["reserved_not_placed"] == 0


def test_tiny_trace_arms_differ_as_they_should(tiny):
    none, hard, flex, auction = (_run(tiny, a) for a in ("none", "hard", "flexible", "auction"))
    for r in (hard, flex, auction):
        assert r["bids"] == 1 and r["granted"] == 1 and r["claimants"] == 1 and r["claimed"] == 1, r
        assert r["late"] == 0, r["late_claimants"]
        # the token covers B's declared window: 4 GPUs x 1 h
        assert r["reserved_gpu_h"] == pytest.approx(4.0)
        assert r["reserved"]["mean"] < none["reserved"]["mean"]
    # hard: the token holds the node from its grant (about 6000 s), lends nothing: B starts on arrival, the
    # fillers never run (they wait from 7000 s until they leave at 10600 s: 3600 s each, a lower bound)
    assert hard["reserved"]["mean"] == 0.0
    assert hard["others"]["mean"] == pytest.approx(3600.0)
    assert hard["lent_gpu_h"] == 0
    assert 3.9 <= hard["reserved_idle_gpu_h"] <= 4.0            # 4 GPUs idle from the grant to 9600 s
    assert hard["idle_share_pct"] == pytest.approx(100.0 * hard["reserved_idle_gpu_h"] / 4.0)
    # flexible: the fillers borrow the held GPUs at 7000 s and are evicted by B's claim
    assert flex["others"]["mean"] == 0.0
    assert flex["lent_gpu_h"] == pytest.approx(4 * 2600 / 3600, rel=0.02)
    assert flex["preempted_by_claimants"] == 4
    assert flex["reserved_idle_gpu_h"] < hard["reserved_idle_gpu_h"]
    assert flex["reserved"]["mean"] <= 10.0                     # at most the victims' grace
    assert auction["lent_gpu_h"] > 0 and auction["others"]["mean"] == 0.0
    assert none["seed"] == hard["seed"] == 42 and none["gpus"] == 4


def test_runs_are_deterministic_per_seed(tiny):
    a, b = _run(tiny, "flexible", 7), _run(tiny, "flexible", 7)
    for k in ("reserved", "others", "frag_idle_pct", "reserved_gpu_h", "reserved_idle_gpu_h", "lent_gpu_h", "inputs"):
        assert a[k] == b[k]


def test_unclaimed_tokens_arrive_without_a_label(tiny):
    rule = rw.Rule(share=1.0, lead_ms=(H, H), overrun=(1.0, 1.0), unclaimed=1.0)
    plan = rw.plan(tiny, rule, 42)
    assert [r.claims for r in plan] == [False]
    hard = rw.simulate(tiny, "bestfit", "hard", plan, 42, policy_extra=NO_QOS_PREEMPT)[""]
    assert hard["granted"] == 1 and hard["claimants"] == 0 and hard["claimed"] == 0
    # the hard token lasts its whole window unclaimed: every reserved GPU-hour is idle, and B (not naming it)
    # cannot start before the window ends at 13200 s, after it left: it waited its whole life
    assert hard["reserved_idle_gpu_h"] >= 4.0
    assert hard["reserved"]["mean"] == pytest.approx(3600.0)


def test_grid_aggregates_and_checks_the_goals(tiny, tmp_path, monkeypatch):
    monkeypatch.setattr(rw, "workload", lambda *a, **k: tiny)
    doc = rw.experiment("n.csv", "p.csv", rules=[TINY_RULE], strategies=["bestfit"], loads=[1.0], seeds=[1, 2],
                        shrink=None, workers=1, policy_extra=NO_QOS_PREEMPT)
    cell = doc["aggregate"]["bestfit/k=1/share=1"]
    assert set(cell["arms"]) == set(rw.ARMS) and cell["seeds"] == [1, 2]
    assert doc["acceptance"]["arms"]["hard"]["reserved_queueing"]["rel"] == pytest.approx(-1.0)
    assert doc["acceptance"]["arms"]["hard"]["reserved_queueing"]["met"] is True
    assert len(doc["runs"]) == 8
    page = rw.write_report(doc, tmp_path / "rep")
    assert page.exists() and "Acceptance" in page.read_text()
    assert math.isfinite(cell["arms"]["hard"]["idle_share_pct"]["mean"])
    assert np.isclose(cell["arms"]["none"]["reserved_q_mean"]["mean"], 1000.0)


def test_whatif_cli_runs_the_arms(tiny, tmp_path, capsys):
    from suanli.cli import main

    nodes, pods = str(tmp_path / "nodes.csv"), str(tmp_path / "pods.csv")   # written by the tiny fixture
    out = tmp_path / "r.json"
    assert main(["whatif", "--protocol", "timed", "--nodes", nodes, "--pods", pods, "--reservations",
                 "share=1,lead=1h-1h,overrun=1-1,unclaimed=0", "--policy", "bestfit", "--seeds", "5",
                 "--shrink", "1", "--workers", "1", "--json", str(out), "--report", str(tmp_path / "rep")]) == 0
    text = capsys.readouterr().out
    assert "acceptance: k = 1, bestfit, 100 % reserving" in text and "report:" in text
    assert (tmp_path / "rep" / "report.html").exists() and out.exists()
    assert main(["whatif", "--protocol", "fgd", "--nodes", nodes, "--pods", pods, "--reservations", "share=1"]) == 2
    assert main(["whatif", "--protocol", "timed", "--nodes", nodes, "--pods", pods, "--reservations", "bogus=1"]) == 2
