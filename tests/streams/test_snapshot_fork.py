"""streams/snapshot_fork.py: snapshots serialised in a forked child, off the caller's loop."""
import os
import time

import pytest

from suanli.streams.snapshot_fork import ForkedSnapshots


def reap_until(forked: ForkedSnapshots, n: int = 1, limit_s: float = 30.0) -> list:
    """Reap until ``n`` results came (a condition, bounded by a generous limit)."""
    out: list = []
    deadline = time.monotonic() + limit_s
    while len(out) < n and time.monotonic() < deadline:
        out.extend(forked.reap())
        if len(out) < n:
            time.sleep(0.01)
    return out


def test_the_child_serialises_the_state_as_it_was_at_the_fork(tmp_path):
    state = {"value": b"before"}
    forked = ForkedSnapshots(tmp_path, lambda p: state["value"] + b"/%d" % p)
    assert forked.start(3, as_of=41)
    state["value"] = b"after"                     # the parent moves on; the child holds its copy
    [done] = reap_until(forked)
    assert (done.partition, done.as_of, done.blob, done.ok) == (3, 41, b"before/3", True)
    assert done.seconds > 0
    assert not list(tmp_path.glob("snapshot-p3.*"))     # the child's file is consumed
    assert forked.reap() == []                          # handed out once


def test_one_child_per_partition_at_a_time(tmp_path):
    r, w = os.pipe()

    def slow(p: int) -> bytes:
        os.read(r, 1)                              # blocks until the test lets it go
        return b"x"

    forked = ForkedSnapshots(tmp_path, slow)
    try:
        assert forked.start(0, as_of=1)
        assert forked.busy(0)
        assert not forked.start(0, as_of=2)        # still running: nothing started
        assert forked.reap() == []
        os.write(w, b"g")
        [done] = reap_until(forked)
        assert done.as_of == 1 and not forked.busy(0)
        assert forked.start(0, as_of=2)            # free again
        os.write(w, b"g")
        assert [d.as_of for d in reap_until(forked)] == [2]
    finally:
        forked.close()
        os.close(r)
        os.close(w)


def test_a_failing_child_is_reported_and_nothing_is_stored(tmp_path):
    def boom(p: int) -> bytes:
        raise RuntimeError("cannot serialise")

    forked = ForkedSnapshots(tmp_path, boom)
    forked.start(1, as_of=9)
    [done] = reap_until(forked)
    assert not done.ok and done.blob is None and done.as_of == 9


def test_a_partition_revoked_meanwhile_has_its_result_dropped(tmp_path):
    r, w = os.pipe()

    def gated(p: int) -> bytes:
        os.read(r, 1)
        return b"old"

    forked = ForkedSnapshots(tmp_path, gated)
    try:
        forked.start(2, as_of=5)
        forked.forget(2)                           # revoked while the child runs
        os.write(w, b"g")
        deadline = time.monotonic() + 30
        while forked.busy(2) and time.monotonic() < deadline:
            assert forked.reap() == []             # reaped, and dropped
            time.sleep(0.01)
        assert not forked.busy(2)
    finally:
        forked.close()
        os.close(r)
        os.close(w)


def test_close_stops_a_child_still_running(tmp_path):
    r, w = os.pipe()
    forked = ForkedSnapshots(tmp_path, lambda p: os.read(r, 1))
    forked.start(0, as_of=1)
    pid = forked.running[0].pid
    forked.close()
    with pytest.raises(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)                # killed and reaped already
    assert not forked.busy(0)
    os.close(r)
    os.close(w)


def test_without_fork_the_caller_serialises(tmp_path):
    calls = []
    forked = ForkedSnapshots(tmp_path, lambda p: calls.append(p) or b"s", fork=False)
    assert forked.start(4, as_of=7)
    assert calls == [4]                            # done in the caller, at once
    [done] = forked.reap()
    assert (done.partition, done.as_of, done.blob) == (4, 7, b"s")
