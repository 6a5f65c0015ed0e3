"""Whole record sets for the audit catch-up (``projections/audit_fetch.py``): the compiled
kernel's parse of Kafka record batches against aiokafka's own parser, and the fold of a
round either way leaving the same store.

No services: the record sets are built with aiokafka's batch builder (as a producer sends
them; the broker only sets the base offset, which is outside the CRC), values encoded by
the real codec with a dict for the registry.
"""
from __future__ import annotations

import pytest
from aiokafka.record.default_records import DefaultRecordBatchBuilder
from aiokafka.record.util import calc_crc32c

from suanli.errors import AuditError
from suanli.projections import audit_fetch
from suanli.projections.audit import AuditIndex
from suanli.projections.audit_bench import synthetic_decisions
from suanli.projections.audit_fetch import Chunk, records_of
from suanli.projections.audit_follower import WriterSchemas
from suanli.projections.audit_store import MemoryStore
from suanli.schemas.codec import Codec
from tests.projections.test_audit_raw import TOPIC, DictRegistry, _decode

GZIP = 1


def record_batch(base: int, values: list[bytes | None], *, compression: int = 0, control: bool = False,
                 headers: list[tuple[str, bytes]] | None = None) -> bytes:
    """One v2 record batch of ``values`` at offsets ``base``, ``base + 1``, ..."""
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=compression, is_transactional=0, producer_id=-1,
                                        producer_epoch=-1, base_sequence=-1, batch_size=1 << 30)
    for i, value in enumerate(values):
        builder.append(i, timestamp=1_750_000_000_000 + i, key=None if i % 3 else b"cell-%d" % i, value=value,
                       headers=headers or [])
    buf = bytearray(builder.build())
    buf[0:8] = base.to_bytes(8, "big", signed=True)
    if control:   # as the broker writes a transaction marker: the control bit, a new CRC
        buf[21:23] = (int.from_bytes(buf[21:23], "big") | 0x20).to_bytes(2, "big")
        buf[17:21] = calc_crc32c(bytes(buf[21:])).to_bytes(4, "big")
    return bytes(buf)


@pytest.fixture(scope="module")
def values():
    codec = Codec(DictRegistry())
    return codec, [codec.encode(kind, payload) for kind, payload in synthetic_decisions(400, tenants=3, seed=21)]


def _both(codec, chunks):
    """The round folded by the kernel and by aiokafka + the Python fold: (scan, result,
    records, store) each."""
    out = []
    for kernel in (True, False):
        index = AuditIndex(MemoryStore())
        index.kernel = kernel
        scanned = audit_fetch.scan(index, chunks)
        result, records = audit_fetch.fold(index, chunks, scanned, WriterSchemas(codec), _decode(codec))
        out.append((scanned, result, records, dict(index.store.scan(b""))))
    return out


def test_the_kernel_reads_record_sets_as_aiokafka_does(values):
    codec, vs = values
    p0 = (record_batch(0, vs[0:10]) + record_batch(10, [b"\x00\x00"], control=True)
          + record_batch(11, vs[10:20], headers=[("trace", b"abc"), ("empty", b"")]))
    p1_whole = record_batch(100, vs[20:60]) + record_batch(140, vs[60:90])
    p1 = p1_whole + record_batch(170, vs[90:120])[:-7]          # the fetch cut the last batch
    chunks = [Chunk(TOPIC, 0, 3, 18, p0), Chunk(TOPIC, 1, 100, 1000, p1)]
    (k_scan, k_result, k_records, k_store), (p_scan, p_result, p_records, p_store) = _both(codec, chunks)
    assert k_scan.headers and k_scan.parsed is None and p_scan.headers is None
    assert k_scan.next_fetch == p_scan.next_fetch == [21, 170]
    assert k_records == p_records == (18 - 3 - 1) + 70           # from offset 3, below 18, no marker
    assert k_result.by_kernel == k_records and p_result.by_kernel == 0
    assert (k_result.applied, k_result.skipped, k_result.ignored) == (p_result.applied, p_result.skipped,
                                                                       p_result.ignored)
    assert k_store == p_store
    assert k_store[b"pos\x00" + TOPIC.encode() + b"\x000"] == b"18"    # the last record folded + 1


def test_record_sets_the_kernel_does_not_parse_go_through_aiokafka(values):
    codec, vs = values
    compressed = [Chunk(TOPIC, 0, 0, 100, record_batch(0, vs[0:10]) + record_batch(10, vs[10:30], compression=GZIP))]
    (k_scan, k_result, _, k_store), (_, p_result, _, p_store) = _both(codec, compressed)
    assert k_scan.headers is None and k_scan.parsed is not None and k_scan.next_fetch == [30]
    assert k_result.applied == p_result.applied == 30 and k_store == p_store
    corrupt = bytearray(record_batch(0, vs[0:10]))
    corrupt[-3] ^= 0xFF
    with pytest.raises(AuditError, match="corrupt record batch"):
        audit_fetch.scan(AuditIndex(MemoryStore()), [Chunk(TOPIC, 0, 0, 100, bytes(corrupt))])


def test_a_record_for_the_codec_sends_the_round_to_the_python_fold(values):
    codec, vs = values
    chunks = [Chunk(TOPIC, 0, 0, 100, record_batch(0, vs[0:5] + [None] + vs[5:10]))]     # a tombstone
    (k_scan, k_result, k_records, k_store), (_, p_result, _, p_store) = _both(codec, chunks)
    assert k_scan.headers is not None                    # parsed, but one record is not the kernel's
    assert k_result.by_kernel == 0 and k_records == 11 and k_result.ignored == p_result.ignored == 1
    assert k_store == p_store


def test_records_of_gives_what_a_consumer_hands_out(values):
    _codec, vs = values
    chunk = Chunk(TOPIC, 2, 5, 9, record_batch(0, vs[0:10]) + record_batch(10, [b"x"], control=True))
    records, next_offset = records_of(chunk)
    assert [(r.partition, r.offset, r.value) for r in records] == [(2, o, vs[o]) for o in range(5, 9)]
    assert next_offset == 11


def test_a_record_set_cut_anywhere_reads_as_aiokafka_reads_it(values):
    """A fetch may end inside a batch: whatever the cut, the same records and next offset."""
    codec, vs = values
    whole = record_batch(0, vs[0:4]) + record_batch(4, vs[4:7])
    index = AuditIndex(MemoryStore())
    for cut in range(0, len(whole) + 1, 3):
        chunk = Chunk(TOPIC, 0, 0, 100, whole[:cut])
        records, next_offset = records_of(chunk)
        scanned = audit_fetch.scan(index, [chunk])
        assert scanned.headers is not None and scanned.next_fetch == [next_offset], cut
        assert len(records) == (7 if cut == len(whole) else 4 if cut >= len(record_batch(0, vs[0:4])) else 0)
