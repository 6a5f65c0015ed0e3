"""``suanli sim``: the health figures folded from hand-made decisions, and the command line."""
from __future__ import annotations

import pytest

from suanli.cli import build_parser
from suanli.cli_sim import describe_health, health_figures


def _prov(at, offset):
    return {"decided_at": at, "input": {"topic": "cells", "partition": 0, "offset": offset}}


def _placed(task, node, at, offset, n=0):
    return ("TaskPlaced", {"event_id": f"p-{task}-{n}", "decision_id": f"p-{task}-{n}", "task_id": task,
                           "node_id": node, "provenance": _prov(at, offset)})


def _health(node, status, at, offset, last, lost=()):
    return ("NodeHealthChanged", {"event_id": f"h-{node}-{status}", "decision_id": f"h-{node}-{status}",
                                  "node_id": node, "status": status, "last_heartbeat_at": last,
                                  "lost_tasks": list(lost), "provenance": _prov(at, offset)})


def _lost(task, node, at, offset):
    return ("TaskLost", {"event_id": f"l-{task}", "decision_id": f"l-{task}", "task_id": task, "node_id": node,
                         "provenance": _prov(at, offset)})


def _released(task, node, at, offset):
    return ("TaskReleased", {"event_id": f"r-{task}", "decision_id": f"r-{task}", "task_id": task,
                             "node_id": node, "cause": "COMPLETED", "provenance": _prov(at, offset)})


def test_health_figures_of_a_clean_failure():
    decisions = [_placed("a", "n1", 1000, 1), _placed("b", "n1", 1100, 2), _placed("c", "n2", 1200, 3),
                 _health("n1", "SUSPECT", 12_000, 10, 2000), _health("n1", "DOWN", 17_400, 15, 2000, ["a", "b"]),
                 _lost("a", "n1", 17_400, 15), _lost("b", "n1", 17_400, 15),
                 _placed("a", "n2", 17_400, 15, 1), _placed("b", "n3", 22_400, 20, 1),
                 _placed("a", "n2", 17_400, 15, 1),                        # a redelivered duplicate: dropped
                 _released("c", "n2", 23_000, 21)]
    inputs = [(4, "NodeHeartbeat", {"node_id": "n1", "at": 2000}), (5, "NodeHeartbeat", {"node_id": "n2", "at": 2000}),
              (16, "TaskStatusChanged", {"task_id": "a", "node_id": "n1", "status": "COMPLETED"}),
              (17, "TaskStatusChanged", {"task_id": "a", "node_id": "n2", "status": "RUNNING"})]
    f = health_figures(decisions, inputs)
    assert f["nodes_down"] == 1 and f["down_latency_ms"] == {"count": 1, "min": 15_400, "p50": 15_400,
                                                             "p90": 15_400, "max": 15_400}
    assert (f["tasks_lost"], f["replaced_elsewhere"], f["not_replaced"]) == (2, 2, [])
    assert f["replace_delay_ms"]["max"] == 5000 and f["suspect_transitions"] == 1
    for problem in ("double_placements", "placed_on_unhealthy", "release_mismatch", "lost_mismatch",
                    "heartbeat_mismatches"):
        assert f[problem] == [], problem
    assert f["stale_statuses"] == {"COMPLETED": 1}
    assert f["down"][0]["log_last_heartbeat_at"] == 2000
    assert "nodes DOWN: 1; detection latency" in describe_health(f)


def test_health_figures_name_what_went_wrong():
    decisions = [_placed("a", "n1", 1000, 1), _placed("b", "n1", 1000, 2),
                 _health("n1", "DOWN", 17_000, 15, 2000, ["a"]),                # b forgotten
                 _lost("a", "n1", 17_000, 15), _placed("x", "n1", 17_100, 16),  # onto a DOWN node
                 _placed("b", "n2", 17_200, 17, 1),                             # b twice at once
                 _released("a", "n1", 18_000, 18)]                               # a released, held nowhere
    f = health_figures(decisions, [(3, "NodeHeartbeat", {"node_id": "n1", "at": 1500})])
    assert len(f["lost_mismatch"]) == 1 and "lost ['a']" in f["lost_mismatch"][0]
    assert f["placed_on_unhealthy"] == ["x on n1 (DOWN, p-x-0)"]
    assert len(f["double_placements"]) == 1 and f["not_replaced"] == ["a"]
    assert f["heartbeat_mismatches"] == ["n1"] and f["release_mismatch"] == []


def test_the_sim_commands_parse():
    parser = build_parser()
    args = parser.parse_args(["sim", "fault", "silence", "--nodes", "20", "--seed", "3", "--busy-for", "20",
                              "--cell", "c1"])
    assert (args.fault_action, args.nodes, args.seed, args.busy_for, args.cell, args.connector) == \
        ("silence", 20, 3, 20.0, "c1", "sim")
    args = parser.parse_args(["sim", "fault", "restore", "--node", "a", "--node", "b"])
    assert args.node == ["a", "b"]
    assert parser.parse_args(["sim", "health", "--cell", "c"]).cell == "c"
    with pytest.raises(SystemExit):
        parser.parse_args(["sim", "fault", "explode"])
