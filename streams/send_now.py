"""Send what a producer holds back for its linger, now: for an urgent task's records.

The workers' producers linger 2 ms (``streams/app.py``) so that records bound for the same
partition travel in one request: under load that is most of the plane's throughput. But a
lone record waits out the whole linger before it is even sent, and on this machine that
was half of an urgent task's time from intake to the scheduler (an idle broker, a record
every 50 ms: produce -> consume p50 2.2 ms with no linger, 4.4 ms with 2 ms). So when a
micro-batch carries an urgent task (``records.URGENT_HEADER``), the worker hands its
records to the producer as usual and then calls :func:`send_now`: the batches already
open are closed, as full ones are, and the producer's sender is woken to send them. Other
batches keep lingering; nothing else changes (order within a partition is the producer's
as ever: a closed batch is sent before any later one of its partition).

aiokafka has no public call for this (``flush`` waits for the linger; only the
transactional ``flush_for_commit`` closes the batches, and it waits for their answers). So
this does what ``MessageAccumulator.flush_for_commit`` does, without the wait, on the
accumulator's private fields of the aiokafka release the project pins (``>=0.14,<0.15``).
Where they are not as expected it does nothing and says so once in the log: the records
then leave after their linger, as before.
"""
from __future__ import annotations

import logging
from typing import Any

log = logging.getLogger(__name__)

_warned: list[bool] = []


def aiokafka_producer(producer: Any) -> Any:
    """The aiokafka producer behind ``producer``: itself, or a Faust producer's (its
    ``_producer``, None before it started)."""
    return getattr(producer, "_producer", producer)


def send_now(producer: Any) -> bool:
    """Close ``producer``'s open batches and wake its sender (module docstring). Returns
    whether it could (False: nothing was changed). ``producer``: an aiokafka
    ``AIOKafkaProducer`` or a Faust producer."""
    inner = aiokafka_producer(producer)
    try:
        accumulator = inner._message_accumulator
        open_batches = [batch for batches in accumulator._batches.values() for batch in batches]
        waiter = accumulator._waiter_future
        for batch in open_batches:
            batch._builder.close()
    except AttributeError as exc:
        if not _warned:
            _warned.append(True)
            log.warning("send_now: this aiokafka producer has no %s; urgent records wait out the linger", exc.name)
        return False
    if not waiter.done():
        waiter.set_result(None)
    return True
