"""A tiny stdlib progress line (no tqdm): ``label [#####.....] 52% 5,200/10,000 41,300 ev/s``.

On a terminal it redraws one line at most every ``interval`` seconds; otherwise (logs,
pipes) it prints a plain line every ``log_every`` seconds, and nothing on short runs.
"""
from __future__ import annotations

import sys
import time
from typing import TextIO


class Progress:
    def __init__(self, total: int | None, label: str = "", *, stream: TextIO | None = None,
                 enabled: bool = True, interval: float = 0.2, log_every: float = 10.0, width: int = 30):
        self.total = total
        self.label = label
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = enabled
        self.tty = enabled and hasattr(self.stream, "isatty") and self.stream.isatty()
        self.interval = interval if self.tty else log_every
        self.width = width
        self.n = 0
        self.started = time.perf_counter()
        self._last = self.started
        self._drawn = False

    def update(self, k: int = 1) -> None:
        self.n += k
        now = time.perf_counter()
        if self.enabled and now - self._last >= self.interval:
            self._last = now
            self._draw(now)

    def rate(self) -> float:
        elapsed = time.perf_counter() - self.started
        return self.n / elapsed if elapsed > 0 else 0.0

    def _line(self, now: float) -> str:
        elapsed = max(now - self.started, 1e-9)
        rate = self.n / elapsed
        if self.total:
            frac = min(1.0, self.n / self.total)
            bar = "#" * int(frac * self.width) + "." * (self.width - int(frac * self.width))
            return f"{self.label} [{bar}] {frac * 100:3.0f}% {self.n:,}/{self.total:,} {rate:,.0f} ev/s"
        return f"{self.label} {self.n:,} {rate:,.0f} ev/s"

    def _draw(self, now: float) -> None:
        if self.tty:
            self.stream.write("\r" + self._line(now) + "\x1b[K")
        else:
            self.stream.write(self._line(now) + "\n")
        self.stream.flush()
        self._drawn = True

    def close(self) -> None:
        """Finish the line (only if something was drawn)."""
        if self._drawn:
            if self.tty:
                self._draw(time.perf_counter())
                self.stream.write("\n")
            self.stream.flush()
