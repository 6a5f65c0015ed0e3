"""replay/prewarm_oracle.py: the rate oracles' plans, judged on the realised arrivals."""
import json

import pytest

from suanli.errors import ReplayError
from suanli.replay import prewarm_oracle as o
from suanli.replay.prewarm_whatif import Workload, arrivals, catalog, hit_ceilings

SMALL = Workload(seed=3, sites=3, families=6, hours=5.0, warmup_h=1.0, run_on_h=1.0)


def cand(site: str, arch: str, p: float, size: int = 100, issue: int = 0) -> dict:
    return {"site": site, "arch": arch, "issue": issue, "size": size, "p": p}


def test_the_plan_takes_sure_bets_then_spends_their_slack_on_the_best_hits_per_mib():
    cands = [cand("a", "x@1", 0.95), cand("a", "y@1", 0.7, size=10), cand("a", "z@1", 0.7, size=1000),
             cand("b", "x@1", 0.1)]
    # budget 0.2: threshold 0.8; x@1 adds (0.95-0.8)*100 = 15 of slack; y@1 costs 1, z@1 100, b's 70
    chosen = o.plan(cands, 0.2)
    assert [(c["site"], c["arch"]) for c in chosen] == [("a", "x@1"), ("a", "y@1")]
    assert o.plan(cands, 0.0) == []                         # nothing is sure with no budget
    assert len(o.plan(cands, 0.95)) == 4                    # everything is within a budget that large


def test_judge_counts_first_requests_met_by_a_prefetch_and_prefetches_nobody_used():
    w = Workload(seed=1, warmup_h=1.0, hours=3.0, run_on_h=1.0)
    hour = o.HOUR_MS
    tasks = [{"site": "s", "arch": "m@1", "at": int(1.5 * hour)},      # first at s: hit only if prefetched
             {"site": "s", "arch": "m@1", "at": int(2.0 * hour)},      # cached: a hit anyway
             {"site": "t", "arch": "m@1", "at": int(2.5 * hour)},      # first at t: a miss
             {"site": "s", "arch": "m@1", "at": int(0.5 * hour)}]      # before the window: not measured
    tasks.sort(key=lambda t: t["at"])
    chosen = [cand("s", "m@1", 0.5, issue=int(0.2 * hour)), cand("u", "m@1", 0.5, size=300)]
    got = o.judge(w, tasks, chosen)
    # the s request at 0.5 h used the prefetch (so the 1.5 h one is no first); u's was never used
    assert got == {"measured": 3, "hits": 2, "prefetched_mib": 400, "unused_mib": 300}


def test_with_no_budget_every_oracle_is_the_cache_only_ceiling():
    ceil = hit_ceilings(SMALL)
    for oracle in o.ORACLES:
        [row] = o.frontier(SMALL, [0.0], oracle)
        assert row["measured"] == ceil["measured"]
        assert row["hits"] == ceil["measured"] - ceil["site_first"]
        assert row["prefetched_mib"] == 0


def test_what_each_oracle_knows_bounds_what_it_can_reach():
    ceil = hit_ceilings(SMALL)
    rows = {k: o.frontier(SMALL, [0.999], k)[0] for k in o.ORACLES}
    # learning versions from their first request, as the planner does, leaves that request a miss
    assert rows["rates"]["hits"] <= ceil["measured"] - ceil["cell_first"]
    # seeing releases as they happen, prefetching everything everywhere misses nothing
    assert rows["rates+releases"]["hits"] == ceil["measured"]
    assert rows["clairvoyant"]["hits"] == ceil["measured"]


def test_the_oracles_weigh_the_same_candidates_by_what_they_know():
    cat = catalog(SMALL)
    tasks = arrivals(SMALL, cat)
    fair = o.candidates(SMALL, cat, tasks, "rates+releases")
    seer = o.candidates(SMALL, cat, tasks, "clairvoyant")
    assert {(c["site"], c["arch"]) for c in fair} == {(c["site"], c["arch"]) for c in seer}
    assert all(0.0 <= c["p"] < 1.0 for c in fair + seer)


def test_the_command_writes_every_oracle_and_refuses_bad_budgets(tmp_path, capsys):
    out = tmp_path / "o.json"
    assert o.main(["--seeds", "1", "--budgets", "0,0.2", "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert set(doc["oracles"]) == set(o.ORACLES)
    assert [r["budget"] for r in doc["oracles"]["rates"]["pooled"]] == [0.0, 0.2]
    assert "best hit rate" in capsys.readouterr().out
    with pytest.raises(ReplayError, match="each budget must be in"):
        o.main(["--seeds", "1", "--budgets", "1.5"])
    with pytest.raises(ReplayError, match="not a list of numbers"):
        o.main(["--seeds", "1", "--budgets", "a,b"])
