"""`suanli cost` against a real plane: tasks of each tier run on the simulated cluster, then
the command reads the log and prices them. The simulator registers each node with a price
and an idle price, ``IDLE_PRICE_SHARE`` (40 %) of it (``connectors/simulated.py``), so
bronze must come out 60 % below the same intervals at the silver rate.
"""
from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
import uuid

import pytest

from suanli.config import load_settings, to_env
from suanli.connectors.simulated import IDLE_PRICE_SHARE
from suanli.deploy.plane import Plane, PlaneOptions
from suanli.projections.reader import load_lifecycle

pytestmark = [pytest.mark.stack, pytest.mark.timeout(400)]

TENANT, OTHER = "costtest", "someone-else"
PER_TIER = 4
RUN_MS = 3000          # each task runs 3 s (time scale 1)


@pytest.fixture(scope="module")
def priced_plane(stack, tmp_path_factory):
    nodes_csv = tmp_path_factory.mktemp("nodes") / "nodes.csv"
    rows = (load_settings().openb_dir / "openb_node_list_gpu_node.csv").read_text().splitlines()
    nodes_csv.write_text("\n".join(rows[:1] + rows[300:304]) + "\n")
    settings = load_settings(namespace=f"t{uuid.uuid4().hex[:10]}", partitions=1)
    tiers = ["GOLD", "SILVER", "BRONZE"] * PER_TIER + ["SILVER", "BRONZE"]

    async def workload(publish, _send_raw, tasks, _names):
        for task, tier in zip(tasks, tiers):
            task.update(qos_tier=tier, tenant=OTHER if task is tasks[-1] or task is tasks[-2] else TENANT,
                        duration_estimate_ms=RUN_MS, submitted_at=int(time.time() * 1000),
                        resources={**task["resources"], "cpu_milli": 1000, "memory_mib": 1024, "gpu_count": 1,
                                   "gpu_milli": 250, "gpu_models": []})
            await publish("TaskSubmitted", task)

    plane = Plane(settings, PlaneOptions(tasks=len(tiers), rate=0, time_scale=1.0, exit_when_drained=True,
                                         quiet=True, nodes_csv=nodes_csv, drain_timeout=240, workload=workload),
                  out=lambda _m: None)
    plane.start()
    try:
        asyncio.run(plane.run())
        # wait (on the log, not on time) until every task has completed and been released
        deadline = time.monotonic() + 180
        while True:
            view = asyncio.run(load_lifecycle(settings, cell=plane.cell))
            mine = [t for t in view.tasks.values() if t.cell == plane.cell]
            if len(mine) == len(tiers) and all(t.status == "COMPLETED" for t in mine):
                break
            assert time.monotonic() < deadline, sorted((t.task_id, t.status) for t in mine)
    finally:
        plane.stop()
    return plane


def _cost(plane: Plane, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, **to_env(plane.s)}
    return subprocess.run([sys.executable, "-m", "suanli", "cost", *args], capture_output=True, text=True,
                          env=env, timeout=120)


def test_cost_by_tier_prices_every_tier_and_bronze_at_the_idle_rate(priced_plane):
    out = _cost(priced_plane, "--tenant", TENANT, "--by", "tier", "--cell", priced_plane.cell, "--json")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    rows = {r["key"]: r for r in doc["rows"]}
    assert list(rows) == ["GOLD", "SILVER", "BRONZE", "total"]
    for tier in ("GOLD", "SILVER", "BRONZE"):
        r = rows[tier]
        assert r["tasks"] == PER_TIER and r["open_intervals"] == 0, r       # the other tenant is not counted
        assert r["cost"] > 0 and r["gpu_hours"] > 0, r
        # each ran about RUN_MS between its placement and its release (cell-clock times)
        assert r["hours"] >= PER_TIER * 0.5 * RUN_MS / 3.6e6, r
    assert not doc["unpriced_nodes"]
    b = doc["bronze_vs_silver"]
    assert b["intervals"] == PER_TIER
    # every node's idle price is 40 % of its price (rounded to 4 digits): bronze paid 60 % less than
    # silver would have for the same intervals
    assert b["saving_pct"] == pytest.approx(100 * (1 - IDLE_PRICE_SHARE), abs=0.05)
    assert doc["bronze_without_idle_price"] == 0
    assert b["bronze_cost"] == pytest.approx(rows["BRONZE"]["cost"], rel=1e-4)


def test_cost_by_tenant_and_pricing_and_the_table(priced_plane):
    by_tenant = json.loads(_cost(priced_plane, "--by", "tenant", "--cell", priced_plane.cell, "--json").stdout)
    tenants = {r["key"]: r for r in by_tenant["rows"]}
    assert tenants[TENANT]["tasks"] == 3 * PER_TIER and tenants[OTHER]["tasks"] == 2
    by_pricing = json.loads(_cost(priced_plane, "--by", "pricing", "--cell", priced_plane.cell, "--json").stdout)
    pricing = {r["key"] for r in by_pricing["rows"]} - {"total"}
    assert pricing and pricing <= {"ON_DEMAND", "RESERVED", "SPOT"}
    assert by_pricing["rows"][-1]["cost"] == pytest.approx(by_tenant["rows"][-1]["cost"], rel=1e-6)
    table = _cost(priced_plane, "--tenant", TENANT, "--cell", priced_plane.cell)
    assert table.returncode == 0 and "BRONZE" in table.stdout and "60.0 % less" in table.stdout


def test_cost_says_clearly_when_kafka_is_not_there(priced_plane):
    env = {**os.environ, **to_env(priced_plane.s), "SUANLI_KAFKA": "127.0.0.1:1",
           "SUANLI_REGISTRY": "http://127.0.0.1:1/apis/ccompat/v7"}
    out = subprocess.run([sys.executable, "-m", "suanli", "cost"], capture_output=True, text=True, env=env,
                         timeout=60)
    assert out.returncode == 2 and "not reachable" in out.stderr and "Traceback" not in out.stderr
