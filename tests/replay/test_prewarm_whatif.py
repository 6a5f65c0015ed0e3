"""The cold-start what-if (replay/prewarm_whatif.py) on a tiny scenario."""
from __future__ import annotations

import json

from suanli.processors.model_loading import load_ms
from suanli.replay import prewarm_whatif as P

TINY = P.Workload(seed=3, sites=3, nodes_per_site=2, families=6, hours=2.0, warmup_h=0.5, rate_per_h=20.0)


def test_wait_is_local_then_peer_then_origin():
    site_of = {"a": "s1", "b": "s1", "c": "s2"}
    view = {"a": {"m@1": (5_000, "task")}, "b": {}, "c": {}}
    assert P._wait(view, site_of, "a", "m@1", 2048, 1_000) == ("local", 4_000 + load_ms(2048, "local"), "a")
    assert P._wait(view, site_of, "b", "m@1", 2048, 9_000) == ("peer", load_ms(2048, "peer"), "a")
    assert P._wait(view, site_of, "c", "m@1", 2048, 9_000) == ("origin", load_ms(2048, "origin"), None)


def test_the_workload_is_a_function_of_the_seed():
    a, b = P.arrivals(TINY, P.catalog(TINY)), P.arrivals(TINY, P.catalog(TINY))
    assert a == b and a
    assert {t["site"] for t in a} == {"edge-00", "edge-01", "edge-02"}
    sizes = P.catalog(TINY)["sizes"]
    assert all(1024 <= s <= 70 * 1024 for s in sizes)


def test_both_arms_run_the_same_dispatches_and_only_the_on_arm_prefetches(tmp_path):
    off = P.simulate(TINY, False)
    on = P.simulate(TINY, True)
    assert off["dispatches"] == on["dispatches"] > 0
    assert off["prewarms"] == 0 and off["prefetched_gib"] == 0
    assert sum(off["sources"].values()) == off["dispatches"]
    again = P.simulate(TINY, True)
    assert {k: v for k, v in again.items() if k != "seconds"} == {k: v for k, v in on.items() if k != "seconds"}
    agg = P.aggregate([off, on])                   # runs of the two cache arms only: no no-cache comparisons
    assert set(agg) == {"off", "on", "changes", "change", "goals_by_baseline", "goals"}
    assert set(agg["changes"]) == {"on_vs_off"} and set(agg["goals_by_baseline"]) == {"off"}
    assert agg["off"]["dispatches"] == off["dispatches"]


def test_the_no_cache_arm_loads_everything_from_the_origin():
    none = P.simulate(TINY, False, cache=False)
    off, on = P.simulate(TINY, False), P.simulate(TINY, True)
    assert none["arm"] == "no_cache" and off["arm"] == "off" and on["arm"] == "on"
    assert none["dispatches"] == off["dispatches"] == on["dispatches"] > 0
    assert none["dispatched_gib"] == off["dispatched_gib"] == on["dispatched_gib"]
    # every start pulls its weights from the origin: no hit, origin bytes = the dispatched models' sizes
    assert none["sources"] == {"local": 0, "peer": 0, "origin": none["dispatches"]}
    assert none["hit_rate_pct"] == 0 and none["local_hit_rate_pct"] == 0
    assert none["origin_gib"] == round(sum(none["sizes_mib"]) / 1024, 3) == none["dispatched_gib"]
    assert none["waits_ms"] == [load_ms(s, "origin") for s in none["sizes_mib"]]
    assert none["prewarms"] == 0 and none["prefetched_gib"] == 0 and none["wasted_prefetch_pct"] is None
    # the planner has no cache to fill even when it is on
    planner_on = P.simulate(TINY, True, cache=False)
    assert planner_on["prewarms"] == 0 and planner_on["sources"] == none["sources"]
    assert on["prewarms"] > 0 and on["hit_rate_pct"] > 0

    agg = P.aggregate([none, off, on])
    assert set(agg) == {"no_cache", "off", "on", "changes", "change", "goals_by_baseline", "goals"}
    assert agg["no_cache"]["dispatches"] == agg["off"]["dispatches"] == agg["on"]["dispatches"]
    assert agg["no_cache"]["hit_rate_pct"] == 0 and agg["no_cache"]["origin_gib"] == agg["no_cache"]["dispatched_gib"]
    ch = agg["changes"]
    assert set(ch) == {"on_vs_no_cache", "on_vs_off", "off_vs_no_cache"} and agg["change"] == ch["on_vs_off"]
    assert ch["on_vs_no_cache"]["hit_rate_points"] == agg["on"]["hit_rate_pct"]
    assert ch["on_vs_no_cache"]["hit_rate_pct"] is None            # relative to a hit rate of 0
    assert ch["on_vs_no_cache"]["p50_pct"] == P._change(agg["no_cache"]["ready_s_p50"], agg["on"]["ready_s_p50"])
    gb = agg["goals_by_baseline"]
    assert set(gb) == {"no_cache", "off"} and agg["goals"] == gb["off"]["goals"]
    for base in ("no_cache", "off"):
        g = gb[base]["goals"]
        assert g["p50_change_pct"]["value"] == ch[f"on_vs_{base}"]["p50_pct"]
        assert g["hit_rate_pct"]["value"] == agg["on"]["hit_rate_pct"]
        assert gb[base]["met"] == all(v["met"] for v in g.values())
    text = P.render(agg)
    assert "no cache" in text and "cache + prewarm vs no cache" in text and "on-demand cache vs no cache" in text


