"""The node model cache (connectors/model_store.py) on real small files in tmp_path."""
from __future__ import annotations

import asyncio
import os
import threading
from pathlib import Path

import pytest

from suanli.connectors.model_store import MIB, TEMP_PREFIX, ModelStore, ModelStoreError, source_path
from suanli.errors import ConnectorError
from suanli.processors.model import ModelRef


def _origin(tmp_path: Path, name: str, size: int = MIB) -> Path:
    path = tmp_path / "origin" / name
    path.parent.mkdir(exist_ok=True)
    path.write_bytes(os.urandom(size))
    return path


def _model(path: Path, arch: str | None = None, size_mib: int = 0) -> ModelRef:
    return ModelRef(model_arch=arch or path.stem, artifact_uri=path.as_uri(), size_mib=size_mib)


class CountingStore(ModelStore):
    """Counts the copies it makes (each one is a thread reading the origin)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.copies: list[Path] = []

    def _copy_file(self, src: Path, dest: Path, size: int) -> int:
        self.copies.append(src)
        return super()._copy_file(src, dest, size)


def test_a_miss_copies_the_weights_and_the_next_ensure_is_a_hit(tmp_path):
    src = _origin(tmp_path, "llama", 3 * MIB + 5)
    store = ModelStore(tmp_path / "cache")

    async def scenario():
        return await store.ensure(_model(src, "llama-3-8b@2", 3)), await store.ensure(_model(src, "llama-3-8b@2"))

    miss, hit = asyncio.run(scenario())
    assert (miss.hit, miss.bytes_copied, miss.source, miss.shared) == (False, 3 * MIB + 5, str(src), False)
    assert miss.path.parent == tmp_path / "cache" and miss.path.read_bytes() == src.read_bytes()
    assert miss.describe().startswith("model llama-3-8b@2: copied 3 MiB from ")
    assert (hit.hit, hit.bytes_copied, hit.path) == (True, 0, miss.path)
    assert "cache hit" in hit.describe()
    assert store.cached() == {"llama-3-8b@2": 3 * MIB + 5}


def test_a_plain_path_and_a_dict_from_the_wire_work_too(tmp_path):
    src = _origin(tmp_path, "m")
    store = ModelStore(tmp_path / "cache")
    result = asyncio.run(store.ensure({"model_arch": "org/m@1", "artifact_uri": str(src), "size_mib": 1}))
    assert result.path.read_bytes() == src.read_bytes() and store.path_of("org/m@1") == result.path
    assert result.path.parent == tmp_path / "cache"        # a '/' in the arch does not make a directory


def test_concurrent_requests_for_one_model_share_one_copy(tmp_path):
    src = _origin(tmp_path, "shared", 4 * MIB)
    store = CountingStore(tmp_path / "cache", chunk_mib=1)

    async def scenario():
        return await asyncio.gather(*(store.ensure(_model(src)) for _ in range(5)))

    results = asyncio.run(scenario())
    assert store.copies == [src]
    assert sorted(r.shared for r in results) == [False, True, True, True, True]
    assert all(not r.hit and r.bytes_copied == 4 * MIB and r.path.read_bytes() == src.read_bytes() for r in results)


def test_a_cancelled_waiter_does_not_cancel_the_copy_the_others_wait_for(tmp_path):
    src = _origin(tmp_path, "m", 2 * MIB)
    store = CountingStore(tmp_path / "cache", chunk_mib=1)

    async def scenario():
        first = asyncio.create_task(store.ensure(_model(src)))
        second = asyncio.create_task(store.ensure(_model(src)))
        await asyncio.sleep(0)          # both are waiting for the one copy
        first.cancel()
        return await second, first

    result, first = asyncio.run(scenario())
    assert first.cancelled() and store.copies == [src]
    assert result.path.read_bytes() == src.read_bytes()


class PausingStore(ModelStore):
    """Stops in the middle of its copy until ``resume`` is set (after ``paused`` is)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.paused, self.resume = threading.Event(), threading.Event()

    def _copy_chunks(self, fin: int, fout: int, size: int) -> int:
        os.sendfile(fout, fin, 0, MIB)              # the first MiB is written ...
        self.paused.set()
        self.resume.wait(30)
        raise OSError(28, "No space left on device")   # ... then the copy dies


