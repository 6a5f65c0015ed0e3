"""Progress on long work: the one helper behind every progress bar of the CLI.

``whatif``, ``export``, ``replay``, ``bench`` and ``audit rebuild`` count their work through
:class:`Progress`; on a terminal it draws, with ``rich``, on stderr::

    replay cell-7 ━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━ 5,200/10,000 41,300 ev/s ETA 0:00:01

and the last state stays on screen when the work ends (``... done in 0:00:02``). It draws
nothing, and imports nothing, when it is disabled or its stream is not a terminal (pipes,
logs, CI); the commands also disable it with ``--json`` or ``--quiet`` (:func:`wanted`).
Either way it counts: ``n`` and :meth:`Progress.rate` serve callers that report figures.

Bars opened while another is open (a phase inside a benchmark) become more rows of the same
live display. Counting is cheap (an add and a clock read); the display is told at most every
``interval`` seconds, so the hot loops of replay and what-if keep their speed.
"""
from __future__ import annotations

import atexit
import datetime as dt
import os
import sys
import time
from typing import Any, Optional, TextIO

# The live display shared by nested bars: [rich Progress, number of open bars, atexit hook set].
_LIVE: list[Any] = [None, 0, False]


def _stop_live() -> None:
    live, _LIVE[0], _LIVE[1] = _LIVE[0], None, 0
    if live is not None:
        live.stop()


def is_terminal(stream: Any) -> bool:
    """True when ``stream`` is an interactive terminal that can redraw a line."""
    try:
        return bool(stream.isatty()) and os.environ.get("TERM") != "dumb"
    except (AttributeError, ValueError, OSError):
        return False


def wanted(*, quiet: bool = False, json: Any = None, stream: Optional[TextIO] = None) -> bool:
    """Whether a command should show progress: not with ``--quiet`` or ``--json`` (any value),
    and only when stderr (or ``stream``) is a terminal."""
    return not quiet and not json and is_terminal(stream if stream is not None else sys.stderr)


def _clock(seconds: float) -> str:
    return str(dt.timedelta(seconds=max(0, round(seconds))))


def _rate_text(rate: float, unit: str) -> str:
    figure = f"{rate:,.0f}" if rate >= 100 else f"{rate:.1f}" if rate >= 10 else f"{rate:.2f}"
    return f"{figure} {unit}/s"


def _columns(width: int) -> list[Any]:
    """label, bar, done/total, rate, ETA, fitted to a terminal ``width`` columns wide: the
    label (cut with an ellipsis) and the bar give way first, down to 80 columns."""
    from rich.progress import BarColumn, ProgressColumn
    from rich.table import Column
    from rich.text import Text

    label_width = max(12, min(32, width - 60))
    bar_width = max(10, min(30, width - 52 - label_width))

    class Label(ProgressColumn):
        def render(self, task: Any) -> Text:
            text = task.description
            if len(text) > label_width:
                text = text[:label_width - 1] + "…"
            return Text(text, no_wrap=True)

    class Count(ProgressColumn):
        def render(self, task: Any) -> Text:
            total = f"/{int(task.total):,}" if task.total is not None else ""
            return Text(f"{int(task.completed):,}{total}", style="progress.download")

    class Rate(ProgressColumn):
        def render(self, task: Any) -> Text:
            rate = task.finished_speed or task.speed
            if rate is None and task.elapsed:
                rate = task.completed / task.elapsed
            unit = task.fields.get("unit", "ev")
            shown = _rate_text(rate, unit) if rate and task.completed else f"- {unit}/s"
            return Text(shown, style="progress.data.speed")

    class Eta(ProgressColumn):
        def render(self, task: Any) -> Text:
            elapsed = task.finished_time if task.finished else task.elapsed
            if task.finished:
                return Text(f"done in {_clock(elapsed or 0)}", style="progress.elapsed")
            if task.total is None:
                return Text(f"elapsed {_clock(elapsed or 0)}", style="progress.elapsed")
            rate = task.speed or (task.completed / elapsed if elapsed and task.completed else None)
            eta = _clock((task.total - task.completed) / rate) if rate else "-:--:--"
            return Text(f"ETA {eta}", style="progress.remaining")

    return [Label(table_column=Column(no_wrap=True)), BarColumn(bar_width=bar_width),
            Count(table_column=Column(no_wrap=True)), Rate(table_column=Column(no_wrap=True)),
            Eta(table_column=Column(no_wrap=True))]

