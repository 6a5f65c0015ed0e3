"""Keep a Faust consumer's commits moving when a record is both acked and inside a gap.

When a partition's stream jumps (Faust dropped records in flight around a rebalance), Faust
notes the skipped offsets as a *gap* and, at its next commit, counts them as acked. The
scheduler re-applies those same records itself and acks them too (``streams/app.py``
``recover``: so that commits move past them when Faust noted no gap). ``Consumer._new_offset``
then adds the gap's offsets to a list that already holds them: each offset twice. It commits
the first run of consecutive offsets in that sorted list, and a repeated offset ends a run, so
each commit moved the group's offset by one record. CI saw it in
``tests/deploy/test_plane.py`` (two scheduler workers, one killed): the committed offset of
the cell's partition crept up one record a second, 4,648 records behind the log, while every
task had been decided (``__consumer_offsets`` showed commits 4836, 4837, ... at 1 s).

:class:`AckedGapDedupe` drops, before each such computation, the acked offsets that a gap
already covers, so every offset is counted once.
"""
from __future__ import annotations

from typing import Any, Optional


def outside_gaps(acked: list[int], gaps: Any) -> tuple[list[int], set[int]]:
    """``acked`` without the offsets any interval of ``gaps`` (an ``IntervalTree`` of
    half-open ranges) covers, but its highest, and the set of those removed. The highest
    stays because Faust adds a gap to the acked offsets only up to their highest: a partition
    whose last acked record closes its gap (Faust's gap ends at the record it delivered) would
    otherwise commit nothing until its next record. Kept twice, the highest ends the run, not
    the run before it."""
    highest = max(acked, default=None)
    inside = {offset for offset in acked if offset != highest and gaps.at(offset)}
    return [offset for offset in acked if offset not in inside], inside


class AckedGapDedupe:
    """Mixin for a Faust ``Consumer`` (put it before the consumer class): see the module
    docstring."""

    def _new_offset(self, tp: Any) -> Optional[int]:
        acked = self._acked[tp]                                   # type: ignore[attr-defined]
        gaps = self._gap.get(tp)                                  # type: ignore[attr-defined]
        if acked and gaps:
            kept, inside = outside_gaps(acked, gaps)
            if inside:
                acked[:] = kept
                self._acked_index[tp].difference_update(inside)  # type: ignore[attr-defined]
        return super()._new_offset(tp)                            # type: ignore[misc]
