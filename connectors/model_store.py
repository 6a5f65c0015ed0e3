"""A node's model cache on disk: model weights copied once, then read locally (C11, issue 20).

``ModelStore(root, capacity_mib)`` keeps one file per model under ``root``, keyed by the
model's ``model_arch`` (name and version: the key of a node's cache, see ``ModelRef``).
``await store.ensure(model)`` makes a model's weights local and returns a :class:`LoadResult`:

- **hit**: the file is there (and its size agrees with ``size_mib`` when that is given):
  returned at once, marked as used now (the LRU order);
- **miss**: the file at ``artifact_uri`` (``file://`` URI or a plain absolute path; any other
  scheme is refused with :class:`ModelStoreError`) is copied into ``root``: written under a
  temporary name (``.partial-*``), checked for size (``size_mib``, to the MiB, when given;
  else the source's size), fsynced, then renamed into place and the directory fsynced. So a
  file under its final name is always complete: a crash leaves at most a temporary file,
  which the index never takes for a model (and removes at the next start);
- **shared**: concurrent requests for a model being copied wait for that one copy (one
  reader of the origin, one write); cancelling a waiter does not cancel the copy.

The copy runs in a thread (``os.sendfile`` in chunks of ``chunk_mib``, read/write where the
kernel cannot), so the event loop, and with it the connector's heartbeats, keeps running;
``aclose()`` stops copies in flight at the next chunk.

**Capacity.** Before a copy, least-recently-used entries are evicted until the cached models
plus the copies in flight fit ``capacity_mib`` (None: no limit but the disk's, which is
checked too). An entry in use is never evicted: :meth:`ModelStore.using` ensures a model and
pins it until its block ends (the local connector holds it while the task's process runs).
A model that cannot fit, even after evicting everything not in use, fails the ``ensure``.

**Index.** Rebuilt from the directory at start (file name = the model arch, percent-quoted;
last use = the file's mtime, which a hit refreshes), so it survives restarts. One store per
directory at a time (a second live store there would see the first's copies as leftovers).
Errors are :class:`ModelStoreError` (a :class:`~suanli.errors.ConnectorError`) with a message
meant for the task's FAILED status.
"""
from __future__ import annotations

import asyncio
import errno
import logging
import os
import shutil
import threading
import time
import uuid
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote, urlparse
from urllib.request import url2pathname

from suanli.errors import ConnectorError
from suanli.processors.model import ModelRef

log = logging.getLogger("suanli.connectors.model_store")

MIB = 1 << 20
TEMP_PREFIX = ".partial-"         # a copy in progress (or a crash's leftover): never a model
SUFFIX = ".weights"


class ModelStoreError(ConnectorError):
    """A model's weights could not be made local (bad URI, missing source, wrong size, no room)."""


@dataclass(frozen=True, slots=True)
class LoadResult:
    """The outcome of one :meth:`ModelStore.ensure`.

    ``hit``: it was cached already; ``shared``: it waited for a copy another request started;
    ``bytes_copied``: what this ensure's copy wrote (0 for a hit; the shared copy's size for a
    waiter); ``seconds``: how long this caller waited."""

    model_arch: str
    path: Path
    hit: bool
    bytes_copied: int
    source: str
    seconds: float
    shared: bool = False

    def describe(self) -> str:
        """One line for a status message, e.g. ``model llama@2: copied 512 MiB from /m/llama in 1.40 s``."""
        if self.hit:
            return f"model {self.model_arch}: cache hit ({self.seconds * 1000:.1f} ms)"
        how = "waited for a copy of" if self.shared else "copied"
        return (f"model {self.model_arch}: {how} {self.bytes_copied / MIB:.0f} MiB from {self.source} "
                f"in {self.seconds:.2f} s")


@dataclass(slots=True)
class _Entry:
    path: Path
    size: int
    last_used: float        # wall seconds (the file's mtime), for LRU across restarts


def model_ref(model: ModelRef | Mapping[str, Any]) -> ModelRef:
    """A ModelRef from itself or from the Avro dict of one (DispatchCommand.model, a PrewarmCommand)."""
    if isinstance(model, ModelRef):
        return model
    return ModelRef(model_arch=str(model["model_arch"]), artifact_uri=str(model.get("artifact_uri") or ""),
                    size_mib=int(model.get("size_mib") or 0))


