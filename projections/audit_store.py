"""Key-value backends of the audit index: in memory, and RocksDB (rocksdict) by default.

The interface is deliberately narrow (as Quix Streams' state stores): ``get``, ordered
``scan`` of a key prefix, and ``write`` of a :class:`Batch` of sets and deletes applied
atomically. The audit fold puts its view rows *and* its source positions in one batch, so
a crash leaves either both or neither (see ``projections/audit.py``).

Keys and values are bytes. Both backends order keys bytewise, so a prefix scan returns
index entries in key order (the audit keys embed a fixed-width timestamp).
"""
from __future__ import annotations

import bisect
import shutil
from collections import deque
from contextlib import contextmanager
from pathlib import Path
from typing import Any, ContextManager, Iterator, Protocol

from suanli.errors import AuditError


class Batch:
    """Buffered sets and deletes, applied at once by :meth:`Store.write`. Later ops win.

    ``puts``: sets already in ascending key order, as parallel lists of keys and values
    (the audit kernel's output, ``projections/audit.py``), written before ``ops``; their keys
    must not also be in ``ops``, and :meth:`get` does not see them.
    """

    __slots__ = ("ops", "puts")

    def __init__(self) -> None:
        self.ops: dict[bytes, bytes | None] = {}
        self.puts: tuple[list[bytes], list[bytes]] = ([], [])

    def set(self, key: bytes, value: bytes) -> None:
        self.ops[key] = value

    def delete(self, key: bytes) -> None:
        self.ops[key] = None

    def get(self, key: bytes) -> bytes | None | bool:
        """The buffered value, None for a buffered delete, False if the key is not in the batch."""
        return self.ops.get(key, False)

    def __len__(self) -> int:
        return len(self.ops) + len(self.puts[0])


class Store(Protocol):
    """What the audit fold needs from a backend."""

    def get(self, key: bytes) -> bytes | None: ...

    def get_many(self, keys: list[bytes]) -> list[bytes | None]:
        """``[get(k) for k in keys]``, in one call where the backend can (RocksDB multi-get)."""
        ...

    def scan(self, prefix: bytes, start: bytes | None = None) -> Iterator[tuple[bytes, bytes]]:
        """``(key, value)`` for every key starting with ``prefix`` (and ``>= start``), ascending."""
        ...

    def write(self, batch: Batch) -> None:
        """Apply every op of ``batch`` atomically."""
        ...

    def unlogged(self) -> ContextManager[None]:
        """Within it, writes may skip the backend's write-ahead log; on leaving (also by an
        exception) everything written is made durable. A crash inside loses a suffix of
        the batches written in it, never part of one (the fold's positions go with its rows)."""
        ...

    def close(self) -> None: ...


class MemoryStore:
    """A dict plus a sorted key list: the reference backend for tests and throwaway use."""

    def __init__(self) -> None:
        self._data: dict[bytes, bytes] = {}
        self._keys: list[bytes] = []

    def get(self, key: bytes) -> bytes | None:
        return self._data.get(key)

    def get_many(self, keys: list[bytes]) -> list[bytes | None]:
        return [self._data.get(k) for k in keys]

    def scan(self, prefix: bytes, start: bytes | None = None) -> Iterator[tuple[bytes, bytes]]:
        lo = start if start is not None and start > prefix else prefix
        i = bisect.bisect_left(self._keys, lo)
        keys = self._keys
        while i < len(keys) and keys[i].startswith(prefix):
            key = keys[i]
            yield key, self._data[key]
            i += 1

    def write(self, batch: Batch) -> None:
        for key, value in zip(*batch.puts):
            if key not in self._data:
                bisect.insort(self._keys, key)
            self._data[key] = value
        for key, value in batch.ops.items():
            if value is None:
                if self._data.pop(key, None) is not None:
                    del self._keys[bisect.bisect_left(self._keys, key)]
            else:
                if key not in self._data:
                    bisect.insort(self._keys, key)
                self._data[key] = value

    @contextmanager
    def unlogged(self) -> Iterator[None]:
        yield

    def close(self) -> None:
        pass

    def __len__(self) -> int:
        return len(self._data)


class RocksStore:
    """RocksDB through rocksdict in raw mode (bytes keys, bytewise order), WriteBatch writes.

    ``read_only`` opens without taking RocksDB's lock, so a query can read an index that a
    running follower holds (it sees the state as of the moment it opened).
    """

    def __init__(self, path: Path, *, read_only: bool = False):
        from rocksdict import AccessType, Options, Rdict

        self.path = Path(path)
        self.read_only = read_only
        self._unlogged: Any = None        # WriteOptions without the WAL, inside unlogged()
        options = Options(raw_mode=True)
        options.create_if_missing(not read_only)
        try:
            if read_only:
                self._db = Rdict(str(self.path), options, access_type=AccessType.read_only())
            else:
                self.path.mkdir(parents=True, exist_ok=True)
                self._db = Rdict(str(self.path), options)
        except Exception as exc:  # rocksdict raises plain Exception ("IO error: lock ...")
            raise AuditError(f"cannot open the audit index at {self.path}: {exc}") from exc

    @staticmethod
    def is_locked_error(err: BaseException) -> bool:
        text = str(err)
        return "lock" in text.lower() and ("LOCK" in text or "Resource temporarily unavailable" in text)

    def get(self, key: bytes) -> bytes | None:
        return self._db.get(key)

    def get_many(self, keys: list[bytes]) -> list[bytes | None]:
        return self._db.get(keys) if keys else []

    def scan(self, prefix: bytes, start: bytes | None = None) -> Iterator[tuple[bytes, bytes]]:
        it = self._db.iter()
        it.seek(start if start is not None and start > prefix else prefix)
        while it.valid():
            key = it.key()
            if not key.startswith(prefix):
                return
            yield key, it.value()
            it.next()

    def write(self, batch: Batch) -> None:
        from rocksdict import WriteBatch

        if self.read_only:
            raise AuditError(f"the audit index at {self.path} is open read-only")
        wb = WriteBatch(raw_mode=True)
        put, delete, ops = wb.put, wb.delete, batch.ops
        # Already sorted: one C-level loop of puts, no Python frame per key.
        deque(map(put, *batch.puts), maxlen=0)
        # In key order: RocksDB's memtable takes sorted inserts much faster (measured about
        # 1.5x on a rebuild's batches), and the keys are distinct, so order changes nothing
        # else. Sorting the keys alone is 3x cheaper than sorting (key, value) pairs.
        for key in sorted(ops):
            value = ops[key]
            if value is None:
                delete(key)
            else:
                put(key, value)
        self._db.write(wb, self._unlogged)     # None: the default options, with the WAL

    @contextmanager
    def unlogged(self) -> Iterator[None]:
        """Writes without RocksDB's WAL, then a flush of the memtables to SST files. The
        WAL was about a third of a rebuild's write cost (it copies every row once more).
        Without it a crash loses the memtable: whole batches, rows with their positions, so
        the index reopens at an older position and the fold reads from there. The flush on
        the way out comes before any logged write can follow, so a later logged batch can
        never survive a crash that an earlier unlogged one did not."""
        from rocksdict import WriteOptions

        options = WriteOptions()
        options.disable_wal = True
        self._unlogged = options
        try:
            yield
        finally:
            self._unlogged = None
            if not self.read_only:
                self._db.flush(True)

    def close(self) -> None:
        self._db.close()

    @staticmethod
    def destroy(path: Path) -> None:
        """Delete the whole index directory (rebuild starts from nothing)."""
        shutil.rmtree(path, ignore_errors=True)
