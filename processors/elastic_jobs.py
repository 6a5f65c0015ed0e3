"""The cell's book of elastic jobs (issue 22, C15): what the core keeps of each elastic
federated job, and the next step of one after a round. Pure; the core (``core.py``) calls
:func:`fold_round` on a ``JobRound``, :func:`next_step` right after, and
:func:`fold_resize` when its ``JobResized`` decision is applied.

A job is elastic when one of its tasks in the cell carries the ``elastic`` label
(:data:`elastic.ELASTIC_LABEL`, normally its aggregator): its value is the policy
(:func:`elastic.parse_label`). A round of any other job leaves the state as it was.

The book (``state.elastic[job_id]``, plain JSON for the snapshot):

* ``losses``: the losses of the job's aggregated rounds, oldest first (the last
  ``window + 1``: all the policy reads);
* ``round``: the newest round folded; an older or repeated round number is not folded
  again (a re-sent report is a duplicate);
* ``clients`` / ``batch``: the size and batch size the job was last resized to; until its
  first resize, the clients are counted (its active client tasks) and the batch size is
  the label's starting one.

The policy's inputs, all read from the cell state, so that replay decides the same:

* **clients**: the book's, else the job's active client tasks (``federated-role=client``,
  placed, dispatched or running);
* **free slots**: how many more client-shaped tasks (the request of the job's first client
  task) fit on the ready nodes of the sites its clients run at (``data-site`` labels): per
  node, the smaller of free CPU over the client's CPU and free memory over its memory.
  Finished clients count here, also once the cell has forgotten them
  (``CellState.job_clients``);
* **gold waiting**: gold tasks in the cell's queue.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from suanli.errors import StrategyConfigError

from . import model as m
from .elastic import ELASTIC_LABEL, ElasticArgs, ElasticDecision, decide, parse_label
from .federated import DATA_SITE_LABEL
from .qos import GOLD
from .forgotten_clients import ClientView
from .state import HOLDING, CellState, TaskRecord


@dataclass(frozen=True, slots=True)
class ElasticStep:
    """What :func:`next_step` found for a job: the decision and the figures before it."""
    job_id: str
    head: TaskRecord              # the task carrying the policy (the decision names it)
    decision: ElasticDecision
    clients_from: int
    batch_from: int
    round: int
    inputs: str                   # the figures the policy read, for the decision's path

    @property
    def changes(self) -> bool:
        return self.decision.clients != self.clients_from or self.decision.batch_size != self.batch_from


def _members(state: CellState, job_id: str) -> list[TaskRecord]:
    """The job's tasks the cell remembers, in arrival order (the elastic policy's task is always among them)."""
    return state.job_tasks(job_id)


def policy_of(state: CellState, job_id: str) -> Optional[tuple[TaskRecord, ElasticArgs, int]]:
    """The task carrying ``job_id``'s elastic policy, the policy and the starting batch size;
    None when no task of the job in the cell carries a label that parses (the API refuses a
    bad one at submission, so a bad label here was written past it: the job stays fixed)."""
    for t in sorted(_members(state, job_id), key=lambda r: r.seq):
        text = t.task.labels.get(ELASTIC_LABEL)
        if text is None:
            continue
        try:
            args, batch = parse_label(text)
        except StrategyConfigError:
            continue
        return t, args, batch
    return None


def fold_round(state: CellState, e: m.JobRound) -> None:
    """Keep the round's loss in the job's book (elastic jobs only; a round number at or
    below the newest folded one is a duplicate and is ignored)."""
    found = policy_of(state, e.job_id)
    if found is None:
        return
    _head, args, batch = found
    book = state.elastic.setdefault(e.job_id, {"losses": [], "round": 0, "clients": None, "batch": batch})
    if e.round <= book["round"]:
        return
    book["round"] = e.round
    if e.aggregated and e.loss is not None:
        book["losses"] = (book["losses"] + [float(e.loss)])[-(args.window + 1):]


def fold_resize(state: CellState, e: m.JobResized) -> None:
    """The job runs ``clients_to`` clients at ``batch_size_to`` from now on."""
    book = state.elastic.setdefault(e.job_id, {"losses": [], "round": e.round, "clients": None, "batch": None})
    book["clients"], book["batch"] = e.clients_to, e.batch_size_to


def free_slots(state: CellState, clients: list[ClientView]) -> int:
    """Client-shaped tasks that still fit on the ready nodes of the clients' sites (module
    docstring); 0 when the job has no client task to take the shape from."""
    if not clients:
        return 0
    cpu, mem = clients[0].cpu, clients[0].mem
    sites = {t.labels.get(DATA_SITE_LABEL) for t in clients} - {None}
    slots = 0
    for row, nid in enumerate(state.node_ids):
        if not state.ready[row] or (sites and state.nodes[nid].site not in sites):
            continue
        fits = []
        if cpu > 0:
            fits.append(int(state.cpu_free[row]) // cpu)
        if mem > 0:
            fits.append(int(state.mem_free[row]) // mem)
        slots += max(0, min(fits)) if fits else 0
    return slots


def gold_waiting(state: CellState) -> int:
    """Gold tasks in the cell's queue."""
    return sum(1 for *_key, tid in state.queue if tid in state.tasks and state.tasks[tid].task.qos_tier == GOLD)


def next_step(state: CellState, e: m.JobRound) -> Optional[ElasticStep]:
    """The elastic policy's step for ``e``'s job after :func:`fold_round` kept the round;
    None for a job that is not elastic or a round that was not folded (a duplicate)."""
    found = policy_of(state, e.job_id)
    book = state.elastic.get(e.job_id)
    if found is None or book is None or book["round"] != e.round:
        return None
    head, args, start_batch = found
    clients = state.job_clients(e.job_id, by_job_id=True)
    active = sum(1 for t in clients if t.status in HOLDING)
    n = book["clients"] if book["clients"] is not None else active
    batch = book["batch"] if book["batch"] is not None else start_batch
    free = free_slots(state, clients)
    gold = gold_waiting(state)
    decision = decide(book["losses"], n, free, gold, batch, args)
    inputs = (f"job {e.job_id} round {e.round}: {n} clients ({active} running), batch {batch}, "
              f"{len(book['losses'])} losses kept, {free} client slots free on its sites, {gold} gold tasks waiting")
    return ElasticStep(e.job_id, head, decision, n, batch, e.round, inputs)


def resized(step: ElasticStep, *, event_id: str, decision_id: str, cell: str, at: int,
            provenance: m.Provenance) -> m.JobResized:
    """The ``JobResized`` decision of ``step``."""
    d = step.decision
    return m.JobResized(event_id=event_id, decision_id=decision_id, task_id=step.head.task.task_id,
                        job_id=step.job_id, tenant=step.head.task.tenant, cell=cell, action=d.action,
                        clients_from=step.clients_from, clients_to=d.clients, batch_size_from=step.batch_from,
                        batch_size_to=d.batch_size, round=step.round, reason=d.reason, at=at, provenance=provenance)

