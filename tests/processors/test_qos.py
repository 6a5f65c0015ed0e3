"""QoS in the core: gold pools, silver priority, preemptible bronze, migration, tiers (issue #14)."""
import json

from core_helpers import Feed
from suanli.processors.state import HOLDING, CellState


def kinds(out):
    return [k for k, _ in out]


def of(out, kind):
    return [p for k, p in out if k == kind]


def pooled(config=None, **kw):
    """g1 (gold pool), s1, s2: 4 CPUs each."""
    f = Feed(strategy="bestfit", config={"seed": 1, "retry_every_ms": 0, **(config or {})})
    f.node("g1", cpu=4000, labels={"pool": "gold"})
    f.node("s1", cpu=4000)
    f.node("s2", cpu=4000)
    return f


def test_gold_uses_its_pool_first_then_overflows_and_silver_never_enters_it():
    f = pooled()
    assert of(f.task("g-a", cpu=4000, qos="GOLD"), "TaskPlaced")[0]["node_id"] == "g1"
    second = of(f.task("g-b", cpu=4000, qos="GOLD"), "TaskPlaced")[0]
    assert second["node_id"] in ("s1", "s2")
    assert "qos: gold pool full -> shared pool" in second["provenance"]["path"]
    f.send("TaskStatusChanged", {"task_id": "g-a", "node_id": "g1", "status": "COMPLETED", "at": 5})
    # g1 is free now, yet silver may not enter the gold pool: the free shared node takes it,
    # and once that is full silver waits with a reason that names the pool
    assert of(f.task("s-a", cpu=4000), "TaskPlaced")[0]["node_id"] in ("s1", "s2")
    pend = of(f.task("s-b", cpu=4000), "TaskPending")[0]
    assert any("gold pool" in r["reason"] for r in pend["reasons"]), pend["reasons"]
    # bronze runs on the idle gold pool
    assert of(f.task("b-a", cpu=4000, qos="BRONZE"), "TaskPlaced")[0]["node_id"] == "g1"


def test_gold_share_sets_aside_part_of_each_model_when_no_node_is_labelled():
    f = Feed(strategy="bestfit", config={"seed": 1, "qos": {"gold_share": 0.5}})
    for i in range(4):
        f.node(f"n{i}", cpu=1000)
    placed = {p["node_id"] for p in of(sum((f.task(f"s{i}", cpu=1000) for i in range(4)), []), "TaskPlaced")}
    assert len(placed) == 2                              # half the nodes are the gold pool
    gold = of(f.task("g", cpu=1000, qos="GOLD"), "TaskPlaced")[0]["node_id"]
    assert gold not in placed


def test_silver_preempts_bronze_and_the_decision_cites_preemptor_and_victims():
    f = pooled({"qos": {"grace_ms": 2_000}})
    for i, node_cpu in enumerate([2000, 2000, 4000, 4000]):
        f.task(f"b{i}", cpu=node_cpu, qos="BRONZE", priority=i, at=10 + i)
    assert not f.state.queue                            # all bronze placed: g1, s1, s2 full
    out = f.task("silver", cpu=4000, at=1_000)
    pre = of(out, "TaskPreempted")
    assert len(pre) == 1 and pre[0]["preempted_by"] == "silver"
    victim = pre[0]["task_id"]
    assert f.state.tasks[victim].task.qos_tier == "BRONZE"
    assert pre[0]["victims"] == [victim] and pre[0]["grace_ms"] == 2_000
    assert "lowest tier and priority first" in " ".join(pre[0]["provenance"]["path"])
    placed = of(out, "TaskPlaced")[0]
    assert placed["task_id"] == "silver" and placed["node_id"] == pre[0]["node_id"]
    assert any(p.startswith("preempt:") for p in placed["provenance"]["path"])
    stop = of(out, "StopCommand")[0]
    assert stop["task_id"] == victim and stop["grace_ms"] == 2_000
    # one victim (the fewest) of the lowest priority that is enough: s1/s2 hold one bronze of
    # 4000 each (priorities 2, 3); g1 holds two of 2000 (priorities 0, 1) but silver may not go there
    assert victim == "b2"
    assert f.state.tasks[victim].status == "PREEMPTED"
    # the grace ends on the cell clock: queued again, with a reason naming the preemptor
    assert kinds(f.send("CellTick", {"at": 2_999})) == []
    back = of(f.send("CellTick", {"at": 3_000}), "TaskPending")
    assert back and back[0]["task_id"] == victim and "preempted by silver" in back[0]["reasons"][0]["reason"]
    f.state.check()


