"""`suanli pending`, `status`, `nodes` and `submit` against a real plane on a small cluster."""
from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import uuid

import pytest

from suanli.config import load_settings, to_env
from suanli.deploy.plane import Plane, PlaneOptions

pytestmark = pytest.mark.stack


@pytest.fixture(scope="module")
def busy_plane(stack, tmp_path_factory):
    """A 4-node cluster given 120 long tasks: most of them wait."""
    nodes = tmp_path_factory.mktemp("nodes") / "nodes.csv"
    all_nodes = (load_settings().openb_dir / "openb_node_list_gpu_node.csv").read_text().splitlines()
    nodes.write_text("\n".join(all_nodes[:1] + all_nodes[300:304]) + "\n")
    settings = load_settings(namespace=f"t{uuid.uuid4().hex[:10]}", partitions=1)
    plane = Plane(settings, PlaneOptions(tasks=120, rate=0, time_scale=1.0, exit_when_drained=True, quiet=True,
                                         nodes_csv=nodes, drain_timeout=240), out=lambda _m: None)
    plane.start()
    try:
        result = asyncio.run(plane.run())
    finally:
        plane.stop()
    return plane, result


def _cli(plane: Plane, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, **to_env(plane.s)}
    return subprocess.run([sys.executable, "-m", "suanli", *args], capture_output=True, text=True, env=env,
                          input=stdin, timeout=120)


def test_pending_shows_reasons_and_queue_positions(busy_plane):
    plane, result = busy_plane
    assert result["pending"] > 10, result
    out = _cli(plane, "pending", "--cell", plane.cell, "--json")
    assert out.returncode == 0, out.stderr
    rows = json.loads(out.stdout)
    assert len(rows) > 10  # the plane kept deciding after its own count, so compare shapes, not totals
    assert [r["queue_position"] for r in rows] == list(range(1, len(rows) + 1))
    assert all(r["reasons"] and r["reasons"][0]["reason"] for r in rows)
    table = _cli(plane, "pending", "--cell", plane.cell, "--limit", "3")
    assert table.returncode == 0 and "    1  " in table.stdout and "nodes)" in table.stdout


def test_status_of_a_pending_and_a_placed_task(busy_plane):
    plane, _ = busy_plane
    rows = json.loads(_cli(plane, "pending", "--cell", plane.cell, "--json").stdout)
    out = _cli(plane, "status", rows[0]["task_id"])
    assert out.returncode == 0 and "PENDING" in out.stdout and "queue position 1" in out.stdout
    assert "reason:" in out.stdout
    nodes = json.loads(_cli(plane, "nodes", "--cell", plane.cell, "--json").stdout)
    assert len(nodes) == 4 and any(n["cpu_used"] > 0 for n in nodes)
    missing = _cli(plane, "status", "no-such-task")
    assert missing.returncode == 1 and "no task" in missing.stderr


def test_submit_validates_and_reaches_the_raw_topic(busy_plane):
    plane, _ = busy_plane
    bad = _cli(plane, "submit", "-", stdin="resources: {cpu: 1, memory: 1Gi, gpu: -1}\n")
    assert bad.returncode == 2 and "resources.gpu" in bad.stderr
    good = _cli(plane, "submit", "-", "--cell", plane.cell,
                stdin="id: cli-task-1\nresources: {cpu: 1, memory: 1Gi}\n")
    assert good.returncode == 0 and "submitted cli-task-1" in good.stdout
