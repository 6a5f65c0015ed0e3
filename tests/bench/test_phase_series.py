"""The phase series' windows (bench/phase_series.py), from record times alone."""
from suanli.bench.phase_series import windows


def test_windows_count_from_the_first_submission_and_leave_out_unplaced_tasks():
    submitted = {"a": (1_000, 1_010), "b": (1_400, 1_450), "c": (1_600, 1_605), "d": (2_700, 2_900), "e": (1_100, 1_101)}
    placed = {"a": 1_050, "b": 1_700, "c": 1_620, "d": 3_000}                     # e never placed
    got = windows(submitted, placed, 500)
    assert got == [
        {"from_s": 0.0, "tasks": 2, "p50_ms": 50, "max_ms": 300, "intake_max_ms": 50},    # a: 50 ms, b: 300 ms (nearest rank)
        {"from_s": 0.5, "tasks": 1, "p50_ms": 20, "max_ms": 20, "intake_max_ms": 5},       # c
        {"from_s": 1.5, "tasks": 1, "p50_ms": 300, "max_ms": 300, "intake_max_ms": 200},   # d; 1.0-1.5 s: none
    ]


def test_no_submissions_no_series():
    assert windows({}, {"a": 5}, 500) == []
