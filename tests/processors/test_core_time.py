"""Time as events: heartbeats, the cell clock, node health, lost tasks, stale copies,
periodic retries and telemetry conditions — all on log time, no wall clock (no broker)."""
from __future__ import annotations

import pytest

from core_helpers import Feed


def _cell(config=None):
    f = Feed(strategy="bestfit", config={"seed": 1, "retry_every_ms": 0, **(config or {})})
    for n in ("a", "b", "c"):
        f.node(n, cpu=4000, gpus=1)
    return f


def _kinds(out):
    return [k for k, _ in out]


def beat(f, node, at):
    return f.send("NodeHeartbeat", {"node_id": node, "at": at})


def tick(f, at):
    return f.send("CellTick", {"at": at})


def test_a_silent_node_goes_suspect_then_down_and_its_tasks_are_placed_elsewhere():
    f = _cell()
    for n in ("a", "b", "c"):
        beat(f, n, 1_000)
    placed = {}
    for i in range(3):
        [(kind, p)] = f.task(f"t{i}", cpu=1000, at=1_000)
        placed[p["task_id"]] = p["node_id"]
    victim = placed["t0"]
    on_victim = sorted(t for t, n in placed.items() if n == victim)
    others = [n for n in ("a", "b", "c") if n != victim]
    for at in range(2_000, 11_000, 1_000):              # the others keep beating; the victim is silent
        for n in others:
            beat(f, n, at)
        assert tick(f, at) == []                          # nothing before the suspect timeout
    for n in others:
        beat(f, n, 11_000)
    [(kind, p)] = tick(f, 11_000)                         # 10 s since its last heartbeat
    assert (kind, p["node_id"], p["status"], p["previous"]) == ("NodeHealthChanged", victim, "SUSPECT", "READY")
    assert p["last_heartbeat_at"] == 1_000 and "no heartbeat for 10 s" in p["reason"]
    assert f.task("late", cpu=1000, at=11_000)[0][1]["node_id"] != victim      # no new work on a SUSPECT node
    for at in (12_000, 13_000, 14_000, 15_000):
        for n in others:
            beat(f, n, at)
        assert tick(f, at) == []
    for n in others:
        beat(f, n, 16_000)
    out = tick(f, 16_000)                                 # 15 s: DOWN, its tasks lost and placed again
    assert _kinds(out) == ["NodeHealthChanged"] + ["TaskLost"] * len(on_victim) + ["TaskPlaced"] * len(on_victim)
    down = out[0][1]
    assert down["status"] == "DOWN" and down["lost_tasks"] == on_victim
    assert [p["task_id"] for k, p in out if k == "TaskLost"] == on_victim
    assert all(p["node_id"] != victim for k, p in out if k == "TaskPlaced")
    f.state.check()
    row = f.state.node_index[victim]
    assert f.state.cpu_free[row] == f.state.cpu_cap[row] and not f.state.ready[row]


def test_stale_reports_never_release_the_new_placement_and_running_copies_are_stopped():
    f = _cell()
    beat(f, "a", 0)
    beat(f, "b", 0)
    [(_, p)] = f.task("t", cpu=1000)
    old = p["node_id"]
    other = "b" if old == "a" else "a"
    f.node("spare", cpu=4000, gpus=1)
    beat(f, other, 15_000)
    out = tick(f, 15_000)
    new = next(p["node_id"] for k, p in out if k == "TaskPlaced")
    assert new != old
    held = f.state.cpu_free.copy()
    assert f.send("TaskStatusChanged", {"task_id": "t", "node_id": old, "status": "COMPLETED", "at": 15_500}) == []
    assert (f.state.cpu_free == held).all() and f.state.tasks["t"].node == new
    stop = f.send("TaskStatusChanged", {"task_id": "t", "node_id": old, "status": "RUNNING", "at": 15_600})
    assert stop == [("StopCommand", {"event_id": stop[0][1]["event_id"], "task_id": "t", "cell": "test",
                                     "node_id": old, "connector": "sim", "reason": f"stale copy: the task is placed on {new}",
                                     "issued_at": 15_600, "grace_ms": None})]
    # the new node's own report still counts
    assert _kinds(f.send("TaskStatusChanged", {"task_id": "t", "node_id": new, "status": "COMPLETED", "at": 16_000})) \
        == ["TaskReleased"]


