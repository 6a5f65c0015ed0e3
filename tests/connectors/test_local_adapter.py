"""The local-process connector without services: real processes, real exit codes and rusage."""
from __future__ import annotations

import asyncio
import sys
import time

import pytest

from connector_helpers import group_gone
from suanli.connectors.kit import TaskReporter
from suanli.connectors.local_process import LocalProcesses, cpu_count, read_meminfo
from suanli.errors import ConnectorError

PY = sys.executable


def _command(argv, i: str = "1", node_id: str = "test-node") -> dict:
    return {"dispatch_id": f"d{i}", "task_id": f"t{i}", "cell": "local", "node_id": node_id, "connector": "local",
            "cpu_milli": 1000, "memory_mib": 256, "gpu_devices": [], "gpu_milli": 0, "command": argv,
            "duration_estimate_ms": None}


async def _execute(adapter: LocalProcesses, command: dict, out: list[dict] | None = None) -> list[dict]:
    out = [] if out is None else out

    async def emit(payload: dict) -> None:
        out.append(payload)

    assert adapter.admit(command) is None
    await adapter.execute(command, TaskReporter(command, adapter.now_ms, emit))
    return out


@pytest.fixture()
def local() -> LocalProcesses:
    return LocalProcesses(cell="local", node_id="test-node", kill_grace_s=2.0)


def test_describes_this_machine(local):
    [node] = local.discover()
    assert node["node_id"] == "test-node" and node["connector"] == "local" and node["cell"] == "local"
    assert node["cpu_milli"] == cpu_count() * 1000 > 0
    assert node["memory_mib"] == read_meminfo()["MemTotal"] // 1024 > 0
    assert node["accelerators"] == [] and node["tier"] == "onprem"
    kinds = [k for k, _ in local.monitor(1_700_000_000_000, 5)]
    assert kinds == ["NodeHeartbeat", "NodeMetrics"]


def test_a_failing_command_reports_its_exit_code(local):
    events = asyncio.run(_execute(local, _command([PY, "-c", "import sys; print('bad input'); sys.exit(3)"])))
    assert [e["status"] for e in events] == ["RUNNING", "FAILED"]
    failed = events[1]
    assert failed["exit_code"] == 3 and failed["event_id"] == "d1:failed"
    assert failed["message"] == "exited with code 3; output: bad input"
    assert failed["usage"]["wall_ms"] >= 0 and failed["usage"]["cpu_seconds"] > 0


def test_a_successful_command_completes_with_its_usage(local):
    burn = "import time; b = bytearray(120 * 2**20); t = time.process_time()\nwhile time.process_time() - t < 0.3: pass"
    events = asyncio.run(_execute(local, _command([PY, "-c", burn])))
    assert [e["status"] for e in events] == ["RUNNING", "COMPLETED"]
    usage = events[1]["usage"]
    assert events[1]["exit_code"] == 0
    assert 0.3 <= usage["cpu_seconds"] < 5
    assert 120 <= usage["max_rss_mib"] < 400  # the command's own peak, not the connector's
    assert usage["wall_ms"] >= 300


def test_the_tasks_environment_reaches_the_process_and_cannot_replace_the_suanli_variables(local, tmp_path):
    out = tmp_path / "env.txt"
    show = ("import os, sys; names = ['GREETING', 'EMPTY', 'SUANLI_TASK_ID', 'HOME']\n"
            "open(sys.argv[1], 'w').write('\\n'.join(f'{n}={os.environ.get(n)}' for n in names))")
    command = {**_command([PY, "-c", show, str(out)], i="env"),
               "env": {"GREETING": "ni hao 算力", "EMPTY": "", "SUANLI_TASK_ID": "spoofed", "HOME": "/task/home"}}
    events = asyncio.run(_execute(local, command))
    assert [e["status"] for e in events] == ["RUNNING", "COMPLETED"]
    assert events[1]["exit_code"] == 0 and events[1]["message"] == "exited with code 0"
    assert out.read_text().splitlines() == ["GREETING=ni hao 算力", "EMPTY=", "SUANLI_TASK_ID=tenv", "HOME=/task/home"]


