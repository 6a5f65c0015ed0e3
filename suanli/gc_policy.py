"""The cyclic garbage collector's thresholds for Suanli's long-running processes.

CPython collects its youngest generation after 700 net new container objects, and the
whole heap after ten middle collections (and once the objects promoted since the last full
pass reach a quarter of the heap). A stream worker allocates a few short-lived objects per
record (decoded payloads, events, futures) while it holds a large, long-lived heap (a
cell's tasks, a read model's views, a connector's running tasks): at the default 700 many
of those short-lived objects are still referenced when a collection runs, get promoted, and
drag full collections over the whole heap behind them. In an E2E max phase
(``python -m suanli.bench.e2e --max-only``, BENCHMARKS.md) the simulator connector spent
two thirds of its CPU in the collector, and the driver's read model more than half of its.

:func:`apply` raises the thresholds to :data:`THRESHOLDS`: a young collection every 50,000
net allocations, by which time a record's objects are long gone, so few survive to be
promoted and full collections become rare. Garbage in reference cycles is still collected,
only later; the memory that waits for it is bounded by the young threshold's objects and
the full pass's quarter rule, as before. This sets how often passes run; how long a
scheduler's full pass may grow is ``streams/gc_pauses.py``'s concern (it freezes what a
long full pass left).

Every process entry point calls it first: ``suanli`` (the CLI, and so ``api serve``,
``replay``, ``bench``), ``python -m suanli.streams.worker``, ``python -m
suanli.connectors``, and the E2E drivers (``bench/e2e.py``, ``bench/phase_series.py``), whose
read model stands in for ``api serve``'s. ``SUANLI_GC_THRESHOLDS`` overrides it: ``default`` keeps CPython's own
thresholds (for an A/B comparison), or three non-negative integers ``"g0,g1,g2"`` as
``gc.set_threshold`` takes them (``g0`` 0 disables automatic collection).
"""
from __future__ import annotations

import gc
import os
from typing import Mapping, Optional

from suanli.errors import ConfigError

ENV = "SUANLI_GC_THRESHOLDS"
THRESHOLDS = (50_000, 20, 20)


def thresholds_from(value: Optional[str]) -> Optional[tuple[int, int, int]]:
    """The thresholds ``SUANLI_GC_THRESHOLDS`` asks for: :data:`THRESHOLDS` when unset or
    empty, None for ``default`` (leave CPython's), else its three integers. Raises
    :class:`ConfigError`, naming the variable, for anything else."""
    if value is None or not value.strip():
        return THRESHOLDS
    text = value.strip()
    if text.lower() == "default":
        return None
    parts = [p.strip() for p in text.split(",")]
    try:
        numbers = tuple(int(p) for p in parts)
    except ValueError:
        numbers = ()
    if len(numbers) != 3 or min(numbers) < 0:
        raise ConfigError(f"{ENV}={value!r}: expected 'default' or three non-negative integers "
                          f"'g0,g1,g2' (e.g. {','.join(map(str, THRESHOLDS))})")
    return numbers      # type: ignore[return-value]


def apply(environ: Optional[Mapping[str, str]] = None) -> Optional[tuple[int, int, int]]:
    """Set the collector's thresholds for this process (see the module doc); returns the
    thresholds set, None when CPython's defaults are kept."""
    chosen = thresholds_from((os.environ if environ is None else environ).get(ENV))
    if chosen is not None:
        gc.set_threshold(*chosen)
    return chosen
