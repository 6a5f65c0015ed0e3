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
    assert w.waits == {"idle": 2, "busy": 2, "urgent": 0, "quiet": 0}


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
            pass
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
