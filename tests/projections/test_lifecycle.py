"""The lifecycle fold and its capacity audit, on hand-made event sequences."""
from __future__ import annotations

from suanli.projections.lifecycle import LifecycleView


def _node(node_id="n1", gpus=2, cpu=8000, mem=16384):
    return ("NodeRegistered", {"event_id": f"reg-{node_id}", "node_id": node_id, "cell": "c", "cpu_milli": cpu,
                               "memory_mib": mem, "connector": "sim",
                               "accelerators": [{"kind": "GPU", "model": "T4", "count": gpus, "memory_mib": 0}]})


def _submit(task_id, gpu_count=1, gpu_milli=500):
    return ("TaskSubmitted", {"event_id": f"sub-{task_id}", "task_id": task_id, "tenant": "t", "cell": "c",
                              "submitted_at": 1, "resources": {"cpu_milli": 1000, "memory_mib": 1024,
                                                               "gpu_count": gpu_count, "gpu_milli": gpu_milli}})


def _prov(offset=1):
    return {"input": {"topic": "cells", "partition": 0, "offset": offset}, "decided_at": offset}


def _placed(task_id, devices, milli=500, cpu=1000, node="n1", decision=None):
    decision = decision or f"d-{task_id}"
    return ("TaskPlaced", {"event_id": f"{decision}/TaskPlaced", "decision_id": decision, "task_id": task_id,
                           "tenant": "t", "cell": "c", "node_id": node, "gpu_devices": devices, "gpu_milli": milli,
                           "cpu_milli": cpu, "memory_mib": 1024, "provenance": _prov()})


def _released(task_id, cause="COMPLETED"):
    return ("TaskReleased", {"event_id": f"rel-{task_id}", "decision_id": f"rel-{task_id}", "task_id": task_id,
                             "tenant": "t", "cell": "c", "node_id": "n1", "cause": cause, "gpu_devices": [],
                             "provenance": _prov(9)})


def _fold(events):
    view = LifecycleView()
    for kind, payload in events:
        view.apply(kind, payload)
    return view


def test_lifecycle_counts_and_no_violations_for_a_valid_history():
    view = _fold([_node(), _submit("a"), _submit("b"), _placed("a", [0]), _placed("b", [0]),
                  ("TaskStatusChanged", {"event_id": "run-a", "task_id": "a", "cell": "c", "node_id": "n1",
                                         "status": "RUNNING", "at": 5}),
                  _released("b")])
    counts = view.counts()
    assert counts["submitted"] == 2 and counts["placed"] == 2 and counts["completed"] == 1
    assert view.tasks["a"].status == "RUNNING"
    assert counts["capacity_violations"] == 0
    assert view.gpu_allocation_pct() == 25.0


def test_over_committed_gpu_is_a_violation():
    view = _fold([_node(), _submit("a"), _submit("b"), _placed("a", [1], milli=700), _placed("b", [1], milli=400)])
    assert view.counts()["capacity_violations"] == 1
    assert "GPU 1 at 1100 milli" in view.violations[0]


def test_over_committed_cpu_and_missing_device_are_violations():
    view = _fold([_node(cpu=1500), _submit("a"), _submit("b"), _placed("a", [0]), _placed("b", [5])])
    assert any("CPU 2000/1500" in v for v in view.violations)
    assert any("GPU 5 does not exist" in v for v in view.violations)


def test_released_capacity_can_be_reused():
    view = _fold([_node(gpus=1), _submit("a", 1, 1000), _submit("b", 1, 1000), _placed("a", [0], 1000),
                  _released("a"), _placed("b", [0], 1000)])
    assert view.violations == []


def test_duplicate_events_count_once_and_a_second_live_placement_is_flagged():
    placed = _placed("a", [0])
    view = _fold([_node(), _submit("a"), placed, placed])
    assert view.violations == [] and view.counts()["placed"] == 1
    view.apply(*_placed("a", [1], decision="other"))
    assert len(view.violations) == 1 and "placed again" in view.violations[0]


def test_pending_queue_lists_reasons_in_queue_order():
    view = _fold([_node(), _submit("a"), _submit("b")])
    for task_id, pos in (("b", 2), ("a", 1)):
        view.apply("TaskPending", {"event_id": f"p-{task_id}", "decision_id": f"p-{task_id}", "task_id": task_id,
                                   "tenant": "t", "cell": "c", "queue_position": pos,
                                   "reasons": [{"reason": "insufficient GPU milli", "nodes": 1}],
                                   "provenance": _prov()})
    assert [t.task_id for t in view.pending()] == ["a", "b"]
    assert view.pending()[0].reasons[0]["reason"] == "insufficient GPU milli"
    assert view.undecided() == []


