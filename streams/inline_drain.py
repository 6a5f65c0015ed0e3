"""Hand each fetched record to Faust's conductor without four tasks a record.

Faust's fetch loop (``Consumer._drain_messages``, faust-streaming 0.15) passes every record on
with ``await self.wait_first(callback(message), self.suspend_flow.wait())``: the conductor's
callback races a rebalance, so that a callback stuck behind flow control is abandoned when
the flow is suspended. ``Service.wait_first`` makes a task of each argument, two more for
the service's stopped and crashed events, waits for the first, and cancels the rest: four
tasks made and three cancelled for every record. Almost every callback finishes without
ever waiting (flow control open, the channel's queue not full), so that race was most of
what a record cost a worker outside its own work: about a third of the scheduler's busy
time at full load went to Faust's machinery around each record (BENCHMARKS.md, "Where the
scheduler's time goes at full load").

:class:`InlineDrain` (a mixin for the worker consumer, ``streams/fetch_wait.py``) recognises
that one call and runs the callback's first step inline. When it finishes there, nothing
could have raced it, and the result is what ``wait_first`` returns for a callback that won.
When it waits on something, the rest of it is raced against the suspension exactly as
before, through :func:`finish`, which drives the started coroutine as a task would. Every
other ``wait_first`` call is Faust's own.
"""
from __future__ import annotations

import asyncio
import inspect
from typing import Any, Coroutine

from mode.services import WaitResults

__all__ = ["InlineDrain", "finish", "is_wait_on"]

_EVENT_WAIT = asyncio.Event.wait.__code__


def is_wait_on(coro: Any, event: asyncio.Event) -> bool:
    """Whether ``coro`` is ``event.wait()``, not started."""
    if getattr(coro, "cr_code", None) is not _EVENT_WAIT or inspect.getcoroutinestate(coro) != inspect.CORO_CREATED:
        return False
    return coro.cr_frame.f_locals.get("self") is event


async def finish(coro: Coroutine[Any, Any, Any], yielded: Any) -> Any:
    """Run ``coro`` to its end, as an asyncio task would: it was started by a ``send(None)``
    that gave ``yielded`` (the future it waits on, or None for a bare yield). Each future is
    waited for and the coroutine resumed, to read its result itself. Cancelling this
    cancels the future it waits on and throws ``CancelledError`` into it, as cancelling its
    task would have."""
    try:
        while True:
            if yielded is None:
                await asyncio.sleep(0)
            else:
                yielded._asyncio_future_blocking = False     # as Task.__step resets it
                try:
                    await asyncio.wait({yielded})
                except asyncio.CancelledError:
                    yielded.cancel()
                    try:
                        coro.throw(asyncio.CancelledError())
                    except (StopIteration, asyncio.CancelledError):
                        pass
                    else:
                        coro.close()
                    raise
            yielded = coro.send(None)
    except StopIteration as stop:
        return stop.value


class InlineDrain:
    """Mixin for a Faust ``Consumer`` (put it before the consumer class): see the module."""

    suspend_flow: asyncio.Event

    async def wait_first(self, *coros: Any, timeout: Any = None) -> WaitResults:
        if len(coros) == 2 and timeout is None and asyncio.iscoroutine(coros[0]) \
                and is_wait_on(coros[1], self.suspend_flow) and not self.suspend_flow.is_set():
            callback, suspended = coros
            try:
                yielded = callback.send(None)
            except StopIteration as stop:
                suspended.close()                 # never started: nothing to cancel
                return WaitResults([callback], [stop.value], False)
            except BaseException:
                suspended.close()
                raise
            return await super().wait_first(finish(callback, yielded), suspended)  # type: ignore[misc]
        return await super().wait_first(*coros, timeout=timeout)  # type: ignore[misc]
