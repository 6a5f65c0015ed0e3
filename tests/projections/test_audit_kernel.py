"""The compiled audit fold (``kernels/``, ``AuditIndex._apply_kernel``) against the Python
fold it stands in for (``AuditIndex.apply_raw`` with ``kernel = False``): from the same
records, the same store, byte for byte; its walker against the generated Python walker on
mutated records; and the store's unlogged writes.

No services: the records come from ``test_audit_raw``'s fixture (the real codec, a dict
for the registry, every odd record the topic may hold).
"""
from __future__ import annotations

import random

import pytest

from suanli.projections import audit
from suanli.projections.audit import AuditIndex
from suanli.projections.audit_avro import EXTRACT_ERRORS, compile_extractor, extractor_program
from suanli.projections.audit_bench import synthetic_decisions
from suanli.projections.audit_follower import WriterSchemas
from suanli.projections.audit_store import Batch, RocksStore
from suanli.schemas.codec import Codec
from tests.projections import test_audit_raw as raw
from tests.projections.test_audit_raw import TOPIC, DictRegistry, Rec, _contents, _decode

# The raw fold's fixtures: its odd-record topic, and both store backends.
topic_records, backend = raw.topic_records, raw.backend


def test_the_kernel_is_built():
    """bin/suanli builds kernels/ into the venv; without it the fold is the Python one,
    several times slower, so a missing build must fail here rather than go unnoticed."""
    assert audit.KERNEL, "suanli_kernels is not importable: run ./bin/suanli (it builds kernels/ with cargo)"


def _fold(index: AuditIndex, codec, records, chunk: int) -> tuple[list[int], int]:
    """Fold ``records`` in chunks; the totals, and how many chunks the kernel folded."""
    decode, schemas = _decode(codec), WriterSchemas(codec)
    totals, by_kernel = [0, 0, 0, 0], 0
    for i in range(0, len(records), chunk):
        rs = records[i:i + chunk]
        result = index._apply_kernel(rs, schemas) if index.kernel else None
        if result is None:
            result = index.apply_raw(rs, schemas, decode)
        else:
            by_kernel += 1
        totals = [a + b for a, b in zip(totals, (result.applied, result.duplicates, result.skipped, result.ignored))]
    return totals, by_kernel


@pytest.mark.parametrize("chunk", [13, 97, 5000])
def test_kernel_and_python_folds_leave_the_same_store(topic_records, backend, chunk):
    codec, records = topic_records
    python, kernel = AuditIndex(backend("python")), AuditIndex(backend("kernel"))
    python.kernel = False
    want, _ = _fold(python, codec, records, chunk)
    got, by_kernel = _fold(kernel, codec, records, chunk)
    assert got == want
    assert _contents(kernel) == _contents(python)
    # The odd records send their chunks to the Python fold; the others went through the kernel.
    chunks = -(-len(records) // chunk)
    assert 0 < by_kernel < chunks if chunk < 5000 else by_kernel == 0


def _clean_records(n: int = 3000, seed: int = 3) -> tuple[Codec, list[Rec]]:
    """Decisions only, over three partitions, ids that need escaping, some event ids
    delivered twice (a producer's retry: the same event at a later offset)."""
    codec = Codec(DictRegistry())
    rnd = random.Random(seed)
    values = []
    for kind, payload in synthetic_decisions(n, tenants=3, nodes=30, seed=seed):
        if rnd.random() < 0.1:
            payload = dict(payload, task_id=payload["task_id"] + "\\\x00", tenant="t\x00" + payload["tenant"],
                           event_id=payload["event_id"] + "\\")
        values.append(codec.encode(kind, payload))
    values += [values[i] for i in rnd.sample(range(len(values)), 40)]       # redelivered
    offsets = [0, 0, 0]
    records = []
    for i, value in enumerate(values):
        part = i % 3
        records.append(Rec(TOPIC, part, offsets[part], value))
        offsets[part] += 1
    return codec, records


@pytest.mark.parametrize("chunk", [7, 500, 10_000])
def test_the_kernel_folds_whole_topics_alike_and_counts_duplicates_across_batches(backend, chunk):
    codec, records = _clean_records()
    python, kernel = AuditIndex(backend("python")), AuditIndex(backend("kernel"))
    python.kernel = False
    want, _ = _fold(python, codec, records, chunk)
    got, by_kernel = _fold(kernel, codec, records, chunk)
    assert got == want and got[1] == 40                    # the redeliveries, wherever they fell
    assert by_kernel == -(-len(records) // chunk)          # every chunk by the kernel
    assert _contents(kernel) == _contents(python)
    # Opened again (not empty: duplicates are looked up in the store), the same records
    # are all skipped, and later offsets of stored events are duplicates.
    again = AuditIndex(kernel.store)
    assert again._fresh is None
    tail = [Rec(TOPIC, 0, 10_000 + i, r.value) for i, r in enumerate(records[:50])]
    assert _fold(again, codec, records + tail, chunk)[0] == [0, 50, len(records), 0]


def test_the_compiled_walker_accepts_and_captures_exactly_what_the_python_walker_does():
    codec = Codec(DictRegistry())
    rnd = random.Random(17)
    decisions = list(synthetic_decisions(300, seed=8))
    walkers = {kind: audit._kernels.Walker(extractor_program(codec.events[kind].schema)) for kind, _ in decisions}
    accepted = 0
    for i in range(4000):
        kind, payload = rnd.choice(decisions)
        value = codec.encode(kind, payload)
        if i % 5:       # four in five mutated
            value = raw.mutated(rnd, value)
        try:
            want = compile_extractor(codec.events[kind].schema)(value)
        except EXTRACT_ERRORS:
            want = None
        assert walkers[kind].extract(value) == want, (kind, value)
        accepted += want is not None
    assert 800 < accepted < 4000


def test_unlogged_writes_are_durable_on_leaving_even_by_an_exception(tmp_path):
    store = RocksStore(tmp_path / "ix")
    batch = Batch()
    batch.puts = ([b"a", b"b"], [b"1", b"2"])
    batch.set(b"c", b"3")
    with pytest.raises(RuntimeError):
        with store.unlogged():
            store.write(batch)
            raise RuntimeError("folding failed")
    store.write(Batch())        # logged again
    # No close (which would flush anyway): a second, read-only opener reads the SST files
    # and the WAL only, so it sees the unlogged batch only if leaving flushed it.
    reader = RocksStore(tmp_path / "ix", read_only=True)
    assert [reader.get(k) for k in (b"a", b"b", b"c")] == [b"1", b"2", b"3"]
    reader.close()
    store.close()
