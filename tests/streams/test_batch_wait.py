"""streams/batch_wait.py: the scheduler's micro-batch wait follows the last batch's size."""
import asyncio

import pytest

from suanli.streams.batch_wait import MARKER, BatchWait


def test_quiet_batches_wait_short_and_busy_ones_long():
    w = BatchWait(idle_s=0.002, busy_s=0.02, busy_batch=8)
    assert w.current == 0.002                      # a fresh worker answers fast
    assert w.after(1) == 0.002
    assert w.after(8) == 0.02
    assert w.after(500) == 0.02
    assert w.after(7) == 0.002                     # quiet again
    assert w.waits == {"idle": 2, "busy": 2, "urgent": 0, "quiet": 0, "gap": 0}


def test_only_the_marker_timeout_is_replaced():
    w = BatchWait()
    w.after(100)
    assert w.timeout(MARKER) == w.busy_s
    assert w.timeout(1.5) == 1.5 and w.timeout(None) is None


def test_attach_changes_the_streams_take_wait_and_nothing_else():
    seen = []

    class Stream:
        current_event = None

        def add_processor(self, p):
            pass

        async def wait_for_stopped(self, *coros, timeout=None):
            seen.append((coros, timeout))
            return False

    s = Stream()
    w = BatchWait(idle_s=0.001, busy_s=0.03, busy_batch=2)
    w.attach(s)

    async def go():
        await s.wait_for_stopped("full", timeout=MARKER)
        w.after(5)
        await s.wait_for_stopped("full", timeout=MARKER)
        await s.wait_for_stopped("other", timeout=7)

    asyncio.run(go())
    assert seen == [(("full",), 0.001), (("full",), 0.03), (("other",), 7)]


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="idle_s <= busy_s"):
        BatchWait(idle_s=0.05, busy_s=0.02)
    with pytest.raises(ValueError):
        BatchWait(busy_batch=0)


class _Message:
    def __init__(self, headers):
        self.headers = headers


class _Event:
    def __init__(self, headers):
        self.message = _Message(headers)


class _TakingStream:
    """Faust's Stream as take_events uses it: processors run on each record (take_events' own
    first), and the take waits on its buffer_full event."""

    def __init__(self):
        self.current_event = None
        self.processors = []
        self.timeouts = []                        # the timeout of each wait, in order

    def add_processor(self, p):
        self.processors.append(p)

    async def wait_for_stopped(self, full, timeout=None):
        self.timeouts.append(timeout)
        try:
            await asyncio.wait_for(full.wait(), timeout)
        except asyncio.TimeoutError:
            return True                           # as mode's Service answers a timeout
        return False

    def arrive(self, headers):
        self.current_event = _Event(headers)
        for p in self.processors:
            p(b"value")


def test_an_urgent_record_ends_the_wait_and_others_do_not():
    from suanli.streams.records import URGENT_HEADER

    s = _TakingStream()
    w = BatchWait(idle_s=5.0, busy_s=5.0)          # a wait no test would sit out
    w.attach(s)

    async def go():
        loop = asyncio.get_running_loop()
        full = asyncio.Event()
        waiting = asyncio.ensure_future(s.wait_for_stopped(full, timeout=MARKER))
        await asyncio.sleep(0)                    # the take is waiting now
        s.arrive(None)
        s.arrive((("other", b"x"),))
        await asyncio.sleep(0.01)
        assert not waiting.done() and not full.is_set()
        started = loop.time()
        s.arrive((("trace", b"1"), URGENT_HEADER))
        await waiting
        return loop.time() - started

    assert asyncio.run(go()) < 1.0                # ended by the record, not by the 5 s wait
    assert w.waits["urgent"] == 1 and len(s.processors) == 1


class _BufferedStream(_TakingStream):
    """As :class:`_TakingStream`, with take_events' own processor first: it adds each record to
    the buffer, and its closure holds ``buffer_size`` as faust-streaming's does."""

    def __init__(self):
        super().__init__()
        self.buffer = []
        buffer, buffer_size = self.buffer, self.buffer.__len__

        def add_to_buffer(value):
            buffer.append(value)
            return value if buffer_size() else None

        self._processors = [add_to_buffer]
        self.processors = self._processors


