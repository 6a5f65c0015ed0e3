"""The 'local' connector: runs each DispatchCommand's ``command`` as a real process on this machine.

The machine registers as one node (CPU count from the affinity mask, memory from
``/proc/meminfo``, no accelerators, tier ``onprem``). A command runs without a shell, argv as
given, in a new session (so the whole process group can be stopped). Its environment is the
connector's, plus the task's ``env`` (from its submission, carried by the DispatchCommand;
it overrides the connector's variables, ``PATH`` included, which is also where the program
is looked up), plus ``SUANLI_TASK_ID``, ``SUANLI_DISPATCH_ID``, ``SUANLI_CPU_MILLI``,
``SUANLI_MEMORY_MIB`` and, for a member of a job (the submission's ``job``), ``SUANLI_JOB_ID``
(set last: a task cannot change them). stdin is /dev/null;
stdout+stderr go into a temporary file whose tail goes into the FAILED message.

Usage comes from ``os.wait4`` on the command: ``cpu_seconds`` = user + system time
(including descendants it waited for), ``max_rss_mib`` = peak RSS, ``wall_ms``. Linux
charges a child, at exec, with the RSS high-water mark of the process it was forked from, so
waiting for the command directly from this (large) connector process would report the
connector's RSS for every small task. Hence ``asyncio.create_subprocess_exec`` starts a tiny
trampoline (``python -S -I``, about 8 MiB: the floor of ``max_rss_mib``) that spawns the
command, ``wait4``s it and writes the exit status and rusage to a pipe.

Outcomes: exit 0 -> COMPLETED with exit code 0 ("exited with code 0"); non-zero -> FAILED
with that exit code; killed by a signal -> FAILED with the negative signal number; cannot exec
-> FAILED with 127 (not found) or 126. The core releases the task's resources on the terminal
status (TaskReleased). A command that is missing, empty, names an executable not on the
(task's) PATH, carries an environment no process can have, or targets another node is
refused in its DispatchAck. At most ``max_concurrent`` processes run at once; the rest
wait (accepted) for a slot. Resource limits (cpu_milli, memory_mib) are not enforced.

Stop (a StopCommand for a task on this node, see ``kit.py``): the task's process group gets
SIGTERM, then SIGKILL after the grace: the StopCommand's ``grace_ms`` when it carries one
(0: SIGKILL right after SIGTERM), else ``kill_grace_s``. The dispatch reports FAILED
"stopped by the scheduler: <reason>; killed by SIGTERM" (it obeyed), "...; exited with code
N" (it handled SIGTERM and exited within the grace) or "...; killed by SIGKILL (SIGTERM not
obeyed within the G s grace)", with the exit code and usage of what ran; a process that
exits 0 within its grace has finished its work and reports COMPLETED. A stopped task still
waiting for a slot never starts (FAILED, stopped, no exit code); one stopped while its
process is being started is stopped as soon as the process exists.

Model weights (C11, issue 20): a DispatchCommand whose ``model`` is set (``model_arch``,
``artifact_uri``, ``size_mib``: the task's profile) starts its process only once the weights
are in this node's model cache (``connectors/model_store.py``): a cache directory
(``model_cache``; default ``<home>/connectors/<name>/models``, ``home`` from the settings)
holding at most ``model_cache_mib`` MiB (default None: as much as the disk holds), least
recently used models evicted first, never one a running task uses. A cached model is a hit;
otherwise the file at ``artifact_uri`` (``file://`` or an absolute path) is copied in (in a
thread: heartbeats go on meanwhile; atomically: a file under its final name is complete), and
dispatches or prewarms of a model being copied wait for that one copy. The model is ensured
before the task waits for a process slot and stays pinned until its process has ended. The
process gets ``SUANLI_MODEL_PATH`` (the cached file, to be read, not written) and
``SUANLI_MODEL_ARCH``, set with the other SUANLI_* variables; the RUNNING message says how
the model came, e.g. ``model llama@2: cache hit (0.1 ms); process group 4242`` or ``model
llama@2: copied 512 MiB from /models/llama.bin in 1.32 s; process group 4242`` (the process
group stays last). A model that cannot be loaded (missing file, unsupported scheme, a size
other than ``size_mib``, no room in the cache) fails the task: FAILED, no exit code,
"cannot start the task: model <arch>: <why>". A stop while the model is loading fails the
task at once (the copy goes on and stays cached). A PrewarmCommand for this node
(``prewarm``) ensures its model the same way, with nobody waiting; one for another node is
ignored. The acceptance figure (cold start vs. warmed node): ``bench/prewarm_copy.py``.

Telemetry: with ``prometheus`` (a Prometheus URL; default ``SUANLI_LOCAL_PROMETHEUS``) the
node's NodeMetrics are the latest sample of the series that Prometheus scraped from
``prometheus_node`` (a selector of ``connectors/prometheus_source.py``; default
``127.0.0.1``: node_exporter and any DCGM exporter scraped on loopback), refreshed in the
background, with ``running_processes`` added to ``extended``. When that sample is missing or
older than 30 s (Prometheus down, node_exporter not scraped), /proc is read as without it.
"""
from __future__ import annotations

