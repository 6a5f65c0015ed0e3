"""The task profiler (processors/profiler.py) through the core: dimensions, history, snapshot."""
from __future__ import annotations

import json
from dataclasses import fields

from core_helpers import Feed

from suanli.processors import CellState
from suanli.processors.model import TaskProfile
from suanli.processors.profiler import Profiler, numeric_dimensions

ON = {"seed": 1, "profiles": {"enabled": True}}


def _finish(f: Feed, tid: str, at: int, *, exit_code: int = 0, wall_ms: int = 60_000, cpu_s: float = 30.0,
            rss: int = 512, gpu_util: float | None = None, io_mib: float | None = None) -> None:
    node = f.state.tasks[tid].node
    f.send("TaskStatusChanged", {"task_id": tid, "cell": "test", "node_id": node,
                                 "status": "COMPLETED" if exit_code == 0 else "FAILED", "at": at,
                                 "exit_code": exit_code, "message": "",
                                 "usage": {"cpu_seconds": cpu_s, "max_rss_mib": rss, "wall_ms": wall_ms,
                                           "gpu_util": gpu_util, "gpu_memory_peak_mib": None,
                                           "io_read_mib": io_mib, "io_write_mib": io_mib, "net_mib": None}})


def _profile(outs: list) -> dict:
    placed = [d for k, d in outs if k in ("TaskPlaced", "TaskPending")]
    assert placed, outs
    return placed[-1]["provenance"]["profile"]


def test_profiles_are_off_by_default_and_decisions_carry_none() -> None:
    f = Feed()
    f.node("n1")
    outs = f.task("a")
    assert outs[0][1]["provenance"]["profile"] is None
    assert f.state.profiler is None
    assert "profiler" not in f.state.to_snapshot()


def test_profile_has_over_fifty_named_dimensions_and_learns_from_finished_runs() -> None:
    f = Feed(config=ON)
    f.node("n1", gpus=2)
    first = _profile(f.task("a", cpu=2000, mem=4096, at=1_000))
    assert first["history_level"] == "prior"
    assert first["req_cpu_cores"] == 2.0 and first["req_memory_gib"] == 4.0
    assert len(numeric_dimensions()) >= 50
    # the same signature runs three times: 60 s, 120 s, 90 s; half its CPU; some IO
    t = 1_000
    for i, wall in enumerate((60_000, 120_000, 90_000)):
        tid = f"r{i}"
        f.task(tid, cpu=2000, mem=4096, at=t)
        t += wall
        _finish(f, tid, t, wall_ms=wall, cpu_s=wall / 1000, rss=2048, io_mib=wall / 1000 * 5)
    _finish(f, "a", t + 1)
    prof = _profile(f.task("next", cpu=2000, mem=4096, at=t + 10))
    assert prof["history_level"] == "signature"
    assert prof["history_runs"] == 4.0
    assert 60 <= prof["duration_p50_s"] <= 120
    assert 60 <= prof["predicted_duration_s"] <= 120
    assert prof["duration_class"] == "short"
    assert abs(prof["cpu_used_ratio_mean"] - 0.5 * 3 / 4 - 30 / 60 / 2 / 4) < 0.2
    assert prof["mem_peak_ratio_mean"] > 0.3
    assert prof["io_read_mib_s"] > 0 and prof["io_intensity"] > 0
    assert prof["arrivals"] == 5.0 and prof["interarrival_mean_s"] > 0
    assert prof["dims_filled"] >= 50, prof["dims_filled"]


def test_exit_codes_and_oom_share_are_learnt() -> None:
    f = Feed(config=ON)
    f.node("n1")
    f.task("x1", at=1)
    _finish(f, "x1", 10_000, exit_code=137)
    f.task("x2", at=20_000)
    _finish(f, "x2", 30_000, exit_code=0)
    prof = _profile(f.task("x3", at=40_000))
    assert prof["exit_oom_share"] == 0.5 and prof["success_rate"] == 0.5
    assert prof["oom_risk"] >= 0.5


def test_history_survives_a_snapshot_and_replay_is_identical() -> None:
    def run(restore_at: int | None) -> list:
        f = Feed(config=ON)
        f.node("n1", gpus=1)
        outs = []
        t = 0
        for i in range(12):
            if restore_at == i:
                snap = json.loads(json.dumps(f.state.to_snapshot()))
                f.state = CellState.from_snapshot(snap)
            t += 5_000
            outs += f.task(f"t{i}", at=t)
            if f.state.tasks[f"t{i}"].node:
                _finish(f, f"t{i}", t + 1_000 * (i + 1), wall_ms=1_000 * (i + 1))
        return outs

    straight = run(None)
    assert straight == run(6)
    assert straight == run(None)


def test_signature_history_is_bounded() -> None:
    f = Feed(config={"seed": 1, "profiles": {"enabled": True, "max_signatures": 3}})
    f.node("n1", cpu=64000)
    for i in range(8):
        f.task(f"s{i}", cpu=1000 + i, at=i + 1)
    assert len(f.state.profiler.histories) == 3 + 1          # + the whole cell's


def test_plugins_read_the_profile_from_the_cycle_context() -> None:
    from suanli.processors.framework import CycleContext
    f = Feed(config=ON)
    f.node("n1")
    f.task("a", at=1)
    ctx = CycleContext(f.state, f.state.tasks["a"].task.request, "a", 0, {})
    assert isinstance(ctx.profile, TaskProfile)
    assert ctx.profile.req_cpu_cores == 1.0


def test_profiler_json_round_trip_is_exact() -> None:
    f = Feed(config=ON)
    f.node("n1")
    f.task("a", at=1)
    _finish(f, "a", 5_000)
    p = f.state.profiler
    assert Profiler.from_json(json.loads(json.dumps(p.to_json()))).to_json() == p.to_json()


def test_every_profile_field_is_documented_in_the_schema() -> None:
    from suanli.schemas.catalog import AVRO_DIR
    schema = json.loads((AVRO_DIR / "io.suanli.events.TaskProfile.avsc").read_text())
    docs = {f["name"]: f.get("doc", "") for f in schema["fields"]}
    for fld in fields(TaskProfile):
        assert len(docs[fld.name]) > 10, fld.name


def test_congested_nodes_are_kept_from_io_heavy_tasks_only() -> None:
    def cell(io_mib: float) -> Feed:
        f = Feed(config=ON)
        f.node("busy", cpu=8000)                 # bestfit-like packing aside, both nodes fit
        f.node("calm", cpu=64000)
        f.send("NodeConditionChanged", {"node_id": "busy", "cell": "test", "condition": "CONGESTED",
                                        "previous": "NORMAL", "metrics": {}, "reason": "nic", "at": 1})
        for i in range(2):                       # the signature's history: two measured runs
            f.task(f"h{i}", at=10 + i)
            _finish(f, f"h{i}", 60_000 + i, wall_ms=60_000, io_mib=io_mib)
        return f

    light = cell(io_mib=6.0)                     # 0.2 MiB/s: light
    outs = light.task("next", at=120_000)
    assert outs[0][0] == "TaskPlaced" and outs[0][1]["node_id"] == "busy"      # bestfit: the fuller node
    assert outs[0][1]["provenance"]["profile"]["io_intensity"] < 0.3
    heavy = cell(io_mib=6000.0)                  # 200 MiB/s: heavy
    outs = heavy.task("next", at=120_000)
    assert outs[0][1]["node_id"] == "calm"
    assert any("CONGESTED" in f["reason"] for f in outs[0][1]["provenance"]["filtered"])
