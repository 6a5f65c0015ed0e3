"""The stage breakdown of ``bench/stages.py`` (issue 16): the join of the records into per-task
boundaries, the figures and the table rows on made-up records; then one small measured phase
on the real stack, checked for completeness and for the order of every task's boundaries
(timings themselves are the benchmark's business, never asserted).
"""
from __future__ import annotations

import uuid

import pytest

from suanli.bench.stages import (BOUNDARIES, STAGES, Stamped, TaskTimes, figures, join, markdown_rows,
                                 missing_figures, order_violations, scheduler_split)

CELL = "c1"


def _records(n: int, late: dict[str, int] | None = None) -> tuple[list[Stamped], list[Stamped], list[Stamped]]:
    """Task i sent at 1000 + 10 i: raw +1, cell log +5, placed +20 (``late``: task -> decision offset)."""
    raw, cell, dec = [], [], []
    for i in range(n):
        t, at = f"t{i}", 1000 + 10 * i
        raw.append(Stamped("raw", "TaskSubmitted", {"task_id": t, "cell": CELL, "submitted_at": at}, at + 1))
        cell.append(Stamped("cells", "TaskSubmitted", {"task_id": t, "cell": CELL, "submitted_at": at}, at + 5))
        dec.append(Stamped("dec", "TaskPlaced", {"task_id": t, "cell": CELL}, at + (late or {}).get(t, 20)))
    return raw, cell, dec


def test_join_takes_the_first_record_per_task_and_only_its_cell():
    raw, cell, dec = _records(3)
    raw.append(Stamped("raw", "TaskSubmitted", {"task_id": "t0", "cell": CELL, "submitted_at": 1}, 9999))  # a resend
    cell.insert(0, Stamped("cells", "TaskSubmitted", {"task_id": "t1", "cell": "other"}, 1))                 # other cell
    dec.insert(0, Stamped("dec", "TaskPending", {"task_id": "t2", "cell": CELL}, 1020))                      # queued first
    times = join({"t0", "t1", "t2"}, CELL, raw, cell, dec, {"t0": 1004.5}, {"t0": ("TaskPlaced", 1030.2)})
    assert (times["t0"].sent, times["t0"].raw, times["t0"].cell, times["t0"].decision) == (1000, 1001, 1005, 1020)
    assert times["t0"].acked == 1004.5 and times["t0"].applied == 1030.2
    assert times["t1"].cell == 1015
    assert times["t2"].first_decision == "TaskPending" and times["t2"].decision is None
    assert times["t1"].applied is None and times["t1"].applied_kind is None


def test_figures_cover_every_stage_after_the_warm_up():
    raw, cell, dec = _records(20)
    applied = {f"t{i}": ("TaskPlaced", 1000 + 10 * i + 30.0) for i in range(20)}
    acked = {f"t{i}": 1000 + 10 * i + 3.0 for i in range(20)}
    f = figures(join({f"t{i}" for i in range(20)}, CELL, raw, cell, dec, acked, applied))
    assert f["warmup"] == 2 and f["measured"] == 18 and f["order_violations"] == 0
    by = {s["stage"]: s for s in f["stages"]}
    assert [s["stage"] for s in f["stages"][:len(STAGES)]] == [label for label, _a, _b in STAGES]
    assert by["producer -> raw topic"]["p50"] == 1 and by["raw topic -> cell log (intake)"]["p99"] == 4
    assert by["cell log -> decisions topic (scheduler)"]["p50"] == 15
    assert by["decisions topic -> read model"]["p50"] == 10.0 and by["submit -> read model (whole)"]["p99"] == 30.0
    assert by["send -> raw record acknowledged to the driver"]["n"] == 18
    assert not missing_figures({"low_load": {"stages": dict(f, scheduler=_split())},
                                "half_load": {"stages": dict(f, scheduler=_split())}})


