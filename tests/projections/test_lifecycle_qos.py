"""The lifecycle fold on preemption and migration, from typed decisions (processors/model.py).

Every event is built as the core's typed value and turned into its Avro dict with
``model.to_avro``, exactly what the reader decodes from Kafka. Each scenario is folded in
log order (statuses interleaved with decisions, as the API's follower sees them) and in the
reader's order (the whole cell log first, then the decisions), and must end the same way.
"""
from __future__ import annotations

from typing import Any

import pytest

from suanli.processors import model as m
from suanli.projections.lifecycle import LifecycleView, copy_of

CELL = "c"
Event = tuple[str, dict[str, Any]]


def _ev(value: Any) -> Event:
    return value.KIND, m.to_avro(value)


def prov(at: int) -> m.Provenance:
    return m.Provenance(input=m.LogPosition(topic="c.cells", partition=0, offset=at),
                        strategy=m.StrategyRef(name="default", version="1", config_digest="d"),
                        candidates=(), filtered=(), path=("submitted", "bind"), decided_at=at)


def did(at: int, n: int = 0) -> str:
    return f"{CELL}/c.cells/0/{at}/{n}"          # the core's decision ids: cell/topic/partition/offset/n


def node(nid: str, gpus: int = 1) -> Event:
    return _ev(m.NodeRegistered(event_id=f"reg/{nid}", node_id=nid, cell=CELL, site="s", region="r", zone="z",
                                tier="cloud", arch="x86_64", cpu_milli=8000, memory_mib=16384,
                                accelerators=(m.Accelerator(kind="GPU", model="V100M16", count=gpus),),
                                registered_at=0))


def submit(tid: str, tier: str, milli: int = 1000) -> Event:
    return _ev(m.TaskSubmitted(event_id=f"sub/{tid}", task_id=tid, tenant="acme", cell=CELL, submitted_at=1,
                               resources=m.TaskResources(cpu_milli=2000, memory_mib=4096, gpu_count=1, gpu_milli=milli),
                               qos_tier=tier))


def placed(tid: str, nid: str, at: int, devices=(0,), milli: int = 1000) -> Event:
    return _ev(m.TaskPlaced(event_id=f"{did(at)}/TaskPlaced", decision_id=did(at), task_id=tid, tenant="acme",
                            cell=CELL, node_id=nid, gpu_devices=tuple(devices), gpu_milli=milli, cpu_milli=2000,
                            memory_mib=4096, provenance=prov(at)))


def status(tid: str, nid: str, st: str, at: int, copy_at: int, n: str = "") -> Event:
    """A connector status with the kit's event id: ``{dispatch_id}:{status}``."""
    return _ev(m.TaskStatusChanged(event_id=f"{did(copy_at)}:{st.lower()}{n}", task_id=tid, cell=CELL, node_id=nid,
                                   status=st, at=at, message=f"{st.lower()} on {nid}"))


def preempted(victim: str, nid: str, at: int, by: str, grace_ms: int = 30_000, n: int = 0) -> Event:
    return _ev(m.TaskPreempted(event_id=f"{did(at, n)}/TaskPreempted", decision_id=did(at, n), task_id=victim,
                               tenant="acme", cell=CELL, node_id=nid, preempted_by=by,
                               reason=f"{by} (GOLD) needs the GPU; {victim} is BRONZE", provenance=prov(at),
                               grace_ms=grace_ms, work_lost_ms=12_000, victims=(victim,)))


def pending(tid: str, at: int, reason: str = "waiting", n: int = 0) -> Event:
    return _ev(m.TaskPending(event_id=f"{did(at, n)}/TaskPending", decision_id=did(at, n), task_id=tid, tenant="acme",
                             cell=CELL, reasons=(m.PendingReason(reason=reason, nodes=2),), queue_position=1,
                             provenance=prov(at)))


