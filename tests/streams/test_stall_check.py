"""When a scheduler worker warns that a partition is stalled (streams/app.py ``stalled``):
records waited past the state's offset at the last check, none was applied since, and some
still wait."""
from __future__ import annotations

from suanli.streams.app import stalled


def test_a_partition_seen_once_is_not_stalled():
    assert not stalled(None, 4, 9)


def test_records_waiting_through_two_checks_with_nothing_applied_are_a_stall():
    assert stalled((4, 9), 4, 9)
    assert stalled((-1, 3), -1, 5)          # more arrived meanwhile, none applied


def test_a_partition_that_applied_records_since_the_last_check_is_not_stalled():
    assert not stalled((4, 9), 6, 9)


def test_records_that_arrived_after_the_last_check_are_not_a_stall_yet():
    assert not stalled((4, 5), 4, 9)        # the partition was at its end then


def test_a_partition_at_its_end_is_idle_not_stalled():
    assert not stalled((5, 6), 5, 6)


def test_a_table_recovery_that_receives_nothing_while_records_wait_is_a_stall():
    from collections import namedtuple

    from suanli.streams.app import stalled_changelogs

    tp = namedtuple("TP", "topic partition")
    waiting, done, moving = tp("s-changelog", 3), tp("s-changelog", 4), tp("s-changelog", 5)
    partitions = {waiting, done, moving}
    highwaters = {waiting: 5, done: 81, moving: 90}       # Faust's: the last offset there is
    progress: dict = {}
    assert stalled_changelogs(partitions, {waiting: -1, done: 81, moving: 10}, highwaters, progress) == []
    # a check later: partition 3 received nothing of its six records, 5 received some, 4 had none to get
    assert stalled_changelogs(partitions, {waiting: -1, done: 81, moving: 40}, highwaters, progress) == \
        ["s-changelog:3"]
    assert stalled_changelogs(partitions, {waiting: 5, done: 81, moving: 90}, highwaters, progress) == []
