"""The prewarm planner in the core (processors/prewarm.py): per period, within the bandwidth
and cache budgets, deterministic and replayable; caches follow placements and node news."""
from __future__ import annotations

import json

from suanli.processors.model_loading import load_ms
from suanli.processors import CellState, decide
from suanli.processors import model as m
from suanli.processors.model_cache import PREWARM

from core_helpers import TOPIC, Feed, typed
from model_helpers import GIB, edge_node, model_task, tick

PW = {"enabled": True, "period_ms": 60_000, "bandwidth_mib_s": 50.0, "burst_periods": 2, "min_use": 0.1,
      "half_life_ms": 600_000, "horizon_ms": 600_000}


def _cell(prewarm=PW, sites=("s1", "s2", "s3")):
    f = Feed(strategy="default", config={"seed": 2, "prewarm": prewarm})
    for site in sites:
        for i in range(2):
            edge_node(f, f"{site}-n{i}", site, cache_gib=60)
    return f


def _prewarms(outs):
    return [d for k, d in outs if k == "PrewarmCommand"]


def _arrivals(f, n=12, at0=1000):
    """Tasks at s1 only, of three models; each ends at once (so the cell stays empty)."""
    for i in range(n):
        arch = ("a@1", "b@1", "c@1")[i % 3]
        model_task(f, f"t{i}", arch, size_gib=(2, 3, 4)[i % 3], at=at0 + i * 1000, site="s1")
        f.status(f"t{i}", "COMPLETED", at=at0 + i * 1000 + 500)


def test_a_placement_puts_the_model_in_the_nodes_cache_and_down_empties_it():
    f = _cell(prewarm={"enabled": False})
    placed = [d for k, d in model_task(f, "t", "x@1", size_gib=5, site="s2") if k == "TaskPlaced"][0]
    nid = placed["node_id"]
    e = f.state.model_caches[nid].entries["x@1"]
    assert e.size_mib == 5 * GIB and e.used and e.ready_at == 1 + load_ms(5 * GIB, "origin")
    f.send("NodeStatusChanged", {"node_id": nid, "status": "DOWN", "at": 10})
    assert f.state.model_caches[nid].entries == {}


def test_disabled_planner_emits_nothing_and_keeps_no_book():
    f = _cell(prewarm={"enabled": False})
    _arrivals(f)
    outs = [o for t in range(60_000, 600_001, 60_000) for o in tick(f, t)]
    assert _prewarms(outs) == [] and f.state.prewarm == {}


def test_planner_fetches_popular_models_to_the_other_sites_within_the_budget():
    f = _cell()
    _arrivals(f)
    cmds = []
    for t in range(20_000, 1_200_001, 1000):             # a tick a second for 20 minutes
        cmds += _prewarms(tick(f, t))
    assert cmds, "the cell-wide demand should warm the sites that saw no arrival"
    runs = sorted({c["at"] for c in cmds})
    assert all((b - a) >= PW["period_ms"] for a, b in zip(runs, runs[1:]))      # per period, not per event
    for site in ("s2", "s3"):
        mine = [c for c in cmds if c["node_id"].startswith(site)]
        assert {c["model_arch"] for c in mine} <= {"a@1", "b@1", "c@1"}
        # the bandwidth budget: what a site fetched never exceeds what it had earned by then
        for c in mine:
            spent = sum(x["size_mib"] for x in mine if x["at"] <= c["at"])
            earned = PW["bandwidth_mib_s"] * (c["at"] - 20_000 + PW["period_ms"]) / 1000   # first run: a period
            assert spent <= earned + 1e-6
    c = cmds[0]
    assert c["reason"].startswith(f"prewarm {c['model_arch']}") and c["cell"] == "test"
    entry = f.state.model_caches[c["node_id"]].entries[c["model_arch"]]
    assert entry.via == PREWARM
    for c in cmds:                                        # the cache budget
        cache = f.state.model_caches[c["node_id"]]
        assert cache.used_mib <= cache.capacity_mib