def migrated(tid: str, src: str, dst: str, at: int, *, cause: str, reserve_first: bool, devices=(0,),
             since: int = 0) -> Event:
    return _ev(m.TaskMigrated(event_id=f"{did(at)}/TaskMigrated", decision_id=did(at), task_id=tid, tenant="acme",
                              cell=CELL, from_node=src, to_node=dst, gpu_devices=tuple(devices),
                              reason=f"{src} {cause}", provenance=prov(at), cause=cause, since=since,
                              elapsed_ms=at - since, reserve_first=reserve_first))


def node_status(nid: str, st: str, at: int) -> Event:
    return _ev(m.NodeStatusChanged(event_id=f"ns/{nid}/{st}/{at}", node_id=nid, cell=CELL, status=st,
                                   reason="maintenance", at=at))


def health(nid: str, st: str, at: int) -> Event:
    return _ev(m.NodeHealthChanged(event_id=f"h/{nid}/{st}/{at}", decision_id=did(at, 9), node_id=nid, cell=CELL,
                                   status=st, previous="READY", reason="silent", last_heartbeat_at=at - 15_000,
                                   provenance=prov(at)))


def released(tid: str, nid: str, at: int, cause: str = "COMPLETED") -> Event:
    return _ev(m.TaskReleased(event_id=f"{did(at)}/TaskReleased", decision_id=did(at), task_id=tid, tenant="acme",
                              cell=CELL, node_id=nid, cause=cause, provenance=prov(at)))


INPUTS = {"NodeRegistered", "NodeStatusChanged", "TaskSubmitted", "TaskStatusChanged"}


def fold(events: list[Event], *, reader_order: bool = False) -> LifecycleView:
    """Fold ``events`` as given, or as the reader does: every cell-log input first, then the decisions."""
    if reader_order:
        events = [e for e in events if e[0] in INPUTS] + [e for e in events if e[0] not in INPUTS]
    view = LifecycleView()
    for kind, payload in events:
        view.apply(kind, payload)
    return view


def used(view: LifecycleView, nid: str) -> tuple[int, list[int]]:
    n = view.nodes[(CELL, nid)]
    return n.cpu_used, n.gpu_used


BOTH = pytest.mark.parametrize("reader_order", [False, True], ids=["log-order", "reader-order"])


# ------------------------------------------------------------------ preemption
def _preemption() -> list[Event]:
    return [node("n1"), node("n2"), submit("bronze-1", "BRONZE"), submit("gold-1", "GOLD"),
            placed("bronze-1", "n1", 10), status("bronze-1", "n1", "RUNNING", 11, 10),
            preempted("bronze-1", "n1", 100_000, by="gold-1"), placed("gold-1", "n1", 100_000 + 1),
            status("bronze-1", "n1", "FAILED", 100_002, 10),                  # the victim's copy stopped
            status("gold-1", "n1", "RUNNING", 100_003, 100_001)]


@BOTH
def test_a_preempted_task_is_preempted_by_its_preemptor_and_its_place_is_free_at_once(reader_order):
    view = fold(_preemption(), reader_order=reader_order)
    victim, gold = view.tasks["bronze-1"], view.tasks["gold-1"]
    assert (victim.status, victim.node_id, victim.gpu_devices) == ("PREEMPTED", "", [])
    assert (victim.preempted, victim.preempted_by, victim.requeue_at) == (1, "gold-1", 130_000)
    [record] = victim.preemptions
    assert record == {"decision_id": did(100_000), "at": 100_000, "node_id": "n1", "by": "gold-1",
                      "reason": "gold-1 (GOLD) needs the GPU; bronze-1 is BRONZE", "grace_ms": 30_000,
                      "requeue_at": 130_000, "work_lost_ms": 12_000, "victims": ["bronze-1"]}
    assert (gold.status, gold.node_id) == ("RUNNING", "n1")
    assert used(view, "n1") == (2000, [1000]) and view.violations == []      # the GPU was freed for gold-1
    assert [t.task_id for t in view.preempted_waiting()] == ["bronze-1"] and view.pending() == []
    counts = view.counts()
    assert (counts["preempted"], counts["in_grace"], counts["running"]) == (1, 1, 1)


