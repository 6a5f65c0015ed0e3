"""The lifecycle view against the real core: preemption, a drain and a reported DOWN.

The scheduling core (``processors.decide``) decides; a connector written here follows the
kit's conventions (statuses ``{dispatch_id}:{status}``, RUNNING when a copy is dispatched,
FAILED "stopped" when a StopCommand names it) and its statuses go back into the core as cell
inputs, as they would through intake. The view then folds the cell inputs and the
decisions, in log order and in the reader's order (all inputs first), and must agree with
the core's own state: each task's status and node, each node's CPU in use, and no capacity
violation. No broker: the core and the fold are pure.
"""
from __future__ import annotations

from typing import Any

import pytest

from suanli.processors import CellState, decide
from suanli.processors import model as m
from suanli.projections.lifecycle import LifecycleView

CELL = "mirror"
Event = tuple[str, dict[str, Any]]
INPUTS = {"NodeRegistered", "NodeStatusChanged", "TaskSubmitted", "TaskStatusChanged", "PolicyChanged", "CellTick",
          "TaskCancelled"}


class Cell:
    """The core of one cell, its log, and a connector that runs what it is told."""

    def __init__(self, qos: dict[str, Any]):
        self.state = CellState(CELL)
        self.offset = 0
        self.events: list[Event] = []             # inputs and decisions, in the order they happened
        self.copies: dict[tuple[str, str], str] = {}   # (task, node) -> dispatch id the connector runs
        self.send(m.PolicyChanged.of(CELL, "bestfit", {"seed": 1, "retry_every_ms": 0, "qos": qos}, at=0,
                                     event_id="policy"))

    def send(self, value: Any) -> list[Any]:
        self.events.append((value.KIND, m.to_avro(value)))
        self.state, outs = decide(self.state, value, (f"{CELL}.cells", 0, self.offset))
        self.offset += 1
        for d in outs:
            if isinstance(d, m.StopCommand):
                self._stop(d)
                continue
            self.events.append((d.KIND, m.to_avro(d)))
        for d in outs:                            # the connector starts what was dispatched
            if isinstance(d, (m.TaskPlaced, m.TaskMigrated)):
                node = d.node_id if isinstance(d, m.TaskPlaced) else d.to_node
                self.copies[(d.task_id, node)] = d.decision_id
                self.report(d.task_id, node, "RUNNING")
        return outs

    def report(self, task: str, node: str, status: str) -> None:
        dispatch = self.copies[(task, node)]
        if status in ("COMPLETED", "FAILED"):
            del self.copies[(task, node)]
        self.send(m.TaskStatusChanged(event_id=f"{dispatch}:{status.lower()}", task_id=task, cell=CELL, node_id=node,
                                      status=status, at=self.state.now, exit_code=0 if status == "COMPLETED" else None,
                                      message=f"{status.lower()} on {node}"))

    def _stop(self, stop: m.StopCommand) -> None:
        if (stop.task_id, stop.node_id) in self.copies:
            self.pending_stops.append((stop.task_id, stop.node_id))

    pending_stops: list[tuple[str, str]]

    def run_stops(self) -> None:
        """The connector ends the stopped copies (FAILED, stopped), one after the other."""
        while self.pending_stops:
            task, node = self.pending_stops.pop(0)
            if (task, node) in self.copies:
                self.report(task, node, "FAILED")

    def node(self, nid: str, cpu: int = 4000) -> None:
        self.send(m.NodeRegistered(event_id=f"reg/{nid}", node_id=nid, cell=CELL, site="s", region="r", zone="z",
                                   tier="onprem", arch="x86_64", cpu_milli=cpu, memory_mib=65536, registered_at=0))

    def task(self, tid: str, cpu: int, tier: str, at: int = 1_000) -> None:
        self.send(m.TaskSubmitted(event_id=f"sub/{tid}", task_id=tid, tenant="t", cell=CELL, submitted_at=at,
                                  resources=m.TaskResources(cpu_milli=cpu, memory_mib=1024), qos_tier=tier))

    def tick(self, at: int) -> None:
        self.send(m.CellTick(event_id=f"tick/{at}", cell=CELL, at=at))

    def node_status(self, nid: str, status: str, at: int) -> None:
        self.send(m.NodeStatusChanged(event_id=f"ns/{nid}/{status}/{at}", node_id=nid, cell=CELL, status=status,
                                      reason="test", at=at))


def _new(qos: dict[str, Any]) -> Cell:
    cell = Cell(qos)
    cell.pending_stops = []
    return cell


def fold(cell: Cell, reader_order: bool) -> LifecycleView:
    events = cell.events
    if reader_order:
        events = [e for e in events if e[0] in INPUTS] + [e for e in events if e[0] not in INPUTS]
    view = LifecycleView()
    for kind, payload in events:
        view.apply(kind, payload)
    return view