def test_a_copy_in_progress_is_never_taken_for_a_complete_file(tmp_path):
    src = _origin(tmp_path, "big", 3 * MIB)
    cache = tmp_path / "cache"
    store = PausingStore(cache)
    seen: dict[str, object] = {}

    async def scenario():
        copy = asyncio.create_task(store.ensure(_model(src, "big@1")))
        await asyncio.to_thread(store.paused.wait, 30)
        seen["files"] = sorted(p.name for p in cache.iterdir())
        seen["restarted"] = ModelStore(cache).cached()   # a restart now (a crash mid-copy) sees no model
        store.resume.set()
        with pytest.raises(ModelStoreError, match="copying .* failed: .*No space left"):
            await copy

    asyncio.run(scenario())
    [partial] = seen["files"]
    assert partial.startswith(TEMP_PREFIX) and seen["restarted"] == {}
    assert list(cache.iterdir()) == [] and store.cached() == {}     # the failed copy left nothing


def test_a_temporary_file_left_by_a_crash_is_ignored_and_removed(tmp_path):
    cache = tmp_path / "cache"
    cache.mkdir()
    src = _origin(tmp_path, "m")
    leftover = cache / f"{TEMP_PREFIX}0123abcd-{ModelStore.file_name('m')}"
    leftover.write_bytes(src.read_bytes())       # even a temp file of the right size is not a model
    store = ModelStore(cache)
    assert store.cached() == {} and not leftover.exists()
    assert not asyncio.run(store.ensure(_model(src))).hit


def test_a_size_other_than_the_declared_one_is_refused_and_nothing_is_cached(tmp_path):
    src = _origin(tmp_path, "m", 2 * MIB)
    store = ModelStore(tmp_path / "cache")
    with pytest.raises(ModelStoreError, match=r"has 2097152 bytes \(2.0 MiB\), not the declared 5 MiB"):
        asyncio.run(store.ensure(_model(src, size_mib=5)))
    assert store.cached() == {} and list((tmp_path / "cache").iterdir()) == []


def test_a_cached_file_of_another_size_than_declared_is_copied_again(tmp_path):
    store = CountingStore(tmp_path / "cache")
    old = _origin(tmp_path, "v1", MIB)
    asyncio.run(store.ensure(_model(old, "m")))
    new = _origin(tmp_path, "v2", 2 * MIB)          # the same arch, declared with the new size
    result = asyncio.run(store.ensure(_model(new, "m", size_mib=2)))
    assert not result.hit and store.copies == [old, new] and result.path.read_bytes() == new.read_bytes()


def test_least_recently_used_models_are_evicted_to_fit_the_capacity(tmp_path):
    srcs = {name: _origin(tmp_path, name) for name in "abcd"}
    store = ModelStore(tmp_path / "cache", capacity_mib=3)

    async def scenario():
        for name in "abc":
            await store.ensure(_model(srcs[name]))
        assert (await store.ensure(_model(srcs["a"]))).hit      # a is now the most recently used
        await store.ensure(_model(srcs["d"]))

    asyncio.run(scenario())
    assert list(store.cached()) == ["c", "a", "d"] and store.evictions == 1
    assert sorted(p.name for p in (tmp_path / "cache").iterdir()) == ["a.weights", "c.weights", "d.weights"]