@BOTH
def test_when_its_grace_ends_the_victim_is_pending_then_placed_again_on_its_old_node(reader_order):
    events = _preemption() + [
        pending("bronze-1", 130_000, reason="preempted by gold-1; waiting for capacity"),
        released("gold-1", "n1", 140_000),
        placed("bronze-1", "n1", 140_001), status("bronze-1", "n1", "RUNNING", 140_002, 140_001)]
    view = fold(events[:-2] + events[-2:-1], reader_order=reader_order)
    victim = view.tasks["bronze-1"]
    assert victim.status == "PLACED"                      # the old copy's RUNNING is not this copy's
    view = fold(events, reader_order=reader_order)
    victim = view.tasks["bronze-1"]
    assert (victim.status, victim.node_id, victim.preempted) == ("RUNNING", "n1", 1)
    assert view.violations == [] and used(view, "n1") == (2000, [1000])
    mid = fold(events[:-3], reader_order=reader_order)
    assert mid.tasks["bronze-1"].status == "PENDING" and [t.task_id for t in mid.pending()] == ["bronze-1"]
    assert mid.preempted_waiting() == []


def test_a_stale_status_of_the_victim_is_counted_and_never_touches_it():
    view = fold(_preemption())
    assert view.stale_statuses == 1                       # bronze-1's FAILED from n1, after the preemption
    assert view.tasks["bronze-1"].status == "PREEMPTED" and view.tasks["bronze-1"].exit_code is None


def test_a_preemption_the_capacity_audit_would_not_need_is_still_history_for_a_pending_task():
    view = fold([node("n1"), submit("b", "BRONZE"), pending("b", 5), preempted("b", "n1", 9, by="g")])
    assert view.tasks["b"].status == "PENDING" and view.tasks["b"].preempted == 1 and view.violations == []


# ------------------------------------------------------------------ migration
@BOTH
def test_a_task_moved_off_a_down_node_holds_its_new_place_and_gives_the_old_one_back(reader_order):
    events = [node("n1"), node("n2"), submit("gold-1", "GOLD"), placed("gold-1", "n1", 10),
              status("gold-1", "n1", "RUNNING", 11, 10), health("n1", "DOWN", 40_000),
              migrated("gold-1", "n1", "n2", 40_001, cause="NODE_DOWN", reserve_first=False, since=25_000),
              status("gold-1", "n2", "RUNNING", 40_500, 40_001),
              status("gold-1", "n1", "RUNNING", 41_000, 10, n="-resync1")]      # n1 back: its stale copy
    view = fold(events, reader_order=reader_order)
    gold = view.tasks["gold-1"]
    assert (gold.status, gold.node_id, gold.gpu_devices, gold.gpu_milli) == ("RUNNING", "n2", [0], 1000)
    assert gold.migrations == [{"decision_id": did(40_001), "at": 40_001, "from": "n1", "to": "n2",
                                "cause": "NODE_DOWN", "reason": "n1 NODE_DOWN", "since": 25_000,
                                "elapsed_ms": 15_001, "reserve_first": False, "preempted": []}]
    assert used(view, "n1") == (0, [0]) and used(view, "n2") == (2000, [1000]) and view.violations == []
    assert gold.dispatch_id == did(40_001) and not gold.moving_from
    assert view.counts()["migrated"] == 1


def _drain(old_copy_first: bool) -> list[Event]:
    move = [node("n1"), node("n2"), submit("gold-1", "GOLD"), placed("gold-1", "n1", 10),
            status("gold-1", "n1", "RUNNING", 11, 10), node_status("n1", "DRAINING", 50_000),
            migrated("gold-1", "n1", "n2", 50_001, cause="DRAIN", reserve_first=True, since=50_000)]
    new_runs = status("gold-1", "n2", "RUNNING", 50_400, 50_001)
    old_stops = status("gold-1", "n1", "FAILED", 50_500, 10)
    return move + ([old_stops, new_runs] if old_copy_first else [new_runs, old_stops])


