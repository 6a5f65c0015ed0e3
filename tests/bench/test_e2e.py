"""``python -m suanli.bench.e2e --max-only`` on the real stack: a small plane run as fast as
it goes, its figures written as JSON, with the records of each kind the phase left."""
from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.stack


def test_the_max_phase_cli_writes_its_figures_and_counts_the_records(stack, tmp_path):
    from suanli.bench import e2e

    out = tmp_path / "e2e.json"
    e2e.main(["--max-only", "--nodes", "20", "--tasks", "150", "--json", str(out)])
    figures = json.loads(out.read_text())
    assert figures["nodes"] == 20 and set(figures) == {"nodes", "max"}
    phase = figures["max"]
    assert phase["tasks"] == 150 and phase["placed"] == 150 and phase["capacity_violations"] == 0
    assert phase["placements_per_s"] > 0
    kinds = phase["records_by_kind"]
    # every submission reached the cell log and was placed (again, if preempted), and the 20 nodes registered
    assert kinds["TaskSubmitted"] == 150 and kinds["TaskPlaced"] >= 150 and kinds["NodeRegistered"] == 20
    # the plane's workers, the broker the phase ran on, and this driver are all measured
    assert set(phase["workers"]) >= {"intake", "scheduler", "kafka", "driver"}
    # and what each spent while the placements happened
    window = phase["placement_window"]
    assert set(window["cpu_us_per_placement"]) == set(phase["workers"])
    assert window["cores_busy"] > 0 and window["cpu_seconds"]["scheduler"] > 0


def test_the_rate_cli_runs_one_phase_at_that_rate_with_its_stages(stack, tmp_path):
    from suanli.bench import e2e

    out = tmp_path / "rate.json"
    e2e.main(["--rate", "50", "--nodes", "20", "--tasks", "60", "--json", str(out)])
    figures = json.loads(out.read_text())
    assert set(figures) == {"nodes", "at_rate"}
    phase = figures["at_rate"]
    assert phase["offered_rate"] == 50 and phase["placed"] == 60 and phase["capacity_violations"] == 0
    stages = {row["stage"]: row for row in phase["stages"]["stages"]}
    assert stages["raw topic -> cell log (intake)"]["n"] > 0
    assert set(phase["placement_window"]["cpu_us_per_placement"]) == set(phase["workers"])


def test_the_rate_cli_refuses_a_rate_it_cannot_offer(capsys):
    from suanli.bench import e2e

    for argv in (["--rate", "0"], ["--rate", "100", "--max-only"]):
        with pytest.raises(SystemExit) as exc:
            e2e.main(argv)
        assert exc.value.code == 2
    assert "--rate takes a rate above 0" in capsys.readouterr().err
