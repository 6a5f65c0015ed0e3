"""Gold standby (qos.py, issue #14): each plain gold task also runs a copy on another node,
so one node's failure never takes both; the copy goes when the task ends."""
import json

import pytest

from core_helpers import Feed, typed
from suanli.errors import RejectedInput
from suanli.processors import decide
from suanli.processors.qos import primary_of, standby_id
from suanli.processors.state import HOLDING, CellState

SB = standby_id("gold")


def of(out, kind):
    return [p for k, p in out if k == kind]


def cell(nodes=("a", "b", "c"), cpu=8000, config=None):
    f = Feed(strategy="bestfit", config={"seed": 1, "retry_every_ms": 0,
                                         "qos": {"grace_ms": 0, "gold_standby": True}, **(config or {})})
    for n in nodes:
        f.node(n, cpu=cpu)
        f.send("NodeHeartbeat", {"node_id": n, "at": 1_000})
    return f


def test_ids():
    assert SB == "gold~standby" and primary_of(SB) == "gold" and primary_of("gold") is None


def test_off_by_default_no_copy():
    f = Feed(strategy="bestfit", config={"seed": 1})
    f.node("a")
    f.node("b")
    out = f.task("gold", qos="GOLD")
    assert [p["task_id"] for p in of(out, "TaskPlaced")] == ["gold"] and SB not in f.state.tasks


def test_a_gold_task_gets_a_copy_on_another_node_and_others_do_not():
    f = cell()
    out = f.task("gold", cpu=3000, qos="GOLD", at=1_000)
    placed = of(out, "TaskPlaced")
    assert [p["task_id"] for p in placed] == ["gold", SB]
    assert placed[0]["node_id"] != placed[1]["node_id"]
    # bestfit would have stacked the copy on the primary's node (the tightest fit): the
    # provenance names what kept it off
    filtered = [o["reason"] for o in placed[1]["provenance"]["filtered"]]
    assert "its other copy's node (gold standby)" in filtered, filtered
    sb = f.state.tasks[SB].task
    assert (sb.qos_tier, sb.request, sb.tenant) == ("GOLD", f.state.tasks["gold"].task.request, "t")
    assert not of(f.task("silver", cpu=1000), "TaskPlaced")[0]["task_id"].endswith("~standby")
    gang = {"gang": "j", "gang-size": "2"}
    f.task("m1", cpu=1000, qos="GOLD", labels=gang)
    assert sorted(p["task_id"] for p in of(f.task("m2", cpu=1000, qos="GOLD", labels=gang), "TaskPlaced")) == \
        ["m1", "m2"]                                      # gang members get no copy
    f.state.check()


def test_the_primarys_node_fails_the_copy_runs_on_and_the_move_avoids_it():
    f = cell()
    f.task("gold", cpu=3000, qos="GOLD", at=1_000)
    p, s = f.state.tasks["gold"].node, f.state.tasks[SB].node
    for n in "abc":
        if n != p:
            f.send("NodeHeartbeat", {"node_id": n, "at": 16_000})
    out = f.send("CellTick", {"at": 16_000})                  # p silent for 15 s: DOWN
    mig = of(out, "TaskMigrated")
    assert [m["task_id"] for m in mig] == ["gold"]
    # s has room (8000 - 3000) but holds the other copy
    assert mig[0]["to_node"] not in (p, s)
    assert f.state.tasks[SB].node == s and f.state.tasks[SB].status in HOLDING
    assert not of(out, "TaskLost")
    f.state.check()


def test_the_copys_node_fails_the_copy_moves_off_the_primarys():
    f = cell()
    f.task("gold", cpu=3000, qos="GOLD", at=1_000)
    p, s = f.state.tasks["gold"].node, f.state.tasks[SB].node
    out = f.send("NodeStatusChanged", {"node_id": s, "status": "DOWN", "reason": "host lost", "at": 2_000})
    mig = of(out, "TaskMigrated")
    assert [m["task_id"] for m in mig] == [SB] and mig[0]["to_node"] not in (p, s)
    assert f.state.tasks["gold"].node == p
    f.state.check()


