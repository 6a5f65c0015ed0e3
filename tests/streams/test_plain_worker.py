"""The frame the plain workers share (streams/plain_worker.py), without a broker: side jobs,
and which offsets get committed. The loops themselves run on the real stack in
tests/streams/test_intake_worker.py and test_scheduler_worker.py."""
from __future__ import annotations

import asyncio

import pytest
from aiokafka import TopicPartition
from aiokafka.errors import CommitFailedError, KafkaConnectionError

from suanli.config import load_settings
from suanli.streams.plain_worker import PlainWorker, group_consumer


class _Consumer:
    """Stands in for the consumer's assignment and commit (``refuse``: the group rebalanced)."""

    def __init__(self, assigned: set, refuse: bool = False):
        self._assigned = assigned
        self.refuse = refuse
        self.commits: list[dict] = []

    def assignment(self) -> set:
        return self._assigned

    async def commit(self, offsets: dict) -> None:
        if self.refuse:
            raise CommitFailedError("rebalanced")
        self.commits.append(dict(offsets))


def _worker(tmp_path, consumer=None) -> PlainWorker:
    worker = PlainWorker(load_settings(home=tmp_path))
    worker.consumer = consumer
    return worker


A, B, C = (TopicPartition("t", p) for p in range(3))


def test_only_stored_offsets_of_assigned_partitions_that_moved_are_committed(tmp_path):
    worker = _worker(tmp_path, _Consumer({A, B}))
    worker.stored = {A: 10, B: 4, C: 7}            # C is no longer assigned
    asyncio.run(worker.commit_stored())
    worker.stored[A] = 12
    asyncio.run(worker.commit_stored())
    asyncio.run(worker.commit_stored())            # nothing moved: no request
    assert worker.consumer.commits == [{A: 10, B: 4}, {A: 12}]
    assert worker.committed == {A: 12, B: 4}


def test_a_refused_commit_is_logged_and_not_counted_as_committed(tmp_path, caplog):
    worker = _worker(tmp_path, _Consumer({A}, refuse=True))
    worker.stored = {A: 3}
    asyncio.run(worker.commit_stored())
    assert worker.committed == {} and "commit refused" in caplog.text


def test_revoked_partitions_take_their_offsets_with_them(tmp_path):
    worker = _worker(tmp_path)
    worker.stored, worker.committed = {A: 1, B: 2}, {A: 1}
    worker.forget_offsets([A])
    assert worker.stored == {B: 2} and worker.committed == {}


def test_a_side_job_that_fails_on_the_broker_is_logged_and_runs_again(tmp_path, caplog):
    worker = _worker(tmp_path)
    runs = []

    async def job():
        runs.append(1)
        if len(runs) == 1:
            raise KafkaConnectionError("broker away")

    async def main():
        [task] = worker.start_side([(0.001, "tick", job)])
        while len(runs) < 3:
            await asyncio.sleep(0.001)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    asyncio.run(main())
    assert "tick failed" in caplog.text and not worker.stopping
    worker.raise_failure()                          # nothing to raise


def test_a_side_job_that_crashes_stops_the_worker_which_raises_it(tmp_path):
    worker = _worker(tmp_path)

    async def job():
        raise ValueError("a bug in the ticker")

    async def main():
        [task] = worker.start_side([(0.001, "tick", job)])
        await asyncio.gather(task, return_exceptions=True)

    asyncio.run(main())
    assert worker.stopping
    with pytest.raises(ValueError, match="a bug in the ticker"):
        worker.raise_failure()


def test_the_group_consumer_commits_by_hand_with_the_workers_session(tmp_path):
    settings = load_settings(home=tmp_path, fetch_max_wait_ms=35)

    async def made():                               # aiokafka makes its consumer in a loop
        return group_consumer(settings, "g")

    consumer = asyncio.run(made())
    assert consumer._group_id == "g" and consumer._enable_auto_commit is False
    assert consumer._fetch_max_wait_ms == 35 and consumer._session_timeout_ms == 10_000
