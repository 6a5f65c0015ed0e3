"""Waiting on a condition: the one polling helper of the benches and the tests that drive a
real plane (waits go on a condition, never on a fixed sleep)."""
from __future__ import annotations

import time
from typing import Any, Callable

from suanli.errors import StackError


def wait_for(what: str, probe: Callable[[], Any], timeout: float = 120.0, every: float = 0.5) -> Any:
    """Call ``probe`` every ``every`` seconds until it returns something truthy, and return
    that. :class:`StackError` naming ``what`` and the last value seen after ``timeout``."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = probe()
        if last:
            return last
        time.sleep(every)
    raise StackError(f"timed out after {timeout:.0f}s waiting for {what}; last seen: {last!r}")
