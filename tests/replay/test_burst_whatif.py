"""The burst what-if (replay/burst_whatif.py): the arrival-clock warp, deadline success on a
hand-made trace through the real core, the seed guard, a small openb run (deterministic)
and the command lines."""
from __future__ import annotations

import json
import math

import pytest

from suanli.errors import ReplayError
from suanli.replay import burst_whatif as bw
from suanli.replay import qos_whatif as q
from suanli.replay.timed import Cluster, TimedWorkload

S = 1000            # ms
MIN = 60 * S


# ------------------------------------------------------------------ the warp
def test_bursts_are_seeded_non_overlapping_and_after_the_warm_up():
    arrivals = list(range(0, 20_000 * S, 7 * S))
    a = bw.plan_bursts(arrivals, 3, 10 * MIN, 5.0, 0.3, seed=4)
    assert a == bw.plan_bursts(arrivals, 3, 10 * MIN, 5.0, 0.3, seed=4)
    assert a != bw.plan_bursts(arrivals, 3, 10 * MIN, 5.0, 0.3, seed=5)
    assert len(a.starts) == 3 and a.span_ms == 50 * MIN
    lo = arrivals[int(0.3 * (len(arrivals) - 1))]
    assert a.starts[0] >= lo and a.starts[-1] + a.span_ms <= arrivals[-1]
    assert all(b >= s + a.span_ms for s, b in zip(a.starts, a.starts[1:]))        # no overlap (trace clock)
    wins = a.windows()
    assert all(e - s == 10 * MIN for s, e in wins)
    assert all(b[0] >= w[1] for w, b in zip(wins, wins[1:]))                        # no overlap (sim clock)
    assert bw.plan_bursts(arrivals, 0, 10 * MIN, 5.0, 0.3, seed=4).starts == ()


def test_the_warp_runs_the_arrival_clock_five_times_faster_inside_a_burst():
    plan = bw.BurstPlan((1000 * S, 10_000 * S), 10 * MIN, 5.0)
    assert plan.warp(500 * S) == 500 * S                                          # before: unchanged
    s = plan.starts[0]
    assert plan.warp(s + 50 * S) - plan.warp(s) == 10 * S                          # 5x faster inside
    assert plan.warp(s + plan.span_ms) - plan.warp(s) == 10 * MIN                  # 50 min of trace in 10 min
    assert plan.warp(5000 * S) == 5000 * S - 40 * MIN                              # after: moved by what it saved
    assert plan.warp(20_000 * S) == 20_000 * S - 80 * MIN
    assert plan.windows() == [(1000 * S, 1000 * S + 10 * MIN), (10_000 * S - 40 * MIN, 10_000 * S - 30 * MIN)]
    xs = list(range(0, 20_000 * S, 777))
    assert all(plan.warp(a) <= plan.warp(b) for a, b in zip(xs, xs[1:]))          # monotone


def test_warping_a_workload_keeps_every_lifetime():
    tasks = [{"task_id": f"t{i}", "submitted_at": i * 60 * S} for i in range(200)]
    events = sorted([(t["submitted_at"], 1, i) for i, t in enumerate(tasks)]
                    + [(t["submitted_at"] + (i % 7 + 1) * 1000 * S, 0, i) for i, t in enumerate(tasks)])
    w = TimedWorkload("w", Cluster([], {}), tasks, events, [], 1.0)
    plan = bw.plan_bursts([t["submitted_at"] for t in tasks], 2, 10 * MIN, 5.0, 0.2, seed=1)
    ww = bw.warp_workload(w, plan)
    arrive = {i: t for t, k, i in ww.events if k == 1}
    depart = {i: t for t, k, i in ww.events if k == 0}
    assert all(depart[i] - arrive[i] == (i % 7 + 1) * 1000 * S for i in range(200))
    assert all(ww.tasks[i]["submitted_at"] == arrive[i] for i in range(200))
    assert tasks[5]["submitted_at"] == 5 * 60 * S                                  # the input is untouched
    inside = [i for i in range(200) if any(a <= arrive[i] < b for a, b in plan.windows())]
    assert len(inside) in (99, 100, 101)           # 2 x 50 min of one-a-minute arrivals, in 2 x 10 min
    ep_like = [i for i in range(200) if any(s <= tasks[i]["submitted_at"] < s + plan.span_ms for s in plan.starts)]
    assert inside == ep_like


def test_bursts_that_do_not_fit_are_refused():
    with pytest.raises(ReplayError, match="need 9000 s"):
        bw.plan_bursts(list(range(0, 3000 * S, S)), 3, 10 * MIN, 5.0, 0.0, seed=1)
    with pytest.raises(ReplayError, match="deadlines"):
        bw.BurstScenario(deadlines_ms={"GOLD": 1}).check()