def test_a_node_heard_again_comes_back_ready_and_takes_queued_work():
    f = Feed(strategy="bestfit", config={"seed": 1, "retry_every_ms": 0})
    f.node("only", cpu=2000)
    beat(f, "only", 0)
    f.task("t", cpu=1000)
    tick(f, 15_000)                                        # DOWN; t lost, nowhere to go
    assert f.state.tasks["t"].status == "PENDING" and f.state.queue[0][-1] == "t"
    out = beat(f, "only", 15_500)
    assert _kinds(out) == ["NodeHealthChanged", "TaskPlaced"] and out[0][1]["status"] == "READY"


def test_nodes_that_never_sent_a_heartbeat_are_not_watched():
    f = _cell()
    f.task("t", cpu=1000)
    assert tick(f, 10 ** 9) == []


def test_lost_tasks_go_first_in_their_priority():
    f = Feed(strategy="bestfit", config={"seed": 1, "retry_every_ms": 0})
    f.node("a", cpu=1000)
    beat(f, "a", 0)
    f.task("running", cpu=1000, priority=1)
    f.task("waiting", cpu=1000, priority=1)               # queued behind it, never fits
    f.task("urgent", cpu=1000, priority=5)
    tick(f, 15_000)
    assert [q[-1] for q in f.state.queue] == ["urgent", "running", "waiting"]


def test_periodic_retry_runs_on_the_cell_clock():
    f = Feed(strategy="bestfit", config={"seed": 1, "retry_every_ms": 5_000})
    f.node("a", cpu=1000)
    f.task("x", cpu=1000)
    f.task("y", cpu=1000)                                  # pending
    f.state.free("a", [], 0, 1000, 1024)                   # capacity appears with no release event
    f.state.tasks["x"].status = "COMPLETED"
    assert _kinds(tick(f, 1_000)) == ["TaskPlaced"]       # first tick retries (next at 6 s)
    assert tick(f, 2_000) == []


@pytest.mark.parametrize("condition", ["HOT", "CONGESTED", "DEGRADED"])
def test_nodes_in_a_bad_condition_are_avoided_while_others_fit(condition):
    f = Feed(strategy="bestfit", config={"seed": 1})
    f.node("bad", cpu=2000)                                # bestfit prefers the tighter node
    f.node("good", cpu=8000)
    f.send("NodeConditionChanged", {"node_id": "bad", "condition": condition, "at": 5})
    [(_, p)] = f.task("t1", cpu=1000)
    assert p["node_id"] == "good"
    assert {"reason": f"node {condition} (telemetry)", "nodes": 1, "sample": ["bad"]} in p["provenance"]["filtered"]
    f.task("fill", cpu=7000)                               # now only the bad node fits: better than nothing
    assert f.task("t2", cpu=1000)[0][1]["node_id"] == "bad"
    f.send("NodeConditionChanged", {"node_id": "bad", "condition": "NORMAL", "previous": condition, "at": 9})
    assert f.state.condition_ok.all()


def test_one_heartbeat_batch_keeps_every_node_it_names_alive_and_brings_silent_ones_back():
    f = _cell()
    f.send("NodeHeartbeat", {"node_id": "a", "nodes": ["b", "c", "nobody"], "at": 1_000})   # unknown: ignored
    assert list(f.state.last_heartbeat) == [1_000, 1_000, 1_000]
    for at in range(2_000, 11_000, 1_000):
        f.send("NodeHeartbeat", {"node_id": "a", "nodes": ["b"], "at": at})              # c falls silent
        assert tick(f, at) == []
    f.send("NodeHeartbeat", {"node_id": "a", "nodes": ["b"], "at": 11_000})
    [(kind, p)] = tick(f, 11_000)
    assert (kind, p["node_id"], p["status"]) == ("NodeHealthChanged", "c", "SUSPECT")
    out = f.send("NodeHeartbeat", {"node_id": "nobody", "nodes": ["a", "c"], "at": 11_500})
    assert [(k, p["node_id"], p["status"], p["previous"]) for k, p in out] == \
        [("NodeHealthChanged", "c", "READY", "SUSPECT")]