def test_a_model_in_use_is_never_evicted(tmp_path):
    srcs = {name: _origin(tmp_path, name) for name in "abc"}
    store = ModelStore(tmp_path / "cache", capacity_mib=2)

    async def scenario():
        async with store.using(_model(srcs["a"])):              # a running task holds a (the LRU one)
            await store.ensure(_model(srcs["b"]))
            await store.ensure(_model(srcs["c"]))                # evicts b, not a
            assert list(store.cached()) == ["a", "c"]
            async with store.using(_model(srcs["c"])):
                with pytest.raises(ModelStoreError, match=r"does not fit the model cache \(2 MiB\).*a, c"):
                    await store.ensure(_model(srcs["b"]))       # both held: nothing may go
        assert not store.in_use("a") and not store.in_use("c")
        await store.ensure(_model(srcs["b"]))                    # released: a (LRU) can go now

    asyncio.run(scenario())
    assert list(store.cached()) == ["c", "b"]


def test_a_model_larger_than_the_cache_is_refused(tmp_path):
    src = _origin(tmp_path, "huge", 3 * MIB)
    store = ModelStore(tmp_path / "cache", capacity_mib=2)
    with pytest.raises(ModelStoreError, match=r"larger than the model cache \(2 MiB\)"):
        asyncio.run(store.ensure(_model(src)))
    with pytest.raises(ModelStoreError, match="capacity must be > 0"):
        ModelStore(tmp_path / "other", capacity_mib=0)


@pytest.mark.parametrize("uri, error", [
    ("s3://bucket/llama.bin", "scheme 's3' is not supported .*only file:// and plain paths"),
    ("https://example.com/llama.bin", "scheme 'https' is not supported"),
    ("file://otherhost/models/llama.bin", "another host"),
    ("models/llama.bin", "relative path"),
    ("", "no artifact_uri"),
])
def test_artifact_uris_other_than_local_files_are_refused_clearly(tmp_path, uri, error):
    store = ModelStore(tmp_path / "cache")
    with pytest.raises(ModelStoreError, match=f"model m@1: .*{error}") as caught:
        asyncio.run(store.ensure(ModelRef(model_arch="m@1", artifact_uri=uri)))
    assert isinstance(caught.value, ConnectorError)


def test_a_missing_artifact_is_a_clear_error(tmp_path):
    store = ModelStore(tmp_path / "cache")
    with pytest.raises(ModelStoreError, match=r"model m@1: artifact '.*/nowhere.bin' not found"):
        asyncio.run(store.ensure(ModelRef(model_arch="m@1", artifact_uri=(tmp_path / "nowhere.bin").as_uri())))


def test_file_uris_and_plain_paths_name_local_files():
    assert source_path("file:///models/llama%203.bin") == Path("/models/llama 3.bin")
    assert source_path("file://localhost/models/a.bin") == Path("/models/a.bin")
    assert source_path("/models/a.bin") == Path("/models/a.bin")


def test_the_index_is_rebuilt_from_the_directory_after_a_restart(tmp_path):
    srcs = {name: _origin(tmp_path, name) for name in "abc"}
    cache = tmp_path / "cache"

    async def first_life():
        store = ModelStore(cache, capacity_mib=3)
        for name in "abc":
            await store.ensure(_model(srcs[name], f"org/{name}@1"))
        await store.ensure(_model(srcs["a"], "org/a@1"))         # a used last

    asyncio.run(first_life())
    restarted = CountingStore(cache, capacity_mib=3)
    assert list(restarted.cached()) == ["org/b@1", "org/c@1", "org/a@1"]      # the LRU order survives too
    hit = asyncio.run(restarted.ensure(_model(srcs["a"], "org/a@1")))
    assert hit.hit and restarted.copies == [] and hit.path.read_bytes() == srcs["a"].read_bytes()


def test_a_cached_file_removed_behind_the_stores_back_is_copied_again(tmp_path):
    src = _origin(tmp_path, "m")
    store = CountingStore(tmp_path / "cache")
    first = asyncio.run(store.ensure(_model(src)))
    first.path.unlink()
    again = asyncio.run(store.ensure(_model(src)))
    assert not again.hit and store.copies == [src, src] and again.path.read_bytes() == src.read_bytes()
