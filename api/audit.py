"""Where the API reads a task's decisions from: the :class:`AuditSource` interface.

Contract of an ``AuditSource``:

``async def task_decisions(task_id: str) -> Sequence[DecisionRecord]``
    Every scheduling decision about ``task_id`` (TaskPlaced, TaskPending,
    TaskUnschedulable, TaskReleased) in log order, each once (duplicates by event id
    dropped), with its Avro payload and its coordinates on the decisions topic. Unknown
    task: an empty sequence. The source does *no* tenant filtering: the API checks each
    record's ``tenant`` against the caller's (so a source cannot leak by mistake).
    May raise :class:`~suanli.errors.UnavailableError` when it is not ready.

:class:`FollowerAuditSource` answers from the API's in-memory fold of the decisions topic,
which holds only the tasks the read model still keeps (``SUANLI_API_FINISHED_TASKS``).
:class:`IndexedAuditArchive` answers for the ones it has forgotten, from the namespace's
RocksDB audit index (``projections/audit_follower.py``), the one ``suanli audit`` reads.
"""
from __future__ import annotations

import asyncio
from typing import Protocol, Sequence, runtime_checkable

from aiokafka.errors import KafkaError

from suanli.api.readmodel import DecisionRecord, ReadModel
from suanli.config import Settings
from suanli.errors import AuditError, RegistryError, UnavailableError

__all__ = ["AuditArchive", "AuditSource", "DecisionRecord", "FollowerAuditSource", "IndexedAuditArchive"]


@runtime_checkable
class AuditSource(Protocol):
    async def task_decisions(self, task_id: str) -> Sequence[DecisionRecord]:
        """Every decision about ``task_id``, in log order (see the module docstring)."""
        ...


@runtime_checkable
class AuditArchive(AuditSource, Protocol):
    """An :class:`AuditSource` that also answers by job, for the jobs the read model forgot."""

    async def task_decisions(self, task_id: str) -> Sequence[DecisionRecord]:
        ...

    async def job_decisions(self, job_id: str) -> Sequence[DecisionRecord]:
        """Every decision about a member of ``job_id``, as ``task_decisions`` gives them
        (no tenant filter), in log order."""
        ...


class FollowerAuditSource:
    """An :class:`AuditSource` over :attr:`ReadModel.decisions` (the background fold)."""

    def __init__(self, model: ReadModel):
        self.model = model

    async def task_decisions(self, task_id: str) -> Sequence[DecisionRecord]:
        return self.model.task_decisions(task_id)


class IndexedAuditArchive:
    """An :class:`AuditSource` over the namespace's RocksDB audit index, for the tasks the read
    model no longer keeps.

    Each question opens the index as ``suanli audit why`` does (``opened_index``):

    * if no other process holds it, it is first caught up with the decisions topic, within
      ``catch_up_timeout`` seconds. A catch-up cut short raises :class:`UnavailableError`
      (a 503 that says to retry); what it folded stays, so each retry goes further;
    * if a follower holds it (``suanli audit follow``), it is read as it stands: the
      follower keeps it current.

    The index is shared with the CLI: what the API folds, ``suanli audit`` finds folded.
    The work runs on a thread with its own event loop, registry client and Kafka consumer,
    so a long catch-up does not stall the API's other requests; questions take turns.
    """

    def __init__(self, settings: Settings, *, catch_up_timeout: float = 20.0):
        self.settings = settings
        self.catch_up_timeout = catch_up_timeout
        self._turn: asyncio.Lock | None = None

    async def task_decisions(self, task_id: str) -> Sequence[DecisionRecord]:
        return await self._answer("task", task_id)

    async def job_decisions(self, job_id: str) -> Sequence[DecisionRecord]:
        return await self._answer("job", job_id)

    async def _answer(self, by: str, key: str) -> Sequence[DecisionRecord]:
        if self._turn is None:
            self._turn = asyncio.Lock()
        async with self._turn:
            return await asyncio.to_thread(asyncio.run, self._read(by, key))

    async def _read(self, by: str, key: str) -> Sequence[DecisionRecord]:
        from suanli.projections.audit_follower import AuditIndexSource, opened_index

        try:
            async with opened_index(self.settings, catch_up_timeout=self.catch_up_timeout) as (index, _stats):
                source = AuditIndexSource(index)
                return await (source.task_decisions(key) if by == "task" else source.job_decisions(key))
        except (AuditError, KafkaError, RegistryError) as exc:
            raise UnavailableError(f"the audit index cannot answer yet ({exc}); retry shortly, or keep it "
                                   "current with `suanli audit follow`") from exc
