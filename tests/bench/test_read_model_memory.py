"""The read-model memory bench runs, both folds answer alike, bytes cost less than dicts, and a
model that forgets holds about as many tasks as it keeps."""
from __future__ import annotations

from suanli.bench import read_model_memory


def test_two_levels_fold_both_ways_with_the_same_answers_and_the_bytes_held_smaller():
    lines: list[str] = []
    figures = read_model_memory.run([40, 120], node_count=20, out=lines.append)
    first, last = figures["levels"]
    assert (first["tasks"], last["tasks"]) == (40, 120) and last["records"] > first["records"]
    assert last["decisions"] >= 120 and figures["same_answers"] is True
    assert lines[-1].startswith("bytes a task more, from 40 to 120 tasks")
    more = figures["bytes_per_task_more"]
    assert 0 < more["forgets"] < more["wire"] < more["decoded"]
    assert first["forgets_tasks_held"] == 40 and 40 <= last["forgets_tasks_held"] <= 45
    # read topic by topic, the same model in the end, but it held more on the way
    assert last["by_topic_same_tasks"] is True
    assert last["forgets_by_topic_peak_bytes"] > last["forgets_peak_bytes"]
