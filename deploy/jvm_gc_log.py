"""The embedded JVMs' garbage-collection log: the option that writes it, and its pauses read back.

Kafka's own start scripts log every collection of the broker (``kafkaServer-gc.log``); the
embedded broker does the same (``.suanli/logs/kafka-gc.log``, beside its ``kafka.log``), because
a broker whose heap is nearly full pauses every second or two for 10-25 ms, and every record
on its way through it waits that long: on this machine it was what decided the urgent tier's
p99 (``bench/urgent_latency.py`` reports the pauses of its window from this file).

The log is JDK unified logging (``-Xlog``) of the ``gc`` and ``gc+phases`` tags, with the wall
time first, rotated over a few small files. G1 logs each pause as one ``gc`` line; ZGC (the
broker's default, ``deploy/kafka_broker.py``) logs a line per collection there and its three
short pauses a cycle as ``gc,phases`` lines. A pause is a line that says ``Pause``; the phases
of a G1 pause and ZGC's concurrent phases do not::

    [2026-12-05T09:26:05.123+0000][info][gc] GC(170) Pause Young (Normal) (G1 Evacuation Pause) 458M->361M(512M) 10.798ms
    [2026-12-05T12:50:34.398+0000][info][gc,phases] GC(0) Pause Mark Start 0.012ms
    [2026-12-05T12:50:34.409+0000][info][gc,phases] GC(0) Concurrent Mark 11.182ms
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Iterable

# rotation: the current file plus FILES - 1 older ones of at most SIZE each (a few hours of a
# busy broker; the pauses that matter are the recent ones)
FILES = 4
SIZE = "10M"

_PAUSE = re.compile(r"^\[(?P<time>[^\]]+)\].*\bPause\b.*?(?P<ms>\d+(?:\.\d+)?)ms\s*$")


def option(path: Path) -> str:
    """The JVM option that writes collection events to ``path`` (wall-time stamped, rotated)."""
    return f"-Xlog:gc,gc+phases:file={path}:time,level,tags:filecount={FILES},filesize={SIZE}"


@dataclass(frozen=True, slots=True)
class Pauses:
    """The stop-the-world pauses of a time window."""
    count: int
    total_ms: float
    max_ms: float

    def as_dict(self) -> dict[str, float | int]:
        return {"count": self.count, "total_ms": round(self.total_ms, 1), "max_ms": round(self.max_ms, 1)}


def pauses_between(lines: Iterable[str], start: float, end: float) -> Pauses:
    """The pauses logged in ``lines`` whose wall time (epoch seconds) is in ``[start, end)``.
    Lines that are not a pause (concurrent phases, other JVM output) are ignored."""
    count, total, longest = 0, 0.0, 0.0
    for line in lines:
        m = _PAUSE.match(line)
        if m is None:
            continue
        try:
            at = datetime.strptime(m["time"], "%Y-%m-%dT%H:%M:%S.%f%z").timestamp()
        except ValueError:
            continue                               # another decoration than ``time``: not ours
        if start <= at < end:
            ms = float(m["ms"])
            count, total, longest = count + 1, total + ms, max(longest, ms)
    return Pauses(count, total, longest)


def read_pauses(path: Path, start: float, end: float) -> Pauses | None:
    """:func:`pauses_between` over ``path`` and its rotated files; None when there is no log
    (a broker started before its launch wrote one, or not by this project)."""
    files = sorted(path.parent.glob(path.name + "*"))
    if not files:
        return None
    lines: list[str] = []
    for f in files:
        lines.extend(f.read_text(errors="replace").splitlines())
    return pauses_between(lines, start, end)