def test_a_job_members_process_gets_suanli_job_id(local):
    """Issue 22: SUANLI_JOB_ID for a member of a job (set last: the task's env cannot spoof it);
    a task of no job does not get one."""
    from suanli.connectors.local_process import LocalProcesses as Adapter

    base = {**_command(["true"], i="job"), "env": {"SUANLI_JOB_ID": "spoofed"}}
    assert Adapter.environment({**base, "job_id": "fl-round-7"})["SUANLI_JOB_ID"] == "fl-round-7"
    assert Adapter.environment({**_command(["true"], i="nojob"), "job_id": None}).get("SUANLI_JOB_ID") == \
        __import__("os").environ.get("SUANLI_JOB_ID")


def test_the_program_is_looked_up_on_the_tasks_path(local, tmp_path):
    tool = tmp_path / "bin" / "only-on-task-path"
    tool.parent.mkdir()
    tool.write_text(f"#!/bin/sh\necho found > {tmp_path / 'ran'}\n")
    tool.chmod(0o755)
    without = _command([tool.name], i="nopath")
    assert "not found" in local.admit(without)
    events = asyncio.run(_execute(local, {**without, "env": {"PATH": f"{tool.parent}:/usr/bin:/bin"}}))
    assert events[-1]["status"] == "COMPLETED" and (tmp_path / "ran").read_text() == "found\n"


def test_an_environment_no_process_can_have_is_refused(local):
    assert "environment variable name 'A=B'" in local.admit({**_command(["true"]), "env": {"A=B": "1"}})
    assert "may not contain NUL" in local.admit({**_command(["true"]), "env": {"A": "x\0y"}})


def test_small_commands_are_not_charged_the_connector_memory(local):
    ballast = bytearray(300 * 2**20)  # make this (the connector) process big
    ballast[::4096] = b"x" * len(ballast[::4096])
    events = asyncio.run(_execute(local, _command(["true"])))
    assert events[1]["status"] == "COMPLETED" and events[1]["usage"]["max_rss_mib"] < 64


def test_a_signal_is_a_negative_exit_code(local):
    events = asyncio.run(_execute(local, _command(["sh", "-c", "kill -9 $$"])))
    assert events[1]["status"] == "FAILED" and events[1]["exit_code"] == -9
    assert events[1]["message"].startswith("killed by SIGKILL")


def test_commands_that_cannot_run_are_refused(local):
    assert "has no command" in local.admit(_command(None))
    assert "has no command" in local.admit(_command([]))
    assert "not found" in local.admit(_command(["/no/such/binary-xyz"]))
    assert "is not this machine" in local.admit(_command(["true"], node_id="elsewhere"))
    with pytest.raises(ConnectorError):
        LocalProcesses(max_concurrent=0)


def test_cancelling_stops_the_whole_process_group(local):
    out: list[dict] = []

    async def scenario():
        run = asyncio.create_task(_execute(local, _command(["sh", "-c", "sleep 30 & sleep 30"]), out))
        while not out:
            await asyncio.sleep(0.02)
        started = time.monotonic()
        run.cancel()
        with pytest.raises(asyncio.CancelledError):
            await run
        return time.monotonic() - started

    took = asyncio.run(scenario())
    assert [e["status"] for e in out] == ["RUNNING"]  # the runner, not the adapter, reports the stop
    assert took < 3
    assert group_gone(int(out[0]["message"].split()[-1]))
    assert not local.pids


def test_a_term_ignoring_command_is_killed_after_the_grace_period():
    local = LocalProcesses(cell="local", node_id="test-node", kill_grace_s=0.5)
    out: list[dict] = []
    stubborn = [PY, "-c", "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(30)"]

    async def scenario():
        run = asyncio.create_task(_execute(local, _command(stubborn), out))
        await asyncio.sleep(0.8)  # long enough for the child to install its handler
        started = time.monotonic()
        run.cancel()
        with pytest.raises(asyncio.CancelledError):
            await run
        return time.monotonic() - started

    took = asyncio.run(scenario())
    assert 0.45 <= took < 3  # SIGTERM ignored, so it waited out the grace period, then SIGKILL
    assert group_gone(int(out[0]["message"].split()[-1]))


def test_at_most_max_concurrent_processes_run():
    local = LocalProcesses(cell="local", node_id="test-node", max_concurrent=1)
    out: list[dict] = []

    async def scenario():
        await asyncio.gather(*(_execute(local, _command([PY, "-c", "import time; time.sleep(0.2)"], str(i)), out)
                               for i in range(2)))

    asyncio.run(scenario())
    assert [(e["task_id"], e["status"]) for e in out] == [
        ("t0", "RUNNING"), ("t0", "COMPLETED"), ("t1", "RUNNING"), ("t1", "COMPLETED")]


