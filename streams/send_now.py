"""Send what a producer holds back for its linger, now.

The workers' producers linger 2 ms (``streams/app.py``) so that records sent together share
a request. But a worker hands a batch's records to its producer and then waits for their
answers: nothing else joins them meanwhile, and the linger is only a delay (a lone record on
this machine, produce -> consume p50: 2.0 ms without a linger, 4.2 ms with 2 ms;
``bench/produce_linger.py``). So once a batch's records are all with the producer the worker
calls :func:`send_now`: the open batches are closed, as full ones are, and the producer's
sender is woken to send them. The scheduler also calls it right after an urgent task's
decision in a quiet batch (``records.URGENT_HEADER``), before the batch's later inputs are
decided. Order within a partition is unchanged: a closed batch is sent before any later one
of its partition. (Per record it would be wrong: each record would close its own batch, and
the producer sends one batch per partition per request.)

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
