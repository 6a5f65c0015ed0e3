"""How long a worker's fetch may wait at the broker for data: ``Settings.fetch_max_wait_ms``
(20 ms by default), not Faust's fixed 1.5 s.

Faust's aiokafka driver builds every worker consumer with ``fetch_max_wait_ms=1500``, fixed.
With the fetcher aiokafka has, that leaves a fresh record of a busy partition waiting up to
1.5 s behind a fetch for *idle* ones:

* aiokafka keeps one fetch request in flight per broker, and does not ask again for a
  partition whose records it holds and the worker has not taken yet;
* when the worker is slow to take a batch (over aiokafka's 0.1 s ``prefetch_backoff``: a
  long micro-batch, a collector pause), the fetcher sends a request for the partitions
  it holds nothing of. A cell's records all go to one partition of the cell log, so those
  are the other, empty ones, and the broker holds that request until ``fetch_max_wait_ms``;
* records written to the busy partition meanwhile wait for that request to come back.

The batch that comes back then is larger, takes longer to take, and the next empty fetch
goes out: the scheduler settles into ~1 s batches, a second behind the log, with its CPU
mostly idle. ``bench/e2e.py``'s phase at 100 submissions/s showed it as a p50 of either
~25 ms or ~1,000 ms from one run to the next (``python -m suanli.bench.fetch_wait``).

A short wait bounds that. The price is an idle worker asking the broker once per wait
instead of once per 1.5 s (about 50 small requests a second a worker at 20 ms), and a
saturated one making more, smaller fetches: 3-7 % fewer placements/s in the E2E max phase
(BENCHMARKS.md, "What the short wait costs at full load").

The same holds for any aiokafka consumer of idle and busy partitions, at aiokafka's own
default of 500 ms (``python -m suanli.bench.fetch_wait --bare`` shows it on one bare
consumer). The API's read model and the connectors keep that default: giving them 20 ms too
measured worse at 450 submissions/s (BENCHMARKS.md).

:func:`set_fetch_wait` installs it on an app by giving it a transport whose consumer sets
the wait after Faust builds it (aiokafka reads ``_fetch_max_wait_ms`` when the consumer
starts its fetcher). It must run before anything asks the app for its transport.
"""
from __future__ import annotations

from typing import Any

import faust
from faust.transport.drivers import aiokafka as driver

from suanli.streams.busy_fetch import set_consumer_fetch
from suanli.streams.changelog_refetch import ChangelogRefetch
from suanli.streams.commit_gaps import AckedGapDedupe
from suanli.streams.inline_drain import InlineDrain

__all__ = ["FAUST_FETCH_MAX_WAIT_MS", "FetchWaitTransport", "set_fetch_min_bytes", "set_fetch_wait"]

FAUST_FETCH_MAX_WAIT_MS = 1500      # what faust/transport/drivers/aiokafka.py fixes


class _ConsumerThread(driver.AIOKafkaConsumerThread):
    def _create_worker_consumer(self, transport: Any) -> Any:
        consumer = super()._create_worker_consumer(transport)
        consumer._fetch_max_wait_ms = transport.fetch_max_wait_ms     # read by AIOKafkaConsumer.start()
        consumer._fetch_min_bytes = transport.fetch_min_bytes         # likewise (streams/busy_fetch.py moves it)
        transport.worker_consumers.append(consumer)
        return consumer


class _Consumer(InlineDrain, ChangelogRefetch, AckedGapDedupe, driver.Consumer):
    # also hands each record on without four tasks a record (streams/inline_drain.py), fetches
    # again the changelog records Faust drops (streams/changelog_refetch.py), and counts an
    # acked offset inside a gap once (streams/commit_gaps.py)
    def _new_consumer_thread(self) -> _ConsumerThread:
        return _ConsumerThread(self, loop=self.loop, beacon=self.beacon)


class FetchWaitTransport(driver.Transport):
    """Faust's aiokafka transport, whose worker consumer waits ``fetch_max_wait_ms`` at the
    broker."""

    Consumer = _Consumer
    fetch_max_wait_ms = FAUST_FETCH_MAX_WAIT_MS
    fetch_min_bytes = 1               # aiokafka's default; ``set_fetch_min_bytes`` changes it

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.worker_consumers: list[Any] = []      # the aiokafka consumers made for the app, in order


def set_fetch_wait(app: faust.App, fetch_max_wait_ms: int) -> None:
    """Give ``app`` a :class:`FetchWaitTransport` waiting ``fetch_max_wait_ms`` (call it right
    after building the app).

    Raises ``ValueError`` for a wait below 1 ms, and ``RuntimeError`` when the app already
    made its transport: agents or topics declared before would hold the old one."""
    if fetch_max_wait_ms < 1:
        raise ValueError(f"set_fetch_wait: fetch_max_wait_ms must be >= 1, not {fetch_max_wait_ms}")
    if app._transport is not None:
        raise RuntimeError("set_fetch_wait: the app already has its transport; call it first")
    transport = FetchWaitTransport(app.conf.broker_consumer, app)
    transport.fetch_max_wait_ms = fetch_max_wait_ms
    app.transport = transport


def set_fetch_min_bytes(transport: FetchWaitTransport, min_bytes: int) -> None:
    """Make the worker consumers of ``transport`` ask the broker, from their next fetch on,
    to hold it until ``min_bytes`` are there (or the fetch wait has passed): aiokafka's
    fetcher puts its ``_fetch_min_bytes`` in each fetch request it builds. A consumer made
    later starts with it. Setting an int is atomic, so the call is safe from the app's loop
    while the fetcher runs in Faust's consumer thread."""
    if min_bytes < 1:
        raise ValueError(f"set_fetch_min_bytes: min_bytes must be >= 1, not {min_bytes}")
    transport.fetch_min_bytes = min_bytes
    for consumer in transport.worker_consumers:
        set_consumer_fetch(consumer, min_bytes)            # the worker's fetch wait stays