def source_path(uri: str) -> Path:
    """The local file an ``artifact_uri`` names: ``file:///abs/path``, ``file://localhost/...`` or an
    absolute path. Any other scheme or host, or a relative path, is refused."""
    if not uri:
        raise ModelStoreError("the model has no artifact_uri to copy it from")
    parsed = urlparse(uri)
    if parsed.scheme == "file":
        if parsed.netloc not in ("", "localhost"):
            raise ModelStoreError(f"artifact_uri {uri!r}: file:// on another host ({parsed.netloc}) cannot be read "
                                  "from this machine")
        return Path(url2pathname(unquote(parsed.path)))
    if parsed.scheme and len(parsed.scheme) > 1:        # (a one-letter 'scheme' would be a Windows drive)
        raise ModelStoreError(f"artifact_uri {uri!r}: scheme {parsed.scheme!r} is not supported by this "
                              "connector's model cache (only file:// and plain paths)")
    path = Path(uri)
    if not path.is_absolute():
        raise ModelStoreError(f"artifact_uri {uri!r} is a relative path: give an absolute path or a file:// URI")
    return path


def size_matches(size_bytes: int, size_mib: int) -> bool:
    """Whether a file of ``size_bytes`` is ``size_mib`` MiB (rounded either way); 0 declares nothing."""
    return size_mib <= 0 or abs(size_bytes - size_mib * MIB) < MIB


class _Cancelled(Exception):
    """A copy stopped by ``aclose`` (inside the copying thread)."""