# ------------------------------------------------------------------ success on a hand-made trace
def _node(nid: str) -> dict:
    return {"event_id": f"reg/{nid}", "node_id": nid, "cell": "openb", "site": "s", "region": "r", "zone": "",
            "tier": "cloud", "arch": "x86_64", "cpu_milli": 8000, "memory_mib": 65536,
            "accelerators": [{"kind": "GPU", "model": "A100", "count": 1, "memory_mib": 0}],
            "pricing": "ON_DEMAND", "price_per_hour": 0.0, "pue": 1.0, "carbon_g_per_kwh": 0.0,
            "connector": "openb", "labels": {}, "registered_at": 0}


def _task(tid: str, tier: str, at_s: int) -> dict:
    return {"event_id": f"sub/{tid}", "task_id": tid, "tenant": "t", "cell": "openb", "submitted_at": at_s * S,
            "resources": {"cpu_milli": 1000, "memory_mib": 1024, "gpu_count": 1, "gpu_milli": 1000,
                          "gpu_models": [], "gpu_memory_mib": 0, "accelerators": []},
            "qos_tier": tier, "priority": 0, "labels": {}, "deadline": None, "duration_estimate_ms": None,
            "command": None}


class _Recorder:
    def __init__(self) -> None:
        self.started = 0
        self.inputs: list[tuple[int, str]] = []

    def start(self, state) -> None:
        self.started += 1

    def after_input(self, at_ms, event, outs, state) -> None:
        self.inputs.append((at_ms, type(event).__name__))


def test_deadline_success_of_a_tiny_trace_by_hand():
    """One node with one GPU; every task takes it. A (silver) 0-100 s runs at once: success.
    B (gold, 30 s) arrives at 1 s, runs when A leaves at 100 s: 99 s late, fails. C (bronze,
    600 s) arrives at 2 s, runs when B leaves at 201 s: within 600 s, succeeds. D (silver)
    arrives at 3 s and leaves at 53 s, never placed: fails."""
    tasks = [_task("A", "SILVER", 0), _task("B", "GOLD", 1), _task("C", "BRONZE", 2), _task("D", "SILVER", 3)]
    life = [100, 200, 1000, 50]
    events = sorted([(t["submitted_at"], 1, i) for i, t in enumerate(tasks)]
                    + [(t["submitted_at"] + life[i] * S, 0, i) for i, t in enumerate(tasks)])
    w = TimedWorkload("tiny", Cluster([_node("n0")], {}), tasks, events, [], 1.0)
    rec = _Recorder()
    sc = bw.BurstScenario(bursts=0, qos={})
    r = bw.simulate_burst(w, sc, "first-fit", observer=rec, tiers=False, outcomes=True)
    got = {row[0]: row for row in r["outcomes"]}
    assert {k: (v[4], v[6]) for k, v in got.items()} == {"A": (0, True), "B": (100 * S, False),
                                                         "C": (201 * S, True), "D": (None, False)}
    assert r["success_pct"] == 50.0 and r["success_under_burst_pct"] is None and r["tasks_in_burst"] == 0
    assert r["success_by_tier_pct"] == {"GOLD": 0.0, "SILVER": 50.0, "BRONZE": 100.0}
    assert (r["tasks"], r["placed"], r["gold_preempted"]) == (4, 3, 0)
    assert r["stop_at_ms"] == 3 * S + 600 * S and r["window_ms"] == [0, 3 * S]
    assert rec.started == 1 and rec.inputs[0] == (0, "TaskSubmitted") and rec.inputs[-1][0] == r["stop_at_ms"]
    assert sum(1 for _t, k in rec.inputs if k == "CellTick") == 603
    # the node is used 0-3 s (A holds it) in the window, at its price
    assert r["node_hours"] == pytest.approx(3 / 3600) and r["gpu_hours"] == pytest.approx(3 / 3600)
    assert r["cost_total"] == pytest.approx(3 / 3600 * q.node_price(_node("n0")), rel=1e-6)
    assert r["cost_per_gpu_hour"] == pytest.approx(q.node_price(_node("n0")), rel=1e-5)


# ------------------------------------------------------------------ seeds and policies
def test_training_and_evaluation_seeds_are_kept_apart():
    assert bw.is_eval_seed(1) and bw.is_eval_seed(100) and not bw.is_eval_seed(1000)
    assert bw.train_seeds(3) == [1000, 1001, 1002] and bw.train_scenario(1000).seed == 1000
    for seed in (1, 42, 100, 999):
        with pytest.raises(ReplayError, match="not a training seed"):
            bw.train_scenario(seed)
    with pytest.raises(ReplayError, match="refused: 1000"):
        bw.evaluate(["first-fit"], [1, 1000])
    with pytest.raises(ReplayError, match="refused: 0"):
        bw.check_eval_seeds([0])