@pytest.mark.parametrize("how", ["COMPLETED", "FAILED", "cancel"])
def test_the_copy_goes_when_the_task_ends(how):
    f = cell()
    f.task("gold", cpu=3000, qos="GOLD", at=1_000)
    s = f.state.tasks[SB].node
    f.status("gold", "RUNNING", at=1_100)
    f.send("TaskStatusChanged", {"task_id": SB, "node_id": s, "status": "RUNNING", "at": 1_100})
    if how == "cancel":
        out = f.send("TaskCancelled", {"task_id": "gold", "reason": "no longer needed", "at": 2_000})
    else:
        out = f.status("gold", how, at=2_000)
    rel = of(out, "TaskReleased")
    assert [(r["task_id"], r["cause"]) for r in rel] == [("gold", "CANCELLED" if how == "cancel" else how),
                                                         (SB, "CANCELLED")]
    assert rel[1]["node_id"] == s and rel[1]["provenance"]["path"][0].startswith("standby of gold, which ended")
    stops = [st for st in of(out, "StopCommand") if st["task_id"] == SB]
    assert len(stops) == 1 and stops[0]["node_id"] == s
    assert int(f.state.cpu_free.sum()) == 3 * 8000
    f.state.check()


def test_the_copy_waits_for_a_second_node_and_takes_it_when_one_registers():
    f = cell(nodes=("a",))
    out = f.task("gold", cpu=1000, qos="GOLD", at=1_000)
    assert of(out, "TaskPlaced")[0]["node_id"] == "a"
    pend = of(out, "TaskPending")
    assert [p["task_id"] for p in pend] == [SB]
    assert any("gold standby" in r["reason"] for r in pend[0]["reasons"]), pend[0]["reasons"]
    out = f.node("b", cpu=8000)
    assert [(p["task_id"], p["node_id"]) for p in of(out, "TaskPlaced")] == [(SB, "b")]
    f.state.check()


def test_a_submission_under_a_standby_id_is_refused_with_the_reason():
    f = cell()
    with pytest.raises(RejectedInput, match="reserved for gold standby"):
        decide(f.state, typed("TaskSubmitted", {"task_id": "x~standby", "submitted_at": 1, "qos_tier": "GOLD",
                                                "resources": {"cpu_milli": 1, "memory_mib": 1}}),
               ("cell.test", 0, 999))


def test_replay_from_a_snapshot_mid_run_is_identical():
    def run(split):
        f = cell()
        script = [("task", dict(tid="gold", cpu=3000, qos="GOLD", at=1_000)),
                  ("task", dict(tid="b1", cpu=8000, qos="BRONZE", at=1_001)),
                  ("task", dict(tid="g2", cpu=2000, qos="GOLD", at=1_002)),
                  ("NodeHeartbeat", {"node_id": "b", "at": 16_000}),
                  ("NodeHeartbeat", {"node_id": "c", "at": 16_000}),
                  ("CellTick", {"at": 16_000}),
                  ("status", ("gold", "COMPLETED", 17_000)),
                  ("CellTick", {"at": 18_000})]
        for i, (kind, ev) in enumerate(script):
            if split is not None and i == split:
                f.state = CellState.from_snapshot(json.loads(json.dumps(f.state.to_snapshot())))
            if kind == "task":
                ev = dict(ev)
                f.task(ev.pop("tid"), **ev)
            elif kind == "status":
                f.status(*ev[:2], at=ev[2])
            else:
                f.send(kind, ev)
            f.state.check()
        return json.dumps(f.outputs, sort_keys=True), json.dumps(f.state.to_snapshot(), sort_keys=True)

    whole = run(None)
    assert "gold~standby" in whole[0] and "TaskMigrated" in whole[0]
    for split in (1, 3, 6, 7):
        assert run(split) == whole


