"""The cold-start what-if (replay/prewarm_whatif.py) on a tiny scenario."""
from __future__ import annotations

import json

from suanli.connectors.model_loading import load_ms
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
    agg = P.aggregate([off, on])
    assert set(agg) == {"off", "on", "change", "goals"}
    assert agg["off"]["dispatches"] == off["dispatches"]


def test_cli_writes_json(tmp_path):
    out = tmp_path / "w.json"
    assert P.main(["--seeds", "1", "--hours", "2.5", "--workers", "1", "--quiet", "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc["aggregate"]["on"]["runs"] == 1 and "load_model" in doc
