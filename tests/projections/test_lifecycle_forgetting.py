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


def _member(task_id, job):
    return [("TaskSubmitted", {**_submit(task_id, 1, 100)[1], "job_id": job}), _placed(task_id, [0], 100),
            _status(task_id, "RUNNING")]


def _round(job, n):
    return ("JobRound", {"event_id": f"round-{job}-{n}", "job_id": job, "round": n, "tenant": "t"})


def _resize(job, n):
    # a resize names its job's head task too
    return ("JobResized", {"event_id": f"resize-{job}-{n}", "job_id": job, "task_id": "m1", "round": n,
                           "tenant": "t"})


def test_a_job_goes_whole_at_its_last_members_finish_and_one_still_running_keeps_it():
    view = _fold(LifecycleView(), [_node()] + _member("m1", "j1") + _member("m2", "j1") + _run("x")
                 + _member("k1", "j2") + _member("k2", "j2") + _run("y") + [_round("j1", 1), _resize("j1", 1)])
    # j1's m1 finishes first, then x, then m2 (j1 is whole now), then y; j2 has k2 still running
    _fold(view, [_released(t) for t in ("m1", "x", "m2", "k1", "y")])
    assert view.forget_finished(keep=2, keep_ids=10) == ["x", "m1", "m2"]
    assert sorted(view.tasks) == ["k1", "k2", "y"]
    assert view.jobs == {"j2": ["k1", "k2"]} and view.forgotten_jobs == {"j1": frozenset({"t"})}
    assert "j1" not in view.job_rounds and "j1" not in view.job_resizes and not any("j1" in e for e in view._seen)
    view.check()
    # j2 is kept while k2 runs: the pass walks past k1 and finds nothing more to forget
    assert view.forget_finished(keep=0, keep_ids=10) == ["y"]
    assert sorted(view.tasks) == ["k1", "k2"]
    # a late round of j1 is ignored; a member that arrives later starts j1 anew
    _fold(view, [_round("j1", 2), _resize("j1", 2)])
    assert "j1" not in view.job_rounds and "j1" not in view.job_resizes
    _fold(view, _member("m3", "j1") + [_round("j1", 3)])
    assert [t.task_id for t in view.job_tasks("j1")] == ["m3"] and list(view.job_rounds["j1"]) == [3]
    view.check()


def test_job_tombstones_are_bounded_like_the_tasks():
    events = [_node()]
    for i in range(4):
        events += _member(f"m{i}", f"j{i}") + [_released(f"m{i}")]
    view = _fold(LifecycleView(), events)
    assert view.forget_finished(keep=0, keep_ids=2) == ["m0", "m1", "m2", "m3"]
    assert list(view.forgotten_jobs) == ["j2", "j3"] and list(view.forgotten) == ["m2", "m3"]
    assert view.jobs == {} and view.tasks == {}
    view.check()


def test_the_ids_of_kinds_the_fold_does_not_read_are_not_kept():
    # a cell log carries a CellTick a second and batched heartbeats: their ids would pile up for ever
    view = _fold(LifecycleView(), [_node()] + [("CellTick", {"event_id": f"tick-{i}", "cell": "c", "at": i})
                                               for i in range(500)]
                 + [("NodeHeartbeat", {"event_id": f"hb-{i}", "cell": "c", "at": i}) for i in range(50)])
    assert view._seen == {"reg-n1"}
