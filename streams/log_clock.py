"""The time intake may stamp on a CellTick: no later than what the raw topics have shown.

A tick tells the scheduler "it is now ``at``": every timeout of the cell (a node's
heartbeat, a batch window, a reservation's start) runs on it. Intake stamps it from the wall
clock, so a tick written while raw records are still queued unread would overtake them: on a
burst of submissions, the heartbeats queued behind it looked seconds late and healthy nodes
went SUSPECT (4,878 of 5,000 nodes in one E2E run of 20,000 tasks, each one a decision out
and another one back).

:class:`RawWatermark` bounds the tick by the raw partitions intake is behind on: for each
of those, the timestamp of the newest record it has handed on. A record written before that
time on that partition has been handed on too (a partition's records are in the order they
were written), so no input from before the tick is still waiting behind it. A partition read
to its end bounds nothing, so an idle plane's clock runs on the wall clock, and a dead node
still goes SUSPECT. Under a backlog that never clears the clock still advances, at the pace
the log is read, instead of stopping. A partition intake has handed nothing on from yet
bounds nothing either: only ticks for cells intake has forwarded inputs to are written, so
this matters only at start, until its first batch of that partition. Pure: the caller gives
the wall clock and each partition's end offset (its consumer's highwater, as last heard: a
record newer than that is not known to be waiting, and holds back no tick until it is).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Generic, Hashable, TypeVar

P = TypeVar("P", bound=Hashable)

__all__ = ["RawWatermark"]


@dataclass
class RawWatermark(Generic[P]):
    """The newest record handed on of each raw partition, and the last tick stamped.

    ``P`` is whatever names a partition (Faust's ``TP`` in the worker)."""

    handed_on: dict[P, tuple[int, int]] = field(default_factory=dict)   # partition -> (offset, timestamp ms)
    last_tick: int | None = None

    def handed(self, partition: P, offset: int, timestamp_ms: int) -> None:
        """Record that the record at ``offset`` of ``partition``, and all before it, went on."""
        seen = self.handed_on.get(partition)
        if seen is None or offset > seen[0]:
            self.handed_on[partition] = (offset, timestamp_ms)

    def bound(self, now_ms: int, end_offset: Callable[[P], int | None]) -> int:
        """The latest time a tick may claim: ``now_ms``, or earlier, the timestamp of the newest
        record handed on of any partition whose end (``end_offset``: the offset the next record
        written to it will get; None when not known yet) is past it."""
        at = now_ms
        for partition, (offset, timestamp) in self.handed_on.items():
            end = end_offset(partition)
            if end is not None and offset + 1 < end:
                at = min(at, timestamp)
        return at

    def next_tick(self, now_ms: int, end_offset: Callable[[P], int | None]) -> int | None:
        """The ``at`` of the tick to write now, or None when it would not move the clock on
        (ticks only ever go forward); a returned time is taken as stamped."""
        at = self.bound(now_ms, end_offset)
        if self.last_tick is not None and at <= self.last_tick:
            return None
        self.last_tick = at
        return at