class Progress:
    """Counts work and, when enabled on a terminal, shows it as a bar with rate and ETA.

    ``total``: the amount of work (None: unknown, shown as a count with the elapsed time);
    ``label``: what is being done; ``unit``: what is counted, short (``ev/s``, ``rec/s``, ``runs/s``).
    Use it as a context manager, or call :meth:`close` when the work ends.
    """

    def __init__(self, total: Optional[int], label: str = "", *, unit: str = "ev",
                 stream: Optional[TextIO] = None, enabled: bool = True, interval: float = 0.1):
        self.total = total
        self.label = label
        self.unit = unit
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = enabled and is_terminal(self.stream)
        self.interval = interval
        self.n = 0
        self.started = time.perf_counter()
        self._last = float("-inf")
        self._task: Any = None
        self._live: Any = None
        self._closed = False
        if self.enabled:
            self._open()

    # ---------------------------------------------------------------- counting
    def update(self, k: int = 1) -> None:
        """``k`` more units done."""
        self.n += k
        if self._task is not None:
            now = time.perf_counter()
            if now - self._last >= self.interval:
                self._last = now
                self._push()

    def set_total(self, total: Optional[int]) -> None:
        self.total = total
        self._push()

    def add_total(self, k: int) -> None:
        """Grow the total (work found as it goes, e.g. one more range to read)."""
        self.total = (self.total or 0) + k
        self._push()

    def describe(self, label: str) -> None:
        """Change the label (a benchmark's current phase)."""
        self.label = label
        self._push()

    def rate(self) -> float:
        """Units per second since the bar was made."""
        elapsed = time.perf_counter() - self.started
        return self.n / elapsed if elapsed > 0 else 0.0

    def refresh(self) -> None:
        """Draw now (the display otherwise redraws a few times a second on its own)."""
        self._push()
        if self._mine():
            self._live.refresh()

    def close(self, *, done: bool = True) -> None:
        """The work ended: draw the final state (it stays on screen) and release the display.
        ``done``: it ended normally, so the bar shows complete even if fewer units came than
        the total announced (inputs skipped) or no total was known."""
        if self._closed:
            return
        self._closed = True
        if not self._mine():
            return
        if done and (self.total is None or self.n < self.total):
            self.total = self.n
        self._push()
        _LIVE[1] -= 1
        if _LIVE[1] <= 0:
            _stop_live()
        self._live = self._task = None

    def __enter__(self) -> "Progress":
        return self

    def __exit__(self, exc_type: object, *exc: object) -> None:
        self.close(done=exc_type is None)

    # ---------------------------------------------------------------- display
    def _open(self) -> None:
        from rich.console import Console
        from rich.progress import Progress as RichProgress

        if _LIVE[0] is None:
            if not _LIVE[2]:
                atexit.register(_stop_live)      # a loop that raised past its bar: restore the terminal
                _LIVE[2] = True
            console = Console(file=self.stream)
            # Prints to stdout go above the bar only if stdout is this terminal too; a
            # redirected stdout (``> out.txt``) must keep its own output.
            live = RichProgress(*_columns(console.width), console=console, refresh_per_second=5, transient=False,
                                redirect_stdout=is_terminal(sys.stdout), redirect_stderr=self.stream is sys.stderr)
            live.start()
            _LIVE[0] = live
        _LIVE[1] += 1
        self._live = _LIVE[0]
        self._task = self._live.add_task(self.label, total=self.total, unit=self.unit)

    def _mine(self) -> bool:
        """This bar is on the live display (not closed, and the display not stopped under it)."""
        return self._task is not None and self._live is not None and self._live is _LIVE[0]

    def _push(self) -> None:
        if self._mine():
            self._live.update(self._task, completed=self.n, total=self.total, description=self.label)


def run_jobs(fn: Any, jobs: list, workers: int, each: Any) -> None:
    """Run ``fn(job)`` for every job and hand each result to ``each`` as it comes: in
    ``workers`` spawned processes when there are more than one and more than one job (results
    in completion order), else in this process, in order. ``fn`` must be importable (pickled
    by name) for the processes."""
    if workers > 1 and len(jobs) > 1:
        from multiprocessing import get_context

        with get_context("spawn").Pool(workers) as pool:
            for result in pool.imap_unordered(fn, jobs):
                each(result)
    else:
        for job in jobs:
            each(fn(job))
