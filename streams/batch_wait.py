"""How long a worker's next micro-batch waits to fill: short when its input is quiet, long
when it is busy. The Faust workers use it: the scheduler (on the cell log) and telemetry.

Faust's ``take_events(max_, within)`` waits the whole ``within`` for a batch that is not full,
so every input waits up to ``within`` before it is decided. A short wait (2 ms) answers a
lone urgent task in a few ms (issue 14's tier), but under load it cuts the log into many small
batches, each paying the broker's acknowledgement and the batch's own costs: 10-15 % fewer
placements/s at full load in ``bench/e2e.py`` (measured, see BENCHMARKS.md). A long wait
(20 ms) is the other way round. :class:`BatchWait` picks per batch: after a batch of at least
``busy_batch`` inputs the next one waits ``busy_s``, after a smaller one ``idle_s``.

**A busy batch ends at a pause** (``gap_s``, the scheduler's ``Settings.batch_gap_ms``). The
busy window is there to gather what is coming, but under load most of a batch is already
waiting when its window opens: the records that came while the last batch was decided and
acknowledged reach the take within a millisecond or two, and a fixed 20 ms then only added
20 ms to every one of them (at 1,733 submissions/s in a full run the scheduler's cycle was
that window, about 15 ms of deciding and 20 of acknowledgement, with batches of 286
records). With
``gap_s`` set, a busy batch starts after the first stretch of ``gap_s`` in which no record
reached the take (the window is watched in slices of ``gap_s``), or after ``busy_s`` at most
(a fuller input never pauses: its batches stay long). Measured in
BENCHMARKS.md ("A busy batch ends at a pause"). Telemetry waits its one fixed window and does
not set it. (Intake, no Faust app, takes what each fetch brings: ``streams/intake_worker.py``.)

Faust fixes ``within`` when the generator starts, so :meth:`BatchWait.attach` wraps the
stream's ``wait_for_stopped``, the call ``take_events`` waits in (faust-streaming 0.15:
``self.wait_for_stopped(buffer_full, timeout=timeout)``), and replaces the timeout only when
it is :data:`MARKER`, the ``within`` the agent passes; any other caller's wait is unchanged.

**An urgent task ends the wait.** A record marked urgent (``records.URGENT_HEADER``: a task
labelled ``scheduling: urgent``, issue 14's millisecond tier; producers mark it on the raw
topic and intake on the cell log, ``intake.lane_headers``) should not wait for a batch to
fill. The wrapper keeps the ``buffer_full`` event ``take_events`` waits on, and a
stream processor added after ``take_events``' own (which puts the record in the batch) sets
it when the record's headers say urgent: the batch that holds the urgent task starts at
once, whichever wait was running. Batch boundaries never change decisions (the core decides
input by input), so this changes only when they are made.

**A quiet stream sleeps.** Faust's loop waits ``within`` and looks again even when its buffer
is empty: at a 2 ms wait an idle worker woke 500 times a second to find nothing, and each
intake and scheduler worker burnt 8-9 % of a core doing so with no work at all (measured with
a two-node plane and no tasks, ``python -m suanli.bench.idle_cpu``). So while the buffer is
empty the wait has no timeout; the record that ends the quiet spell opens the batch's window
(``current``), as a producer's linger opens at its first record. (Starting that batch at
once instead was measured too: no better urgent p99 and more CPU, telemetry's most, with
many more small batches; BENCHMARKS.md.) A take that finds records already buffered waits
its ``current`` as before. The buffer's size comes from ``take_events``' own processor (its
``buffer_size``, faust-streaming 0.15), looked up at each wait; where it is not found the
wait stays Faust's, and a warning says so once.
"""
from __future__ import annotations

import asyncio
import logging
from typing import Any, Callable, Optional

from suanli.streams.records import is_urgent

log = logging.getLogger("suanli.streams")

MARKER = 0.0201           # the ``within`` handed to take_events: "ask BatchWait" (no one else uses it)
IDLE_S = 0.002            # the wait after a quiet batch
BUSY_S = 0.02             # the wait after a busy one
BUSY_BATCH = 8            # a batch of this many inputs or more is busy (streams/busy_fetch.py counts fetches so too)


