"""``suanli job show JOB`` and the job line of ``suanli status`` (issue 22), from a folded view."""
from __future__ import annotations

from suanli.cli_job import job_lines
from suanli.cli_tasks import status_lines
from suanli.projections.lifecycle import LifecycleView


def _view() -> LifecycleView:
    view = LifecycleView()
    for i, (task, job) in enumerate((("c1", "fl-7"), ("c2", "fl-7"), ("solo", None))):
        view.apply("TaskSubmitted", {"event_id": f"s{i}", "task_id": task, "tenant": "t", "cell": "c",
                                     "submitted_at": i, "resources": {"cpu_milli": 1, "memory_mib": 1},
                                     "job_id": job})
    return view


def test_job_show_lists_the_members_with_status_and_node():
    view = _view()
    view.tasks["c1"].status, view.tasks["c1"].node_id = "RUNNING", "n7"
    lines = job_lines("fl-7", view.job_tasks("fl-7"))
    assert lines[0] == "job fl-7: 2 task(s), 1 RUNNING, 1 SUBMITTED"
    assert "c1" in lines[2] and "RUNNING" in lines[2] and "n7" in lines[2]
    assert "c2" in lines[3] and "solo" not in "\n".join(lines)


def test_status_names_the_job_of_a_member_only():
    view = _view()
    assert "  job fl-7 (2 member tasks: `suanli job show fl-7`)" in status_lines(view, view.tasks["c1"])
    assert not any("job" in line for line in status_lines(view, view.tasks["solo"]))


def test_job_show_lists_the_elastic_resizes_folded_from_the_decisions():
    view = _view()
    resize = {"event_id": "d1", "decision_id": "x", "task_id": "c1", "job_id": "fl-7", "tenant": "t", "cell": "c",
              "action": "grow", "clients_from": 2, "clients_to": 4, "batch_size_from": 32, "batch_size_to": 32,
              "round": 6, "reason": "improving and 2 slots free: grow 2 -> 4 clients (max 4)", "at": 9}
    view.apply("JobResized", resize)
    view.apply("JobResized", resize)                   # a redelivered duplicate
    assert view.resizes_of("fl-7") == [resize] and view.resizes_of("fl-7", tenant="u") == []
    lines = job_lines("fl-7", view.job_tasks("fl-7"), resizes=view.resizes_of("fl-7"))
    assert lines[-2] == "  resized 1 time(s) by the elastic policy:"
    assert lines[-1] == ("    after round 6: grow 2 -> 4 clients, batch 32 -> 32: improving and 2 slots free: "
                         "grow 2 -> 4 clients (max 4)")
