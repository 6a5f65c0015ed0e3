"""The garbage collector's pauses in this process, per generation.

CPython's cyclic collector stops the whole interpreter while it runs: a young collection
takes well under a millisecond, a full (generation 2) one scans every tracked object the
process holds, and in a scheduler holding a cell of some 12,000 tasks that is about
100 ms (``bench/queue_retry.py``'s cell, measured with this class). An input that arrives
meanwhile waits for it, so the worker reports the pauses beside its latencies
(``streams/app.py``, ``DecisionLatency``): where a slow answer waited.

:class:`GcPauses` times each collection through ``gc.callbacks`` (start and stop are
called around every automatic and explicit collection) and keeps, per generation, the
count, the total and the longest pause in milliseconds. Reading the wall clock here is
instrumentation of the worker, never an input of a decision.

**Freezing what a full collection leaves** (``freeze_after_ms``). A full collection's pause
grows with everything the process holds, and a scheduler's cell only grows (it never
forgets a task): 520 ms at the end of the urgent bench's fill, and tens of seconds for a
cell of millions of tasks, long enough to lose the worker its consumer-group session. So
when a full collection took longer than ``freeze_after_ms``, everything that survived it is
moved to the permanent generation (``gc.freeze``), which later collections skip: the next
full pause covers only what the process took on since. What survived a full collection
is not cyclic garbage, so nothing collectable is frozen; what is frozen and dies later is
still freed by reference counting, unless it dies as part of a reference cycle (an
asyncio future in flight at that moment, say), which then stays until the process ends.
Such objects are few per freeze, and freezes are as rare as the heap growing by
``freeze_after_ms`` worth of objects.
"""
from __future__ import annotations

import gc
import time
from typing import Any


class GcPauses:
    """Count, total and longest pause of each generation's collections since :meth:`install`;
    with ``freeze_after_ms``, freezes what a full collection longer than that left (above)."""

    def __init__(self, freeze_after_ms: float | None = None) -> None:
        self.count = [0, 0, 0]
        self.total_ms = [0.0, 0.0, 0.0]
        self.max_ms = [0.0, 0.0, 0.0]
        self.freeze_after_ms = freeze_after_ms
        self.freezes = 0
        # objects in the permanent generation after the last freeze, counted then: counting
        # walks the whole permanent generation, one cache miss an object (about 15 ms for
        # 136,000 objects spread over a scheduler's heap, measured by py-spy when this was read
        # at each latency report, every 2 s: a stall of the loop every report)
        self.frozen = 0
        self._started = 0.0

    def install(self) -> "GcPauses":
        """Start timing collections (idempotent). With ``freeze_after_ms``, first collect and
        freeze what the process holds already (its modules, its framework): at start-up, a
        full collection costs no answer any wait."""
        if self._on_collect not in gc.callbacks:
            if self.freeze_after_ms is not None:
                gc.collect()
                self._freeze()
            gc.callbacks.append(self._on_collect)
        return self

    def uninstall(self) -> None:
        if self._on_collect in gc.callbacks:
            gc.callbacks.remove(self._on_collect)

    def _on_collect(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
            return
        ms = (time.perf_counter() - self._started) * 1000
        g = info["generation"]
        self.count[g] += 1
        self.total_ms[g] += ms
        if ms > self.max_ms[g]:
            self.max_ms[g] = ms
        if g == 2 and self.freeze_after_ms is not None and ms > self.freeze_after_ms:
            self._freeze()       # right after the full collection: only survivors are moved

    def _freeze(self) -> None:
        gc.freeze()
        self.freezes += 1
        self.frozen = gc.get_freeze_count()

    def as_json(self) -> dict[str, Any]:
        """``{"0": {"count", "total_ms", "max_ms"}, "1": ..., "2": ..., "freezes": n,
        "frozen": objects in the permanent generation right after the last freeze}``. Cheap:
        it never walks the permanent generation."""
        out: dict[str, Any] = {str(g): {"count": self.count[g], "total_ms": round(self.total_ms[g], 1),
                                        "max_ms": round(self.max_ms[g], 1)} for g in range(3)}
        out["freezes"], out["frozen"] = self.freezes, self.frozen
        return out
