"""Where the scheduler keeps its partitions' snapshots and durable marks: a compacted topic.

**The layout** (:class:`PartitionSnapshots`), in a key-value table of ``str -> bytes``, per
cell-log partition ``N``:

- ``p{N}``: the manifest, JSON ``{"gen", "chunks", "as_of"}``;
- ``p{N}/g{gen}/{i}``: chunk ``i`` of generation ``gen`` (``cell_runner.chunk``: each below
  Kafka's 1 MB record limit);
- ``p{N}/durable``: the last cell-log offset of the partition whose outputs are known to be
  stored (:meth:`PartitionSnapshots.mark_durable`).

A new generation is written before its manifest, and the old one's chunks deleted after it,
so a crash mid-write leaves the previous snapshot whole.

**The table** is the changelog topic ``<scheduler group>-cell-snapshots-changelog``, one
partition per cell-log partition, compacted: each key's last record is its value, and a
record without a value deletes it. The Faust scheduler kept the same keys in a Faust table
(a RocksDB store whose changelog is this topic: ``streams/app.py`` ``SnapshotStore``), so
either scheduler loop reads what the other wrote. :class:`ChangelogTable` is that table
without Faust: :meth:`ChangelogTable.load` reads one partition to its end offset (at a
partition's recovery: another worker may have written it since), and every write is kept in
memory and queued for the producer (each key a JSON string, as Faust wrote them; values as they are), which :meth:`ChangelogTable.send_queued` hands over in
order (one producer, one partition: the broker stores them in that order).
"""
from __future__ import annotations

import asyncio
import json
import logging
from typing import Any, Callable, MutableMapping, Optional

from suanli.streams.cell_runner import CellRunner, chunk

log = logging.getLogger("suanli.streams")


def changelog_topic(group: str) -> str:
    """The snapshots' topic of the scheduler group ``group`` (Faust's name for the changelog of
    the group's table ``cell-snapshots``)."""
    return f"{group}-cell-snapshots-changelog"


def encode_key(key: str) -> bytes:
    """A key as Faust's table wrote it to the changelog: a JSON string."""
    return json.dumps(key).encode()


def decode_key(raw: bytes | None) -> str:
    """A changelog key back to its string (a JSON string; bare bytes are taken as they are)."""
    if raw is None:
        return ""
    if raw[:1] == b'"':
        return json.loads(raw)
    return raw.decode(errors="replace")


class PartitionSnapshots:
    """One cell-log partition's snapshot and durable mark in ``table`` (module docstring)."""

    def __init__(self, table: MutableMapping[str, bytes], partition: int):
        self.table = table
        self.partition = partition
        self.key = f"p{partition}"

    def load(self) -> Optional[bytes]:
        """The stored snapshot's bytes (None: there is none, or it is incomplete)."""
        manifest = self.table.get(self.key)
        if manifest is None:
            return None
        meta = json.loads(manifest)
        parts = [self.table.get(f"{self.key}/g{meta['gen']}/{i}") for i in range(meta["chunks"])]
        if any(p is None for p in parts):
            log.warning("snapshot of partition %s generation %s incomplete; replaying from the start",
                        self.partition, meta["gen"])
            return None
        return b"".join(parts)

    def as_of(self) -> Optional[int]:
        """The log offset the stored snapshot is as of (None: there is none)."""
        manifest = self.table.get(self.key)
        return int(json.loads(manifest)["as_of"]) if manifest is not None else None

    def durable(self) -> Optional[int]:
        """The last cell-log offset whose outputs are known to be stored (None: none marked)."""
        value = self.table.get(f"{self.key}/durable")
        return int(value) if value is not None else None

    def mark_durable(self, as_of: int) -> None:
        """Record that every output of the partition's records up to ``as_of`` is stored.

        Call it only after the broker acknowledged those outputs. The mark is written after
        them, so a worker that finds it may re-apply those records without sending their
        outputs again. It stands in for the consumer group's committed offset for that purpose:
        the Faust loop committed past records it dropped (its gap filling), and either loop
        commits only once a second, so a committed offset proves less than the mark."""
        self.table[f"{self.key}/durable"] = str(as_of).encode()

    def save(self, blob: bytes, as_of: int) -> None:
        """Store ``blob`` as the partition's snapshot as of ``as_of`` (a new generation)."""
        old = self.table.get(self.key)
        old_meta = json.loads(old) if old else None
        gen = (old_meta["gen"] + 1) if old_meta else 0
        pieces = chunk(blob)
        for i, piece in enumerate(pieces):
            self.table[f"{self.key}/g{gen}/{i}"] = piece
        self.table[self.key] = json.dumps({"gen": gen, "chunks": len(pieces), "as_of": as_of}).encode()
        if old_meta:
            for i in range(old_meta["chunks"]):
                self.table.pop(f"{self.key}/g{old_meta['gen']}/{i}", None)