def test_a_victim_that_finishes_during_its_grace_is_done_and_its_stop_report_changes_nothing():
    f = pooled({"qos": {"grace_ms": 5_000}})
    for n in ("g1", "s1", "s2"):
        f.task(f"b-{n}", cpu=4000, qos="BRONZE")
    out = f.task("silver-1", cpu=4000, at=100)
    v1 = of(out, "TaskPreempted")[0]
    # this victim's process was stopped (FAILED) on its old node: nothing changes, it waits its grace
    assert f.send("TaskStatusChanged", {"task_id": v1["task_id"], "node_id": v1["node_id"], "status": "FAILED",
                                        "at": 200}) == []
    assert f.state.tasks[v1["task_id"]].status == "PREEMPTED"
    v2 = of(f.task("silver-2", cpu=4000, at=300), "TaskPreempted")[0]
    # this one finished on its own before the stop took effect: the work is done
    out = f.send("TaskStatusChanged", {"task_id": v2["task_id"], "node_id": v2["node_id"], "status": "COMPLETED",
                                       "at": 400})
    assert of(out, "TaskReleased")[0]["cause"] == "COMPLETED"
    assert f.state.tasks[v2["task_id"]].status == "COMPLETED"
    back = of(f.send("CellTick", {"at": 6_000}), "TaskPending")
    assert [p["task_id"] for p in back] == [v1["task_id"]]          # only the unfinished one comes back
    f.state.check()


def test_gold_preempts_in_its_pool_the_fewest_lowest_victims():
    f = pooled({"qos": {"grace_ms": 0}})
    f.task("b-lo", cpu=2000, qos="BRONZE", priority=0)
    f.task("b-hi", cpu=2000, qos="BRONZE", priority=9)
    for n in ("x1", "x2"):
        f.task(n, cpu=4000)                                # silver fills s1 and s2
    assert {f.state.tasks[t].node for t in ("b-lo", "b-hi")} == {"g1"}
    out = f.task("gold", cpu=2000, qos="GOLD", at=50)
    assert [p["task_id"] for p in of(out, "TaskPreempted")] == ["b-lo"]
    assert of(out, "TaskPlaced")[0]["node_id"] == "g1"
    # grace 0: the victim is queued again in the same decision
    assert of(out, "TaskPending")[0]["task_id"] == "b-lo"


def test_no_task_is_ever_the_victim_of_a_lower_or_equal_tier():
    f = pooled({"qos": {"grace_ms": 0}})
    f.task("g", cpu=4000, qos="GOLD")
    f.task("s1", cpu=4000)
    f.task("s2", cpu=4000)
    assert not of(f.task("bronze", cpu=4000, qos="BRONZE"), "TaskPreempted")   # bronze never preempts
    assert not of(f.task("silver", cpu=4000), "TaskPreempted")                  # silver never evicts silver
    assert not of(f.task("gold2", cpu=4000, qos="GOLD"), "TaskPreempted")       # nor gold silver (default)


def test_queue_order_urgent_then_tier_then_aged_priority():
    f = pooled({"qos": {"aging_ms": 1_000}})
    for n in ("g1", "s1", "s2"):
        f.task(f"fill-{n}", cpu=4000, qos="GOLD" if n == "g1" else "SILVER")
    f.task("old-low", cpu=4000, priority=0, at=1_000)
    f.task("new-high", cpu=4000, priority=2, at=1_500)      # 2 priority = 2 s of waiting
    f.task("late-high", cpu=4000, priority=2, at=4_000)     # old-low has aged past it
    f.task("bronze", cpu=4000, qos="BRONZE", priority=100, at=4_000)
    f.task("gold", cpu=4000, qos="GOLD", at=4_000)
    f.task("urgent", cpu=4000, labels={"scheduling": "urgent"}, at=4_000)
    assert [q[-1] for q in f.state.queue] == ["urgent", "gold", "new-high", "old-low", "late-high", "bronze"]


def test_urgent_tasks_are_decided_by_the_bounded_strategy():
    f = Feed(strategy="default", config={"seed": 1})
    f.node("a", cpu=8000)
    placed = of(f.task("u", cpu=1000, labels={"scheduling": "urgent"}), "TaskPlaced")[0]
    assert placed["provenance"]["strategy"]["name"] == "bestfit"
    assert "urgent tier -> bestfit" in placed["provenance"]["path"]