@BOTH
@pytest.mark.parametrize("old_copy_first", [False, True], ids=["new-runs-first", "old-ends-first"])
def test_a_drain_holds_both_places_until_the_old_copy_is_over(reader_order, old_copy_first):
    events = _drain(old_copy_first)
    during = fold(events[:7], reader_order=reader_order)
    gold = during.tasks["gold-1"]
    assert (gold.status, gold.node_id, gold.moving_from) == ("PLACED", "n2", "n1")
    assert used(during, "n1") == (2000, [1000]) and used(during, "n2") == (2000, [1000])   # reserve first
    assert during.nodes[(CELL, "n1")].status == "DRAINING" and during.counts()["nodes_draining"] == 1
    after = fold(events, reader_order=reader_order)
    gold = after.tasks["gold-1"]
    assert (gold.status, gold.node_id, gold.moving_from) == ("RUNNING", "n2", "")
    assert used(after, "n1") == (0, [0]) and used(after, "n2") == (2000, [1000]) and after.violations == []
    assert gold.migrations[0]["reserve_first"] and gold.migrations[0]["cause"] == "DRAIN"


def test_the_capacity_audit_sees_the_old_copys_place_while_it_is_held():
    events = _drain(False)[:7] + [submit("other", "SILVER"), placed("other", "n1", 50_100)]
    view = fold(events)
    assert len(view.violations) == 1 and "n1 GPU 0 at 2000 milli" in view.violations[0]


def test_the_old_copy_dies_with_its_node_and_a_release_frees_both():
    down = fold(_drain(False)[:7] + [node_status("n1", "DOWN", 50_200)])
    assert used(down, "n1") == (0, [0]) and down.tasks["gold-1"].moving_from == ""
    gone = fold(_drain(False)[:7] + [released("gold-1", "n2", 50_300, cause="CANCELLED")])
    assert used(gone, "n1") == (0, [0]) and used(gone, "n2") == (0, [0]) and gone.tasks["gold-1"].status == "CANCELLED"


def test_a_status_names_its_copy_only_with_a_dispatch_id_of_its_cell():
    assert copy_of({"event_id": f"{did(7)}:running"}, CELL) == did(7)
    assert copy_of({"event_id": f"{did(7)}:running-resync2"}, CELL) == did(7)
    assert copy_of({"event_id": "a-n1-RUNNING-0"}, CELL) is None          # another connector's ids: by node
    assert copy_of({"event_id": "other/x/0/1/0:running"}, CELL) is None
    assert copy_of({"event_id": f"{did(7)}:ack:status"}, CELL) == did(7)    # intake's, from a DispatchAck


@BOTH
def test_a_refused_dispatch_shows_the_connectors_reason(reader_order):
    """Intake turns a refused DispatchAck into a FAILED status with event id
    ``{dispatch_id}:ack:status``; the task shows the connector's reason (it once waited
    for a placement of that name forever, and the message stayed empty)."""
    refused = _ev(m.TaskStatusChanged(event_id=f"{did(5)}:ack:status", task_id="t", cell=CELL, node_id="n1",
                                      status="FAILED", at=6, message="the circuit uses 5 qubits; the QPU has 3"))
    view = fold([node("n1"), submit("t", "SILVER"), placed("t", "n1", 5), refused,
                 released("t", "n1", 7, cause="FAILED")], reader_order=reader_order)
    t = view.tasks["t"]
    assert t.status == "FAILED" and t.message == "the circuit uses 5 qubits; the QPU has 3"


# ------------------------------------------------------------------ queue order
def _queued(n: int, tid: str, tier: str, *, priority: int = 0, at: int = 0, labels: dict | None = None) -> list[Event]:
    sub = m.TaskSubmitted(event_id=f"sub/{tid}", task_id=tid, tenant="acme", cell=CELL, submitted_at=at,
                          resources=m.TaskResources(cpu_milli=1000, memory_mib=1024), qos_tier=tier,
                          priority=priority, labels=labels or {})
    return [_ev(sub), pending(tid, 1_000_000 + at, n=n)]


