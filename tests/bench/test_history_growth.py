"""The history bench runs, and each of its probes does what it is named for."""
from __future__ import annotations

from suanli.bench import history_growth


def test_the_probes_run_at_two_levels_on_the_cell_they_describe():
    lines: list[str] = []
    figures = history_growth.run([0, 300], progress=lines.append)
    first, last = figures["levels"]
    assert len(lines) == 2
    assert last["tasks_in_cell"] - first["tasks_in_cell"] >= 300          # the finished tasks are kept
    for row in (first, last):
        assert set(row["ms_per_input"]) == {"submit", "complete", "reserved_node_status", "clearing",
                                            "elastic_round", "federated_aggregator", "node_down",
                                            "new_gpu_model"}
        assert all(v > 0 for v in row["ms_per_input"].values())
        assert row["r0_token"] == "HELD"                                   # the refill probe refilled a token
        assert row["aggregators_placed_by"] == ["federated"]              # the traffic score read the job
    assert set(figures["ratio_last_to_first"]) == set(first["ms_per_input"])
