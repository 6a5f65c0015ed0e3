"""The history bench runs, and each of its probes does what it is named for."""
from __future__ import annotations

from suanli.bench import history_growth

PROBES = {"submit", "complete", "reserved_node_status", "clearing", "elastic_round", "federated_aggregator",
          "node_down", "new_gpu_model"}


def test_the_probes_run_at_two_levels_on_the_cell_they_describe():
    lines: list[str] = []
    figures = history_growth.run([0, 300], progress=lines.append)
    first, last = figures["levels"]
    assert len(lines) == 2
    assert last["tasks_in_cell"] - first["tasks_in_cell"] >= 300          # below the retention: all kept
    for row in (first, last):
        assert set(row["ms_per_input"]) == PROBES
        assert all(v > 0 for v in row["ms_per_input"].values())
        assert row["r0_token"] == "HELD"                                   # the refill probe refilled a token
        assert row["aggregators_placed_by"] == ["federated"]              # the traffic score read the job
    assert set(figures["ratio_last_to_first"]) == set(first["ms_per_input"])


def test_a_small_retention_bounds_the_tasks_the_cell_keeps():
    figures = history_growth.run([0, 400], progress=lambda _line: None, keep_finished=50)
    first, last = figures["levels"]
    assert figures["keep_finished"] == 50
    # what the level-0 probes left that is kept whatever the retention: 5 tasks still running
    # on the new-model nodes (their 50 finished aggregators may go: no rule reads them)
    stays = 5
    assert last["tasks_in_cell"] - first["tasks_in_cell"] <= stays + 50 + 50 // 8   # the 400 finished went
    assert last["tombstones"] >= 400


def test_the_memory_mode_traces_the_heap_and_the_cell_stays_bounded():
    figures = history_growth.memory([0, 300], progress=lambda _line: None, keep_finished=20)
    first, last = figures["levels"]
    assert figures["mode"] == "memory" and first["traced_mib"] > 0 and last["rss_mib"] > 0
    assert last["tasks_in_cell"] <= first["tasks_in_cell"] + 20 + 20 // 8
    assert 300 - (20 + 20 // 8) <= last["tombstones"] <= 300              # all but the kept ones


def test_array_job_members_are_forgotten_like_any_finished_task():
    figures = history_growth.memory([0, 300], progress=lambda _line: None, keep_finished=20, job_size=50)
    first, last = figures["levels"]
    assert figures["job_size"] == 50
    assert last["tasks_in_cell"] <= first["tasks_in_cell"] + 20 + 20 // 8
    assert 300 - (20 + 20 // 8) <= last["tombstones"] <= 300


def test_federated_clients_are_forgotten_and_leave_what_their_jobs_read():
    figures = history_growth.memory([0, 300], progress=lambda _line: None, keep_finished=20, job_size=50,
                                    clients=True)
    first, last = figures["levels"]
    assert figures["jobs"] == "federated clients"
    assert last["tasks_in_cell"] <= first["tasks_in_cell"] + 20 + 20 // 8
    assert last["past_clients"] == last["tombstones"] >= 300 - (20 + 20 // 8)