def test_policies_by_name_or_name_and_config():
    assert bw.resolve_policy("rule-engine") == ("rule-engine", *bw.RULE_ENGINE)
    assert bw.RULE_ENGINE[1]["fallback"] == "first-fit"
    assert bw.resolve_policy("bestfit") == ("bestfit", "bestfit", {})
    assert bw.resolve_policy(("first-fit", {"seed": 3})) == ("first-fit", "first-fit", {"seed": 3})
    with pytest.raises(ReplayError):
        bw.resolve_policy("no-such-strategy")


def test_t_intervals():
    assert bw.t975(1) == 12.706 and bw.t975(30) == 2.042 and math.isnan(bw.t975(0))
    iv = bw.interval([1.0, 2.0, 3.0, None])
    assert iv["n"] == 3 and iv["mean"] == 2.0 and iv["half"] == pytest.approx(4.303 * 1 / math.sqrt(3), abs=1e-4)
    assert bw.interval([5.0])["half"] is None and bw.interval([])["mean"] is None
    stats = pytest.importorskip("scipy.stats")
    for df in (1, 5, 29, 40, 100):
        assert bw.t975(df) == pytest.approx(stats.t.ppf(0.975, df), abs=2e-3)


# ------------------------------------------------------------------ a small openb run
SMALL = dict(tasks=None, shrink=0.3, shrink_seed=1, load=1000.0, burst_minutes=2.0)


@pytest.fixture(scope="module")
def small_runs(openb_small):
    sc = bw.BurstScenario(seed=3, **SMALL)
    a = bw.simulate_burst(openb_small, sc, "default")
    b = bw.simulate_burst(openb_small, sc, "default")
    return a, b


def test_a_small_openb_run_is_sane_and_deterministic(small_runs):
    a, b = small_runs
    timing = {"seconds", "decision_ms_p50", "decision_ms_p99"}
    assert {k: v for k, v in a.items() if k not in timing} == {k: v for k, v in b.items() if k not in timing}
    assert a["tasks"] == 408 and 0 < a["tasks_in_burst"] < a["tasks"]
    assert len(a["burst_windows_ms"]) == 3 and all(e - s == 2 * MIN for s, e in a["burst_windows_ms"])
    for k in ("success_pct", "success_under_burst_pct", "gpu_alloc_pct"):
        assert 0 <= a[k] <= 100, k
    assert a["placed"] <= a["tasks"] and a["decisions"] > 0
    assert a["cost_total"] > 0 and a["cost_per_gpu_hour"] > 0 and a["decision_ms_p99"] >= a["decision_ms_p50"] > 0
    json.dumps(a)
    assert a["seconds"] < 30


def test_evaluate_and_render_on_the_small_run(openb_small):
    res = bw.evaluate(["first-fit", "rule-engine"], [1, 2], bw.BurstScenario(**SMALL), paths=openb_small)
    agg = res["aggregate"]
    assert list(agg) == ["first-fit", "rule-engine"] and agg["first-fit"]["runs"] == 2
    assert [r["seed"] for r in res["runs"]] == [1, 2, 1, 2]
    table = bw.render(res)
    assert table.splitlines()[0].startswith("| policy |") and "| rule-engine | 2 |" in table and " ± " in table


# ------------------------------------------------------------------ the command lines
def test_the_module_cli_on_a_tiny_case(openb_small, tmp_path, capsys):
    out = tmp_path / "burst.json"
    rc = bw.main(["--nodes", openb_small[0], "--pods", openb_small[1], "--tasks", "0", "--shrink", "0.3",
                  "--load", "1000", "--burst-minutes", "2", "--seeds", "1", "--policies", "first-fit",
                  "--json", str(out), "--quiet"])
    assert rc == 0
    assert "| first-fit | 1 |" in capsys.readouterr().out
    doc = json.loads(out.read_text())
    assert doc["seeds"] == [1] and doc["runs"][0]["policy"] == "first-fit" and doc["scenario"]["load"] == 1000.0


def test_suanli_whatif_burst_delegates(openb_small, capsys):
    from suanli.cli import main

    common = ["whatif", "--burst", "--nodes", openb_small[0], "--pods", openb_small[1], "--tasks", "0",
              "--shrink", "0.3", "--seeds", "1", "--policy", "rule-engine", "--quiet"]
    assert main(common + ["--load", "1000"]) == 2     # 3 x 50 min of trace do not fit in its 36 min: refused
    capsys.readouterr()
    assert main(common + ["--load", "200"]) == 0
    assert "| rule-engine | 1 |" in capsys.readouterr().out
    assert main(["whatif", "--burst", "--seeds", "1000", "--policy", "first-fit", "--quiet"]) == 2
    assert main(["whatif", "--protocol", "timed", "--tasks", "5"]) == 2