def test_a_stop_kills_the_tasks_process_group_and_reports_it_stopped():
    local = LocalProcesses(cell="local", node_id="test-node", kill_grace_s=2.0, max_concurrent=1)
    out: list[dict] = []

    async def scenario():
        run = asyncio.create_task(_execute(local, _command(["sh", "-c", "sleep 30 & sleep 30"], "s"), out))
        queued = asyncio.create_task(_execute(local, _command(["sleep", "30"], "q"), out))   # waits for the slot
        while not out:
            await asyncio.sleep(0.02)
        assert await local.stop("tq", "test-node", "stale copy: the task is placed on n9")  # before it starts
        assert not await local.stop("ts", "another-node", "not here")
        assert not await local.stop("no-such-task", "test-node", "nothing")
        started = time.monotonic()
        assert await local.stop("ts", "test-node", "stale copy: the task is placed on n7")
        await asyncio.wait_for(asyncio.gather(run, queued), 10)
        await local.aclose()
        return time.monotonic() - started

    took = asyncio.run(scenario())
    assert took < 3
    by_task = {(e["task_id"], e["status"]): e for e in out}
    assert sorted(by_task) == [("tq", "FAILED"), ("ts", "FAILED"), ("ts", "RUNNING")]
    stopped = by_task[("ts", "FAILED")]
    assert stopped["message"].startswith("stopped by the scheduler: stale copy: the task is placed on n7; killed by SIGTERM")
    assert stopped["exit_code"] == -15 and stopped["usage"]["wall_ms"] >= 0
    assert by_task[("tq", "FAILED")]["message"] == \
        "stopped by the scheduler: stale copy: the task is placed on n9 (before it started)"
    assert group_gone(int(by_task[("ts", "RUNNING")]["message"].split()[-1]))
    assert not local.pids and not local._commands and not local._stoppers


# ---- model weights (C11): the node's model cache --------------------------------------------
SHOW_MODEL = ("import hashlib, os, sys\n"
              "path = os.environ['SUANLI_MODEL_PATH']\n"
              "digest = hashlib.sha256(open(path, 'rb').read()).hexdigest()\n"
              "open(sys.argv[1], 'w').write(f\"{os.environ['SUANLI_MODEL_ARCH']} {path} {digest}\")")


def _weights(tmp_path, name: str = "llama.bin", size: int = 2 * 2**20):
    import hashlib
    import os
    origin = tmp_path / "origin" / name
    origin.parent.mkdir(exist_ok=True)
    origin.write_bytes(os.urandom(size))
    return origin, hashlib.sha256(origin.read_bytes()).hexdigest()


def _with_model(command: dict, origin, arch: str = "llama-3-8b@2", size_mib: int = 0) -> dict:
    return {**command, "model": {"model_arch": arch, "artifact_uri": origin.as_uri(), "size_mib": size_mib}}


def test_a_task_with_a_model_starts_on_its_cached_weights_and_the_next_one_hits(tmp_path):
    local = LocalProcesses(cell="local", node_id="test-node", model_cache=tmp_path / "cache")
    origin, digest = _weights(tmp_path)
    seen = [tmp_path / "first.txt", tmp_path / "second.txt"]

    async def scenario():
        out: list[dict] = []
        for i, where in enumerate(seen):
            await _execute(local, _with_model(_command([PY, "-c", SHOW_MODEL, str(where)], f"m{i}"), origin,
                                              size_mib=2), out)
        await local.aclose()
        return out

    events = asyncio.run(scenario())
    assert [(e["task_id"], e["status"]) for e in events] == [
        ("tm0", "RUNNING"), ("tm0", "COMPLETED"), ("tm1", "RUNNING"), ("tm1", "COMPLETED")]
    cached = tmp_path / "cache" / "llama-3-8b@2.weights"
    for where in seen:       # the process read the cached copy, not the origin, and it is complete
        assert where.read_text() == f"llama-3-8b@2 {cached} {digest}"
    first, second = events[0]["message"], events[2]["message"]
    assert first.startswith(f"model llama-3-8b@2: copied 2 MiB from {origin} in ") and "; process group " in first
    assert second.startswith("model llama-3-8b@2: cache hit (") and "; process group " in second
    store = local.model_store()
    assert store.cached() == {"llama-3-8b@2": 2 * 2**20} and not store.in_use("llama-3-8b@2")