def test_batch_tasks_wait_for_their_window_and_are_placed_jointly_without_holding_up_others():
    f = Feed(strategy="bestfit", config={"seed": 1, "retry_every_ms": 1_000, "qos": {"batch_window_ms": 10_000}})
    f.node("a", cpu=8000)
    for i in range(3):
        out = f.task(f"b{i}", cpu=2000, labels={"scheduling": "batch"}, at=100 + i)
        assert kinds(out) == ["TaskPending"] and "batch window" in out[0][1]["reasons"][0]["reason"]
    assert kinds(f.task("n", cpu=1000, at=200)) == ["TaskPlaced"]        # a normal task is not held up
    assert not of(f.send("CellTick", {"at": 5_000}), "TaskPlaced")       # periodic retries skip batch tasks
    out = f.send("CellTick", {"at": 10_100})
    placed = of(out, "TaskPlaced")
    assert sorted(p["task_id"] for p in placed) == ["b0", "b1", "b2"]
    assert any("batch" in step for step in placed[0]["provenance"]["path"])


def _gold_on_a(config=None):
    f = Feed(strategy="bestfit", config={"seed": 1, "retry_every_ms": 0, "qos": {"grace_ms": 0}, **(config or {})})
    f.node("a", cpu=4000)
    f.node("b", cpu=4000)
    for n in ("a", "b"):
        f.send("NodeHeartbeat", {"node_id": n, "at": 1_000})
    f.task("gold", cpu=3000, qos="GOLD", at=1_000)
    assert f.state.tasks["gold"].node == "a"
    f.task("silver", cpu=1000, at=1_000)                 # a: gold + silver
    f.task("bronze", cpu=4000, qos="BRONZE", at=1_000)   # b: full of bronze
    assert f.state.tasks["silver"].node == "a" and f.state.tasks["bronze"].node == "b"
    return f


def test_gold_migrates_at_once_when_its_node_goes_down_preempting_bronze():
    f = _gold_on_a()
    f.send("NodeHeartbeat", {"node_id": "b", "at": 16_000})
    out = f.send("CellTick", {"at": 16_000})                           # a silent for 15 s: DOWN
    mig = of(out, "TaskMigrated")
    assert len(mig) == 1 and mig[0]["task_id"] == "gold"
    m = mig[0]
    assert (m["from_node"], m["to_node"], m["cause"], m["since"], m["elapsed_ms"], m["reserve_first"]) == \
        ("a", "b", "NODE_DOWN", 1_000, 15_000, False)
    assert m["preempted"] == ["bronze"]
    assert of(out, "TaskPreempted")[0]["task_id"] == "bronze"
    assert [p["task_id"] for p in of(out, "TaskLost")] == ["silver"]
    assert f.state.tasks["gold"].node == "b"
    # the node index followed the move, the loss and the new placement
    assert f.state.holding("a") == _walk(f.state, "a") == [] and "gold" in f.state.holding("b")
    assert f.state.holding("b") == _walk(f.state, "b")
    f.state.check()


def test_reported_down_evacuates_too():
    f = _gold_on_a()
    out = f.send("NodeStatusChanged", {"node_id": "a", "status": "DOWN", "reason": "host lost", "at": 2_000})
    assert of(out, "TaskMigrated")[0]["cause"] == "NODE_DOWN"
    assert of(out, "TaskLost")[0]["task_id"] == "silver"


def test_drain_moves_gold_reserve_first_and_stops_the_old_copy_once_the_new_one_runs():
    f = Feed(strategy="bestfit", config={"seed": 1, "retry_every_ms": 0})
    f.node("a", cpu=4000)
    f.task("gold", cpu=3000, qos="GOLD")
    f.task("silver", cpu=1000)
    f.node("b", cpu=4000)
    out = f.send("NodeStatusChanged", {"node_id": "a", "status": "DRAINING", "reason": "maintenance", "at": 500})
    m = of(out, "TaskMigrated")[0]
    assert (m["task_id"], m["from_node"], m["to_node"], m["cause"], m["reserve_first"]) == \
        ("gold", "a", "b", "DRAIN", True)
    assert not of(out, "StopCommand")                                  # the old copy runs on
    t = f.state.tasks["gold"]
    assert t.moving_from == ("a", ()) and f.state.cpu_free[f.state.node_index["a"]] == 0   # both places held
    # the new copy holds b; the old one is moving_off's, not holding's
    assert (f.state.holding("a"), f.state.holding("b")) == (_walk(f.state, "a"), _walk(f.state, "b")) == (["silver"], ["gold"])
    f.state.check()
    assert f.state.tasks["silver"].node == "a"                          # others finish where they are
    # a report from the old copy is not the task's news
    assert f.send("TaskStatusChanged", {"task_id": "gold", "node_id": "a", "status": "RUNNING", "at": 600}) == []
    out = f.send("TaskStatusChanged", {"task_id": "gold", "node_id": "b", "status": "RUNNING", "at": 700})
    stop = of(out, "StopCommand")
    assert stop and stop[0]["node_id"] == "a" and "reserve-first" in stop[0]["reason"]
    assert t.moving_from is None and f.state.cpu_free[f.state.node_index["a"]] == 3000
    f.state.check()