def restore_newer(runner: CellRunner, snapshots: PartitionSnapshots) -> tuple[str, int]:
    """Restore the partition's stored snapshot into ``runner`` when it is further along than
    the state in memory (a fresh process has none; a partition that moved away and back may
    have been advanced by another worker meanwhile). Returns where the state now comes from,
    ``"memory"`` or ``"snapshot"``, and the last offset whose outputs are known to be stored:
    the durable mark or the snapshot's offset, whichever is later (-1: neither)."""
    held = runner.partitions.get(snapshots.partition)
    in_memory = held.as_of if held is not None else -1
    stored = snapshots.as_of()
    source = "memory"
    if stored is not None and stored > in_memory:
        blob = snapshots.load()
        if blob is not None:
            runner.restore(snapshots.partition, blob)
            source = "snapshot"
    return source, max(snapshots.durable() or -1, stored or -1)


class ChangelogTable(MutableMapping[str, bytes]):
    """One partition of the snapshots' changelog topic as a dict (module docstring).

    ``send(topic, value, key, partition)`` queues one record with the producer and returns
    its future (an awaitable: ``EventProducer.send_raw``)."""

    def __init__(self, topic: str, partition: int, send: Callable[..., Any]):
        self.topic, self.partition = topic, partition
        self._send = send
        self._values: dict[str, bytes] = {}
        self._queued: list[tuple[str, Optional[bytes]]] = []
        self.failures = 0                          # writes the broker refused (logged)

    def load(self, records: list[Any]) -> int:
        """Fold the partition's ``records`` (in offset order, from its start to its end) into
        the table, replacing what it held; returns how many keys it holds."""
        self._values.clear()
        for record in records:
            key = decode_key(record.key)
            if record.value is None:
                self._values.pop(key, None)
            else:
                self._values[key] = record.value
        return len(self._values)

    def __getitem__(self, key: str) -> bytes:
        return self._values[key]

    def __setitem__(self, key: str, value: bytes) -> None:
        self._values[key] = value
        self._queued.append((key, value))

    def __delitem__(self, key: str) -> None:
        del self._values[key]
        self._queued.append((key, None))

    def __iter__(self) -> Any:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    async def send_queued(self) -> None:
        """Hand every queued write to the producer, in order, without waiting for the broker
        (the caller sent what the writes depend on, and had it acknowledged, first). A write
        the broker refuses is logged: a mark or snapshot missing only makes a recovery
        re-apply more of the log."""
        queued, self._queued = self._queued, []
        for key, value in queued:
            future = await self._send(self.topic, value, encode_key(key), partition=self.partition)
            future.add_done_callback(self._sent)

    def _sent(self, future: asyncio.Future) -> None:
        if not future.cancelled() and future.exception() is not None:
            self.failures += 1
            log.warning("scheduler: a write to %s[%s] failed: %s", self.topic, self.partition, future.exception())
