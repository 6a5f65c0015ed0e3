"""The partitioner every Suanli producer uses: aiokafka's choice, with a compiled hash.

A keyed record goes to partition ``murmur2(key) & 0x7fffffff`` modulo the partition count,
as aiokafka's ``DefaultPartitioner`` and the Java client decide; a record without a key
goes where ``DefaultPartitioner`` sends it (a random available partition). aiokafka hashes
in pure Python, about 5 us a short key, for every record a worker, a connector or the
driver sends. :class:`KeyPartitioner` hashes with the kernels' ``murmur2``
(``kernels/src/kafka.rs``) when they are built, and with aiokafka's otherwise: the same
value for every key (``tests/streams/test_partitioner.py``), so every record lands where
it did, and keyed order per cell, node or task is kept.
"""
from __future__ import annotations

from typing import Sequence

from aiokafka.partitioner import DefaultPartitioner
from aiokafka.partitioner import murmur2 as python_murmur2

try:  # the compiled hash; without the kernels aiokafka's does the same arithmetic
    from suanli_kernels import murmur2 as compiled_murmur2
except ImportError:  # pragma: no cover - bin/suanli builds the kernels; their tests fail without them
    compiled_murmur2 = None

_DEFAULT = DefaultPartitioner()


def murmur2(key: bytes) -> int:
    """aiokafka's ``murmur2(key)``: compiled for ``bytes``, aiokafka's own for anything else."""
    if compiled_murmur2 is not None and type(key) is bytes:
        return compiled_murmur2(key)
    return python_murmur2(key)


class KeyPartitioner:
    """aiokafka's partitioner interface (``(key, all_partitions, available) -> partition``),
    choosing what ``DefaultPartitioner`` chooses (see the module docstring)."""

    def __call__(self, key: bytes | None, all_partitions: Sequence[int], available: Sequence[int]) -> int:
        if key is None:
            return _DEFAULT(key, all_partitions, available)
        return all_partitions[(murmur2(key) & 0x7FFFFFFF) % len(all_partitions)]
