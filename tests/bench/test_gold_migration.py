"""Gold migration with the failure injected, on the real stack (issue 14): ``bench/gold_migration.py``
run small, asserting correctness only (the timing figures belong to the benchmark).

A plane of its own (intake, scheduler and telemetry workers and the simulated cluster: every
tenth node of the openb GPU node list, 121 nodes) with the policy ``qos.gold_share = 0.1``;
40 gold tasks (trace GPU shapes) run, then bronze load until its GPU demand exceeds what the
gold tasks leave, so the cluster is full. The 2 nodes holding the most gold tasks (read from the
decisions) are silenced with the simulator's node-kill fault. Then, read back from Kafka:

- both silenced nodes go DOWN, and each gold task they held has a TaskMigrated (cause NODE_DOWN)
  to a node that was not silenced, and the connector reports it RUNNING there (the RUNNING of
  the dispatch named by the decision id); none of them is TaskLost;
- every gold task of the run ends placed and RUNNING, none on a silenced node, none lost;
- whatever was preempted is bronze, and each victim a migration names got its TaskPreempted
  (preempted_by that gold task);
  the full cluster forces at least one migration to preempt; once its grace ends, every
  preempted task is placed again or pending with a reason;
- ``suanli audit list --kind preemption`` and ``audit why VICTIM`` name each victim's preemptor
  from these decisions;
- the cell's log, exported up to the last input decided, replays IDENTICAL
  (``suanli replay DIR --verify``).
"""
from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys
from types import SimpleNamespace

import pytest

from suanli.bench.gold_migration import CellView, Options, dist, report, run
from suanli.config import load_settings, to_env
from suanli.projections.audit_follower import index_dir

def _cli(settings, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, **to_env(settings)}
    return subprocess.run([sys.executable, "-m", "suanli", *args], capture_output=True, text=True, env=env, timeout=120)


def _every_tenth_gpu_node(tmp_path):
    openb = load_settings().openb_dir
    nodes = tmp_path / "nodes.csv"
    with open(openb / "openb_node_list_gpu_node.csv", newline="") as src, open(nodes, "w", newline="") as dst:
        rows = list(csv.reader(src))
        csv.writer(dst).writerows([rows[0], *rows[1::10]])
    return nodes


def test_dist_is_nearest_rank():
    d = dist(list(range(1, 101)))
    assert (d["count"], d["min"], d["p50"], d["p90"], d["p99"], d["max"]) == (100, 1, 50, 90, 99, 100)
    assert dist([7])["p99"] == 7 and dist([])["count"] == 0
    assert dist([3, 1, 2])["p50"] == 2


def test_the_views_cell_clock_is_the_largest_input_time_so_far():
    v = CellView("c")
    records = [(0, "NodeRegistered", {"registered_at": 100, "node_id": "n"}), (1, "CellTick", {"at": 1_000}),
               (2, "TaskSubmitted", {"submitted_at": 994, "task_id": "t"}),     # stamped behind the clock
               (3, "JobRound", {"at": 9_999}),                                  # its reporter's clock: ignored
               (4, "NodeHeartbeat", {"at": 1_500, "node_id": "n"})]
    for offset, kind, payload in records:
        v.apply(SimpleNamespace(topic="cells", kind=kind, payload={"cell": "c", **payload}, offset=offset,
                                timestamp=0), "decisions")
    assert [v.clock_at(o) for o in range(-1, 6)] == [0, 100, 1_000, 1_000, 1_000, 1_500, 1_500]