def test_a_connector_status_read_before_its_placement_is_applied_after_it():
    running = ("TaskStatusChanged", {"event_id": "run-a", "task_id": "a", "cell": "c", "node_id": "n1",
                                     "status": "RUNNING", "at": 5})
    view = _fold([_node(), _submit("a"), running, _placed("a", [0])])
    assert view.tasks["a"].status == "RUNNING"
    assert view.violations == []


def _status(task_id, node, status, n=0):
    return ("TaskStatusChanged", {"event_id": f"{task_id}-{node}-{status}-{n}", "task_id": task_id, "cell": "c",
                                  "node_id": node, "status": status, "at": 5, "exit_code": 0, "message": ""})


def _lost(task_id, node="n1", devices=(0,)):
    return ("TaskLost", {"event_id": f"lost-{task_id}-{node}", "decision_id": f"lost-{task_id}-{node}",
                         "task_id": task_id, "tenant": "t", "cell": "c", "node_id": node,
                         "gpu_devices": list(devices), "reason": f"node {node} DOWN", "provenance": _prov(7)})


def _health(node, status, previous="READY", lost=()):
    return ("NodeHealthChanged", {"event_id": f"h-{node}-{status}", "decision_id": f"h-{node}-{status}",
                                  "node_id": node, "cell": "c", "status": status, "previous": previous,
                                  "reason": "no heartbeat", "last_heartbeat_at": 1000, "lost_tasks": list(lost),
                                  "provenance": _prov(7)})


def test_a_lost_task_frees_its_old_node_before_its_new_placement_is_audited():
    # one whole GPU each: n1 holds a; n1 goes DOWN, a is lost and placed on n2, where b
    # already holds a half GPU; later, b2 reuses n1's freed GPU (came back READY)
    view = _fold([_node("n1", gpus=1), _node("n2", gpus=1), _submit("a", 1, 1000), _submit("b", 1, 500),
                  _submit("b2", 1, 1000), _placed("a", [0], 1000, node="n1"), _placed("b", [0], 500, node="n2"),
                  _status("a", "n1", "RUNNING"), _health("n1", "SUSPECT"), _health("n1", "DOWN", "SUSPECT", ["a"]),
                  _lost("a", "n1")])
    a = view.tasks["a"]
    assert (a.status, a.node_id, a.lost, a.lost_from) == ("PENDING", "", 1, ["n1"])
    assert view.nodes[("c", "n1")].gpu_used == [0] and view.nodes[("c", "n1")].cpu_used == 0
    assert view.nodes[("c", "n1")].health == "DOWN" and view.health_counts("c") == {"READY": 1, "SUSPECT": 0, "DOWN": 1}
    view.apply(*_placed("a", [0], 500, node="n2", decision="again"))       # fits next to b: no violation
    view.apply(*_status("a", "n1", "COMPLETED"))                           # the stale copy finishing
    assert (a.status, a.node_id) == ("PLACED", "n2") and view.stale_statuses == 1
    view.apply(*_status("a", "n2", "RUNNING"))
    view.apply(*_health("n1", "READY", "DOWN"))
    view.apply(*_placed("b2", [0], 1000, node="n1"))
    counts = view.counts()
    assert a.status == "RUNNING" and counts["lost"] == 1 and counts["nodes_down"] == 0
    assert counts["placed"] == 3 and counts["capacity_violations"] == 0, view.violations


def test_a_lost_task_placed_again_without_its_release_is_a_double_placement_no_longer():
    # without the TaskLost the second placement would be flagged; with it, it is not
    view = _fold([_node("n1"), _node("n2"), _submit("a"), _placed("a", [0], node="n1"),
                  _placed("a", [0], node="n2", decision="again")])
    assert len(view.violations) == 1 and "placed again" in view.violations[0]
    view = _fold([_node("n1"), _node("n2"), _submit("a"), _placed("a", [0], node="n1"), _lost("a", "n1"),
                  _placed("a", [0], node="n2", decision="again")])
    assert view.violations == [] and view.tasks["a"].node_id == "n2"


def test_statuses_read_before_the_decisions_go_to_the_placement_on_their_node():
    # the reader folds the cell log first: every status of both copies arrives before any decision
    view = _fold([_node("n1"), _node("n2"), _submit("a"),
                  _status("a", "n1", "DISPATCHED"), _status("a", "n1", "RUNNING"), _status("a", "n2", "DISPATCHED"),
                  _status("a", "n1", "COMPLETED"), _status("a", "n2", "RUNNING"),
                  _placed("a", [0], node="n1"), _lost("a", "n1"), _placed("a", [0], node="n2", decision="again")])
    a = view.tasks["a"]
    assert (a.status, a.node_id) == ("RUNNING", "n2") and view.violations == []
    assert view.nodes[("c", "n1")].gpu_used == [0, 0] and view.nodes[("c", "n2")].gpu_used == [500, 0]


