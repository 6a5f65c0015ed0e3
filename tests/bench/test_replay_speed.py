"""bench/replay_speed.py: the replay figures are produced and add up (nothing about speed)."""
from suanli.bench.replay_speed import replay_events_per_second
from suanli.replay.dir_registry import DirRegistry
from suanli.schemas.catalog import catalog
from suanli.schemas.codec import Codec


def _codec() -> Codec:
    return Codec(DirRegistry({100 + i: ev.schema for i, (_k, ev) in enumerate(sorted(catalog().items()))}))


def test_replay_figures_add_up():
    r = replay_events_per_second(_codec(), 30, 60, heartbeat_rounds=2)
    assert r["events"] == 90 and r["decisions"] >= 60 and r["events_per_s"] > 0 and r["events_per_cpu_s"] > 0
    assert set(r["by_kind"]) == {"NodeRegistered", "TaskSubmitted"}
    assert sum(k["events"] for k in r["by_kind"].values()) == r["events"]
    assert sum(k["seconds"] for k in r["by_kind"].values()) <= r["seconds"] + 0.01
    assert 0 < r["core_seconds"] <= r["seconds"] and 0 < r["core_share"] <= 1
    assert r["verify_identical"] is True and 0 < r["verify_events_per_s"] <= r["events_per_s"]
    hb = r["heartbeats"]
    assert hb["events"] == 60 and hb["events_per_s"] > 0 and hb["core_seconds"] <= hb["seconds"]


def test_heartbeats_can_be_left_out():
    assert "heartbeats" not in replay_events_per_second(_codec(), 5, 5, heartbeat_rounds=0)