def test_a_gold_task_out_of_service_evicts_another_tasks_copy_after_bronze():
    f = cell(nodes=("a", "b", "c"), cpu=4000)
    f.task("gold", cpu=4000, qos="GOLD", at=1_000)
    copy_node = f.state.tasks[SB].node
    f.task("bronze", cpu=4000, qos="BRONZE", at=1_001)                 # the third node
    out = f.task("g2", cpu=4000, qos="GOLD", at=1_002)
    assert [p["task_id"] for p in of(out, "TaskPreempted")] == ["bronze"]   # bronze first
    # g2's own copy finds every node taken by gold; a copy never evicts a copy, and a task
    # placed for the first time does not either
    assert [p["task_id"] for p in of(out, "TaskPending")] == ["g2~standby", "bronze"]
    g2_node = f.state.tasks["g2"].node
    assert g2_node != copy_node
    out = f.send("NodeStatusChanged", {"node_id": g2_node, "status": "DOWN", "reason": "host lost", "at": 2_000})
    # g2 ran and has no copy running: out of service, it may take another task's copy
    pre = of(out, "TaskPreempted")
    assert [p["task_id"] for p in pre] == [SB] and pre[0]["preempted_by"] == "g2"
    mig = of(out, "TaskMigrated")[0]
    assert (mig["task_id"], mig["to_node"], mig["preempted"]) == ("g2", copy_node, [SB])
    assert "a gold standby copy" in " ".join(mig["provenance"]["path"])
    assert [s["task_id"] for s in of(out, "StopCommand")] == [SB]
    assert f.state.tasks["gold"].status in HOLDING                     # its task runs on
    assert SB in [p["task_id"] for p in of(out, "TaskPending")]        # queued again (grace 0)
    f.state.check()


def test_a_task_whose_copy_runs_does_not_evict_others_copies_to_move():
    f = cell(nodes=("a", "b", "c"), cpu=4000)
    f.task("gold", cpu=4000, qos="GOLD", at=1_000)
    f.task("g2", cpu=4000, qos="GOLD", at=1_001)                       # the third node; its copy waits
    node = f.state.tasks["gold"].node
    out = f.send("NodeStatusChanged", {"node_id": node, "status": "DOWN", "reason": "host lost", "at": 2_000})
    assert not of(out, "TaskPreempted") and not of(out, "TaskMigrated")
    assert [p["task_id"] for p in of(out, "TaskLost")] == ["gold"]     # its copy serves meanwhile
    assert f.state.tasks[SB].status in HOLDING
    f.state.check()


def test_with_the_standby_off_gold_never_evicts_gold():
    f = Feed(strategy="bestfit", config={"seed": 1, "retry_every_ms": 0, "qos": {"grace_ms": 0}})
    f.node("a", cpu=4000)
    f.task("gold", cpu=4000, qos="GOLD")
    out = f.task("g2", cpu=4000, qos="GOLD")
    assert not of(out, "TaskPreempted") and of(out, "TaskPending")


def test_a_drain_move_never_evicts_a_copy_the_task_runs_meanwhile():
    f = cell(nodes=("a", "b", "c"), cpu=4000)
    f.task("gold", cpu=4000, qos="GOLD", at=1_000)                     # a, its copy b
    f.task("g2", cpu=4000, qos="GOLD", at=1_001)                       # c; its copy waits
    node = f.state.tasks["g2"].node
    out = f.send("NodeStatusChanged", {"node_id": node, "status": "DRAINING", "reason": "maintenance", "at": 2_000})
    assert not of(out, "TaskPreempted") and not of(out, "TaskMigrated")   # g2 still runs where it is
    out = f.send("NodeStatusChanged", {"node_id": node, "status": "DOWN", "reason": "host lost", "at": 3_000})
    assert [p["task_id"] for p in of(out, "TaskPreempted")] == [SB]      # now it is out of service
    f.state.check()
