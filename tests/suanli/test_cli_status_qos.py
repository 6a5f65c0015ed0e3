"""`suanli status`, `pending` and `nodes drain` on preempted and moved tasks: the pure parts
(text and JSON built from a lifecycle view folded from typed decisions) and the command line's
refusals, which need no broker."""
from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest

from suanli.cli import build_parser
from suanli.cli_tasks import node_status_event, pending_lines, pending_rows, status_lines
from suanli.errors import NotFoundError, ValidationError
from suanli.processors import model as m
from suanli.projections.lifecycle import LifecycleView
from suanli.schemas.models import validate_event

CELL = "c"
T0 = 1_760_000_000_000          # 2025-10-09 08:53:20Z


def _ev(value: Any) -> tuple[str, dict]:
    return value.KIND, m.to_avro(value)


def prov(at: int) -> m.Provenance:
    return m.Provenance(input=m.LogPosition(topic="c.cells", partition=0, offset=at - T0),
                        strategy=m.StrategyRef(name="default", version="1", config_digest="d"),
                        candidates=(), filtered=(), path=("submitted", "bind"), decided_at=at)


def did(at: int) -> str:
    return f"{CELL}/c.cells/0/{at - T0}/0"


def view_of(*values: Any) -> LifecycleView:
    view = LifecycleView()
    for v in values:
        view.apply(*_ev(v))
    return view


def node(nid: str, cell: str = CELL) -> m.NodeRegistered:
    return m.NodeRegistered(event_id=f"reg/{cell}/{nid}", node_id=nid, cell=cell, site="s", region="r", zone="z",
                            tier="cloud", arch="x86_64", cpu_milli=8000, memory_mib=16384,
                            accelerators=(m.Accelerator(kind="GPU", model="T4", count=1),), registered_at=0)


def submit(tid: str, tier: str) -> m.TaskSubmitted:
    return m.TaskSubmitted(event_id=f"sub/{tid}", task_id=tid, tenant="acme", cell=CELL, submitted_at=T0,
                           resources=m.TaskResources(cpu_milli=1000, memory_mib=1024, gpu_count=1, gpu_milli=1000),
                           qos_tier=tier)


def placed(tid: str, nid: str, at: int) -> m.TaskPlaced:
    return m.TaskPlaced(event_id=f"{did(at)}/P", decision_id=did(at), task_id=tid, tenant="acme", cell=CELL,
                        node_id=nid, gpu_devices=(0,), gpu_milli=1000, cpu_milli=1000, memory_mib=1024,
                        provenance=prov(at))


def preempted(tid: str, nid: str, at: int, by: str) -> m.TaskPreempted:
    return m.TaskPreempted(event_id=f"{did(at)}/X", decision_id=did(at), task_id=tid, tenant="acme", cell=CELL,
                           node_id=nid, preempted_by=by, reason=f"preempted by {by} (GOLD priority 0) on {nid}",
                           provenance=prov(at), grace_ms=30_000, work_lost_ms=5_000, victims=(tid,))


def migrated(tid: str, src: str, dst: str, at: int) -> m.TaskMigrated:
    return m.TaskMigrated(event_id=f"{did(at)}/M", decision_id=did(at), task_id=tid, tenant="acme", cell=CELL,
                          from_node=src, to_node=dst, gpu_devices=(0,), reason=f"DRAIN: {src} -> {dst}",
                          provenance=prov(at), cause="DRAIN", since=at - 1_500, elapsed_ms=1_500, reserve_first=True)


def history() -> LifecycleView:
    return view_of(node("n1"), node("n2"), node("n3"), submit("bronze-1", "BRONZE"), submit("gold-1", "GOLD"),
                   placed("bronze-1", "n1", T0 + 1_000), preempted("bronze-1", "n1", T0 + 10_000, "gold-1"),
                   placed("gold-1", "n1", T0 + 10_000 + 1), migrated("gold-1", "n1", "n2", T0 + 20_000),
                   m.NodeStatusChanged(event_id="drain/c/n1/1", node_id="n1", cell=CELL, status="DRAINING",
                                       reason="kernel upgrade", at=T0 + 18_500))


def test_status_of_a_victim_says_by_whom_and_when_it_is_queued_again():
    view = history()
    text = "\n".join(status_lines(view, view.tasks["bronze-1"]))
    assert text.splitlines()[0] == "bronze-1  PREEMPTED  (tenant acme, cell c, BRONZE)"
    assert "  preempted by gold-1 on n1 at 2025-10-09 08:53:30.000Z: preempted by gold-1 (GOLD priority 0) on n1" in text
    assert "  queued again at 2025-10-09 08:54:00.000Z (grace 30 s, work lost 5 s)" in text
    assert "  node " not in text                                       # its node is cleared


