"""``streams/commit_gaps.py``: an offset both acked and inside Faust's gap is counted once, so
one commit moves past the whole run. Faust's own ``Consumer._new_offset`` does the counting
here, on the state CI's failure had: a gap Faust noted for records it dropped, and the same
records acked by the scheduler's recovery."""
from __future__ import annotations

import uuid
from collections import defaultdict

from faust.transport.consumer import Consumer as FaustConsumer
from intervaltree import IntervalTree

from suanli.config import load_settings
from suanli.streams.app import make_app
from suanli.streams.commit_gaps import AckedGapDedupe, outside_gaps

TP = ("w.cells", 0)


class _ConsumerState:
    """The fields Faust's ``_new_offset`` reads and writes, and that method itself."""

    _new_offset = FaustConsumer._new_offset

    def __init__(self, committed: int, acked: list[int], gap: tuple[int, int]):
        self._committed_offset = {TP: committed}
        self._acked = defaultdict(list, {TP: list(acked)})
        self._acked_index = defaultdict(set, {TP: set(acked)})
        self._gap = defaultdict(IntervalTree)
        self._gap[TP].addi(*gap)


class _Deduped(AckedGapDedupe, _ConsumerState):
    pass


def _ci_state(cls):
    # committed 4875; Faust jumped from 4875 to 5604 and noted [4876, 5604] (its addi is
    # half-open, end + 1); the recovery acked 4875..5603 again; 5604..5700 were delivered and acked
    return cls(4875, [*range(4875, 5604), *range(5604, 5701)], (4876, 5605))


def _commits(state, n: int) -> list:
    """``n`` commits as Faust's make them: each computes the new offset and, when there is one,
    stores it as committed."""
    done = []
    for _ in range(n):
        offset = state._new_offset(TP)
        if offset is not None:
            state._committed_offset[TP] = offset
        done.append(offset)
    return done


def test_without_it_faust_moves_the_commit_by_one_record():
    assert _commits(_ci_state(_ConsumerState), 4) == [4877, 4878, 4879, 4880]


def test_with_it_one_commit_moves_past_the_whole_run():
    assert _commits(_ci_state(_Deduped), 2) == [5701, None]      # then nothing is left to commit


def test_a_partition_whose_last_acked_record_closes_its_gap_commits_it_all():
    # Faust delivered 5604 after 4875 and noted [4876, 5604]; nothing came after 5604
    state = _Deduped(4875, [*range(4875, 5605)], (4876, 5605))
    assert _commits(state, 1) == [5605]
    # the same with no recovery acks: only Faust's own ack of the record that closed the gap
    assert _commits(_Deduped(4875, [5604], (4876, 5605)), 1) == [5605]


def test_acked_offsets_inside_a_gap_but_the_highest_are_left_to_the_gap():
    gaps = IntervalTree()
    gaps.addi(10, 15)
    assert outside_gaps([8, 9, 10, 12, 14, 15, 16], gaps) == ([8, 9, 15, 16], {10, 12, 14})
    assert outside_gaps([8, 10, 12, 14], gaps) == ([8, 14], {10, 12})
    assert outside_gaps([1, 2], IntervalTree()) == ([1, 2], set())
    assert outside_gaps([], gaps) == ([], set())


def test_the_worker_consumers_have_it(tmp_path):
    app = make_app("scheduler", load_settings(namespace=f"t{uuid.uuid4().hex[:8]}", home=tmp_path))
    assert issubclass(app.transport.Consumer, AckedGapDedupe)
