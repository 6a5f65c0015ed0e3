"""Gangs through the core: members wait until all arrived, then start together, all or
nothing, inside one zone when one holds them (no broker)."""
from __future__ import annotations

from core_helpers import Feed


def _zones():
    f = Feed(strategy="default", config={"seed": 1, "retry_every_ms": 0})
    for zone, names in (("z1", ["a1", "a2"]), ("z2", ["b1", "b2", "b3"])):
        for n in names:
            f.send("NodeRegistered", {"node_id": n, "zone": zone, "cpu_milli": 8000, "memory_mib": 65536,
                                      "accelerators": [{"kind": "GPU", "model": "T4", "count": 2, "memory_mib": 16384}]})
    return f


def member(f, tid, gang, size, gpus=1):
    return f.send("TaskSubmitted", {
        "task_id": tid, "submitted_at": 1, "labels": {"gang": gang, "gang-size": str(size)},
        "resources": {"cpu_milli": 1000, "memory_mib": 1024, "gpu_count": gpus, "gpu_milli": 1000}})


def test_members_wait_then_start_together_in_one_zone():
    f = _zones()
    for i in range(5):
        out = member(f, f"g{i}", "job", 6)
        assert [k for k, _ in out] == ["TaskPending"]
        assert out[0][1]["reasons"][0]["reason"] == f"gang job: {i + 1} of 6 members arrived"
    out = member(f, "g5", "job", 6)
    assert [k for k, _ in out] == ["TaskPlaced"] * 6
    zones = {f.state.nodes[p["node_id"]].zone for _, p in out}
    assert zones == {"z2"}                                   # 6 GPUs: only z2 (3 nodes x 2) holds them
    assert sorted(p["task_id"] for _, p in out) == [f"g{i}" for i in range(6)]
    assert all("gang job: all 6 members here" in " ".join(p["provenance"]["path"]) for _, p in out)
    assert f.state.queue == []
    f.state.check()


def test_a_gang_that_does_not_fit_waits_whole_and_starts_when_room_appears():
    f = _zones()
    for i in range(4):
        member(f, f"big{i}", "big", 4, gpus=2)               # takes 8 of the 10 GPUs
    out = [member(f, f"h{i}", "h", 2, gpus=2) for i in range(2)]
    assert [k for k, _ in out[-1]] == ["TaskPending"]
    assert "do not fit together" in out[-1][0][1]["reasons"][0]["reason"]
    assert all(f.state.tasks[f"h{i}"].status == "PENDING" for i in range(2))    # nothing started alone
    out = f.status("big0", "COMPLETED")                      # frees 2 GPUs: with the 2 free, h fits
    kinds = [k for k, _ in out]
    assert kinds[0] == "TaskReleased" and kinds[1:] == ["TaskPlaced", "TaskPlaced"]
    f.state.check()
