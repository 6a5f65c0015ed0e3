"""streams/app.py: when the scheduler snapshots a partition."""
from suanli.streams.app import (QUIET_SNAPSHOT_COST_RATIO, SNAPSHOT_COST_RATIO, SNAPSHOT_EVERY, SNAPSHOT_SECONDS,
                                snapshot_due)


def test_due_after_enough_inputs_or_seconds():
    assert not snapshot_due(SNAPSHOT_EVERY - 1, SNAPSHOT_SECONDS - 0.1, 0.0)
    assert snapshot_due(SNAPSHOT_EVERY, 0.1, 0.0)
    assert snapshot_due(1, SNAPSHOT_SECONDS, 0.0)


def test_a_costly_snapshot_pushes_the_next_one_back():
    cost = 2 * SNAPSHOT_SECONDS / SNAPSHOT_COST_RATIO          # the ratio allows one every 2 x SNAPSHOT_SECONDS
    assert not snapshot_due(SNAPSHOT_EVERY * 3, SNAPSHOT_SECONDS, cost)
    assert snapshot_due(SNAPSHOT_EVERY, 2 * SNAPSHOT_SECONDS, cost)


def test_a_snapshot_due_to_time_alone_waits_longer_for_its_cost():
    # a large cell at a low input rate (0.3 s a snapshot): time alone no longer asks every
    # SNAPSHOT_SECONDS, nor every SNAPSHOT_COST_RATIO x its cost, but every QUIET ratio x it
    cost = 0.3
    quiet_gap = QUIET_SNAPSHOT_COST_RATIO * cost
    assert quiet_gap > SNAPSHOT_COST_RATIO * cost > SNAPSHOT_SECONDS
    assert not snapshot_due(SNAPSHOT_EVERY - 1, SNAPSHOT_COST_RATIO * cost, cost)
    assert not snapshot_due(SNAPSHOT_EVERY - 1, quiet_gap - 0.1, cost)
    assert snapshot_due(1, quiet_gap, cost)
    # ... while SNAPSHOT_EVERY inputs still bound the log a recovery re-applies
    assert snapshot_due(SNAPSHOT_EVERY, SNAPSHOT_COST_RATIO * cost, cost)


def test_a_small_cell_still_snapshots_every_few_seconds():
    cheap = SNAPSHOT_SECONDS / QUIET_SNAPSHOT_COST_RATIO / 2     # a few ms: the floor decides
    assert not snapshot_due(1, SNAPSHOT_SECONDS - 0.1, cheap)
    assert snapshot_due(1, SNAPSHOT_SECONDS, cheap)
