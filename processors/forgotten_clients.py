"""What a cell keeps of the federated clients it forgets (``retention.py``), and how the
rules read a job's clients, remembered or forgotten. Pure data; ``CellState`` keeps them
(``past_clients``, ``job_clients``)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional

from .federated import CLIENT_LABELS_READ

if TYPE_CHECKING:
    from .state import TaskRecord


@dataclass(frozen=True, slots=True)
class PastClient:
    """What a cell keeps of a federated client it forgot (``federated-role=client``): what
    its job's later tasks read of a finished client. Its arrival number (clients are read in
    arrival order), id, last status, whether its job came from ``Task.job_id`` (the elastic
    policy reads only those) or from the ``job`` label, the labels of
    ``federated.CLIENT_LABELS_READ`` it had, and its CPU and memory ask (the elastic policy
    takes the first client's shape)."""
    seq: int
    task_id: str
    status: str
    by_job_id: bool
    labels: dict[str, str]
    cpu: int
    mem: int

    @classmethod
    def of(cls, t: TaskRecord, shared: dict[tuple, dict[str, str]]) -> PastClient:
        """``shared``: label sets already kept, so that the clients of a job, alike but for
        their ids, hold one dict between them (callers never change it)."""
        labels = t.task.labels or {}
        kept = tuple((k, labels[k]) for k in CLIENT_LABELS_READ if k in labels)
        return cls(t.seq, t.task.task_id, t.status, bool(t.task.job_id), shared.setdefault(kept, dict(kept)),
                   t.task.request.cpu, t.task.request.mem)

    def to_json(self) -> list:
        return [self.seq, self.task_id, self.status, self.by_job_id, self.labels, self.cpu, self.mem]

    @classmethod
    def from_json(cls, d: list, shared: dict[tuple, dict[str, str]]) -> PastClient:
        seq, tid, status, by_job_id, labels, cpu, mem = d
        kept = tuple(labels.items())
        return cls(int(seq), tid, status, bool(by_job_id), shared.setdefault(kept, dict(kept)), int(cpu), int(mem))


@dataclass(frozen=True, slots=True)
class ClientView:
    """A federated client of a job as the rules read it, remembered whole or forgotten."""
    seq: int
    task_id: str
    status: str
    node: Optional[str]          # the node it holds or last held (None once forgotten)
    labels: dict[str, str]
    cpu: int
    mem: int