def test_pending_is_in_the_cores_queue_order_tiers_first_then_aged_priority():
    minute = 60_000
    events = [node("n1"), submit("lost-1", "SILVER"), placed("lost-1", "n1", 5),
              _ev(m.TaskLost(event_id="lost/lost-1", decision_id=did(6), task_id="lost-1", tenant="acme", cell=CELL,
                             node_id="n1", reason="n1 DOWN", provenance=prov(6))),
              pending("lost-1", 7)]
    events += _queued(1, "bronze-hi", "BRONZE", priority=9, at=0)
    events += _queued(2, "silver-old", "SILVER", priority=0, at=0)
    events += _queued(3, "silver-new-hi", "SILVER", priority=2, at=3 * minute)    # 2 points = 2 min of waiting
    events += _queued(4, "silver-late", "SILVER", priority=1, at=10 * minute)
    events += _queued(5, "gold", "GOLD", at=20 * minute)
    events += _queued(6, "urgent-bronze", "BRONZE", at=30 * minute, labels={"scheduling": "urgent"})
    view = fold(events)
    order = [t.task_id for t in view.pending(CELL)]
    # urgent lane first; then gold; silver by aged rank = submitted - priority x 1 min: silver-old 0,
    # lost-1 1 ms (submitted at 1), silver-new-hi 3 min - 2 min = 1 min, silver-late 10 - 1 = 9 min; bronze last.
    assert order == ["urgent-bronze", "gold", "silver-old", "lost-1", "silver-new-hi", "silver-late", "bronze-hi"]
    assert [t.queue_position for t in view.pending(CELL)] == list(range(1, 8))
    no_aging = [t.task_id for t in view.pending(CELL, aging_ms=0)]
    assert no_aging[2:5] == ["silver-new-hi", "silver-late", "lost-1"]      # priority, then lost first, arrival


def _policy(event_id: str, config: dict[str, Any], strategy: str = "default") -> Event:
    return _ev(m.PolicyChanged.of(CELL, strategy, config, at=5, event_id=event_id, changed_by="ops"))


def test_the_queue_ages_by_the_cells_own_policy_and_a_refused_policy_changes_nothing():
    """The cell's policy (qos.aging_ms) sets the aging, as in the core; a policy the scheduler
    refuses (an unknown argument: dead-lettered) leaves the previous one in force."""
    minute = 60_000
    events = []
    events += _queued(1, "silver-old", "SILVER", priority=0, at=0)
    events += _queued(2, "silver-new-hi", "SILVER", priority=2, at=3 * minute)
    events += _queued(3, "silver-late", "SILVER", priority=1, at=10 * minute)
    aged = ["silver-old", "silver-new-hi", "silver-late"]            # 1 point = 1 min (the default)
    by_priority = ["silver-new-hi", "silver-late", "silver-old"]     # no aging: priority first
    view = fold(events)
    assert not view.policy(CELL).set and view.policy(CELL).aging_ms == minute
    assert [t.task_id for t in view.pending(CELL)] == aged

    view = fold([_policy("p1", {"qos": {"aging_ms": 0}}), *events])
    p = view.policy(CELL)
    assert (p.strategy, p.config, p.aging_ms, p.event_id, p.changed_by, p.at) == \
        ("default", {"qos": {"aging_ms": 0}}, 0, "p1", "ops", 5)
    assert p.set and p.digest and [t.task_id for t in view.pending(CELL)] == by_priority
    assert [t.task_id for t in view.pending(CELL, aging_ms=minute)] == aged      # the argument still wins

    refused = fold([_policy("p1", {"qos": {"aging_ms": 0}}), _policy("p2", {"qos": {"agign_ms": 5}}),
                    _policy("p3", {}, strategy="no-such-strategy"), *events])
    assert refused.policy(CELL).event_id == "p1" and [t.task_id for t in refused.pending(CELL)] == by_priority
    later = fold([_policy("p1", {"qos": {"aging_ms": 0}}), _policy("p4", {}, strategy="bestfit"), *events])
    assert (later.policy(CELL).strategy, later.policy(CELL).aging_ms) == ("bestfit", minute)
    assert [t.task_id for t in later.pending(CELL)] == aged
