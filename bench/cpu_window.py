"""The CPU each process of a benchmark spent within a window of wall-clock time.

A phase of ``bench/e2e.py`` runs the plane's workers, the broker, the registry and the
driver on the same 2 cores, so its placements/s is bounded by their CPU added up. Their CPU
over the whole phase also holds the registration of the nodes and the drain after the last
placement; :class:`CpuSampler` reads every process's CPU seconds every ``every`` seconds in a
thread, so that the CPU of the window the placements happened in (from the first
submission to the last placement, wall-clock milliseconds as Kafka's record timestamps and
``submitted_at`` are) can be told afterwards, interpolated between the samples around its
ends. Reading the clock and /proc here is instrumentation, outside any decision.
"""
from __future__ import annotations

import bisect
import threading
import time
from typing import Callable

# (name, CPU seconds so far) of each process sampled
Probe = tuple[str, Callable[[], float]]


class CpuSampler:
    """Samples ``probes`` from ``__enter__`` to ``__exit__`` (and once at each end)."""

    def __init__(self, probes: list[Probe], every: float = 0.2) -> None:
        self.probes = probes
        self.every = every
        self.times_ms: list[float] = []
        self.samples: list[dict[str, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="cpu-sampler", daemon=True)

    def _sample(self) -> None:
        at = time.time() * 1000
        self.samples.append({name: cpu() for name, cpu in self.probes})
        self.times_ms.append(at)

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            self._sample()

    def __enter__(self) -> "CpuSampler":
        self._sample()
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._sample()

    def _at(self, name: str, at_ms: float) -> float:
        """``name``'s CPU seconds at ``at_ms``, linear between the samples around it (the
        first or last sample outside them)."""
        i = bisect.bisect_left(self.times_ms, at_ms)
        if i == 0:
            return self.samples[0][name]
        if i == len(self.times_ms):
            return self.samples[-1][name]
        t0, t1 = self.times_ms[i - 1], self.times_ms[i]
        c0, c1 = self.samples[i - 1][name], self.samples[i][name]
        return c0 + (c1 - c0) * (at_ms - t0) / (t1 - t0) if t1 > t0 else c1

    def spent(self, start_ms: float, end_ms: float) -> dict[str, float]:
        """CPU seconds of each process between two wall-clock instants (ms)."""
        if not self.samples:
            raise ValueError("no samples: the sampler never ran")
        return {name: max(0.0, self._at(name, end_ms) - self._at(name, start_ms)) for name, _ in self.probes}