def test_a_prewarmed_model_is_where_the_next_task_goes():
    f = _cell()
    _arrivals(f)
    cmds = []
    for t in range(20_000, 1_200_001, 5000):
        cmds += _prewarms(tick(f, t))
    target = next(c for c in cmds if c["node_id"].startswith("s3"))
    outs = model_task(f, "new", target["model_arch"], size_gib=target["size_mib"] // GIB, at=1_300_000, site="s3")
    placed = [d for k, d in outs if k == "TaskPlaced"][0]
    assert placed["node_id"] == target["node_id"]
    assert placed["provenance"]["notes"][0].startswith(f"model {target['model_arch']} cached on")
    assert f.state.model_caches[target["node_id"]].entries[target["model_arch"]].used


def _inputs():
    f = _cell()
    evs = [typed("PolicyChanged", {"cell": "test", "strategy": "default", "config": {"seed": 2, "prewarm": PW},
                                   "at": 0})]
    for site in ("s1", "s2", "s3"):
        for i in range(2):
            evs.append(typed("NodeRegistered", {
                "node_id": f"{site}-n{i}", "cell": "test", "site": site, "region": site, "zone": site, "tier": "edge", "cpu_milli": 64000,
                "memory_mib": 262144, "accelerators": [{"kind": "GPU", "model": "L4", "count": 4, "memory_mib": 1}],
                "registered_at": 0, "model_cache_mib": 60 * GIB}))
    del f
    t = 1000
    for i in range(40):
        arch = ("a@1", "b@1", "c@1", "d@1")[(i * 7) % 4]
        site = ("s1", "s2", "s3")[i % 3]
        evs.append(typed("TaskSubmitted", {
            "task_id": f"t{i}", "tenant": "t", "cell": "test", "submitted_at": t,
            "resources": {"cpu_milli": 4000, "memory_mib": 16384, "gpu_count": 1, "gpu_milli": 1000},
            "labels": {"user-site": site},
            "profile": {"model_arch": arch, "model_uri": "u", "model_size_mib": (2 + i % 4) * GIB}}))
        for k in range(30):
            t += 1000
            evs.append(m.CellTick(event_id=f"tick/{t}", cell="test", at=t, period_ms=1000))
    return evs


def _run(evs, restore_at=None):
    s = CellState("test")
    outs = []
    for off, e in enumerate(evs):
        if restore_at is not None and off == restore_at:
            s = CellState.from_snapshot(json.loads(json.dumps(s.to_snapshot())))
        s, o = decide(s, e, (TOPIC, 0, off))
        outs += [(d.KIND, m.to_avro(d)) for d in o]
    return s, outs


def test_replay_is_identical_with_prewarm_on_and_across_a_snapshot():
    evs = _inputs()
    s1, o1 = _run(evs)
    s2, o2 = _run(evs)
    assert any(k == "PrewarmCommand" for k, _ in o1)
    assert json.dumps(o1, sort_keys=True) == json.dumps(o2, sort_keys=True)
    assert s1.to_snapshot() == s2.to_snapshot()
    s3, o3 = _run(evs, restore_at=len(evs) // 2)       # snapshot mid-run, restore, continue
    assert json.dumps(o3, sort_keys=True) == json.dumps(o1, sort_keys=True)
    assert s3.to_snapshot() == s1.to_snapshot()


def test_old_snapshots_without_caches_load_empty():
    f = _cell(prewarm={"enabled": False})
    snap = f.state.to_snapshot()
    assert "model_caches" not in snap and "prewarm" not in snap
    back = CellState.from_snapshot(snap)
    assert back.model_caches == {} and back.prewarm == {}


# ---------------------------------------------------------------- the planner's choice (#20, round 2)
def test_chance_of_use_is_the_first_arrival_before_the_next_version_and_the_horizon():
    from suanli.processors.prewarm import _p_used

    h = 3_600_000
    lam, life = 2 / h, 3 * h                                # 2 an hour, a version lives 3 h
    assert abs(_p_used(lam, life, 1e12) - 6 / 7) < 1e-9     # lam L / (1 + lam L) with no horizon
    assert _p_used(lam, life, h) < _p_used(lam, life, 2 * h) < 6 / 7
    assert _p_used(lam / 10, life, 2 * h) < _p_used(lam, life, 2 * h)


def _one_node_sites(cache_gib, prewarm):
    f = Feed(strategy="default", config={"seed": 2, "prewarm": prewarm})
    for site in ("s1", "s2", "s3"):
        edge_node(f, f"{site}-n0", site, cache_gib=cache_gib)
    return f


def test_a_new_version_goes_out_and_evicts_the_superseded_one_first():
    pw = {**PW, "max_waste": 0.3, "bandwidth_mib_s": 500.0}
    f = _one_node_sites(14, pw)
    t = 1000
    for i in range(30):                                     # a@1 (6 GiB) popular at s1 and s2; b@1 once at s3
        model_task(f, f"a{i}", "a@1", size_gib=6, at=t, site=("s1", "s2")[i % 2])
        f.status(f"a{i}", "COMPLETED", at=t + 1)
        t += 20_000
    model_task(f, "b", "b@1", size_gib=6, at=t, site="s3")
    f.status("b", "COMPLETED", at=t + 1)
    cmds = [c for at in range(t + 60_000, t + 600_001, 30_000) for c in _prewarms(tick(f, at))]
    assert [(c["node_id"], c["model_arch"]) for c in cmds] == [("s3-n0", "a@1")]
    assert set(f.state.model_caches["s3-n0"].entries) == {"a@1", "b@1"}
    t += 700_000
    model_task(f, "new", "a@2", size_gib=6, at=t, site="s1")     # a new version: the family's newest
    f.status("new", "COMPLETED", at=t + 1)
    cmds = [c for at in range(t + 30_000, t + 600_001, 30_000) for c in _prewarms(tick(f, at))]
    mine = [c for c in cmds if c["node_id"] == "s3-n0"]
    assert [c["model_arch"] for c in mine] == ["a@2"]
    assert "evicts a@1 (superseded" in mine[0]["reason"]          # not b@1, used less recently
    assert set(f.state.model_caches["s3-n0"].entries) == {"a@2", "b@1"}


def test_the_waste_ledger_never_goes_negative():
    for mw in (0.05, 0.3):
        f = _cell(prewarm={**PW, "max_waste": mw})
        _arrivals(f, n=30)
        for t in range(20_000, 1_200_001, 5000):
            tick(f, t)
            assert f.state.prewarm.get("slack", 0.0) >= -1e-6


def test_prewarm_disabled_decides_as_without_the_key():
    outs = []
    for cfg in ({"seed": 2}, {"seed": 2, "prewarm": {"enabled": False}}):
        f = Feed(strategy="default", config=cfg)
        for site in ("s1", "s2"):
            for i in range(2):
                edge_node(f, f"{site}-n{i}", site, cache_gib=20)
        for i in range(20):
            model_task(f, f"t{i}", ("a@1", "b@1", "a@2")[i % 3], size_gib=(3, 7, 3)[i % 3], at=1000 + i * 7000,
                       site=("s1", "s2")[i % 2])
            if i % 2:
                f.status(f"t{i - 1}", "COMPLETED", at=1500 + i * 7000)
            tick(f, 2000 + i * 7000)
        for _, d in f.outputs:                     # the policy's digest names its config: it differs
            d.get("provenance", {}).get("strategy", {}).pop("config_digest", None)
        outs.append(json.dumps([(k, d) for k, d in f.outputs], sort_keys=True, default=str))
    assert '"TaskPlaced"' in outs[0] and outs[0] == outs[1]