def test_cli_writes_json(tmp_path):
    out = tmp_path / "w.json"
    assert P.main(["--seeds", "1", "--hours", "2.5", "--workers", "1", "--quiet", "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc["aggregate"]["on"]["runs"] == 1 and "load_model" in doc
    assert doc["aggregate"]["no_cache"]["runs"] == doc["aggregate"]["off"]["runs"] == 1
    assert [r["arm"] for r in doc["runs"]] == ["no_cache", "off", "on"]
    assert set(doc["aggregate"]["goals_by_baseline"]) == {"no_cache", "off"}


def test_the_run_on_leaves_the_window_alone_and_only_judges_its_prewarms():
    from dataclasses import replace
    window = int(TINY.hours * 3_600_000)
    short, long = replace(TINY, run_on_h=0.0), replace(TINY, run_on_h=1.0)
    inside = [[t for t in P.arrivals(w, P.catalog(w)) if t["at"] < window] for w in (short, long)]
    assert inside[0] == inside[1] and inside[0]
    assert any(t["at"] >= window for t in P.arrivals(long, P.catalog(long)))     # the run-on has arrivals
    a, b = P.simulate(short, True), P.simulate(long, True)
    same = ("dispatches", "sources", "hit_rate_pct", "prewarms", "prefetched_gib")
    assert {k: a[k] for k in same} == {k: b[k] for k in same}                   # measured: the window only
    assert b["prefetched_unused_gib"] <= a["prefetched_unused_gib"]             # more time to be used


def test_no_arm_beats_the_workload_s_hit_ceilings():
    c = P.hit_ceilings(TINY)
    assert 0 < c["cell_first"] <= c["site_first"] <= c["measured"]
    off, on = P.simulate(TINY, False), P.simulate(TINY, True)
    assert off["ceilings"] == on["ceilings"] == c and c["measured"] == off["dispatches"]
    hits = lambda r: r["sources"]["local"] + r["sources"]["peer"]   # noqa: E731
    assert hits(off) <= c["measured"] - c["site_first"]        # a cache of what was asked cannot hit a first ask
    assert hits(on) <= c["measured"] - c["cell_first"]         # nor can prewarming hit a version nobody asked yet
    agg = P.aggregate([off, on])["on"]
    assert agg["hit_ceiling_pct"] == round(100 * (1 - c["cell_first"] / c["measured"]), 3)


def test_a_sweep_parses_planner_arguments_and_refuses_unknown_ones():
    import pytest
    from suanli.errors import ReplayError
    assert P._parse_sweep("max_waste=0.2;max_waste=0.3, min_use=0.05") == [
        {"max_waste": 0.2}, {"max_waste": 0.3, "min_use": 0.05}]
    with pytest.raises(ReplayError, match="unknown planner arguments"):
        P._parse_sweep("max_wast=0.2")
    with pytest.raises(ReplayError, match="not key=value"):
        P._parse_sweep("max_waste")
    a, b = P.sweep(TINY, [3], [{"max_waste": 0.05}, {"max_waste": 0.5, "min_use": 0.0}], workers=1)
    assert a["prewarm"] == {"max_waste": 0.05} and b["prewarm"] == {"max_waste": 0.5, "min_use": 0.0}
    assert b["prefetched_gib"] >= a["prefetched_gib"]          # a looser waste budget prefetches no less


def test_the_release_rate_comes_from_the_command_line_and_must_be_positive(tmp_path):
    import pytest

    from suanli.errors import ReplayError

    out = tmp_path / "w.json"
    assert P.main(["--seeds", "1", "--hours", "2.5", "--workers", "1", "--quiet", "--release-every", "24",
                   "--json", str(out)]) == 0
    assert json.loads(out.read_text())["workload"]["release_every_h"] == 24
    with pytest.raises(ReplayError, match="release_every_h > 0"):
        P.main(["--seeds", "1", "--hours", "2.5", "--workers", "1", "--quiet", "--release-every", "0"])