def test_a_task_placed_after_waiting_in_the_queue_is_counted_apart():
    raw, cell, dec = _records(10)
    dec[5] = Stamped("dec", "TaskPending", {"task_id": "t5", "cell": CELL}, dec[5].timestamp)
    applied = {f"t{i}": ("TaskPlaced" if i != 5 else "TaskPending", 1e9) for i in range(10)}
    f = figures(join({f"t{i}" for i in range(10)}, CELL, raw, cell, dec, {}, applied))
    assert f["first_decision_not_placed"] == 1 and f["measured"] == 8 and f["read_model_disagrees"] == 0


def test_order_violations_name_the_first_link_that_goes_back_in_time():
    ok = TaskTimes("a", sent=10, raw=10, cell=9.5, decision=20, applied=21)      # within the 1 ms truncation
    bad = TaskTimes("b", sent=10, raw=11, cell=30, decision=25, applied=40)
    assert order_violations([ok, bad]) == [{"task_id": "b", "from": "cell", "to": "decision", "ms": -5}]


def _split() -> dict:
    window = {"task_submitted": {"start_ms": {"count": 4, "p50": 1, "p99": 3}, "decided_ms": {"count": 4, "p50": 2, "p99": 4},
                                 "acked_ms": {"count": 4, "p50": 5, "p99": 9},
                                 "in_batch_ms": {"count": 4, "p50": 0.3, "p99": 1.2}},
              "batches": {"count": 2}}
    return scheduler_split(window)


def test_table_rows_put_both_loads_side_by_side():
    raw, cell, dec = _records(20)
    f = figures(join({f"t{i}" for i in range(20)}, CELL, raw, cell, dec, {f"t{i}": 1000 + 10 * i + 3.0 for i in range(20)},
                     {f"t{i}": ("TaskPlaced", 1000 + 10 * i + 30.0) for i in range(20)}))
    e2e = {"low_load": {"offered_rate": 100.0, "stages": dict(f, scheduler=_split())},
           "half_load": {"offered_rate": 412.5, "stages": dict(f, scheduler=_split())}}
    rows = markdown_rows(e2e)
    assert rows[1] == "| E2E stage raw topic -> cell log (intake): p50 / p99 ms at 100/s; 412.5/s offered | 4 / 4; 4 / 4 | |"
    assert any("scheduler's own cell log -> decided" in r and "| 2 / 4; 2 / 4 |" in r for r in rows)
    assert markdown_rows({"half_load": {"offered_rate": 1}}) == []          # an older result: no rows
    assert missing_figures({"half_load": {"stages": dict(f, scheduler=scheduler_split(None))}}) == [
        "e2e stages (low_load)", "e2e scheduler split (half_load)"]


@pytest.mark.stack
def test_a_measured_phase_produces_every_stage_in_order(stack):
    """120 tasks at 100/s on 20 synthetic nodes, through the real workers and a real read model."""
    from suanli.bench import e2e
    from suanli.config import load_settings

    settings = load_settings(namespace=f"teststages{uuid.uuid4().hex[:8]}")
    with e2e.workload(20, 120) as (nodes, pods):
        phase = e2e.phase(settings, nodes, pods, 120, rate=100.0, stages=True)
    st = phase["stages"]
    assert st["notes"] == []
    assert st["tasks"] == 120 and st["warmup"] == 12
    assert st["measured"] + st["first_decision_not_placed"] == 108 and st["measured"] > 0
    assert st["missing"] == {b: 0 for b in BOUNDARIES}
    assert st["read_model_disagrees"] == 0                    # the read model saw what the topic holds
    assert st["order_violations"] == 0, st["order_violation_examples"]
    assert st["timestamp_types"] == {"raw": ["CreateTime"], "cell_log": ["LogAppendTime"], "decisions": ["CreateTime"]}
    assert all(s["n"] == st["measured"] for s in st["stages"][:len(STAGES)])
    assert all(s["p50"] <= s["p99"] for s in st["stages"])
    rows = st["scheduler"]["rows"]
    assert all(r["n"] == 120 for r in rows)                   # every submission, warm-up included
    assert missing_figures({"low_load": phase, "half_load": phase}) == []