def test_an_empty_buffer_sleeps_until_a_record_comes_then_waits_its_window():
    s = _BufferedStream()
    w = BatchWait(idle_s=0.001, busy_s=0.001)
    w.attach(s)

    async def go():
        loop = asyncio.get_running_loop()
        full = asyncio.Event()
        waiting = asyncio.ensure_future(s.wait_for_stopped(full, timeout=MARKER))
        while not s.timeouts:                     # until the take is waiting
            await asyncio.sleep(0)
        assert s.timeouts == [None]               # on the record alone, not on a 1 ms window that polls
        assert not waiting.done() and w.waits["quiet"] == 1
        started = loop.time()
        s.arrive(None)                            # an ordinary record: its 1 ms window opens now
        await waiting
        elapsed = loop.time() - started
        # a record already in the buffer: no sleep, straight to the window
        await asyncio.wait_for(s.wait_for_stopped(full, timeout=MARKER), 1.0)
        return elapsed

    assert asyncio.run(go()) < 1.0
    assert w.waits["quiet"] == 1 and s.buffer == [b"value"]


def test_the_buffer_of_fausts_own_take_events_is_found():
    """Against the installed faust-streaming's take_events, run up to its first wait."""
    import inspect

    from faust.streams import Stream

    from suanli.streams.batch_wait import take_buffer_size

    seen = []

    class Channel:
        def __aiter__(self):
            return self

    class Fake:
        enable_acks = True
        should_stop = False
        current_event = object()
        channel = Channel()

        def __init__(self):
            self._processors = []

        def add_processor(self, p):
            self._processors.append(p)

        def _enable_passive(self, it):
            self.loop = asyncio.get_running_loop()

        async def ack(self, event):
            return True

        async def wait_for_stopped(self, full, timeout=None):
            size = take_buffer_size(self)
            seen.append(size())
            await self._processors[0](b"record")   # take_events' own processor buffers a record
            seen.append(size())
            self.should_stop = True
            return False

    async def go():
        agen = inspect.unwrap(Stream.take_events)(Fake(), 10, MARKER)
        batch = await agen.__anext__()
        await agen.aclose()
        return batch

    assert asyncio.run(go()) == [Fake.current_event]     # the batch of the record it buffered
    assert seen == [0, 1]


def test_a_take_restarted_on_the_stream_is_read_afresh():
    """take_events run again on the same stream has a new buffer: a record already in it must
    not wait for another record to come."""
    s = _BufferedStream()
    w = BatchWait(idle_s=0.001, busy_s=0.001)
    w.attach(s)

    async def go():
        full = asyncio.Event()
        first = asyncio.ensure_future(s.wait_for_stopped(full, timeout=MARKER))
        await asyncio.sleep(0)
        s.arrive(None)
        await first
        newer = _BufferedStream()                 # the new take's processor, with a record in its buffer
        newer.buffer.append(b"waiting")
        s._processors[0] = newer._processors[0]
        await asyncio.wait_for(s.wait_for_stopped(full, timeout=MARKER), 1.0)

    asyncio.run(go())
    assert w.waits["quiet"] == 1


def _busy_with_gap(gap_s, busy_s):
    s = _BufferedStream()
    w = BatchWait(idle_s=0.001, busy_s=busy_s, gap_s=gap_s)
    w.attach(s)
    w.after(w.busy_batch)                         # the last batch was busy
    s.buffer.append(b"already here")              # records that came while it was decided
    return s, w


def test_a_busy_window_with_a_gap_lasts_while_records_keep_coming_and_ends_at_a_pause():
    s, w = _busy_with_gap(gap_s=0.1, busy_s=30.0)

    async def go():
        loop = asyncio.get_running_loop()
        full = asyncio.Event()
        started = loop.time()
        waiting = asyncio.ensure_future(s.wait_for_stopped(full, timeout=MARKER))
        for _ in range(4):                        # closer together than the gap: the window stays open
            await asyncio.sleep(0.02)
            s.arrive(None)
            assert not waiting.done()
        await asyncio.wait_for(waiting, 10.0)     # then the pause ends it, long before the 30 s
        return loop.time() - started

    elapsed = asyncio.run(go())
    assert 0.08 <= elapsed < 10.0
    assert w.waits["gap"] == 1 and w.waits["quiet"] == 0 and len(s.buffer) == 5


