"""streams/app.py: when the scheduler snapshots a partition."""
from suanli.streams.app import SNAPSHOT_COST_RATIO, SNAPSHOT_EVERY, SNAPSHOT_SECONDS, snapshot_due


def test_due_after_enough_inputs_or_seconds():
    assert not snapshot_due(SNAPSHOT_EVERY - 1, SNAPSHOT_SECONDS - 0.1, 0.0)
    assert snapshot_due(SNAPSHOT_EVERY, 0.1, 0.0)
    assert snapshot_due(1, SNAPSHOT_SECONDS, 0.0)


def test_a_costly_snapshot_pushes_the_next_one_back():
    cost = 2 * SNAPSHOT_SECONDS / SNAPSHOT_COST_RATIO          # the ratio allows one every 2 x SNAPSHOT_SECONDS
    assert not snapshot_due(SNAPSHOT_EVERY * 3, SNAPSHOT_SECONDS, cost)
    assert snapshot_due(1, 2 * SNAPSHOT_SECONDS, cost)
