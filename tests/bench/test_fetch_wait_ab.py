"""``bench/fetch_wait.py``: both arms run the real plane with their own fetch wait and report
every figure (the figures themselves are the bench's output, not checked here)."""
from __future__ import annotations

import pytest

from suanli.bench import fetch_wait


def _run(p50: int, scheduler_p50: float | None = None) -> dict:
    run = {"placements_per_s": 10 * p50, "latency_ms": {"p50": p50, "p99": 2 * p50}}
    if scheduler_p50 is not None:
        run["stages"] = {"cell log -> decisions topic (scheduler)": {"p50": scheduler_p50, "p99": 2 * scheduler_p50}}
    return run


def test_the_summary_counts_the_runs_a_second_behind():
    summary = fetch_wait.summarise({"faust": [_run(900, 880.0), _run(25, 12.0), _run(30, 501.0)],
                                    "default": [_run(24, 10.0), _run(26, 500.0)]})
    assert summary["faust"] == {"placements_per_s": [9000, 250, 300], "p50_ms": [900, 25, 30],
                                "p99_ms": [1800, 50, 60], "scheduler_stage_p50_ms": [880.0, 12.0, 501.0],
                                "runs_behind": 2, "runs": 3}
    assert summary["default"]["runs_behind"] == 0 and summary["default"]["runs"] == 2
    # the max phase has no stages: no such count
    assert fetch_wait.summarise({"faust": [_run(900)]})["faust"] == {
        "placements_per_s": [9000], "p50_ms": [900], "p99_ms": [1800], "runs": 1}


@pytest.mark.stack
def test_both_arms_place_every_task_with_their_own_wait(stack):
    figures = fetch_wait.run(runs=1, nodes=20, tasks=60)
    assert list(figures["runs"]) == ["faust", "default"]
    [faust], [default] = figures["runs"]["faust"], figures["runs"]["default"]
    assert faust["fetch_max_wait_ms"] == 1500 and default["fetch_max_wait_ms"] == 20
    for arm in (faust, default):
        assert arm["placed"] == arm["tasks"] == 60
        assert arm["stages"]["submit -> read model (whole)"]["p50"] is not None
        # The batches are counted between two of the scheduler's latency writes that bracket the
        # phase. Faust's 1.5 s fetch wait can hold a batch past the probe's bounded wait (one CI run:
        # decisions 4 s late and no batch finished inside the window); then the probe must say so.
        count, notes = arm["scheduler_batches"]["count"], arm["notes"]
        assert count >= 1 or any("histogram counted" in n for n in notes), (count, notes)
    assert default["scheduler_batches"]["count"] >= 1, default["notes"]
    assert figures["summary"]["faust"]["runs"] == figures["summary"]["default"]["runs"] == 1


@pytest.mark.stack
def test_the_bare_consumer_reads_every_record_at_each_wait(stack):
    figures = fetch_wait.run_bare(records=15)
    assert list(figures["ms_by_fetch_wait"]) == [str(w) for w in fetch_wait.BARE_WAITS_MS]
    for wait, ms in figures["ms_by_fetch_wait"].items():
        assert ms["count"] == 15, wait
        assert 0 <= ms["p50"] <= ms["p90"] <= ms["p99"] <= ms["max"], (wait, ms)
