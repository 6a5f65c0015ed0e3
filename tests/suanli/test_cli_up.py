"""`suanli up --exit-when-drained` as a user runs it: a real subprocess, real workers."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

pytestmark = pytest.mark.stack


def _processes_with(marker: str) -> list[int]:
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if marker.encode() in (proc / "cmdline").read_bytes():
                found.append(int(proc.name))
        except OSError:
            continue
    return found


def test_headless_up_drains_2000_tasks_and_leaves_nothing_behind(stack, tmp_path):
    namespace = f"t{uuid.uuid4().hex[:10]}"
    out = tmp_path / "out.json"
    env = {**os.environ, "SUANLI_NAMESPACE": namespace}
    run = subprocess.run([sys.executable, "-m", "suanli", "up", "--tasks", "2000", "--exit-when-drained",
                          "--json", str(out)], env=env, capture_output=True, text=True, timeout=540)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    figures = json.loads(out.read_text())
    assert {"submitted", "placed", "running", "completed", "pending", "dead_lettered",
            "capacity_violations"} <= set(figures)
    assert figures["submitted"] == 2000
    assert figures["capacity_violations"] == 0
    assert figures["placed"] + figures["pending"] + figures["unschedulable"] == 2000
    assert figures["first_placement_s"] is not None  # the figure is reported; its size is a benchmark
    assert "drained in" in run.stdout
    assert _processes_with(f"suanli-plane={namespace}") == []
    (Path(stack.home) / "reports").mkdir(parents=True, exist_ok=True)
    (Path(stack.home) / "reports" / "headless.json").write_text(json.dumps(figures, indent=2))