def test_a_busy_window_with_a_gap_ends_at_busy_s_when_records_never_pause():
    s, w = _busy_with_gap(gap_s=0.5, busy_s=1.0)

    async def go():
        full = asyncio.Event()
        waiting = asyncio.ensure_future(s.wait_for_stopped(full, timeout=MARKER))
        arrivals = 0
        while not waiting.done() and arrivals < 1000:   # a record every 5 ms, never a 0.5 s pause: 1 s

            await asyncio.sleep(0.005)
            s.arrive(None)
            arrivals += 1
        await waiting
        return arrivals

    assert asyncio.run(go()) < 1000               # ended by busy_s, not by the test's 5 s cap
    assert w.waits["gap"] == 0


def test_a_busy_window_with_a_gap_ends_when_the_batch_is_full():
    s, w = _busy_with_gap(gap_s=5.0, busy_s=30.0)

    async def go():
        full = asyncio.Event()
        waiting = asyncio.ensure_future(s.wait_for_stopped(full, timeout=MARKER))
        await asyncio.sleep(0.01)
        assert not waiting.done()
        full.set()                                # take_events' processor: max_ records buffered
        s.arrive(None)
        await asyncio.wait_for(waiting, 1.0)

    asyncio.run(go())
    assert w.waits["gap"] == 0


def test_a_quiet_batch_waits_its_window_whatever_the_gap():
    s = _BufferedStream()
    w = BatchWait(idle_s=0.001, busy_s=30.0, gap_s=10.0)
    w.attach(s)
    w.after(1)                                    # quiet: the 1 ms window, not the gap's 10 s
    s.buffer.append(b"already here")

    async def go():
        await asyncio.wait_for(s.wait_for_stopped(asyncio.Event(), timeout=MARKER), 5.0)

    asyncio.run(go())
    assert s.timeouts == [0.001] and w.waits["gap"] == 0


def test_a_gap_longer_than_the_busy_window_is_refused():
    with pytest.raises(ValueError, match="gap_s"):
        BatchWait(busy_s=0.02, gap_s=0.05)
    with pytest.raises(ValueError, match="gap_s"):
        BatchWait(gap_s=0)


def test_the_scheduler_ends_its_busy_batches_at_the_settings_gap(tmp_path):
    from suanli.config import load_settings
    from suanli.errors import ConfigError
    from suanli.streams.app import scheduler_batch_wait

    assert load_settings(home=tmp_path).batch_gap_ms == 2.0
    assert scheduler_batch_wait(load_settings(home=tmp_path)).gap_s == 0.002
    assert scheduler_batch_wait(load_settings(home=tmp_path, batch_gap_ms=5)).gap_s == 0.005
    assert scheduler_batch_wait(load_settings(home=tmp_path, batch_gap_ms=0)).gap_s is None     # off
    for bad in (-1, 21):
        with pytest.raises(ConfigError, match="batch_gap_ms"):
            load_settings(home=tmp_path, batch_gap_ms=bad)


def test_attaching_again_replaces_the_earlier_attachment():
    """Faust restarts a crashed agent on the same stream, and the agent attaches again: the
    waits must not nest, nor the per-record processors pile up."""
    s = _BufferedStream()
    w = BatchWait(idle_s=0.001, busy_s=0.001)
    original = s.wait_for_stopped

    async def one_wait():
        s.buffer.append(b"waiting")
        await asyncio.wait_for(s.wait_for_stopped(asyncio.Event(), timeout=MARKER), 1.0)

    for _ in range(50):                           # a crash loop
        w.attach(s)
        asyncio.run(one_wait())
    assert len(s._processors) == 2                # take_events' own and one urgent watcher
    assert s._batch_wait["original"] == original  # each wait goes straight to Faust's
    assert len(s.timeouts) == 50


def test_a_stopping_stream_ends_a_busy_window_at_once():
    class _Stopping(_BufferedStream):
        async def wait_for_stopped(self, full, timeout=None):
            self.timeouts.append(timeout)
            return True                               # mode's answer while the service stops

    s = _Stopping()
    w = BatchWait(idle_s=0.001, busy_s=30.0, gap_s=5.0)
    w.attach(s)
    w.after(w.busy_batch)
    s.buffer.append(b"already here")

    async def go():
        return await asyncio.wait_for(s.wait_for_stopped(asyncio.Event(), timeout=MARKER), 1.0)

    assert asyncio.run(go()) is True and s.timeouts == [5.0]     # one slice, ended at once