@pytest.mark.stack
@pytest.mark.timeout(600)
def test_gold_tasks_of_silenced_nodes_migrate_and_run_elsewhere_and_none_is_lost(stack, tmp_path):
    openb = load_settings().openb_dir
    o = Options(nodes_csv=_every_tenth_gpu_node(tmp_path), pods_csv=openb / "openb_pod_list_default.csv", gold=40,
                silence=2, fill=1.05, timeout=180, verify=True)
    f = run(o, say=print, prefix="tgm")
    print(report(f))

    silenced = set(f["silenced_nodes"])
    assert len(silenced) == 2 and all(n > 0 for n in f["gold_per_silenced_node"].values()), f["gold_per_silenced_node"]
    assert f["gold_affected"] == sum(f["gold_per_silenced_node"].values()) == len(f["migrations"])
    # each affected gold task: one TaskMigrated off its node, NODE_DOWN, to a live node, RUNNING there
    assert f["problems"] == []
    for m in f["migrations"]:
        assert m["from"] in silenced and m["to"] not in silenced, m
    # no gold task lost, every one RUNNING where it is placed, none left on a silenced node
    assert f["gold_lost"] == [] and f["gold_not_running_at_end"] == [] and f["gold_on_silenced_nodes_at_end"] == []
    assert f["health_transitions"].get("DOWN", 0) >= 2
    # only bronze is ever preempted; the cluster was full, so moving gold took bronze's place
    assert set(f["preempted_tiers"]) <= {"BRONZE"}, f["preempted_tiers"]
    assert f["migrations_with_victims"] >= 1 and f["bronze_preempted_by_migrations"] >= 1
    # every preempted task placed again, or pending with a reason, after its grace ("problems")
    assert f["preempted_placed_again"] + f["preempted_pending"] >= 1
    named = {v for m in f["migrations"] for v in m["preempted"]}     # each has its TaskPreempted ("problems")
    assert named and f["bronze_preempted_by_migrations"] >= len(named)
    # the audit answers "who was preempted, by whom and why" from these real decisions
    settings = load_settings(namespace=f["namespace"])
    try:
        listed = _cli(settings, "audit", "list", "--kind", "preemption", "--json")
        assert listed.returncode == 0, listed.stderr
        by = {r["task_id"]: r["detail"]["preempted_by"] for r in json.loads(listed.stdout)["decisions"]}
        assert named <= set(by) and all("-gold-" in p for p in by.values()), by
        m = next(m for m in f["migrations"] if m["preempted"])
        why = _cli(settings, "audit", "why", m["preempted"][0])
        assert why.returncode == 0, why.stderr
        assert f"preempted by {m['task_id']} on {m['to']}" in why.stdout, why.stdout
    finally:
        shutil.rmtree(index_dir(settings), ignore_errors=True)          # left by the CLI
    # the whole run replays byte for byte
    assert f["replay"]["identical"] is True and f["replay"]["exit_code"] == 0, f["replay"]


@pytest.mark.stack
@pytest.mark.timeout(600)
def test_with_a_gold_standby_the_other_copy_runs_through_the_failure(stack, tmp_path):
    """The same run with the policy's ``qos.gold_standby``: each of the 20 gold tasks also runs
    a copy (``<id>~standby``) on another node, dispatched to the simulator and RUNNING there.
    The 2 nodes holding the most gold tasks are silenced. Read back from Kafka:

    - no gold task shares a node with its copy, before or after the failure ("problems");
    - each affected gold task is migrated and RUNNING again, and, unless its copy was on the
      other silenced node, its copy ran on throughout on its own node (no move, no end): the
      task was never out of service;
    - copies on the silenced nodes are moved too; nothing gold is lost; every task and every
      copy is RUNNING where placed at the end, none on a silenced node;
    - the run replays IDENTICAL."""
    openb = load_settings().openb_dir
    o = Options(nodes_csv=_every_tenth_gpu_node(tmp_path), pods_csv=openb / "openb_pod_list_default.csv", gold=20,
                silence=2, fill=1.05, timeout=180, verify=True,
                policy={"qos": {"gold_share": 0.1, "gold_standby": True}})
    f = run(o, say=print, prefix="tgs")
    print(report(f))

    assert f["gold_standby"] is True and f["problems"] == []
    assert f["gold_affected"] >= 2 and len(f["migrations"]) == f["gold_affected"]
    # covered unless both copies were silenced; at least one task ran on in its copy
    assert set(f["standby_uncovered"]) <= set(f["standbys_on_silenced_nodes"]), f
    assert len(f["standby_covered"]) + len(f["standby_uncovered"]) == f["gold_affected"]
    assert f["standby_covered"], f
    assert f["gold_downtime_ms"]["min"] == 0
    assert f["gold_lost"] == [] and f["gold_not_running_at_end"] == [] and f["gold_on_silenced_nodes_at_end"] == []
    assert set(f["preempted_tiers"]) <= {"BRONZE"}, f["preempted_tiers"]
    assert f["preempted_placed_again"] + f["preempted_pending"] >= 1
    assert f["replay"]["identical"] is True and f["replay"]["exit_code"] == 0, f["replay"]