class BatchWait:
    """The wait of the next micro-batch, from the size of the last one; ``gap_s`` (optional)
    ends a busy one's window at the first pause of that long."""

    def __init__(self, idle_s: float = IDLE_S, busy_s: float = BUSY_S, busy_batch: int = BUSY_BATCH,
                 gap_s: Optional[float] = None):
        if not 0 < idle_s <= busy_s or busy_batch < 1 or (gap_s is not None and not 0 < gap_s <= busy_s):
            raise ValueError("BatchWait: 0 < idle_s <= busy_s, busy_batch >= 1 and 0 < gap_s <= busy_s")
        self.idle_s, self.busy_s, self.busy_batch = idle_s, busy_s, busy_batch
        self.gap_s = gap_s
        self.current = idle_s
        self.busy = False                 # whether the last batch was busy (streams/busy_fetch.py follows it)
        # batches begun in each mode, waits an urgent record ended early, busy windows a pause
        # ended (latency figures)
        self.waits = {"idle": 0, "busy": 0, "urgent": 0, "quiet": 0, "gap": 0}
        self._warned = False

    def after(self, events: int) -> float:
        """A batch of ``events`` inputs was taken: the next one's wait (also ``current``)."""
        busy = self.busy = events >= self.busy_batch
        self.current = self.busy_s if busy else self.idle_s
        self.waits["busy" if busy else "idle"] += 1
        return self.current

    def timeout(self, asked: Any) -> Any:
        """The timeout to wait with when a caller asked for ``asked``."""
        return self.current if asked == MARKER else asked

    def attach(self, stream: Any) -> None:
        """Make ``stream``'s take waits follow this, an urgent record end them, and an empty
        buffer sleep until a record comes (see the module docstring). What it watches belongs
        to ``stream`` (an agent restarted on a new stream is attached afresh), and the take's
        buffer is looked up at each wait (a take restarted on the same stream has a new one).

        Attaching again to the same stream replaces the earlier attachment: Faust restarts a
        crashed agent on its stream, and each restart used to wrap the last one's wrapper and
        add one more processor to every record (36 deep after a crash loop)."""
        earlier = getattr(stream, "_batch_wait", None)
        if earlier is not None:
            original = earlier["original"]
            if earlier["processor"] in stream._processors:
                stream._processors.remove(earlier["processor"])
        else:
            original = stream.wait_for_stopped
        full: Any = None                          # the running take's buffer_full event
        watching = False
        arrived = asyncio.Event()                 # set by every record that reaches the take

        def urgent_ends_wait(value: Any) -> Any:
            arrived.set()
            event = stream.current_event
            if event is not None and full is not None and not full.is_set() \
                    and is_urgent(event.message.headers):
                full.set()
                self.waits["urgent"] += 1
            return value

        async def wait_for_stopped(*coros: Any, timeout: Any = None) -> Any:
            nonlocal full, watching
            if timeout == MARKER and coros:
                full = coros[0]
                if not watching:              # after take_events' processor: the record is in the batch
                    stream.add_processor(urgent_ends_wait)
                    watching = True
                buffered = take_buffer_size(stream)
                if buffered is None:
                    self._warn_once()
                else:
                    arrived.clear()                       # no await until the wait: no record slips by
                    if buffered() == 0:
                        self.waits["quiet"] += 1
                        await original(arrived, timeout=None)   # then its window, as a producer's linger
                    if self.busy and self.gap_s is not None:
                        return await self._until_gap(original, coros[0], arrived)
            return await original(*coros, timeout=self.timeout(timeout))

        stream.wait_for_stopped = wait_for_stopped
        stream._batch_wait = {"original": original, "processor": urgent_ends_wait}

    async def _until_gap(self, original: Any, full: Any, arrived: asyncio.Event) -> Any:
        """A busy batch's window, in slices of ``gap_s``: it ends after a slice in which no
        record reached the take (``arrived`` still clear), when the batch is full (``full``,
        take_events' own event, which an urgent record sets too), or when ``busy_s`` is up.
        Each slice waits on ``full`` alone, so the records that keep coming under load do not
        wake the take one by one. The events, not the wait's answer, say why a slice ended:
        mode's ``wait_for_stopped`` answers True for a timeout as for a stop (a stopping
        stream's slice ends at once, and the window with it). Returns the last answer."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.busy_s
        answer: Any = False
        while not full.is_set():
            left = deadline - loop.time()
            if left <= 0:
                break
            arrived.clear()
            answer = await original(full, timeout=min(self.gap_s, left))
            if full.is_set():
                break
            if not arrived.is_set():          # a pause, a stop, or (in the last slice) busy_s is up
                if left > self.gap_s:
                    self.waits["gap"] += 1
                break
        return answer

    def _warn_once(self) -> None:
        if not self._warned:
            self._warned = True
            log.warning("batch wait: Faust's take_events buffer was not found (faust-streaming changed?); "
                        "an idle stream polls every %s s as Faust does", self.idle_s)


def take_buffer_size(stream: Any) -> Optional[Callable[[], int]]:
    """The ``buffer_size`` of the ``take_events`` running on ``stream`` (faust-streaming 0.15
    adds a processor ``add_to_buffer`` whose closure holds it), or None."""
    for processor in getattr(stream, "_processors", ()):
        code = getattr(processor, "__code__", None)
        if code is None or code.co_name != "add_to_buffer" or "buffer_size" not in code.co_freevars:
            continue
        size = processor.__closure__[code.co_freevars.index("buffer_size")].cell_contents
        if callable(size):
            return size
    return None
