"""The snapshots' layout and the changelog table without Faust (streams/snapshot_store.py)."""
from __future__ import annotations

import asyncio
import json
from types import SimpleNamespace

from suanli.streams.snapshot_store import (ChangelogTable, PartitionSnapshots, changelog_topic, decode_key, encode_key,
                                          restore_newer)


class _Producer:
    """Records what the table hands over, in order; each send's future resolves at once
    (or with ``fail`` as its error)."""

    def __init__(self, fail: Exception | None = None):
        self.sent: list[tuple[str, bytes | None, bytes, int]] = []
        self.fail = fail

    async def send(self, topic, value, key, partition=None):
        self.sent.append((topic, value, key, partition))
        future = asyncio.get_running_loop().create_future()
        future.set_exception(self.fail) if self.fail else future.set_result(None)
        return future


def _record(key: str, value: bytes | None):
    return SimpleNamespace(key=encode_key(key), value=value)


def test_the_topic_is_the_faust_tables_changelog():
    assert changelog_topic("suanli.scheduler") == "suanli.scheduler-cell-snapshots-changelog"


def test_keys_are_json_strings_as_faust_wrote_them():
    assert encode_key("p0/durable") == b'"p0/durable"'
    assert decode_key(b'"p0/durable"') == "p0/durable" == decode_key(b"p0/durable")


def test_a_snapshot_round_trips_in_chunks_with_its_offset():
    table: dict[str, bytes] = {}
    snaps = PartitionSnapshots(table, 3)
    assert snaps.load() is None and snaps.as_of() is None and snaps.durable() is None
    blob = bytes(range(256)) * 5000                  # 1.28 MB: three chunks of 512 KiB at most
    snaps.save(blob, as_of=41)
    assert snaps.load() == blob and snaps.as_of() == 41
    assert json.loads(table["p3"]) == {"gen": 0, "chunks": 3, "as_of": 41}


def test_a_new_generation_replaces_the_old_and_deletes_its_chunks():
    table: dict[str, bytes] = {}
    snaps = PartitionSnapshots(table, 0)
    snaps.save(b"x" * 600_000, as_of=5)
    snaps.save(b"y", as_of=9)
    assert snaps.load() == b"y" and snaps.as_of() == 9
    assert sorted(table) == ["p0", "p0/g1/0"]


def test_an_incomplete_generation_loads_as_none():
    table: dict[str, bytes] = {}
    snaps = PartitionSnapshots(table, 1)
    snaps.save(b"z" * 600_000, as_of=7)
    del table["p1/g0/1"]
    assert snaps.load() is None


def test_the_durable_mark_is_per_partition():
    table: dict[str, bytes] = {}
    PartitionSnapshots(table, 0).mark_durable(12)
    assert PartitionSnapshots(table, 0).durable() == 12 and PartitionSnapshots(table, 1).durable() is None


def test_load_folds_the_log_last_value_wins_and_a_tombstone_deletes():
    table = ChangelogTable("t", 2, _Producer().send)
    table["stale"] = b"gone when loaded"
    n = table.load([_record("p2", b"a"), _record("p2/durable", b"4"), _record("p2", b"b"),
                    _record("p2/g0/0", b"c"), _record("p2/g0/0", None)])
    assert n == 2 and dict(table) == {"p2": b"b", "p2/durable": b"4"}


def test_writes_go_to_the_tables_partition_in_order_once_sent():
    producer = _Producer()
    table = ChangelogTable("t", 2, producer.send)
    snaps = PartitionSnapshots(table, 2)
    snaps.save(b"one", as_of=3)
    snaps.save(b"two", as_of=8)
    snaps.mark_durable(8)
    assert producer.sent == []                       # queued, not sent, until send_queued
    asyncio.run(table.send_queued())
    assert [(decode_key(k), v) for _, v, k, _ in producer.sent] == [
        ("p2/g0/0", b"one"), ("p2", b'{"gen": 0, "chunks": 1, "as_of": 3}'),
        ("p2/g1/0", b"two"), ("p2", b'{"gen": 1, "chunks": 1, "as_of": 8}'), ("p2/g0/0", None),
        ("p2/durable", b"8")]
    assert {(t, p) for t, _, _, p in producer.sent} == {("t", 2)}
    # what the broker would hold folds back into the same table
    reloaded = ChangelogTable("t", 2, producer.send)
    reloaded.load([SimpleNamespace(key=k, value=v) for _, v, k, _ in producer.sent])
    assert dict(reloaded) == dict(table)
    asyncio.run(table.send_queued())
    assert len(producer.sent) == 6                   # nothing is sent twice


def test_a_refused_write_is_counted_and_logged(caplog):
    producer = _Producer(fail=RuntimeError("broker said no"))
    table = ChangelogTable("t", 0, producer.send)
    PartitionSnapshots(table, 0).mark_durable(1)

    async def send_and_settle():
        await table.send_queued()
        await asyncio.sleep(0)

    asyncio.run(send_and_settle())
    assert table.failures == 1 and "broker said no" in caplog.text
    assert PartitionSnapshots(table, 0).durable() == 1     # the worker's own view keeps it


class _Runner:
    """The part of a CellRunner restore_newer reads and calls."""

    def __init__(self, as_of: int | None):
        self.partitions = {} if as_of is None else {0: SimpleNamespace(as_of=as_of)}
        self.restored: list[bytes] = []

    def restore(self, partition, blob):
        self.restored.append(blob)


def test_restore_newer_takes_the_snapshot_only_when_it_is_further_along():
    table: dict[str, bytes] = {}
    snaps = PartitionSnapshots(table, 0)
    assert restore_newer(_Runner(None), snaps) == ("memory", -1)       # nothing stored, nothing held
    snaps.save(b"state", as_of=10)
    fresh = _Runner(None)
    assert restore_newer(fresh, snaps) == ("snapshot", 10) and fresh.restored == [b"state"]
    ahead = _Runner(15)
    assert restore_newer(ahead, snaps) == ("memory", 10) and ahead.restored == []
    snaps.mark_durable(20)                                             # marked past the snapshot
    assert restore_newer(_Runner(15), snaps) == ("memory", 20)
