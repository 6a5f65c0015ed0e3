"""streams/inline_drain.py: Faust's per-record race, run inline when the callback never waits,
and raced as before when it does."""
from __future__ import annotations

import asyncio

import pytest
from mode import Service

from suanli.streams.inline_drain import InlineDrain, finish, is_wait_on


class _Base(Service):
    """Records every wait_first that reaches mode's own."""

    def __post_init__(self) -> None:
        self.raced: list[int] = []

    async def wait_first(self, *coros, timeout=None):
        self.raced.append(len(coros))
        return await super().wait_first(*coros, timeout=timeout)


class _Consumer(InlineDrain, _Base):
    def __post_init__(self) -> None:
        super().__post_init__()
        self.suspend_flow = asyncio.Event()


def _run(coro):
    return asyncio.run(coro)


def test_is_wait_on_names_only_an_unstarted_wait_of_that_event():
    async def main():
        a, b = asyncio.Event(), asyncio.Event()
        wa = a.wait()
        assert is_wait_on(wa, a) and not is_wait_on(wa, b)
        wa.close()
        other = asyncio.sleep(0)
        assert not is_wait_on(other, a)
        other.close()
    _run(main())


def test_a_callback_that_never_waits_runs_inline_and_wins():
    async def main():
        c = _Consumer()
        seen = []

        async def callback(x):
            seen.append(x)
            return x * 2

        before = len(asyncio.all_tasks())
        result = await c.wait_first(callback(21), c.suspend_flow.wait())
        assert seen == [21] and result.results == [42] and not result.stopped
        assert c.raced == []                          # mode's wait_first (its tasks) never ran
        assert len(asyncio.all_tasks()) == before
    _run(main())


def test_a_callback_that_waits_is_raced_against_the_suspension_as_before():
    async def main():
        c = _Consumer()
        gate = asyncio.Event()
        done = []

        async def callback():
            await gate.wait()
            done.append(1)
            return "late"

        racer = asyncio.ensure_future(c.wait_first(callback(), c.suspend_flow.wait()))
        await asyncio.sleep(0.01)
        assert not racer.done() and c.raced == [2]
        c.suspend_flow.set()                           # a rebalance: the stuck callback is abandoned
        result = await racer
        gate.set()
        await asyncio.sleep(0.01)
        assert done == [] and result.results != ["late"]
    _run(main())


def test_a_callback_that_waits_and_then_finishes_returns_its_value():
    async def main():
        c = _Consumer()

        async def callback():
            await asyncio.sleep(0)                     # a bare yield
            fut = asyncio.get_running_loop().create_future()
            asyncio.get_running_loop().call_later(0.01, fut.set_result, 7)
            return await fut

        result = await c.wait_first(callback(), c.suspend_flow.wait())
        assert result.results[0] == 7 and not result.stopped
    _run(main())


def test_errors_reach_the_caller_on_both_paths():
    async def main():
        c = _Consumer()

        async def at_once():
            raise ValueError("bad record")

        async def later():
            await asyncio.sleep(0.01)
            raise KeyError("later")

        with pytest.raises(ValueError, match="bad record"):
            await c.wait_first(at_once(), c.suspend_flow.wait())
        with pytest.raises(KeyError):
            await c.wait_first(later(), c.suspend_flow.wait())
    _run(main())


def test_other_calls_and_a_suspended_flow_go_through_mode():
    async def main():
        c = _Consumer()

        async def quick():
            return 1

        await c.wait_first(quick(), timeout=1.0)
        assert c.raced == [1]
        c.suspend_flow.set()
        await c.wait_first(quick(), c.suspend_flow.wait())
        assert c.raced == [1, 2]
    _run(main())


def test_finish_cancelled_cancels_what_the_coroutine_waits_on():
    async def main():
        fut = asyncio.get_running_loop().create_future()
        cleaned = []

        async def stuck():
            try:
                await fut
            finally:
                cleaned.append(1)

        coro = stuck()
        yielded = coro.send(None)
        task = asyncio.ensure_future(finish(coro, yielded))
        await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert fut.cancelled() and cleaned == [1]
    _run(main())


def test_fausts_fetch_loop_still_makes_the_call_this_recognises():
    """The mixin recognises one call of faust-streaming 0.15's fetch loop; if Faust changes
    it, every record goes back to Faust's own race (correct, but slow): fail here instead."""
    import inspect

    from faust.transport.consumer import Consumer

    from suanli.streams.fetch_wait import FetchWaitTransport

    source = inspect.getsource(Consumer._drain_messages)
    assert "self.wait_first(" in source and "callback(message), self.suspend_flow.wait()" in source
    assert "self.suspend_flow = Event()" in inspect.getsource(Consumer.__init__)
    assert inspect.getmodule(Consumer).Event is asyncio.Event
    assert issubclass(FetchWaitTransport.Consumer, InlineDrain)
