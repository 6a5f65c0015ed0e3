"""Snapshots serialised off the event loop, in a forked child.

A scheduler partition's snapshot is the JSON of its whole cell state: hundreds of ms for a
cell of thousands of nodes and tasks. Written on the event loop, every input that arrived
meanwhile waited that long (the urgent tier's p99 was the snapshot's stall: issue 14, and the
plane's E2E p99 at low load: issue 16).

:class:`ForkedSnapshots` forks the worker instead. The child holds a copy-on-write image of
the state *as it is at the fork*, so what it serialises is exactly the state after the input
at ``as_of``, however far the parent has moved on meanwhile; it writes the bytes to a file
and exits. The parent reaps finished children without blocking (:meth:`ForkedSnapshots.reap`,
called after each micro-batch and by a timer) and stores the blob then. The loop pays for the
fork (page tables: a few ms for a few hundred MiB) and for storing the blob, not for the JSON.

Contract:

- at most one child per partition at a time (:meth:`start` says False while one runs);
- a child's result is returned once, with the ``as_of`` and the generation it was started
  with: a partition revoked meanwhile (:meth:`forget`) has its result dropped, because its
  new owner may have stored a newer snapshot since;
- a child that fails (non-zero exit, killed) is reported (``ok`` False), nothing is stored,
  and the next due snapshot tries again; the log stays the source of truth either way;
- where ``os.fork`` does not exist, :meth:`start` serialises in the caller (the old way).

The child never returns into the worker's code: it resets the signal handling the parent's
event loop installed (so a signal to it cannot wake the parent's loop through the shared
wake-up pipe) and leaves with ``os._exit``, running no atexit hook, no destructor and no
flush of buffers it inherited.
"""
from __future__ import annotations

import logging
import os
import signal
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

log = logging.getLogger("suanli.streams")

FORK = hasattr(os, "fork")


@dataclass(frozen=True, slots=True)
class SnapshotResult:
    """One finished snapshot: its partition, the log offset it is as of, the bytes (None when
    the child failed) and the wall seconds the serialisation took."""
    partition: int
    as_of: int
    blob: bytes | None
    seconds: float

    @property
    def ok(self) -> bool:
        return self.blob is not None


@dataclass(frozen=True, slots=True)
class _Running:
    pid: int
    as_of: int
    generation: int
    path: Path
    started: float


class ForkedSnapshots:
    """Serialise partitions' snapshots in forked children (see the module docstring).

    ``serialise(partition) -> bytes`` runs in the child; ``directory`` holds the children's
    files (one per partition, replaced atomically)."""

    def __init__(self, directory: Path, serialise: Callable[[int], bytes], fork: bool = FORK):
        self.directory = directory
        self.serialise = serialise
        self.fork = fork
        self.running: dict[int, _Running] = {}
        self.generation: dict[int, int] = {}
        self.done: list[SnapshotResult] = []           # results of the no-fork path, handed out by reap

    def busy(self, partition: int) -> bool:
        return partition in self.running

    def start(self, partition: int, as_of: int) -> bool:
        """Begin a snapshot of ``partition`` as it is now (as of ``as_of``). False when one is
        still running for it (nothing started)."""
        if partition in self.running:
            return False
        if not self.fork:
            t0 = time.perf_counter()
            blob = self.serialise(partition)
            self.done.append(SnapshotResult(partition, as_of, blob, time.perf_counter() - t0))
            return True
        self.directory.mkdir(parents=True, exist_ok=True)
        path = self.directory / f"snapshot-p{partition}.bin"
        started = time.perf_counter()
        pid = os.fork()
        if pid == 0:                                   # the child: serialise, write, leave
            _child(self.serialise, partition, path)
        self.running[partition] = _Running(pid, as_of, self.generation.get(partition, 0), path, started)
        return True

    def forget(self, partition: int) -> None:
        """The partition was revoked: a snapshot of it still running is not stored."""
        self.generation[partition] = self.generation.get(partition, 0) + 1

    def reap(self) -> list[SnapshotResult]:
        """The snapshots finished since the last call (never blocks), in partition order,
        without those of partitions forgotten since they started."""
        out, self.done = self.done, []
        for partition in sorted(self.running):
            run = self.running[partition]
            pid, status = os.waitpid(run.pid, os.WNOHANG)
            if pid == 0:
                continue                               # still serialising
            del self.running[partition]
            seconds = time.perf_counter() - run.started
            blob = None
            if os.waitstatus_to_exitcode(status) == 0:
                blob = run.path.read_bytes()
            else:
                log.warning("scheduler: the snapshot of partition %s failed in its child (exit %s); "
                            "the next one is tried when due", partition, os.waitstatus_to_exitcode(status))
            run.path.unlink(missing_ok=True)
            if run.generation != self.generation.get(partition, 0):
                continue                               # revoked meanwhile: not ours to store
            out.append(SnapshotResult(partition, run.as_of, blob, seconds))
        return out

    def close(self) -> None:
        """Stop every child still running (the worker is going away) and reap it."""
        for run in self.running.values():
            try:
                os.kill(run.pid, signal.SIGKILL)
                os.waitpid(run.pid, 0)
            except (ProcessLookupError, ChildProcessError):
                pass
            run.path.unlink(missing_ok=True)
        self.running.clear()


def _child(serialise: Callable[[int], bytes], partition: int, path: Path) -> None:
    """The forked child's whole life: it never returns."""
    code = 1
    try:
        try:
            signal.set_wakeup_fd(-1)                   # the parent loop's pipe is not ours
            for sig in (signal.SIGINT, signal.SIGTERM):
                signal.signal(sig, signal.SIG_DFL)
        except ValueError:                             # forked from another thread than the main one
            pass
        blob = serialise(partition)
        tmp = path.with_suffix(".tmp")
        with open(tmp, "wb") as f:
            f.write(blob)
        os.replace(tmp, path)
        code = 0
    except BaseException:                              # noqa: BLE001 - reported, then the exit code says it
        try:
            sys.stderr.write(traceback.format_exc())
            sys.stderr.flush()
        except BaseException:                          # noqa: BLE001
            pass
    finally:
        os._exit(code)