def test_degraded_node_moves_gold_reserve_first():
    f = Feed(strategy="bestfit", config={"seed": 1})
    f.node("a", cpu=4000)
    f.task("gold", cpu=3000, qos="GOLD")
    f.node("b", cpu=4000)
    out = f.send("NodeConditionChanged", {"node_id": "a", "condition": "DEGRADED", "previous": "NORMAL",
                                          "reason": "XID 79", "at": 900, "metrics": {}})
    m = of(out, "TaskMigrated")[0]
    assert (m["to_node"], m["cause"], m["reserve_first"], m["since"]) == ("b", "NODE_DEGRADED", True, 900)


def test_replay_from_a_snapshot_mid_run_is_identical():
    def run(split: int | None):
        f = pooled({"qos": {"grace_ms": 1_000}, "retry_every_ms": 1_000})
        script = []
        for i in range(6):
            script.append(("TaskSubmitted", dict(tid=f"b{i}", cpu=2000, qos="BRONZE", priority=i % 3, at=10 + i)))
        for i in range(3):
            script.append(("TaskSubmitted", dict(tid=f"s{i}", cpu=3000, at=100 + i)))
        script.append(("TaskSubmitted", dict(tid="g", cpu=4000, qos="GOLD", at=150)))
        for t in (500, 1_200, 2_500):
            script.append(("CellTick", {"at": t}))
        script.append(("TaskStatusChanged", {"task_id": "s0", "status": "COMPLETED", "at": 3_000}))
        script.append(("CellTick", {"at": 4_000}))
        for i, (kind, ev) in enumerate(script):
            if split is not None and i == split:
                f.state = CellState.from_snapshot(json.loads(json.dumps(f.state.to_snapshot())))
            if kind == "TaskSubmitted":
                f.task(ev.pop("tid"), **ev)
            elif kind == "TaskStatusChanged":
                f.send(kind, {**ev, "node_id": f.state.tasks[ev["task_id"]].node or ""})
            else:
                f.send(kind, ev)
            f.state.check()
        return json.dumps(f.outputs, sort_keys=True), json.dumps(f.state.to_snapshot(), sort_keys=True)

    whole = run(None)
    assert "TaskPreempted" in whole[0]
    for split in (3, 9, 11, 13):
        assert run(split) == whole


def _walk(state: CellState, node: str) -> list[str]:
    """``CellState.holding(node)`` the slow way: every task, in arrival order."""
    return sorted((tid for tid, t in state.tasks.items() if t.status in HOLDING and t.node == node),
                  key=lambda tid: state.tasks[tid].seq)


def _holding_by_tier(state: CellState) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for tid, t in state.tasks.items():
        if t.status in HOLDING:
            out.setdefault(t.task.qos_tier, set()).add(tid)
    return out


def test_the_holders_index_follows_every_status_change_and_is_rebuilt_after_a_restore():
    """The preemption scan reads only the holders of the tiers it may evict
    (``CellState.holders``), and "who holds this node" reads the node index
    (``CellState.holding``): placed, preempted (no grace: queued again at once), completed,
    and restored from a snapshot. After each step both indexes give exactly the holding tasks."""
    f = pooled({"qos": {"grace_ms": 0}})

    def exact():
        want = _holding_by_tier(f.state)
        got = {tier: {tid for tid in f.state.holders(tier)} for tier in ("GOLD", "SILVER", "BRONZE")}
        assert {k: v for k, v in got.items() if v} == want
        for node in f.state.node_ids:          # the node index: the same answer as a walk of every task
            assert f.state.holding(node) == _walk(f.state, node)
        f.state.check()

    for i in range(3):
        f.task(f"b{i}", cpu=4000, qos="BRONZE", at=10 + i)
        exact()
    assert set(f.state.holders("BRONZE")) == {"b0", "b1", "b2"}
    pre = of(f.task("s", cpu=4000, at=100), "TaskPreempted")          # silver evicts one bronze
    assert len(pre) == 1
    exact()
    assert pre[0]["task_id"] not in set(f.state.holders("BRONZE")) and "s" in set(f.state.holders("SILVER"))
    f.send("TaskStatusChanged", {"task_id": "s", "node_id": f.state.tasks["s"].node, "status": "COMPLETED", "at": 200})
    exact()
    assert "s" not in set(f.state.holders("SILVER"))
    restored = CellState.from_snapshot(json.loads(json.dumps(f.state.to_snapshot())))
    assert {tier: set(restored.holders(tier)) for tier in ("SILVER", "BRONZE")} == \
        {tier: set(f.state.holders(tier)) for tier in ("SILVER", "BRONZE")}
