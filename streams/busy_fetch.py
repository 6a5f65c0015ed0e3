"""While a consumer is busy, its fetches wait at the broker for a fuller response.

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
a quiet batch puts it back to 1 byte. The batch then gathers at the broker, and intake
takes what each fetch brings with no wait of its own (``streams/intake_worker.py``). A
quiet input keeps its millisecond answer: a lone record after a busy spell waits at most
one fetch wait at the broker, once, and its small batch ends the busy mode.

The min bytes is the consumer's, so one :class:`BusyFetch` serves every stream of an app:
the app counts as busy while any of its streams' last batch was.

The same holds for a plain aiokafka consumer that follows busy topics: the API's read model
(``api/readmodel.py`` ``LogFollower``) and a plane driver's fold (``deploy/plane.py``, through
``EventConsumer.batches(busy_min_bytes=...)``). Their idle poll is aiokafka's 500 ms fetch wait,
so while busy (a fetched batch of ``BUSY_RECORDS`` or more) they also wait at most 20 ms.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Hashable, Optional

from suanli.streams.batch_wait import BUSY_BATCH

if TYPE_CHECKING:       # fetch_wait imports Faust; kafka_io's users (connectors, tools) do not need it
    from suanli.streams.fetch_wait import FetchWaitTransport

__all__ = ["BUSY_RECORDS", "BusyFetch", "set_consumer_fetch"]

QUIET_MIN_BYTES = 1          # aiokafka's default: a fetch returns at its first record
BUSY_RECORDS = BUSY_BATCH    # a fetch of this many records or more is busy, as a batch is for BatchWait
BUSY_MAX_WAIT_MS = 20        # a plain consumer's fetch wait while busy (a worker's own is 20 ms)


def set_consumer_fetch(consumer: Any, min_bytes: int, max_wait_ms: Optional[int] = None) -> None:
    """Make an aiokafka consumer's next fetches ask the broker for ``min_bytes`` or
    ``max_wait_ms`` (None: the wait it has), whichever comes first (its fetcher reads both
    each time it builds a request; a consumer not started yet starts with them)."""
    if min_bytes < 1 or (max_wait_ms is not None and max_wait_ms < 0):
        raise ValueError(f"set_consumer_fetch: min_bytes >= 1 and max_wait_ms >= 0, not {min_bytes}, {max_wait_ms}")
    fetcher = getattr(consumer, "_fetcher", None)          # made by AIOKafkaConsumer.start()
    for holder in (consumer, fetcher):
        if holder is not None:
            holder._fetch_min_bytes = min_bytes
            if max_wait_ms is not None:
                holder._fetch_max_wait_ms = max_wait_ms


class BusyFetch:
    """The min bytes of an app's (or a consumer's) fetches, from whether its streams' last
    batches were busy.

    ``apply(min_bytes)`` makes the fetches ask for it (:meth:`of_transport` for a worker
    app's consumers, :meth:`of_consumer` for one aiokafka consumer). ``busy_min_bytes`` of 1
    turns it off (every fetch returns at its first record)."""

    def __init__(self, apply: Callable[[int], None], busy_min_bytes: int):
        if busy_min_bytes < 1:
            raise ValueError(f"BusyFetch: busy_min_bytes must be >= 1, not {busy_min_bytes}")
        self.apply = apply
        self.busy_min_bytes = busy_min_bytes
        self._busy: dict[Hashable, bool] = {}
        self.current = QUIET_MIN_BYTES
        self.switches = 0                       # times the min bytes changed (metrics, tests)

    @classmethod
    def of_transport(cls, transport: FetchWaitTransport, busy_min_bytes: int) -> BusyFetch:
        """For a worker app: its consumers keep the worker's fetch wait (``fetch_wait.py``)."""
        from suanli.streams.fetch_wait import set_fetch_min_bytes

        return cls(lambda n: set_fetch_min_bytes(transport, n), busy_min_bytes)

    @classmethod
    def of_consumer(cls, consumer: Any, busy_min_bytes: int, busy_max_wait_ms: int = BUSY_MAX_WAIT_MS) -> BusyFetch:
        """For one aiokafka consumer, whose own fetch wait (aiokafka's 500 ms by default) is
        its idle poll: while busy the wait is ``busy_max_wait_ms`` too, so a record after a
        busy spell waits that long at most, not the idle poll's."""
        quiet_wait = consumer._fetch_max_wait_ms
        return cls(lambda n: set_consumer_fetch(consumer, n, quiet_wait if n == QUIET_MIN_BYTES else busy_max_wait_ms),
                   busy_min_bytes)

    def after(self, stream: Hashable, busy: bool) -> int:
        """``stream``'s last batch was ``busy`` (or not): the min bytes the app's fetches ask
        for from now on (also ``current``). ``stream`` names the input (an agent's name), so
        an agent restarted on a new stream takes over its predecessor's entry."""
        self._busy[stream] = busy
        want = self.busy_min_bytes if any(self._busy.values()) else QUIET_MIN_BYTES
        if want != self.current:
            self.apply(want)
            self.current = want
            self.switches += 1
        return want
