"""The read-model bench runs, and each probe reads what it is named for."""
from __future__ import annotations

from suanli.bench import read_model_growth


def test_the_probes_answer_at_two_levels_and_submissions_go_once_the_lifecycle_has_them():
    lines: list[str] = []
    figures = read_model_growth.run([0, 2000], repeat=1, out=lines.append)
    first, last = figures["levels"]
    assert len(lines) == 3 and lines[-1].startswith("last level / first")
    assert last["tasks_in_model"] - first["tasks_in_model"] == 2000 and last["submissions_held"] == 0
    pending_each = read_model_growth.PENDING // read_model_growth.TENANTS
    assert first["answers"] == {"get_pending_task": "PENDING", "list_tasks": pending_each + 1,
                                "list_pending": pending_each, "completed": 0}
    assert last["answers"] == {"get_pending_task": "PENDING", "list_tasks": 100, "list_pending": pending_each,
                               "completed": 2000}
    assert set(figures["ratio_last_to_first"]) == set(first["ms"])
