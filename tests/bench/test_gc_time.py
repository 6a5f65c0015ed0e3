"""``bench/gc_time.py``: the hook counts a child process's collections, and its children's."""
from __future__ import annotations

import sys

from suanli.bench import gc_time

CHURN = ("import gc\n"
         "gc.set_threshold(100, 2, 2)\n"
         "for i in range(20000):\n"
         "    a = []; a.append(a)\n")


def test_a_process_and_its_child_are_counted():
    child = f"import subprocess, sys; subprocess.check_call([sys.executable, '-c', {CHURN!r}, 'child'])"
    out = gc_time.run([sys.executable, "-c", CHURN + child, "parent"])
    assert out["exit_code"] == 0
    by_role = {p["argv"][-1]: p for p in out["processes"]}
    assert set(by_role) == {"parent", "child"}
    for p in by_role.values():
        assert p["thresholds"] == [100, 2, 2]
        assert p["collections"][0] > 0 and p["collections"][2] > 0     # the churn made full passes
        assert abs(p["gc_seconds"] - sum(p["seconds"])) < 0.01 and p["gc_seconds"] > 0
        assert 0 < p["gc_share"]


def test_a_failing_command_reports_its_exit_code():
    assert gc_time.run([sys.executable, "-c", "raise SystemExit(3)"])["exit_code"] == 3
