"""The tick's time is bounded by the raw partitions intake is behind on (streams/log_clock.py)."""
from __future__ import annotations

from suanli.streams.log_clock import RawWatermark


def ends(**by_partition: int | None):
    return lambda p: by_partition.get(p)


def test_read_to_the_end_the_clock_is_the_wall_clock():
    mark = RawWatermark()
    mark.handed("a", 9, 1_000)
    assert mark.bound(5_000, ends(a=10)) == 5_000


def test_behind_on_a_partition_the_clock_stops_at_its_newest_record_handed_on():
    mark = RawWatermark()
    mark.handed("a", 9, 1_000)          # 10 records more are waiting behind offset 9
    mark.handed("b", 3, 4_000)          # read to its end
    assert mark.bound(5_000, ends(a=20, b=4)) == 1_000


def test_the_most_behind_partition_bounds_the_clock():
    mark = RawWatermark()
    mark.handed("a", 9, 2_000)
    mark.handed("b", 3, 1_500)
    assert mark.bound(5_000, ends(a=20, b=7)) == 1_500


def test_an_unknown_end_bounds_nothing():
    mark = RawWatermark()
    mark.handed("a", 9, 1_000)
    assert mark.bound(5_000, ends(a=None)) == 5_000


def test_an_older_record_handed_on_again_does_not_move_the_partition_back():
    mark = RawWatermark()
    mark.handed("a", 9, 1_000)
    mark.handed("a", 4, 400)            # a redelivery after a rebalance
    assert mark.handed_on["a"] == (9, 1_000)


def test_ticks_only_go_forward():
    mark = RawWatermark()
    assert mark.next_tick(5_000, ends()) == 5_000
    mark.handed("a", 9, 3_000)          # a burst arrived and intake is behind on it
    assert mark.next_tick(6_000, ends(a=50)) is None        # 3,000 is before the last tick
    mark.handed("a", 49, 7_000)          # read to its end again
    assert mark.next_tick(8_000, ends(a=50)) == 8_000
    assert mark.next_tick(8_000, ends(a=50)) is None         # the same time twice: no tick


def test_under_a_backlog_that_never_clears_the_clock_still_advances_with_the_reading():
    mark = RawWatermark()
    got = []
    for second in range(1, 6):         # each second intake hands on records one second newer,
        mark.handed("a", 100 * second, 1_000 * second)   # but 50 more are always waiting
        got.append(mark.next_tick(10_000 + 1_000 * second, ends(a=100 * second + 51)))
    assert got == [1_000, 2_000, 3_000, 4_000, 5_000]
