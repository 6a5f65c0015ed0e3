"""`suanli up --exit-when-drained` as a user runs it: a real subprocess, real workers."""
from __future__ import annotations

import json
import os
import re
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


def test_up_with_three_cells_on_two_workers_deals_nodes_and_tasks_and_shares_the_cells(stack, tmp_path):
    """`suanli up --cells 3 --workers 2` in a fresh namespace of 3 partitions: each cell on a
    partition of its own with its own simulated cluster (a third of the nodes), the tasks
    dealt among them, both scheduler workers holding cells, every task decided."""
    import csv

    from suanli.config import load_settings

    namespace = f"t{uuid.uuid4().hex[:10]}"
    src = load_settings().openb_dir / "openb_node_list_gpu_node.csv"
    rows = list(csv.reader(open(src, newline="")))
    nodes = tmp_path / "nodes.csv"
    with open(nodes, "w", newline="") as f:
        csv.writer(f).writerows([rows[0], *rows[1:61]])
    out = tmp_path / "out.json"
    env = {**os.environ, "SUANLI_NAMESPACE": namespace, "SUANLI_PARTITIONS": "3"}
    run = subprocess.run([sys.executable, "-m", "suanli", "up", "--cells", "3", "--workers", "2", "--tasks", "300",
                          "--rate", "0", "--nodes", str(nodes), "--no-metrics", "--exit-when-drained",
                          "--json", str(out)], env=env, capture_output=True, text=True, timeout=540)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    figures = json.loads(out.read_text())
    cells = figures["cells"]
    assert len(cells) == 3 and "3 cells" in run.stdout
    assert "scheduler workers share the cells' partitions" in run.stdout     # both joined before the work
    from suanli.streams.topics import partition_of
    assert sorted(partition_of(c, 3) for c in cells) == [0, 1, 2]
    assert figures["submitted"] == 300 and figures["capacity_violations"] == 0
    assert figures["placed"] + figures["pending"] + figures["unschedulable"] == 300
    assert sum(figures["placed_per_cell"].values()) == figures["placed"]
    assert all(n > 0 for n in figures["placed_per_cell"].values()), figures["placed_per_cell"]
    assert sum(figures["nodes_health"].values()) == 60
    # both workers decided for cells: each recovered (took up) at least one partition, and
    # together all three (their last assignment lines are from the shutdown's rebalances)
    logs = Path(stack.home) / "logs"
    took = [set(map(int, re.findall(r"partition (\d+) recovered",
                                    (logs / f"{namespace}-{name}.log").read_text(errors="replace"))))
            for name in ("scheduler", "scheduler-2")]
    assert all(took) and set().union(*took) == {0, 1, 2}, took
    assert _processes_with(f"suanli-plane={namespace}") == []