import asyncio
import errno
import json
import logging
import math
import os
import platform
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from contextlib import AsyncExitStack, suppress
from pathlib import Path
from typing import Any

from suanli.connectors.kit import Adapter, TaskReporter, stopped_message
from suanli.connectors.model_store import LoadResult, ModelStore, ModelStoreError, model_ref
from suanli.errors import ConnectorError
from suanli.schemas.models import env_problem

# Runs (as ``python -S -I -c``) between the connector and the command: it spawns the command,
# waits for it with wait4 and writes ``{status, utime, stime, maxrss_kib, wall_ms}`` as JSON
# to the fd named by argv[1]. It ignores SIGTERM/SIGINT (the command gets them with default
# handling via setsigdef) so that a stop request reaches the command and the report is kept.
TRAMPOLINE = """\
import json, os, signal, sys, time
fd = int(sys.argv[1]); argv = sys.argv[2:]
os.set_inheritable(fd, False)
for s in (signal.SIGTERM, signal.SIGINT):
    signal.signal(s, signal.SIG_IGN)
t0 = time.monotonic()
try:
    pid = os.posix_spawnp(argv[0], argv, os.environ, setsigdef=(signal.SIGTERM, signal.SIGINT))
except OSError as e:
    os.write(fd, json.dumps({"error": e.strerror or str(e), "errno": e.errno}).encode()); sys.exit(127)
_, status, ru = os.wait4(pid, 0)
os.write(fd, json.dumps({"status": status, "utime": ru.ru_utime, "stime": ru.ru_stime,
                         "maxrss_kib": ru.ru_maxrss, "wall_ms": int((time.monotonic() - t0) * 1000)}).encode())
"""

log = logging.getLogger("suanli.connectors.local")

ARCH = {"x86_64": "x86_64", "amd64": "x86_64", "aarch64": "arm64", "arm64": "arm64", "riscv64": "riscv64"}


def read_meminfo(path: str = "/proc/meminfo") -> dict[str, int]:
    """``/proc/meminfo`` as ``{field: kB}``."""
    out = {}
    with open(path) as f:
        for line in f:
            name, _, rest = line.partition(":")
            parts = rest.split()
            if parts and parts[0].isdigit():
                out[name] = int(parts[0])
    return out


def cpu_count() -> int:
    """CPUs this process may run on (the affinity mask, which containers narrow)."""
    return len(os.sched_getaffinity(0))


def describe_machine(node_id: str, cell: str, connector: str = "local", *, site: str = "local",
                     tier: str = "onprem", model_cache_mib: int = 0) -> dict[str, Any]:
    """The NodeRegistered payload (without ``registered_at``) of this machine; ``site`` is
    its region and zone too; ``model_cache_mib``: what its model cache may hold (0: none)."""
    host = socket.gethostname()
    return {"event_id": f"{connector}/{node_id}/registered", "node_id": node_id, "cell": cell,
            "site": site, "region": site, "zone": site, "tier": tier, "model_cache_mib": model_cache_mib,
            "arch": ARCH.get(platform.machine().lower(), "other"), "cpu_milli": cpu_count() * 1000,
            "memory_mib": read_meminfo()["MemTotal"] // 1024, "accelerators": [], "pricing": "ON_DEMAND",
            "price_per_hour": 0.0, "pue": 1.0, "carbon_g_per_kwh": 0.0, "connector": connector,
            "labels": {"hostname": host, "os": platform.system().lower(), "kernel": platform.release()}}


