"""``bench/read_your_writes.py`` on the real stack, small: the API's log follower answers
``sync()`` on an idle namespace and right after a write, and the written submission is in
its read model afterwards (the bench raises otherwise). How fast is the benchmark's business."""
from __future__ import annotations

import asyncio

import pytest

from suanli.bench.read_your_writes import measure


@pytest.mark.stack
@pytest.mark.timeout(300)
def test_sync_is_measured_idle_and_after_a_write(stack):
    f = asyncio.run(measure(3))
    assert f["idle"]["calls"] == 3 and f["after_write"]["calls"] == 3
    assert 0 < f["idle"]["p50_ms"] <= f["idle"]["max_ms"]
    assert 0 < f["after_write"]["p50_ms"] <= f["after_write"]["max_ms"]