def test_a_model_that_cannot_be_loaded_fails_the_task_before_it_starts(tmp_path):
    local = LocalProcesses(cell="local", node_id="test-node", model_cache=tmp_path / "cache")
    marker = tmp_path / "ran"
    argv = ["sh", "-c", f"touch {marker}"]
    missing = _with_model(_command(argv, "missing"), tmp_path / "no-such-weights.bin")
    remote = {**_command(argv, "remote"), "model": {"model_arch": "m", "artifact_uri": "s3://b/m.bin", "size_mib": 0}}

    async def scenario():
        out: list[dict] = []
        for command in (missing, remote):
            await _execute(local, command, out)
        return out

    events = asyncio.run(scenario())
    assert [(e["task_id"], e["status"], e["exit_code"]) for e in events] == [
        ("tmissing", "FAILED", None), ("tremote", "FAILED", None)]
    assert events[0]["message"] == (f"cannot start the task: model llama-3-8b@2: artifact "
                                    f"{(tmp_path / 'no-such-weights.bin').as_uri()!r} not found")
    assert events[1]["message"].startswith("cannot start the task: model m: artifact_uri 's3://b/m.bin': scheme 's3'")
    assert not marker.exists() and not local._commands


def test_a_stop_while_the_model_is_copied_fails_the_task_at_once_and_the_copy_goes_on(tmp_path):
    import threading

    from suanli.connectors.model_store import ModelStore

    class SlowStore(ModelStore):
        """Its copy waits (in its thread) until ``resume`` is set."""
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.copying, self.resume = threading.Event(), threading.Event()

        def _copy_file(self, src, dest, size):
            self.copying.set()
            self.resume.wait(30)
            return super()._copy_file(src, dest, size)

    local = LocalProcesses(cell="local", node_id="test-node", model_cache=tmp_path / "cache")
    local._store = store = SlowStore(tmp_path / "cache")
    origin, _ = _weights(tmp_path)
    marker = tmp_path / "ran"

    async def scenario():
        out: list[dict] = []
        run = asyncio.create_task(_execute(local, _with_model(_command(["sh", "-c", f"touch {marker}"], "w"), origin),
                                           out))
        await asyncio.to_thread(store.copying.wait, 30)
        assert await local.stop("tw", "test-node", "preempted by t9")
        await asyncio.wait_for(run, 10)         # ended while the copy still waits
        assert store.path_of("llama-3-8b@2") is None
        store.resume.set()
        later = await store.ensure({"model_arch": "llama-3-8b@2", "artifact_uri": origin.as_uri(), "size_mib": 0})
        return out, later

    events, later = asyncio.run(scenario())
    assert [(e["status"], e["exit_code"], e["message"]) for e in events] == [
        ("FAILED", None, "stopped by the scheduler: preempted by t9 (while its model was loading)")]
    assert not marker.exists()
    assert later.shared and later.path.read_bytes() == origin.read_bytes()   # the one copy finished for others


def test_a_prewarm_copies_the_model_so_the_task_hits(tmp_path):
    local = LocalProcesses(cell="local", node_id="test-node", model_cache=tmp_path / "cache")
    origin, digest = _weights(tmp_path)
    prewarm = {"event_id": "pw1", "node_id": "test-node", "cell": "local", "model_arch": "llama-3-8b@2",
               "artifact_uri": origin.as_uri(), "size_mib": 2, "at": 1, "reason": "expected demand"}
    where = tmp_path / "seen.txt"

    async def scenario():
        await local.prewarm({**prewarm, "node_id": "another-node"})     # not this node: ignored
        assert local.model_store().cached() == {}
        await local.prewarm(prewarm)
        return await _execute(local, _with_model(_command([PY, "-c", SHOW_MODEL, str(where)], "p"), origin))

    events = asyncio.run(scenario())
    assert events[0]["message"].startswith("model llama-3-8b@2: cache hit")
    assert events[1]["status"] == "COMPLETED" and where.read_text().endswith(digest)