def test_tasks_are_indexed_by_job():
    """Issue 22: ``jobs`` holds each job's member tasks in submission order; a decision that
    names the job (read before the submission) indexes its task too; tasks of no job are in none."""
    from suanli.projections.lifecycle import LifecycleView

    view = LifecycleView()
    res = {"cpu_milli": 1000, "memory_mib": 512}
    for i, (task, tenant, job) in enumerate([("a", "t1", "j1"), ("b", "t1", None), ("c", "t1", "j1"),
                                             ("d", "t2", "j1")]):
        view.apply("TaskSubmitted", {"event_id": f"s{i}", "task_id": task, "tenant": tenant, "cell": "c",
                                     "submitted_at": i, "resources": res, "job_id": job})
    view.apply("TaskPending", {"event_id": "p-e", "decision_id": "c/x/0/9/0", "task_id": "e", "tenant": "t1",
                               "cell": "c", "reasons": [], "queue_position": 0, "job_id": "j2",
                               "provenance": {"decided_at": 5, "path": []}})
    assert view.jobs == {"j1": ["a", "c", "d"], "j2": ["e"]}
    assert [t.task_id for t in view.job_tasks("j1")] == ["a", "c", "d"]
    assert [t.task_id for t in view.job_tasks("j1", tenant="t1")] == ["a", "c"]
    assert view.tasks["a"].job_id == "j1" and view.tasks["b"].job_id == ""
    assert view.job_tasks("none") == []


def test_the_indexes_follow_a_task_first_seen_in_a_status_then_submitted_placed_and_finished():
    early = ("TaskStatusChanged", {"event_id": "run-a", "task_id": "a", "cell": "c", "node_id": "n1",
                                   "status": "RUNNING", "at": 5})
    view = _fold([_node(), early])                    # a status names no tenant: it makes no task
    assert view.tasks == {} and view.tenant_tasks("") == [] and view.open_tasks() == []
    assert view.orphans_held() == 1 and view.counts()["submitted"] == 0
    view.check()
    view = _fold([_node(), early, _submit("a"), _submit("b")])
    assert view.orphans_held() == 0 and view.tasks["a"].status == "SUBMITTED"   # waits for its placement
    assert view.tenant_tasks("") == [] and [t.task_id for t in view.tenant_tasks("t")] == ["a", "b"]
    assert [t.task_id for t in view.open_tasks("c")] == ["a", "b"] and view.open_tasks("other") == []
    view = _fold([_node(), early, _submit("a"), _submit("b"), _placed("a", [0]), _released("a")])
    assert [t.task_id for t in view.open_tasks()] == ["b"]
    counts = view.counts()
    assert (counts["submitted"], counts["placed"], counts["completed"], counts["running"]) == (2, 1, 1, 0)


def test_a_status_of_a_task_never_submitted_leaves_no_task_and_is_dropped_beyond_the_bound():
    view = LifecycleView(orphans_kept=2)
    for i in range(4):
        view.apply(*_status(f"ghost{i}", "n1", "RUNNING"))
        view.apply(*_status(f"ghost{i}", "n1", "COMPLETED"))
    assert view.tasks == {} and view.open_tasks() == [] and view.undecided() == []
    assert view.orphans_held() == 4 and view.orphans_dropped == 4          # ghost0 and ghost1's, two each
    assert view.counts()["running"] == 0
    view.check()
    # a dropped status's event id is forgotten with it: redelivered after its task came, it counts
    view.apply(*_submit("ghost0"))
    view.apply(*_placed("ghost0", [0]))
    view.apply(*_status("ghost0", "n1", "RUNNING"))
    assert view.tasks["ghost0"].status == "RUNNING"


def test_statuses_read_before_the_task_apply_once_it_is_known_whichever_comes_first():
    run, done = _status("a", "n1", "RUNNING"), _status("a", "n1", "DISPATCHED")
    for order in ([run, done, _submit("a"), _placed("a", [0])],      # submission first, then the placement
                  [run, done, _placed("a", [0]), _submit("a")],      # the decision read before the submission
                  [_submit("a"), _placed("a", [0]), done, run]):     # as the log has them
        view = _fold([_node(), *order])
        a = view.tasks["a"]
        assert (a.status, a.tenant, a.node_id) == ("RUNNING", "t", "n1"), order
        assert view.orphans_held() == 0 and view.counts()["running"] == 1
        view.check()


def test_statuses_of_a_forgotten_task_do_not_become_orphans():
    view = _fold([_node(), _submit("a"), _placed("a", [0]), _released("a")])
    view.forget_finished(keep=0, keep_ids=10)
    view.apply(*_status("a", "n1", "COMPLETED", n=1))
    assert view.orphans_held() == 0 and "a" in view.forgotten
