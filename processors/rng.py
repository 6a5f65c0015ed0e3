"""Deterministic, seedable, cheap randomness for the core (no global RNG, no wall clock).

``draw(seed, *salts, n=...)`` hashes its integer inputs with SplitMix64 and returns an int
in [0, n). Decisions seed it from the strategy's configured seed and the input position,
so a replay draws exactly the same numbers.
"""
from __future__ import annotations

import functools
import zlib

from . import compiled

_MASK = (1 << 64) - 1


def splitmix64(x: int) -> int:
    x = (x + 0x9E3779B97F4A7C15) & _MASK
    z = x
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK
    return z ^ (z >> 31)


def mix(*values: int) -> int:
    """Fold integers into one 64-bit hash (by the compiled ``mix64`` when it is built and
    every value is in [-2**63, 2**64); this loop is its reference and takes any int)."""
    if compiled.KERNELS is not None:
        try:
            return compiled.KERNELS.mix64(values)
        except OverflowError:
            pass
    h = 0x243F6A8885A308D3
    for v in values:
        h = splitmix64(h ^ (v & _MASK))
    return h


def draw(n: int, *values: int) -> int:
    """A uniform-ish int in [0, n) determined by ``values`` (n >= 1)."""
    return mix(*values) % n


@functools.lru_cache(maxsize=1024)
def str_seed(s: str) -> int:
    """A stable int for a string (e.g. a topic name)."""
    return zlib.crc32(s.encode("utf-8"))