class ModelStore:
    """The model cache of one node in ``root`` (created if missing); see the module docstring."""

    def __init__(self, root: Path | str, capacity_mib: int | None = None, *, chunk_mib: int = 16):
        if capacity_mib is not None and capacity_mib <= 0:
            raise ModelStoreError(f"model cache capacity must be > 0 MiB, not {capacity_mib}")
        self.root = Path(root)
        self.capacity_mib = capacity_mib
        self.chunk_bytes = max(1, chunk_mib) * MIB
        self.root.mkdir(parents=True, exist_ok=True)
        self._entries: dict[str, _Entry] = {}
        self._copies: dict[str, asyncio.Task[LoadResult]] = {}
        self._reserved: dict[str, int] = {}     # bytes of the copies in flight, counted against capacity
        self._pins: dict[str, int] = {}         # model arch -> running users (never evicted)
        self._stop = threading.Event()
        self.evictions = 0
        self._rebuild()

    # -- the index ------------------------------------------------------------------------
    def _rebuild(self) -> None:
        for item in self.root.iterdir():
            if item.name.startswith(TEMP_PREFIX):
                log.info("model cache %s: removing %s (a copy that never finished)", self.root, item.name)
                with suppress(OSError):
                    item.unlink()
                continue
            if not item.name.endswith(SUFFIX) or not item.is_file():
                continue
            st = item.stat()
            self._entries[self.arch_of(item.name)] = _Entry(item, st.st_size, st.st_mtime)

    @staticmethod
    def file_name(model_arch: str) -> str:
        """The cache file of a model arch (reversible: the index is rebuilt from names)."""
        return quote(model_arch, safe="@-_+=,") + SUFFIX

    @staticmethod
    def arch_of(file_name: str) -> str:
        return unquote(file_name[:-len(SUFFIX)])

    def cached(self) -> dict[str, int]:
        """Model arch -> cached bytes, least recently used first."""
        return {arch: e.size for arch, e in sorted(self._entries.items(), key=lambda kv: kv[1].last_used)}

    def path_of(self, model_arch: str) -> Path | None:
        entry = self._entries.get(model_arch)
        return entry.path if entry is not None else None

    def used_bytes(self) -> int:
        return sum(e.size for e in self._entries.values()) + sum(self._reserved.values())

    # -- ensure -----------------------------------------------------------------------------
    async def ensure(self, model: ModelRef | Mapping[str, Any]) -> LoadResult:
        """Make ``model``'s weights local (see the module docstring); ModelStoreError if they cannot be."""
        ref = model_ref(model)
        if not ref.model_arch:
            raise ModelStoreError("the model has no model_arch (the key of the cache)")
        started = time.monotonic()
        entry = self._entries.get(ref.model_arch)
        if entry is not None and ref.model_arch not in self._copies and self._still_there(ref.model_arch, entry):
            if size_matches(entry.size, ref.size_mib):
                self._touch(ref.model_arch, entry)
                return LoadResult(ref.model_arch, entry.path, True, 0, str(entry.path), time.monotonic() - started)
            log.warning("model cache %s: %s is cached with %d bytes but declared %d MiB: copying it again",
                        self.root, ref.model_arch, entry.size, ref.size_mib)
        copy = self._copies.get(ref.model_arch)
        shared = copy is not None
        if copy is None:
            copy = asyncio.create_task(self._copy(ref), name=f"model-copy-{ref.model_arch}")
            self._copies[ref.model_arch] = copy
            copy.add_done_callback(lambda task, arch=ref.model_arch: self._copy_done(arch, task))
        done = await asyncio.shield(copy)      # a waiter's cancellation leaves the copy to the others
        return LoadResult(done.model_arch, done.path, False, done.bytes_copied, done.source,
                          time.monotonic() - started, shared)

    def _still_there(self, model_arch: str, entry: _Entry) -> bool:
        """Whether an indexed file is still on disk with its size (else it leaves the index)."""
        try:
            if entry.path.stat().st_size == entry.size:
                return True
        except OSError:
            pass
        log.warning("model cache %s: %s vanished or changed on disk: copying it again", self.root, model_arch)
        del self._entries[model_arch]
        return False

    def _copy_done(self, model_arch: str, task: asyncio.Task[LoadResult]) -> None:
        self._copies.pop(model_arch, None)
        if not task.cancelled():
            task.exception()        # retrieved: a prewarm nobody awaits any more must not warn at exit

    @asynccontextmanager
    async def using(self, model: ModelRef | Mapping[str, Any]) -> AsyncIterator[LoadResult]:
        """``ensure`` the model and keep it from eviction until the block ends."""
        result = await self.ensure(model)
        # No await between the copy's end and the pin: nothing can evict it in between.
        self._pins[result.model_arch] = self._pins.get(result.model_arch, 0) + 1
        try:
            yield result
        finally:
            left = self._pins[result.model_arch] - 1
            if left:
                self._pins[result.model_arch] = left
            else:
                del self._pins[result.model_arch]

    def in_use(self, model_arch: str) -> bool:
        return model_arch in self._pins

    async def aclose(self) -> None:
        """Stop copies in flight (at their next chunk; their temporary files are removed)."""
        self._stop.set()
        await asyncio.gather(*self._copies.values(), return_exceptions=True)

    # -- the copy ---------------------------------------------------------------------------
    async def _copy(self, ref: ModelRef) -> LoadResult:
        started = time.monotonic()
        try:
            src = source_path(ref.artifact_uri)
        except ModelStoreError as exc:
            raise ModelStoreError(f"model {ref.model_arch}: {exc}") from None
        try:
            size = src.stat().st_size
        except FileNotFoundError:
            raise ModelStoreError(f"model {ref.model_arch}: artifact {ref.artifact_uri!r} not found") from None
        except OSError as exc:
            raise ModelStoreError(f"model {ref.model_arch}: cannot read {ref.artifact_uri!r}: {exc}") from None
        if not src.is_file():
            raise ModelStoreError(f"model {ref.model_arch}: artifact {ref.artifact_uri!r} is not a file")
        if not size_matches(size, ref.size_mib):
            raise ModelStoreError(f"model {ref.model_arch}: {ref.artifact_uri!r} has {size} bytes "
                                  f"({size / MIB:.1f} MiB), not the declared {ref.size_mib} MiB")
        stale = self._make_room(ref.model_arch, size)
        self._reserved[ref.model_arch] = size
        dest = self.root / self.file_name(ref.model_arch)
        try:
            copied = await asyncio.to_thread(self._copy_file, src, dest, size)
        except BaseException as exc:
            self._restore(ref.model_arch, stale)        # its file is untouched: the rename never happened
            if isinstance(exc, _Cancelled):
                raise ModelStoreError(f"model {ref.model_arch}: copy stopped (the connector is closing)") from None
            if isinstance(exc, OSError):
                raise ModelStoreError(f"model {ref.model_arch}: copying {ref.artifact_uri!r} failed: "
                                      f"{exc}") from None
            raise
        finally:
            self._reserved.pop(ref.model_arch, None)
        self._entries[ref.model_arch] = entry = _Entry(dest, copied, time.time())
        self._touch(ref.model_arch, entry)
        took = time.monotonic() - started
        log.info("model cache %s: copied %s (%.0f MiB) from %s in %.2f s", self.root, ref.model_arch,
                 copied / MIB, src, took)
        return LoadResult(ref.model_arch, dest, False, copied, str(src), took)

    def _copy_file(self, src: Path, dest: Path, size: int) -> int:
        """Copy ``src`` to ``dest`` through a temporary file (in a thread); the bytes copied."""
        tmp = dest.with_name(f"{TEMP_PREFIX}{uuid.uuid4().hex[:8]}-{dest.name}")
        try:
            with open(src, "rb") as fin, open(tmp, "xb") as fout:
                copied = self._copy_chunks(fin.fileno(), fout.fileno(), size)
                if copied != size or os.fstat(fin.fileno()).st_size != size:
                    raise ModelStoreError(f"{src} changed while it was copied ({size} bytes before, "
                                          f"{copied} copied)")
                fout.flush()
                os.fsync(fout.fileno())
            os.replace(tmp, dest)
        except BaseException:
            with suppress(OSError):
                tmp.unlink()
            raise
        dir_fd = os.open(self.root, os.O_RDONLY)
        try:
            os.fsync(dir_fd)        # the rename itself survives a crash
        finally:
            os.close(dir_fd)
        return copied

    def _copy_chunks(self, fin: int, fout: int, size: int) -> int:
        copied = 0
        use_sendfile = True
        buffer: bytearray | None = None
        while copied < size:
            if self._stop.is_set():
                raise _Cancelled()
            want = min(self.chunk_bytes, size - copied)
            if use_sendfile:
                try:
                    n = os.sendfile(fout, fin, copied, want)
                except OSError as exc:
                    if exc.errno not in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP) or copied:
                        raise
                    use_sendfile = False        # not for these files: the portable way
                    continue
            else:
                buffer = buffer if buffer is not None else bytearray(self.chunk_bytes)
                n = os.preadv(fin, [memoryview(buffer)[:want]], copied)
                view = memoryview(buffer)[:n]
                while view:
                    view = view[os.write(fout, view):]
            if n == 0:
                break                           # the source shrank: the caller's size check says so
            copied += n
        return copied

    def _make_room(self, model_arch: str, size: int) -> _Entry | None:
        """Evict LRU entries not in use until ``size`` more bytes fit; ModelStoreError if they cannot.
        Returns the entry this copy replaces (out of the index meanwhile), if any."""
        stale = self._entries.pop(model_arch, None)     # replaced by this copy (a size that disagreed)
        needed = size
        if self.capacity_mib is not None:
            capacity = self.capacity_mib * MIB
            if size > capacity:
                self._restore(model_arch, stale)
                raise ModelStoreError(f"model {model_arch} ({size / MIB:.0f} MiB) is larger than the model "
                                      f"cache ({self.capacity_mib} MiB)")
            for arch in list(self.cached()):
                if self.used_bytes() + needed <= capacity:
                    break
                if not self.in_use(arch):
                    self._evict(arch)
            if self.used_bytes() + needed > capacity:
                busy = sorted(a for a in self._entries if self.in_use(a))
                self._restore(model_arch, stale)
                raise ModelStoreError(f"model {model_arch} ({size / MIB:.0f} MiB) does not fit the model cache "
                                      f"({self.capacity_mib} MiB): {self.used_bytes() / MIB:.0f} MiB are held by "
                                      f"running tasks or copies ({', '.join(busy) or 'copies in flight'})")
        free = shutil.disk_usage(self.root).free
        if size > free:
            self._restore(model_arch, stale)
            raise ModelStoreError(f"model {model_arch} ({size / MIB:.0f} MiB) does not fit on the disk of "
                                  f"{self.root} ({free / MIB:.0f} MiB free)")
        return stale

    def _restore(self, model_arch: str, stale: _Entry | None) -> None:
        if stale is not None and stale.path.exists():
            self._entries[model_arch] = stale

    def _evict(self, model_arch: str) -> None:
        entry = self._entries.pop(model_arch)
        with suppress(FileNotFoundError):
            entry.path.unlink()
        self.evictions += 1
        log.info("model cache %s: evicted %s (%d MiB, least recently used)", self.root, model_arch,
                 entry.size // MIB)

    def _touch(self, model_arch: str, entry: _Entry) -> None:
        """Mark as used now, on disk too (the mtime is the LRU order after a restart)."""
        entry.last_used = max(time.time(), max((e.last_used for e in self._entries.values()), default=0) + 1e-6)
        with suppress(OSError):
            os.utime(entry.path, (entry.last_used, entry.last_used))
