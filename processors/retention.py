"""How much of its finished work a cell remembers (the ``retention`` key of a cell's policy).

A cell that kept every task it ever saw grew without bound: about 1 MiB of memory and
430 KiB of snapshot per 1,000 finished tasks (``bench/history_growth.py``), so a plane at
full load for a day would hold gigabytes and take minutes to snapshot and restore. So a
cell *forgets* its oldest finished tasks (``CellState.forget_finished``, after an input):

* a task is forgotten only when it is finished (COMPLETED, FAILED, CANCELLED,
  UNSCHEDULABLE), does not carry a job's elastic policy (the ``elastic`` label: the policy
  reads it at every round), and nothing else in the state names it (the queue, a
  preemption's grace, a closed batch window, a reservation's waiting or queued claimants);
* a forgotten member of a job leaves its job's indexes, as a finished gang member leaves
  its gang's (the gang rule reads only waiting members). A federated client
  (``federated-role=client``) leaves what its job's later tasks read of it, for the
  aggregator's traffic score and the elastic policy, until its tombstone goes
  (``forgotten_clients.ClientView.forgotten``: its arrival number, id, last status, data site and byte
  labels, CPU and memory ask; about 250 bytes against about 840 for the task,
  ``bench/history-growth-federated-clients.json``);
* the oldest finished first, once more than ``finished_tasks`` are kept (in steps of an
  eighth of it, so the work is spread); the tasks a pass had to keep because something still
  named them count on top, so that the next pass waits for another eighth rather than
  coming after every input while they stay named;
* a forgotten task leaves a tombstone, its id with its last status and node, for the
  ``forgotten_ids`` most recently forgotten: a submission with that id is still a duplicate,
  and a stale copy of it still reporting RUNNING somewhere is still told to stop.

Forgetting changes no decision while the tombstones last: everything a decision reads of
finished tasks is kept (the tombstones; FGD's observed shape histogram comes from the
cell's running counts and its arrival shape log, ``CellState.shape_log``). Past the
tombstones, an id is no longer known: a duplicate of a task forgotten more than
``forgotten_ids`` forgettings ago is taken as a new task. ``tests/processors/test_retention.py``
runs the same inputs with and without forgetting and compares every decision.
"""
from __future__ import annotations

from dataclasses import dataclass

from .args import arg


@dataclass(frozen=True, slots=True)
class RetentionArgs:
    """The ``retention`` key of a cell's policy (defaults here)."""
    finished_tasks: int = arg(10_000, "finished tasks a cell keeps whole; the oldest beyond them are forgotten "
                              "(processors/retention.py)", ge=0)
    forgotten_ids: int = arg(200_000, "ids of forgotten tasks kept, with their last status and node, so that "
                             "a duplicate submission or a stale copy of one is still recognised", ge=0)

    def batch(self) -> int:
        """How many more than ``finished_tasks`` may pile up before they are forgotten."""
        return max(1, self.finished_tasks // 8)
