"""Where the API reads a task's decisions from: the :class:`AuditSource` interface.

Contract of an ``AuditSource``:

``async def task_decisions(task_id: str) -> Sequence[DecisionRecord]``
    Every scheduling decision about ``task_id`` (TaskPlaced, TaskPending,
    TaskUnschedulable, TaskReleased) in log order, each once (duplicates by event id
    dropped), with its Avro payload and its coordinates on the decisions topic. Unknown
    task: an empty sequence. The source does *no* tenant filtering: the API checks each
    record's ``tenant`` against the caller's (so a source cannot leak by mistake).
    May raise :class:`~suanli.errors.UnavailableError` when it is not ready.

:class:`FollowerAuditSource` answers from the API's in-memory fold of the decisions topic.
The RocksDB audit projection (``projections/audit.py``) is meant to implement the same
method and be passed to :class:`~suanli.api.service.ApiService` instead.
"""
from __future__ import annotations

from typing import Protocol, Sequence, runtime_checkable

from suanli.api.readmodel import DecisionRecord, ReadModel

__all__ = ["AuditSource", "DecisionRecord", "FollowerAuditSource"]


@runtime_checkable
class AuditSource(Protocol):
    async def task_decisions(self, task_id: str) -> Sequence[DecisionRecord]:
        """Every decision about ``task_id``, in log order (see the module docstring)."""
        ...


class FollowerAuditSource:
    """An :class:`AuditSource` over :attr:`ReadModel.decisions` (the background fold)."""

    def __init__(self, model: ReadModel):
        self.model = model

    async def task_decisions(self, task_id: str) -> Sequence[DecisionRecord]:
        return self.model.task_decisions(task_id)
