"""``streams/changelog_refetch.py``: a table-changelog record Faust fetched but did not
deliver is fetched again; stream partitions and batches delivered whole are left alone.
(On the real stack, the worker-kill test ``tests/deploy/test_cells_across_workers.py`` is
where Faust drops such a batch.)"""
from __future__ import annotations

import asyncio
import uuid
from collections import namedtuple

from suanli.config import load_settings
from suanli.streams.app import make_app
from suanli.streams.changelog_refetch import ChangelogRefetch, first_undelivered, refetch_from

TP = namedtuple("TP", "topic partition")
Record = namedtuple("Record", "offset")
CHANGELOG = "w-scheduler-cell-snapshots-changelog"


def _is_changelog(tp) -> bool:
    return tp.topic.endswith("-changelog")


def test_first_undelivered_is_the_first_offset_past_the_last_delivered():
    assert first_undelivered([0, 1, 2], None) == 0
    assert first_undelivered([0, 1, 2], 0) == 1
    assert first_undelivered([4, 7, 9], 7) == 9
    assert first_undelivered([0, 1, 2], 2) is None
    assert first_undelivered([], None) is None


def test_only_changelog_partitions_with_undelivered_records_are_fetched_again():
    batch = {TP(CHANGELOG, 3): [Record(o) for o in range(6)],      # none delivered
             TP(CHANGELOG, 4): [Record(10), Record(11)],            # all delivered
             TP(CHANGELOG, 5): [Record(20), Record(21), Record(22)],  # one delivered
             TP("w.cells", 3): [Record(105), Record(106)],          # a stream partition
             TP(CHANGELOG, 0): []}
    delivered = {TP(CHANGELOG, 4): 11, TP(CHANGELOG, 5): 20}
    assert refetch_from(batch, delivered, _is_changelog) == {TP(CHANGELOG, 3): 0, TP(CHANGELOG, 5): 21}


Message = namedtuple("Message", "offset")


class _FaustConsumer:
    """Stands in for Faust's consumer in this unit test: it fetches ``batch`` and delivers only
    the first ``deliver`` records of it, as Faust's ``getmany`` does when its flow stops."""

    app = namedtuple("App", "in_recovery")(True)

    def __init__(self, batch, deliver: int, assigned):
        self.batch, self.deliver, self.assigned, self.seeks = batch, deliver, assigned, []

    async def _wait_next_records(self, timeout):
        return self.batch, set(self.batch)

    async def getmany(self, timeout):
        records, _active = await self._wait_next_records(timeout)
        flat = [(tp, Message(r.offset)) for tp, rs in records.items() for r in rs]
        for item in flat[:self.deliver]:
            yield item

    def _is_changelog_tp(self, tp) -> bool:
        return _is_changelog(tp)

    def assignment(self):
        return self.assigned

    async def seek_wait(self, partitions):
        self.seeks.append(dict(partitions))


class _Refetching(ChangelogRefetch, _FaustConsumer):
    pass


def _drain(consumer) -> list:
    async def run():
        return [(tp, m.offset) async for tp, m in consumer.getmany(timeout=1.0)]
    return asyncio.run(run())


def test_the_consumer_seeks_back_to_what_it_dropped_and_delivers_the_rest_unchanged(caplog):
    changelog, other, stream = TP(CHANGELOG, 3), TP(CHANGELOG, 1), TP("w.cells", 3)
    batch = {changelog: [Record(o) for o in range(4)], stream: [Record(7)], other: [Record(5)]}
    consumer = _Refetching(batch, deliver=2, assigned={changelog, stream})
    assert _drain(consumer) == [(changelog, 0), (changelog, 1)]
    # partition 1 of the changelog is no longer assigned (revoked meanwhile): its next owner reads it
    assert consumer.seeks == [{changelog: 2}]
    assert [r.levelname for r in caplog.records] == ["WARNING"]
    assert f"during table recovery; fetching them again from {{'{CHANGELOG}:3': 2}}" in caplog.text
    whole = _Refetching(batch, deliver=6, assigned={changelog, stream, other})
    assert len(_drain(whole)) == 6 and whole.seeks == []


def test_the_scheduler_worker_consumer_is_the_refetching_one(tmp_path):
    app = make_app("scheduler", load_settings(namespace=f"t{uuid.uuid4().hex[:8]}", home=tmp_path))
    assert issubclass(app.transport.Consumer, ChangelogRefetch)