def agree(cell: Cell, view: LifecycleView) -> None:
    """The view says what the core knows."""
    s = cell.state
    for tid, t in s.tasks.items():
        v = view.tasks[tid]
        # a PREEMPTED task holds no place; the core keeps its old node only to know the evicted
        # copy's reports during the grace, the view shows none
        node = None if t.status == "PREEMPTED" else t.node
        assert (v.status, v.node_id or None) == (t.status, node), tid
        assert (v.moving_from or None) == (t.moving_from[0] if t.moving_from else None), tid
    for nid, row in s.node_index.items():
        used = int(s.cpu_cap[row] - s.cpu_free[row])
        assert view.nodes[(CELL, nid)].cpu_used == used, nid
    assert view.violations == []


BOTH = pytest.mark.parametrize("reader_order", [False, True], ids=["log-order", "reader-order"])


@BOTH
def test_preemption_grace_and_requeue_as_the_core_sees_them(reader_order):
    cell = _new({"grace_ms": 2_000})
    cell.node("a")
    cell.task("bronze", 4000, "BRONZE")
    cell.task("silver", 4000, "SILVER")                       # preempts bronze on a
    assert cell.state.tasks["bronze"].status == "PREEMPTED" and cell.state.tasks["silver"].node == "a"
    mid = fold(cell, reader_order)
    agree(cell, mid)
    assert mid.tasks["bronze"].preempted_by == "silver" and mid.tasks["bronze"].requeue_at > 0
    cell.run_stops()                                          # the victim's copy is stopped
    cell.tick(cell.state.now + 2_500)                         # its grace is over: pending again
    assert cell.state.tasks["bronze"].status == "PENDING"
    agree(cell, fold(cell, reader_order))
    cell.report("silver", "a", "COMPLETED")                   # room again: bronze placed again on a
    cell.tick(cell.state.now + 1_000)
    assert cell.state.tasks["bronze"].node == "a"
    view = fold(cell, reader_order)
    agree(cell, view)
    assert view.tasks["bronze"].status == "RUNNING" and view.tasks["bronze"].preempted == 1


@BOTH
def test_a_drain_moves_gold_reserve_first_as_the_core_sees_it(reader_order):
    cell = _new({"grace_ms": 0})
    cell.node("a")
    cell.task("gold", 3000, "GOLD")
    cell.task("silver", 1000, "SILVER")
    cell.node("b")
    cell.node_status("a", "DRAINING", 5_000)
    # the core moved gold to b; the new copy already reported RUNNING, so the old one was told to stop
    assert cell.state.tasks["gold"].node == "b" and cell.state.tasks["gold"].moving_from is None
    cell.run_stops()
    view = fold(cell, reader_order)
    agree(cell, view)
    gold = view.tasks["gold"]
    assert [(mv["from"], mv["to"], mv["cause"], mv["reserve_first"]) for mv in gold.migrations] == \
        [("a", "b", "DRAIN", True)]
    assert view.nodes[(CELL, "a")].status == "DRAINING" and view.tasks["silver"].node_id == "a"


@BOTH
def test_a_drain_whose_new_copy_has_not_run_yet_holds_both_places(reader_order):
    cell = _new({"grace_ms": 0})
    cell.node("a")
    cell.task("gold", 3000, "GOLD")
    cell.node("b")
    real_send = cell.send
    held: list[Any] = []

    def send_without_running(value: Any) -> list[Any]:      # the new copy is slow to start
        if isinstance(value, m.TaskStatusChanged) and value.node_id == "b":
            held.append(value)
            return []
        return real_send(value)

    cell.send = send_without_running
    cell.node_status("a", "DRAINING", 5_000)
    assert cell.state.tasks["gold"].moving_from is not None
    agree(cell, fold(cell, reader_order))                     # a and b both hold gold's CPU
    cell.send = real_send
    for value in held:
        cell.send(value)                                      # now it runs: the old place goes
    cell.run_stops()
    agree(cell, fold(cell, reader_order))


@BOTH
def test_a_reported_down_moves_gold_and_loses_the_others_as_the_core_sees_it(reader_order):
    cell = _new({"grace_ms": 0})
    cell.node("a")
    cell.node("b")
    cell.task("gold", 3000, "GOLD")
    cell.task("silver", 1000, "SILVER")
    cell.task("bronze", 4000, "BRONZE")
    assert cell.state.tasks["gold"].node == "a" and cell.state.tasks["bronze"].node == "b"
    cell.node_status("a", "DOWN", 6_000)                      # gold preempts bronze on b; silver is lost
    cell.run_stops()
    view = fold(cell, reader_order)
    agree(cell, view)
    assert view.tasks["gold"].migrations[0]["cause"] == "NODE_DOWN"
    assert view.tasks["bronze"].preempted_by == "gold" and view.tasks["silver"].lost == 1
