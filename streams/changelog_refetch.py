"""Fetch again the table-changelog records Faust's consumer fetched and dropped.

Faust's ``Consumer.getmany`` drops the rest of a fetched batch when the worker's flow
stopped or its generation changed meanwhile (a rebalance). The Kafka consumer's position has
already moved past those records. For a stream partition Faust then seeks back to the group's
committed offset, but a table's changelog partition has no committed offset: its dropped
records are never fetched again. A worker restoring a table from that partition then waits
for them forever ("No event received for active tp ... since recovery start", faust-streaming
#432 in STACK-NOTES). The worker-kill test (``tests/deploy/test_cells_across_workers.py``)
hit it in 3 of 17 runs here, and once in CI: the scheduler's SIGUSR1 dump
(``streams/diagnostics.py``) showed the Kafka consumer at the changelog partition's end
while recovery had received none of its records. With this, 12 runs in a row passed, and
the refetch's log showed the same drop after recovery's seek, followed by recovery's end.

:class:`ChangelogRefetch` goes between Faust's consumer and its fetch loop: after every
batch it seeks each changelog partition of it back to the first record Faust did not
deliver. Re-reading a changelog record is harmless (a table put of the same value); stream
partitions are left to Faust's own seek to the committed offset, and the scheduler's durable
mark (``streams/app.py``).
"""
from __future__ import annotations

import logging
from typing import Any, AsyncIterator, Iterable, Mapping

log = logging.getLogger(__name__)


def first_undelivered(offsets: Iterable[int], delivered: int | None) -> int | None:
    """The first of a partition's fetched ``offsets`` (ascending) past ``delivered``, the last
    offset the worker was given from that batch (None: none was). None when all were."""
    for offset in offsets:
        if delivered is None or offset > delivered:
            return offset
    return None


def refetch_from(batch: Mapping[Any, list[Any]], delivered: Mapping[Any, int],
                 is_changelog: Any) -> dict[Any, int]:
    """Changelog partition -> the offset to fetch it again from, for each one of ``batch``
    (partition -> its fetched records, each with an ``offset``) with records not in
    ``delivered`` (partition -> last offset delivered)."""
    seeks = {}
    for tp, records in batch.items():
        if records and is_changelog(tp):
            start = first_undelivered([r.offset for r in records], delivered.get(tp))
            if start is not None:
                seeks[tp] = start
    return seeks


class ChangelogRefetch:
    """Mixin for a Faust ``Consumer`` (put it before the consumer class): see the module
    docstring. Adds nothing to a batch delivered whole. Logs each refetch, at WARNING while
    the worker restores a table, else at INFO."""

    _fetched: Mapping[Any, list[Any]] = {}

    async def _wait_next_records(self, timeout: float) -> tuple[Any, Any]:
        records, active = await super()._wait_next_records(timeout)  # type: ignore[misc]
        self._fetched = records or {}
        return records, active

    async def getmany(self, timeout: float) -> AsyncIterator[tuple[Any, Any]]:
        self._fetched = {}
        delivered: dict[Any, int] = {}
        async for tp, message in super().getmany(timeout):  # type: ignore[misc]
            delivered[tp] = message.offset
            yield tp, message
        seeks = refetch_from(self._fetched, delivered, self._is_changelog_tp)  # type: ignore[attr-defined]
        if seeks:                        # (rare: the assignment is only read then)
            assigned = self.assignment()  # type: ignore[attr-defined]
            seeks = {tp: offset for tp, offset in seeks.items() if tp in assigned}
        if seeks:
            # Records of a changelog partition paused after its recovery are dropped in normal
            # running too (the table writes them itself), and re-read by its next recovery: that
            # is only noted. While a recovery runs, a drop is what used to stall it.
            recovering = bool(getattr(self.app, "in_recovery", False))  # type: ignore[attr-defined]
            log.log(logging.WARNING if recovering else logging.INFO,
                    "changelog records fetched but not delivered%s; fetching them again from %s",
                    " during table recovery" if recovering else "",
                    {f"{tp.topic}:{tp.partition}": offset for tp, offset in sorted(seeks.items())})
            await self.seek_wait(seeks)  # type: ignore[attr-defined]
