"""A job's federated clients as the rules read them, remembered or forgotten
(``retention.py``): :class:`ClientView`. ``CellState.job_clients`` makes one of each client
it remembers, and keeps one of each client it forgot (``CellState.past_clients``) until the
client's tombstone goes. Pure data."""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional

from .federated import CLIENT_LABELS_READ

if TYPE_CHECKING:
    from .state import TaskRecord


@dataclass(frozen=True, slots=True)
class ClientView:
    """A federated client (``federated-role=client``) as its job's later tasks read it: its
    arrival number (clients are read in arrival order), id, status, the node it holds (None
    once forgotten), its labels, its CPU and memory ask (the elastic policy takes the first
    client's shape), and whether its job came from ``Task.job_id`` (the elastic policy reads
    only those) or from the ``job`` label alone. What a cell keeps of a client it forgot is
    one of these, its labels cut to ``federated.CLIENT_LABELS_READ``."""
    seq: int
    task_id: str
    status: str
    node: Optional[str]
    labels: dict[str, str]
    cpu: int
    mem: int
    by_job_id: bool

    @classmethod
    def of(cls, t: TaskRecord) -> ClientView:
        """A client the cell remembers, read from its record."""
        r = t.task.request
        return cls(t.seq, t.task.task_id, t.status, t.node, t.task.labels, r.cpu, r.mem, bool(t.task.job_id))

    @classmethod
    def forgotten(cls, t: TaskRecord, shared: dict[tuple, dict[str, str]]) -> ClientView:
        """What a cell keeps of a client it forgets. ``shared``: label sets already kept, so
        that the clients of a job, alike but for their ids, hold one dict between them
        (callers never change it)."""
        labels = t.task.labels or {}
        kept = tuple((k, labels[k]) for k in CLIENT_LABELS_READ if k in labels)
        r = t.task.request
        return cls(t.seq, t.task.task_id, t.status, None, shared.setdefault(kept, dict(kept)), r.cpu, r.mem,
                   bool(t.task.job_id))

    def to_json(self) -> list:
        """A forgotten client's snapshot form (its node is always None)."""
        return [self.seq, self.task_id, self.status, self.by_job_id, self.labels, self.cpu, self.mem]

    @classmethod
    def from_json(cls, d: list, shared: dict[tuple, dict[str, str]]) -> ClientView:
        seq, tid, status, by_job_id, labels, cpu, mem = d
        kept = tuple(labels.items())
        return cls(int(seq), tid, status, None, shared.setdefault(kept, dict(kept)), int(cpu), int(mem),
                   bool(by_job_id))