def _cpu_times() -> tuple[int, int]:
    """(busy, total) jiffies of all CPUs from /proc/stat."""
    with open("/proc/stat") as f:
        values = [int(v) for v in f.readline().split()[1:]]
    idle = values[3] + (values[4] if len(values) > 4 else 0)  # idle + iowait
    total = sum(values[:8])  # guest time is already counted in user
    return total - idle, total


def exit_message(code: int, tail: str) -> str:
    """Human-readable outcome of an exit code (negative: the signal that killed it)."""
    if code < 0:
        with suppress(ValueError):
            what = f"killed by {signal.Signals(-code).name}"
            return f"{what}; output: {tail}" if tail else what
    what = f"exited with code {code}"
    return f"{what}; output: {tail}" if tail else what


class LocalProcesses(Adapter):
    """The 'local' connector. ``node_id`` defaults to ``local-<hostname>``."""

    def __init__(self, *, cell: str = "local", name: str = "local", node_id: str | None = None,
                 max_concurrent: int | None = None, kill_grace_s: float = 5.0, tail_chars: int = 500,
                 prometheus: str | None = None, prometheus_node: str = "127.0.0.1",
                 model_cache: Path | str | None = None, model_cache_mib: int | None = None,
                 site: str = "local", tier: str = "onprem"):
        if tier not in ("cloud", "edge", "onprem"):
            raise ConnectorError(f"local: tier must be cloud, edge or onprem, not {tier!r}")
        self.name, self.cell, self.site, self.tier = name, cell, site, tier
        self.node_id = node_id or f"local-{socket.gethostname()}"
        self.max_concurrent = cpu_count() if max_concurrent is None else max_concurrent
        if self.max_concurrent < 1:
            raise ConnectorError(f"local: max_concurrent must be >= 1, not {max_concurrent}")
        self.kill_grace_s, self.tail_chars = kill_grace_s, tail_chars
        self._slots = asyncio.Semaphore(self.max_concurrent)
        self.pids: set[int] = set()
        # stop support: accepted commands (waiting or running), their processes, stop reasons
        self._commands: dict[str, dict[str, Any]] = {}
        self._procs: dict[str, asyncio.subprocess.Process] = {}
        self._stopped: dict[str, str] = {}
        self._grace_s: dict[str, float] = {}       # dispatch id -> the grace its stop asked for
        self._escalated: set[str] = set()          # dispatch ids SIGKILLed after their grace
        self._stoppers: set[asyncio.Task] = set()
        self._cpu_prev: tuple[int, int] | None = None
        self.model_cache = Path(model_cache) if model_cache is not None else None
        self.model_cache_mib = model_cache_mib
        self._store: ModelStore | None = None           # made at the first model (no directory before)
        self._loading: dict[str, asyncio.Task] = {}     # dispatch id -> its wait for its model
        self._prometheus = self._prometheus_feed(prometheus, prometheus_node)

    # -- discover / monitor ------------------------------------------------------------------
    def discover(self) -> list[dict[str, Any]]:
        # the scheduler keeps a view of the cache (placement by model, prewarms) only when it has a size
        return [{**describe_machine(self.node_id, self.cell, self.name, site=self.site, tier=self.tier,
                                    model_cache_mib=self.model_cache_mib or 0), "registered_at": self.now_ms()}]

    def _prometheus_feed(self, url: str | None, selector: str) -> Any:
        """The background Prometheus sampler of this node, or None (then /proc only)."""
        if url is None:
            from suanli.config import settings
            url = settings().local_prometheus
        if not url:
            return None
        from suanli.connectors.prometheus_source import PrometheusFeed, PrometheusSource, PromNode
        return PrometheusFeed(PrometheusSource(url, [PromNode(self.node_id, self.cell, selector)], name=self.name))

    async def aclose(self) -> None:
        if self._store is not None:
            await self._store.aclose()      # copies in flight stop at their next chunk
        if self._stoppers:
            await asyncio.gather(*self._stoppers, return_exceptions=True)
        if self._prometheus is not None:
            await self._prometheus.aclose()  # the background sampler, so no task outlives the runner

    def monitor(self, at: int, seq: int) -> list[tuple[str, dict[str, Any]]]:
        heartbeat = ("NodeHeartbeat", {"event_id": f"{self.name}/{self.node_id}/hb/{seq}", "node_id": self.node_id,
                                       "cell": self.cell, "seq": seq, "at": at})
        sample = self._prometheus.take(self.node_id) if self._prometheus is not None else None
        if sample is not None:
            extended = {**sample["extended"], "running_processes": float(len(self.pids))}
            return [heartbeat, ("NodeMetrics", {**sample, "extended": extended})]
        mem = read_meminfo()
        load1 = os.getloadavg()[0]
        busy, total = _cpu_times()
        if self._cpu_prev is None or total <= self._cpu_prev[1]:
            cpu_util = min(1.0, load1 / cpu_count())  # no interval yet: approximate from the load
        else:
            cpu_util = (busy - self._cpu_prev[0]) / (total - self._cpu_prev[1])
        self._cpu_prev = (busy, total)
        prefix = f"{self.name}/{self.node_id}"
        used_kib = mem["MemTotal"] - mem.get("MemAvailable", mem.get("MemFree", 0))
        return [
            ("NodeHeartbeat", {"event_id": f"{prefix}/hb/{seq}", "node_id": self.node_id, "cell": self.cell,
                               "seq": seq, "at": at}),
            ("NodeMetrics", {"event_id": f"{prefix}/metrics/{seq}", "node_id": self.node_id, "cell": self.cell,
                             "at": at, "cpu_util": round(max(0.0, min(1.0, cpu_util)), 4),
                             "memory_used_mib": used_kib // 1024,
                             "gpu_util": [], "gpu_memory_used_mib": [], "load1": load1, "disk_iops": 0.0,
                             "net_rx_mbps": 0.0, "net_tx_mbps": 0.0, "power_w": 0.0,
                             "extended": {"running_processes": float(len(self.pids))}}),
        ]

    # -- dispatch ----------------------------------------------------------------------------
    def admit(self, command: dict[str, Any]) -> str | None:
        argv = command.get("command")
        if not argv:
            return ("the DispatchCommand has no command: the local connector runs an OS process "
                    "and needs `command` (an argv list)")
        if command["node_id"] != self.node_id:
            return f"node {command['node_id']!r} is not this machine ({self.node_id!r})"
        task_env = command.get("env") or {}
        problem = env_problem(task_env)
        if problem:
            return f"cannot run the command: {problem}"
        path = task_env.get("PATH", os.environ.get("PATH", ""))
        if shutil.which(argv[0], path=path) is None:
            return f"executable {argv[0]!r} not found (PATH={path})"
        return None

    @staticmethod
    def environment(command: dict[str, Any], model: LoadResult | None = None) -> dict[str, str]:
        """The command's environment: this process's, the task's ``env`` over it, then the SUANLI_*
        variables (with ``SUANLI_MODEL_PATH`` and ``SUANLI_MODEL_ARCH`` when it has a ``model``,
        ``SUANLI_JOB_ID`` when it is a member of a job)."""
        models = {"SUANLI_MODEL_PATH": str(model.path), "SUANLI_MODEL_ARCH": model.model_arch} if model else {}
        return {**os.environ, **(command.get("env") or {}),
                "SUANLI_TASK_ID": command["task_id"], "SUANLI_DISPATCH_ID": command["dispatch_id"],
                "SUANLI_CPU_MILLI": str(command["cpu_milli"]), "SUANLI_MEMORY_MIB": str(command["memory_mib"]),
                **({"SUANLI_JOB_ID": command["job_id"]} if command.get("job_id") else {}), **models}

    def model_store(self) -> ModelStore:
        """This node's model cache (made, and its index read from disk, on first use)."""
        if self._store is None:
            from suanli.config import settings
            root = self.model_cache or settings().home / "connectors" / self.name / "models"
            try:
                self._store = ModelStore(root, self.model_cache_mib)
            except OSError as exc:
                raise ModelStoreError(f"model cache {root} is unusable: {exc}") from None
        return self._store

    async def prewarm(self, command: dict[str, Any]) -> None:
        """Copy a PrewarmCommand's model into the cache (nothing if it is there); ModelStoreError if it cannot be."""
        if command["node_id"] != self.node_id:
            log.warning("local %s: prewarm for node %r ignored: this is %r", self.name, command["node_id"],
                        self.node_id)
            return
        result = await self.model_store().ensure(command)
        log.info("local %s: prewarmed: %s", self.name, result.describe())

    async def execute(self, command: dict[str, Any], report: TaskReporter) -> None:
        dispatch_id = command["dispatch_id"]
        self._commands[dispatch_id] = command
        try:
            async with AsyncExitStack() as held:
                model = None
                if command.get("model"):
                    model = await self._load_model(command, report, held)
                    if model is None:
                        return                  # reported FAILED
                async with self._slots:
                    if dispatch_id in self._stopped:
                        await report.failed(None, f"{stopped_message(self._stopped[dispatch_id])} (before it started)")
                        return
                    await self._run(command, report, model)
        finally:
            self._commands.pop(dispatch_id, None)
            self._procs.pop(dispatch_id, None)
            self._stopped.pop(dispatch_id, None)
            self._grace_s.pop(dispatch_id, None)
            self._escalated.discard(dispatch_id)

    async def _load_model(self, command: dict[str, Any], report: TaskReporter,
                          held: AsyncExitStack) -> LoadResult | None:
        """Ensure the command's model and pin it (until ``held`` closes); None once FAILED is reported."""
        dispatch_id = command["dispatch_id"]
        try:
            store = self.model_store()
            # A task of its own, so that a stop can end the wait (the shared copy itself goes on).
            waiting = asyncio.ensure_future(held.enter_async_context(store.using(model_ref(command["model"]))))
        except ModelStoreError as exc:
            await report.failed(None, f"cannot start the task: {exc}")
            return None
        self._loading[dispatch_id] = waiting
        try:
            return await waiting
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if (current is not None and current.cancelling()) or dispatch_id not in self._stopped:
                raise                           # the connector is stopping: the runner reports it
            await report.failed(None, f"{stopped_message(self._stopped[dispatch_id])} (while its model was loading)")
            return None
        except ModelStoreError as exc:
            await report.failed(None, f"cannot start the task: {exc}")
            return None
        finally:
            self._loading.pop(dispatch_id, None)
            if not waiting.done():
                waiting.cancel()

    async def stop(self, task_id: str, node_id: str, reason: str, grace_ms: int | None = None) -> bool:
        """Kill the process group of ``task_id`` (SIGTERM, SIGKILL after ``grace_ms``, or after
        ``kill_grace_s`` when it is None), or keep it from starting; its run reports FAILED,
        stopped. False if it is not here. A second stop of the same copy changes nothing."""
        if node_id != self.node_id:
            return False
        grace_s = self.kill_grace_s if grace_ms is None else max(0, grace_ms) / 1000.0
        found = False
        for dispatch_id, command in list(self._commands.items()):
            if command["task_id"] != task_id:
                continue
            found = True
            if dispatch_id in self._stopped:
                continue
            self._stopped[dispatch_id] = reason
            self._grace_s[dispatch_id] = grace_s
            loading = self._loading.get(dispatch_id)
            if loading is not None:
                loading.cancel()                # waiting for its model: it never starts
            self._start_stopper(dispatch_id)
        return found

    def _start_stopper(self, dispatch_id: str) -> None:
        """Stop the process of a stopped dispatch, if it has one that still runs."""
        proc = self._procs.get(dispatch_id)
        if proc is not None and proc.returncode is None:
            stopper = asyncio.create_task(self._stop(proc, self._grace_s.get(dispatch_id, self.kill_grace_s),
                                                     dispatch_id), name=f"{self.name}-stop-{dispatch_id}")
            self._stoppers.add(stopper)
            stopper.add_done_callback(self._stoppers.discard)

    async def _run(self, command: dict[str, Any], report: TaskReporter, model: LoadResult | None = None) -> None:
        argv = list(command["command"])
        env = self.environment(command, model)
        started = time.monotonic()
        read_fd, write_fd = os.pipe()
        with tempfile.TemporaryFile() as output, open(read_fd, "rb") as result:
            try:
                proc = await asyncio.create_subprocess_exec(
                    sys.executable, "-S", "-I", "-c", TRAMPOLINE, str(write_fd), *argv,
                    stdin=subprocess.DEVNULL, stdout=output, stderr=subprocess.STDOUT, env=env,
                    pass_fds=(write_fd,), start_new_session=True)
            finally:
                os.close(write_fd)  # the trampoline holds the only write end now: EOF when it exits
            self.pids.add(proc.pid)
            self._procs[command["dispatch_id"]] = proc
            if command["dispatch_id"] in self._stopped:
                self._start_stopper(command["dispatch_id"])     # stopped while it was being started
            try:
                loaded = f"{model.describe()}; " if model is not None else ""
                await report.running(f"{loaded}process group {proc.pid}")
                await proc.wait()
            except BaseException:  # cancelled (connector stopping) or reporting failed: stop the process
                await self._stop(proc)
                raise
            finally:
                self.pids.discard(proc.pid)
            _kill_group(proc.pid, signal.SIGKILL)  # stragglers the task left behind in its session
            outcome = _parse_result(result.read(), proc.returncode, started)
            stopped = self._stopped.get(command["dispatch_id"])
            if stopped is not None and "error" not in outcome and outcome["exit_code"] != 0:
                said = exit_message(outcome["exit_code"], "")
                if command["dispatch_id"] in self._escalated:
                    said += f" (SIGTERM not obeyed within the {self._grace_s[command['dispatch_id']]:g} s grace)"
                tail = self._tail(output)
                await report.failed(outcome["exit_code"], f"{stopped_message(stopped)}; {said}"
                                    + (f"; output: {tail}" if tail else ""), outcome["usage"])
            elif "error" in outcome:
                await report.failed(outcome["exit_code"], f"cannot start {argv[0]!r}: {outcome['error']}")
            elif outcome["exit_code"] == 0:
                await report.completed(outcome["usage"], exit_message(0, ""))
            else:
                await report.failed(outcome["exit_code"], exit_message(outcome["exit_code"], self._tail(output)),
                                    outcome["usage"])

    async def _stop(self, proc: asyncio.subprocess.Process, grace_s: float | None = None,
                    dispatch_id: str | None = None) -> None:
        """SIGTERM the task's process group, SIGKILL it after ``grace_s`` (default
        ``kill_grace_s``; 0: at once), and reap it. ``dispatch_id`` is remembered as escalated
        when the SIGKILL was needed."""
        grace_s = self.kill_grace_s if grace_s is None else grace_s
        _kill_group(proc.pid, signal.SIGTERM)
        try:
            if grace_s <= 0:
                raise TimeoutError
            await asyncio.wait_for(asyncio.shield(proc.wait()), grace_s)
        except (TimeoutError, asyncio.CancelledError):
            if proc.returncode is None and dispatch_id is not None:
                self._escalated.add(dispatch_id)
            _kill_group(proc.pid, signal.SIGKILL)
            await asyncio.shield(proc.wait())
        _kill_group(proc.pid, signal.SIGKILL)

    def _tail(self, output: Any) -> str:
        size = output.seek(0, os.SEEK_END)
        output.seek(max(0, size - 4 * self.tail_chars))
        text = output.read().decode("utf-8", errors="replace").strip()
        return text[-self.tail_chars:]



def _parse_result(data: bytes, returncode: int | None, started: float) -> dict[str, Any]:
    """The trampoline's report, or (if it was killed before writing one) what its own exit says."""
    try:
        report = json.loads(data)
    except ValueError:
        code = returncode if returncode is not None else -signal.SIGKILL
        return {"exit_code": code, "usage": {"cpu_seconds": 0.0, "max_rss_mib": 0,
                                             "wall_ms": int((time.monotonic() - started) * 1000)}}
    if "error" in report:
        return {"exit_code": 127 if report["errno"] == errno.ENOENT else 126, "error": report["error"]}
    return {"exit_code": os.waitstatus_to_exitcode(report["status"]),
            "usage": {"cpu_seconds": round(report["utime"] + report["stime"], 6),
                      "max_rss_mib": math.ceil(report["maxrss_kib"] / 1024), "wall_ms": report["wall_ms"]}}


def _kill_group(pgid: int, sig: int) -> None:
    # Safe after the leader is reaped: Linux never reuses a pid while it names a live process group.
    with suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)
