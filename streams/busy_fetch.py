"""While a worker is busy, its fetches wait at the broker for a fuller response.

A fetch returns as soon as the broker holds any record for it (aiokafka's
``fetch_min_bytes`` is 1). Intake reads raw topics that many producers write in small
requests, so under load nearly every fetch came back with a handful of records: at 1,300
submissions/s intake made about 270 fetches a second (of its 16 raw partitions each), and
each one costs Python work in the client (the request and response walked field by field)
and CPU in the broker on the same two cores. That CPU, not the work itself, is what made
the "half load" phase of ``bench/e2e.py`` run with the cores nearly saturated.

While the worker's last micro-batch was busy (``BatchWait``: at least ``busy_batch``
inputs), :class:`BusyFetch` makes its consumer ask the broker to hold each fetch until
``busy_min_bytes`` are there or the fetch wait (``Settings.fetch_max_wait_ms``) has passed;
a quiet batch puts it back to 1 byte. The batch then gathers at the broker, so intake's
take waits 2 ms after a busy batch too, not the scheduler's 20 ms (``build_intake``): one
wait, not two. A quiet input keeps its millisecond answer: a lone record after a busy spell
waits at most one fetch wait at the broker, once, and its small batch ends the busy mode.

The min bytes is the consumer's, so one :class:`BusyFetch` serves every stream of an app:
the app counts as busy while any of its streams' last batch was.
"""
from __future__ import annotations

from typing import Hashable

from suanli.streams.fetch_wait import FetchWaitTransport, set_fetch_min_bytes

__all__ = ["BusyFetch"]

QUIET_MIN_BYTES = 1          # aiokafka's default: a fetch returns at its first record


class BusyFetch:
    """The min bytes of an app's fetches, from whether its streams' last batches were busy.

    ``busy_min_bytes`` of 1 turns it off (every fetch returns at its first record)."""

    def __init__(self, transport: FetchWaitTransport, busy_min_bytes: int):
        if busy_min_bytes < 1:
            raise ValueError(f"BusyFetch: busy_min_bytes must be >= 1, not {busy_min_bytes}")
        self.transport = transport
        self.busy_min_bytes = busy_min_bytes
        self._busy: dict[Hashable, bool] = {}
        self.current = QUIET_MIN_BYTES
        self.switches = 0                       # times the min bytes changed (metrics, tests)

    def after(self, stream: Hashable, busy: bool) -> int:
        """``stream``'s last batch was ``busy`` (or not): the min bytes the app's fetches ask
        for from now on (also ``current``). ``stream`` names the input (an agent's name), so
        an agent restarted on a new stream takes over its predecessor's entry."""
        self._busy[stream] = busy
        want = self.busy_min_bytes if any(self._busy.values()) else QUIET_MIN_BYTES
        if want != self.current:
            set_fetch_min_bytes(self.transport, want)
            self.current = want
            self.switches += 1
        return want
