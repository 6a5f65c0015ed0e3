"""The lifecycle forgets its oldest finished tasks on request (``forget_finished``): the
ones it keeps, the tallies and the tombstones, on hand-made sequences."""
from __future__ import annotations

from test_lifecycle import _node, _placed, _released, _submit

from suanli.projections.lifecycle import LifecycleView


def _status(task_id, status, node="n1"):
    return ("TaskStatusChanged", {"event_id": f"{status}-{task_id}", "task_id": task_id, "cell": "c",
                                  "node_id": node, "status": status, "at": 5})


def _fold(view, events):
    for kind, payload in events:
        view.apply(kind, payload)
    return view


def _run(task_id):
    return [_submit(task_id, 1, 100), _placed(task_id, [0], 100), _status(task_id, "RUNNING")]


def test_the_oldest_finished_go_first_in_the_order_they_finished_and_the_tallies_still_count_them():
    view = _fold(LifecycleView(), [_node()] + [e for t in "abcdef" for e in _run(t)])
    # f finished first although a was seen first; e, d, c, b next; a is still running
    _fold(view, [_released(t) for t in "fedcb"])
    before = view.counts()
    assert view.forget_finished(keep=2, keep_ids=10) == ["f", "e", "d"]
    view.check()
    assert sorted(view.tasks) == ["a", "b", "c"] and view.tasks["a"].status == "RUNNING"
    assert view.counts() == before and view.counts()["completed"] == 5
    assert view.forgotten == {"f": ("t", "COMPLETED"), "e": ("t", "COMPLETED"), "d": ("t", "COMPLETED")}
    assert [t.task_id for t in view.tenant_tasks("t")] == ["a", "b", "c"]
    assert view.forget_finished(keep=2, keep_ids=10) == []        # nothing over


def test_a_forgotten_task_stays_forgotten_whatever_of_it_comes_again_and_tombstones_are_bounded():
    view = _fold(LifecycleView(), [_node()] + [e for t in "abc" for e in _run(t)] + [_released(t) for t in "abc"])
    assert view.forget_finished(keep=0, keep_ids=2) == ["a", "b", "c"]
    assert list(view.forgotten) == ["b", "c"] and view.tasks == {}
    before = view.counts()
    # redelivered duplicates and a stale report of c: no view comes back, nothing counts twice
    _fold(view, [_submit("c", 1, 100), _placed("c", [0], 100), _status("c", "RUNNING"), _released("c")])
    assert view.tasks == {} and view.counts() == before and view.violations == []
    view.check()
    # the event ids a forgotten task had are freed, not kept for ever
    assert not any(e.endswith("-c") or "d-c" in e for e in view._seen)


def test_job_members_are_kept_and_the_pass_walks_past_them():
    member = [("TaskSubmitted", {**_submit("m", 1, 100)[1], "job_id": "job-1"}), _placed("m", [0], 100),
              _released("m")]
    view = _fold(LifecycleView(), [_node()] + member + [e for t in "xy" for e in _run(t)]
                 + [_released(t) for t in "xy"])
    # m finished first, but a job member is kept: the pass walks past it to x and y (m counts in keep)
    assert view.forget_finished(keep=1, keep_ids=10) == ["x", "y"]
    assert list(view.tasks) == ["m"] and [t.task_id for t in view.job_tasks("job-1")] == ["m"]
    view.check()


def test_the_ids_of_kinds_the_fold_does_not_read_are_not_kept():
    # a cell log carries a CellTick a second and batched heartbeats: their ids would pile up for ever
    view = _fold(LifecycleView(), [_node()] + [("CellTick", {"event_id": f"tick-{i}", "cell": "c", "at": i})
                                               for i in range(500)]
                 + [("NodeHeartbeat", {"event_id": f"hb-{i}", "cell": "c", "at": i}) for i in range(50)])
    assert view._seen == {"reg-n1"}