def test_status_of_a_moved_task_shows_from_to_cause_and_elapsed():
    view = history()
    text = "\n".join(status_lines(view, view.tasks["gold-1"]))
    assert "  node n2, GPU [0] x 1000 milli" in text
    assert "  old copy still on n1: its place is held until the copy on n2 runs (reserve-first move)" in text
    assert "    2025-10-09 08:53:40.000Z  moved n1 -> n2: DRAIN, decided 1.5 s after it began (reserve-first)" in text


def test_pending_lists_the_queue_then_the_preempted_in_their_grace():
    view = history()
    assert pending_rows(view, CELL) == []                 # the queue alone: positions 1..n
    rows = pending_rows(view, CELL, include_grace=True)
    assert rows == [{"task_id": "bronze-1", "cell": CELL, "status": "PREEMPTED", "queue_position": None,
                     "priority": 0, "qos_tier": "BRONZE", "reasons": [], "preempted_by": "gold-1",
                     "requeue_at": T0 + 40_000}]
    lines = pending_lines(view, CELL, 50)
    assert lines[0] == "preempted, in their grace (1):"
    assert "by gold-1 on n1; queued again at 2025-10-09 08:54:00.000Z" in lines[1]
    view.apply(*_ev(m.TaskPending(event_id="p", decision_id=did(T0 + 40_000), task_id="bronze-1", tenant="acme",
                                  cell=CELL, reasons=(m.PendingReason(reason="preempted by gold-1", nodes=3),),
                                  queue_position=0, provenance=prov(T0 + 40_000))))
    [row] = pending_rows(view, CELL, include_grace=True)
    assert (row["status"], row["queue_position"], row["preempted_by"]) == ("PENDING", 1, "gold-1")
    assert pending_lines(view, CELL, 50)[1].endswith("preempted by gold-1 (3 nodes)")


def test_a_node_is_found_by_id_and_cell_or_refused_with_the_reason():
    view = view_of(node("n1"), node("n2"), node("n1", cell="other"))
    assert view.find_node("n2").cell == CELL and view.find_node("n1", "other").cell == "other"
    with pytest.raises(ValidationError, match="registered in cells c, other: name its cell"):
        view.find_node("n1")
    with pytest.raises(NotFoundError, match="no node 'n9' has registered"):
        view.find_node("n9")
    with pytest.raises(NotFoundError, match="no node 'n2' in cell 'other'"):
        view.find_node("n2", "other")
    with pytest.raises(NotFoundError, match="no cell 'nowhere'"):
        view.find_node("n1", "nowhere")
    assert history().nodes[(CELL, "n1")].status == "DRAINING"


def test_the_drain_event_is_a_valid_node_status_change():
    event = node_status_event("n1", CELL, "DRAINING", "kernel upgrade", T0)
    assert validate_event("NodeStatusChanged", event) is None
    assert m.from_avro("NodeStatusChanged", event).status == "DRAINING"
    assert event["event_id"].startswith("draining/c/n1/")
    assert node_status_event("n1", CELL, "DRAINING", "", T0)["event_id"] != event["event_id"]


def test_nodes_keeps_listing_and_takes_drain_cordon_uncordon():
    p = build_parser()
    listing = p.parse_args(["nodes", "--cell", "c", "--limit", "3"])
    assert (listing.node_action, listing.cell, listing.limit) == (None, "c", 3)
    drain = p.parse_args(["nodes", "drain", "n1", "--cell", "c", "--reason", "upgrade"])
    assert (drain.node_action, drain.node, drain.node_cell, drain.reason) == ("drain", "n1", "c", "upgrade")
    assert p.parse_args(["nodes", "uncordon", "n1"]).node_action == "uncordon"
    bad = subprocess.run([sys.executable, "-m", "suanli", "nodes", "drain"], capture_output=True, text=True)
    assert bad.returncode == 2 and "NODE" in bad.stderr


def test_status_names_a_gold_tasks_standby_copy_and_the_copy_its_task():
    view = view_of(node("n1"), node("n2"), submit("gold-9", "GOLD"), placed("gold-9", "n1", T0 + 1_000),
                   placed("gold-9~standby", "n2", T0 + 1_001))
    text = "\n".join(status_lines(view, view.tasks["gold-9"]))
    assert "  standby copy gold-9~standby: PLACED on n2 (qos.gold_standby)" in text
    copy = status_lines(view, view.tasks["gold-9~standby"])
    assert copy[0] == "gold-9~standby  PLACED  (tenant acme, cell c, GOLD)"     # its task's tier
    assert "  the gold standby copy of gold-9 (`suanli status gold-9`)" in copy
    view = view_of(node("n1"), submit("gold-8", "GOLD"), placed("gold-8", "n1", T0 + 1_000))
    assert not any("standby" in line for line in status_lines(view, view.tasks["gold-8"]))
    # the copy's decision read before its task's submission (two topics): the tier follows
    view = view_of(node("n1"), node("n2"), placed("gold-7~standby", "n2", T0 + 1_001), submit("gold-7", "GOLD"))
    assert view.tasks["gold-7~standby"].qos_tier == "GOLD"
