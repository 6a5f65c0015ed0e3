"""streams/partitioner.py: every producer's partition choice is aiokafka's, hash compiled.

Unit tests, no services: the compiled murmur2 equals aiokafka's pure-Python one on keys of
every length and byte value, the partitioner picks the partition ``DefaultPartitioner``
picks for every key and partition count, and the workers' Faust apps and
``EventProducer`` are built with it. That a keyed record reaches the same partition on
the real broker follows from the same choice (aiokafka asks the partitioner, nothing else).
"""
from __future__ import annotations

import asyncio
import random

import pytest
from aiokafka.partitioner import DefaultPartitioner
from aiokafka.partitioner import murmur2 as aiokafka_murmur2

from suanli.streams import partitioner
from suanli.streams.partitioner import KeyPartitioner


def _keys() -> list[bytes]:
    rnd = random.Random(20261207)
    keys = [b"", b"a", b"ab", b"abc", b"abcd", b"openb-r1207", b"node-00042", b"task-001000",
            "单元-α".encode(), bytes(range(256)), b"\xff" * 7, b"\x80\x00\x7f"]
    keys += [bytes(rnd.randrange(256) for _ in range(n)) for n in range(0, 70) for _ in range(5)]
    return keys


def test_the_kernels_are_built():
    assert partitioner.compiled_murmur2 is not None, "the kernels are not built (./bin/suanli builds them)"


def test_compiled_murmur2_is_aiokafkas():
    for key in _keys():
        assert partitioner.compiled_murmur2(key) == aiokafka_murmur2(key), key
        assert partitioner.murmur2(key) == aiokafka_murmur2(key), key


def test_a_key_that_is_not_bytes_is_hashed_by_aiokafka():
    assert partitioner.murmur2(bytearray(b"node-1")) == aiokafka_murmur2(bytearray(b"node-1"))


@pytest.mark.parametrize("count", [1, 2, 3, 6, 8, 12, 64])
def test_the_partition_is_default_partitioners(count):
    parts = list(range(count))
    mine, theirs = KeyPartitioner(), DefaultPartitioner()
    for key in _keys():
        assert mine(key, parts, parts) == theirs(key, parts, parts), (key, count)


def test_an_unkeyed_record_goes_to_an_available_partition():
    mine = KeyPartitioner()
    assert {mine(None, [0, 1, 2, 3], [1, 3]) for _ in range(50)} <= {1, 3}
    assert mine(None, [0, 1], []) in (0, 1)


def test_the_workers_and_event_producers_use_it():
    from suanli.config import load_settings
    from suanli.schemas.codec import Codec
    from suanli.replay.dir_registry import DirRegistry
    from suanli.streams.app import make_app
    from suanli.streams.kafka_io import EventProducer

    app = make_app("intake", load_settings())
    assert isinstance(app.conf.producer_partitioner, KeyPartitioner)
    assert isinstance(app.producer._settings_default()["partitioner"], KeyPartitioner)   # noqa: SLF001

    async def made() -> EventProducer:      # aiokafka's producer is made inside a running loop
        return EventProducer("127.0.0.1:1", Codec(DirRegistry({})))

    producer = asyncio.run(made())
    assert isinstance(producer._producer._partitioner, KeyPartitioner)                      # noqa: SLF001
