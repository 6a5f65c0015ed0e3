"""The 'slurm' connector: a Slurm cluster's nodes as Suanli nodes, each dispatch a real Slurm job.

``python -m suanli.connectors.slurm [--cell C] [--slurm-conf PATH] ...`` (``--help``); the
options are :func:`add_arguments`, the adapter is :func:`build_adapter`, so a launcher can
offer it as one more kind. The cluster of ``deploy/slurm.py`` (``python -m
suanli.deploy.slurm up``) is the default (``SLURM_CONF`` = ``<home>/slurm/slurm.conf``);
any Slurm 22.05+ whose client commands work from this machine will do.

**Discovery** (:func:`parse_sinfo`, :func:`node_registered`): ``sinfo --json`` (Slurm 22.05
answers with its OpenAPI v0.0.38 document; ``scontrol show nodes`` has no ``--json`` before
23.02, so sinfo is the JSON source). Every Slurm node becomes a NodeRegistered: node id
``<prefix><name>`` (prefix default ``<connector>-``), ``cpu_milli`` = CPUs x 1000,
``memory_mib`` = ``RealMemory``, ``arch`` from ``architecture``, accelerators from its GRES
(``gpu:a100:2`` -> 2 GPUs of model a100; ``npu``/``fpga``/``asic``/``qpu`` -> that kind,
any other name -> OTHER, its name in ``attributes['gres']``), labels ``slurm-node``,
``slurm-partition`` (the first partition, where its jobs go), ``slurm-partitions``,
``slurm-cluster`` and ``hostname``; tier ``onprem``; site/region/zone the ``--site`` (default
the connector name).

**Monitoring** (:func:`node_view`): a background poller reads ``sinfo --json`` every
``node_poll_s`` (2 s). A node is *up* when its state is IDLE, MIXED, ALLOCATED or COMPLETING
with no NOT_RESPONDING, DRAIN or FAIL flag; only up nodes get heartbeats, so a node slurmctld
cannot reach goes silent and the core's health judge makes it SUSPECT, then DOWN, on the
cell clock. State changes go out as NodeStatusChanged with the heartbeats: Slurm DOWN ->
DOWN (its tasks are lost and placed again at once), DRAIN/DRAINING/DRAINED or FAIL ->
CORDONED (no new work; what runs finishes, as in Slurm), up again -> READY. NOT_RESPONDING
alone changes no status: Slurm decides DOWN after ``SlurmdTimeout``. NodeMetrics (every
metrics period) carry Slurm's allocation (``alloc_cpus / cpus`` as ``cpu_util``,
``alloc_memory``), not the host's load: the nodes may share a host.

**Dispatch** (:func:`sbatch_argv`, :func:`batch_script`): each DispatchCommand is one batch
job, ``sbatch --parsable --no-requeue --nodelist=<node> --nodes=1 --ntasks=1
--cpus-per-task=ceil(cpu_milli/1000) --mem=<memory_mib> [--gres=gpu:<n>,fpga:u250:1,...]
--job-name=<task>
--partition=<node's partition> --chdir=<run dir> --output=<run dir>/<dispatch>.out
--comment=suanli:<dispatch>`` of a generated script that runs the command's argv (no shell
word splitting: every word is quoted) through ``env NAME=VALUE ...`` with the task's ``env``
and ``SUANLI_TASK_ID``, ``SUANLI_DISPATCH_ID``, ``SUANLI_CPU_MILLI``, ``SUANLI_MEMORY_MIB``,
``SUANLI_SLURM_NODE`` (the job also inherits the connector's environment: sbatch's default
``--export=ALL``), then writes its exit code to ``<dispatch>.exit`` (atomically) and exits
with it (the script itself only traps SIGTERM, so the command decides what a stop means). A job poller reads ``squeue -h -t all -O JobID,State,NodeList,Reason,exit_code``
(one call for every job, every ``poll_interval_s``). The task's statuses: RUNNING "slurm job
42 on n2" once Slurm runs it (a job that ends between two polls still reports RUNNING first,
so the job id is always in the task's status), then COMPLETED (exit 0) or FAILED with the
real exit code ("slurm job 42 on n2: exited with code 3; output: ..."); a command killed by
signal N exits 128+N as the batch shell reports it (the shell cannot tell it from exit(128+N)),
and a job whose batch shell itself was killed (SIGKILL after ``KillWait``) has -N. A job slurmctld has already forgotten (``MinJobAge``)
is judged from its ``.exit`` record. Other end states (CANCELLED from outside Suanli,
TIMEOUT, OUT_OF_MEMORY, BOOT_FAIL, ...) are FAILED with the state and reason.

**A node that dies.** Slurm ends the jobs of a node it marks DOWN as NODE_FAIL (no requeue:
``--no-requeue`` and the cluster's ``JobRequeue=0``). A job whose launch failed on a slurmd
that no longer answers is requeued by Slurm all the same (RUNNING, COMPLETING, then PENDING
for the node), and would start there once the node is back: this connector cancels every
job pending for a node that is DOWN. Such a dispatch reports FAILED ("NODE_FAIL") only after the
node's DOWN has been handed to the runner and one more heartbeat period has passed, so the
cell log sees the node DOWN (the task lost, placed again) before the old copy's FAILED, which
the core then ignores as a stale copy's; a FAILED first would end the task for good.

**Stop** (a StopCommand): ``scancel --signal=TERM --full`` (the batch shell and the command),
then after the grace (the StopCommand's ``grace_ms``, else ``kill_grace_s``) ``scancel``
(Slurm: SIGTERM, SIGKILL after ``KillWait``); FAILED "stopped by the scheduler: <reason>;
slurm job N cancelled", or COMPLETED if it exited 0 within the grace. A connector that stops
cancels its jobs (the kit's contract: the work stops with it).

**Admission** refuses a command without ``command``, a node that is not this cluster's, more
CPUs, memory, GPUs or accelerators of a kind and model than the node has, an environment no process can
have, and an argv whose first word holds '=' (``env`` would take it for a variable).

Limits: Slurm allocates whole CPUs, so a fractional CPU request takes a whole one and a node
may queue (PENDING) work the core thought fits; nodes added to Slurm after the connector
started are not registered until it restarts; usage (CPU seconds, RSS) is not measured
(no accounting database).

GRES: a task's GPUs are ``--gres=gpu:<count>``; each non-GPU accelerator the core assigned
(``DispatchCommand.accelerators``: the node's registered entry, whose ``attributes['gres']``
is the Slurm GRES it came from) is ``<name>:<type>:<count>``, e.g. ``fpga:u250:1``.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import logging
import math
import os
import re
import shlex
import signal
import sys
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

from suanli.connectors.kit import Adapter, TaskReporter, stopped_message
from suanli.errors import ConnectorError
from suanli.schemas.models import env_problem

log = logging.getLogger("suanli.connectors.slurm")

ARCH = {"x86_64": "x86_64", "amd64": "x86_64", "aarch64": "arm64", "arm64": "arm64", "riscv64": "riscv64"}
UP_STATES = frozenset({"IDLE", "MIXED", "ALLOCATED", "COMPLETING"})
KIND_OF_GRES = {"gpu": "GPU", "npu": "NPU", "fpga": "FPGA", "asic": "ASIC", "qpu": "QPU"}
# squeue -O: one job a line, fields separated by '|' (the last one padded: stripped)
SQUEUE_FORMAT = "JobID:|,State:|,NodeList:|,Reason:|,exit_code:"
RUNNING_STATES = frozenset({"RUNNING", "COMPLETING", "CONFIGURING", "SUSPENDED", "STOPPED", "SIGNALING",
                            "STAGE_OUT", "RESIZING"})
# reasons of a job ended by its node's failure (a launch on a slurmd that no longer answers)
NODE_REASONS = frozenset({"NodeDown", "NodeFail", "JobLaunchFailure", "node down while pending"})
WAITING_STATES = frozenset({"PENDING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED"})


# ---- parsing (pure) ----------------------------------------------------------------------
@dataclass(frozen=True)
class SlurmNode:
    """One node as ``sinfo --json`` describes it."""

    name: str
    state: str                      # upper case: IDLE, MIXED, ALLOCATED, DOWN, ...
    flags: frozenset[str]           # upper case: NOT_RESPONDING, DRAIN, ...
    cpus: int
    memory_mib: int
    partitions: tuple[str, ...]
    gres: str
    arch: str
    hostname: str
    address: str
    reason: str = ""
    features: str = ""
    alloc_cpus: int = 0
    alloc_memory_mib: int = 0

    @property
    def up(self) -> bool:
        return self.state in UP_STATES and not self.flags & {"NOT_RESPONDING", "DRAIN", "FAIL", "POWERED_DOWN",
                                                             "INVALID_REG"}

    def describe(self) -> str:
        state = "+".join([self.state, *sorted(self.flags)])
        return f"{state}: {self.reason}" if self.reason else state


def parse_sinfo(text: str) -> list[SlurmNode]:
    """The nodes of a ``sinfo --json`` document (Slurm 22.05: OpenAPI v0.0.38), by name.
    ConnectorError if it is not such a document or reports errors."""
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise ConnectorError(f"slurm: sinfo --json did not answer JSON: {exc}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("nodes"), list):
        raise ConnectorError("slurm: sinfo --json answered no 'nodes' list")
    if doc.get("errors"):
        raise ConnectorError(f"slurm: sinfo --json reported errors: {doc['errors']}")
    nodes = []
    for n in doc["nodes"]:
        nodes.append(SlurmNode(
            name=str(n["name"]), state=str(n.get("state") or "unknown").upper(),
            flags=frozenset(str(f).upper() for f in n.get("state_flags") or []),
            cpus=int(n.get("cpus") or 0), memory_mib=int(n.get("real_memory") or 0),
            partitions=tuple(n.get("partitions") or ()), gres=str(n.get("gres") or ""),
            arch=str(n.get("architecture") or ""), hostname=str(n.get("hostname") or ""),
            address=str(n.get("address") or ""), reason=str(n.get("reason") or ""),
            features=str(n.get("active_features") or n.get("features") or ""),
            alloc_cpus=int(n.get("alloc_cpus") or 0), alloc_memory_mib=int(n.get("alloc_memory") or 0)))
    return sorted(nodes, key=lambda n: n.name)


def parse_gres(gres: str) -> list[dict[str, Any]]:
    """Accelerators of a node's GRES string (``gpu:a100:2(S:0-1),fpga:1``), as Accelerator
    records; entries with a zero count are left out."""
    out: list[dict[str, Any]] = []
    for item in filter(None, (part.strip() for part in re.split(r",(?![^()]*\))", gres or ""))):
        if item in ("(null)", "N/A"):
            continue
        spec = item.split("(", 1)[0]
        parts = spec.split(":")
        name = parts[0].lower()
        count, model = 1, ""
        if len(parts) >= 2 and parts[-1].isdigit():
            count = int(parts[-1])
            model = ":".join(parts[1:-1])
        elif len(parts) >= 2:
            model = ":".join(parts[1:])
        if count <= 0:
            continue
        kind = KIND_OF_GRES.get(name, "OTHER")
        out.append({"kind": kind, "model": model or name, "count": count, "memory_mib": 0,
                    "attributes": {"gres": spec}})
    return out


def gpu_count(gres: str) -> int:
    return sum(a["count"] for a in parse_gres(gres) if a["kind"] == "GPU")


def node_registered(node: SlurmNode, *, connector: str, cell: str, node_id: str, site: str, cluster: str,
                    at: int) -> dict[str, Any]:
    """The NodeRegistered payload of one Slurm node."""
    labels = {"slurm-node": node.name, "slurm-cluster": cluster, "hostname": node.hostname}
    if node.partitions:
        labels["slurm-partition"] = node.partitions[0]
        labels["slurm-partitions"] = ",".join(node.partitions)
    if node.features:
        labels["slurm-features"] = node.features
    return {"event_id": f"{connector}/{node_id}/registered", "node_id": node_id, "cell": cell, "site": site,
            "region": site, "zone": site, "tier": "onprem", "arch": ARCH.get(node.arch.lower(), "other"),
            "cpu_milli": node.cpus * 1000, "memory_mib": node.memory_mib, "accelerators": parse_gres(node.gres),
            "pricing": "ON_DEMAND", "price_per_hour": 0.0, "pue": 1.0, "carbon_g_per_kwh": 0.0,
            "connector": connector, "labels": labels, "registered_at": at, "model_cache_mib": 0}


def node_view(node: SlurmNode) -> tuple[str | None, bool]:
    """(Suanli status or None for "unchanged", heartbeat?) of a Slurm node: DOWN -> DOWN;
    DRAIN or FAIL -> CORDONED; up -> READY; NOT_RESPONDING alone -> no change, no heartbeat."""
    if node.state == "DOWN":
        return "DOWN", False
    responding = "NOT_RESPONDING" not in node.flags
    if node.flags & {"DRAIN", "FAIL"} or node.state in ("DRAINED", "DRAINING", "FAIL", "FAILING"):
        return "CORDONED", responding
    if node.up:
        return "READY", True
    return None, False


@dataclass(frozen=True)
class JobState:
    """One job's line of :data:`SQUEUE_FORMAT`."""

    job_id: int
    state: str
    nodes: str
    reason: str
    exit_status: int | None          # the raw wait status (256 = exit 1), None when unknown


def parse_squeue(text: str) -> dict[int, JobState]:
    """The jobs of ``squeue -h -t all -O`` :data:`SQUEUE_FORMAT` output, by job id."""
    jobs: dict[int, JobState] = {}
    for line in text.splitlines():
        parts = [p.strip() for p in line.split("|")]
        if len(parts) < 5 or not parts[0].isdigit():
            continue
        status = int(parts[4]) if parts[4].lstrip("-").isdigit() else None
        jobs[int(parts[0])] = JobState(int(parts[0]), parts[1].upper(), parts[2], parts[3], status)
    return jobs


def parse_sbatch(stdout: str) -> int:
    """The job id of ``sbatch --parsable`` (``42`` or ``42;cluster``)."""
    head = stdout.strip().split(";", 1)[0]
    if not head.isdigit():
        raise ConnectorError(f"slurm: sbatch answered {stdout.strip()!r}, not a job id")
    return int(head)


def exit_code_of(status: int | None) -> int | None:
    """A raw wait status as an exit code (negative: the signal that killed it)."""
    if status is None:
        return None
    if status & 0x7F:
        return -(status & 0x7F)
    return (status >> 8) & 0xFF


def exit_message(code: int | None, tail: str = "") -> str:
    if code is None:
        what = "no exit code"
    elif code < 0:
        try:
            what = f"killed by {signal.Signals(-code).name}"
        except ValueError:
            what = f"killed by signal {-code}"
    else:
        what = f"exited with code {code}"
    return f"{what}; output: {tail}" if tail else what


def safe_name(dispatch_id: str) -> str:
    """A file name for a dispatch id (which may hold '/' and ':')."""
    return re.sub(r"[^A-Za-z0-9._-]", "_", dispatch_id)


def batch_script(command: Mapping[str, Any], slurm_node: str, exit_file: Path) -> str:
    """The batch script of a DispatchCommand: its argv run through ``env`` with the task's
    environment and the SUANLI_* variables; its exit code written to ``exit_file`` atomically."""
    env = {**(command.get("env") or {}), "SUANLI_TASK_ID": command["task_id"],
           "SUANLI_DISPATCH_ID": command["dispatch_id"], "SUANLI_CPU_MILLI": str(command["cpu_milli"]),
           "SUANLI_MEMORY_MIB": str(command["memory_mib"]), "SUANLI_SLURM_NODE": slurm_node}
    assignments = " ".join(shlex.quote(f"{k}={v}") for k, v in env.items())
    argv = shlex.join(list(command["command"]))
    tmp = exit_file.with_name(exit_file.name + ".tmp")
    return "\n".join([
        "#!/bin/sh",
        f"# suanli: task {command['task_id']}, dispatch {command['dispatch_id']}, node {command['node_id']}",
        # scancel --signal=TERM --full signals every process of the job: the command decides
        # what SIGTERM means, this shell only waits and records (a trap, not an ignore: the
        # command must not inherit an ignored SIGTERM)
        "trap ':' TERM INT",
        f"env {assignments} {argv}",
        "code=$?",
        f"printf '%s\\n' \"$code\" > {shlex.quote(str(tmp))} && mv -f {shlex.quote(str(tmp))} "
        f"{shlex.quote(str(exit_file))}",
        'exit "$code"',
        "",
    ])


def sbatch_argv(command: Mapping[str, Any], node: SlurmNode, script: Path, output: Path, run_dir: Path,
                sbatch: str = "sbatch") -> list[str]:
    """The sbatch command line of a DispatchCommand on ``node``."""
    cpus = max(1, math.ceil(command["cpu_milli"] / 1000))
    argv = [sbatch, "--parsable", "--no-requeue", f"--nodelist={node.name}", "--nodes=1", "--ntasks=1",
            f"--cpus-per-task={cpus}", f"--mem={max(1, int(command['memory_mib']))}",
            f"--job-name={command['task_id']}", f"--chdir={run_dir}", f"--output={output}",
            f"--comment=suanli:{command['dispatch_id']}"]
    if node.partitions:
        argv.append(f"--partition={node.partitions[0]}")
    gres = command_gres(command)
    if gres:
        argv.append(f"--gres={','.join(gres)}")
    argv.append(str(script))
    return argv


def command_gres(command: Mapping[str, Any]) -> list[str]:
    """The GRES a DispatchCommand takes: ``gpu:N`` for its GPU devices, and for each of its
    non-GPU accelerators (the node's registered entry: its ``attributes['gres']`` names the
    Slurm GRES it came from) ``<name>:<type>:<count>``."""
    out = []
    gpus = len(command.get("gpu_devices") or [])
    if gpus:
        out.append(f"gpu:{gpus}")
    for acc in command.get("accelerators") or []:
        spec = str((acc.get("attributes") or {}).get("gres") or "")
        name = spec.split(":", 1)[0] if spec else str(acc["kind"]).lower()
        model = str(acc.get("model") or "")
        out.append(f"{name}:{model}:{acc['count']}" if model and model != name else f"{name}:{acc['count']}")
    return out


# ---- the adapter -------------------------------------------------------------------------
@dataclass
class _Job:
    """One dispatch's Slurm job while its ``execute`` runs."""

    command: dict[str, Any]
    node: str                                  # Slurm node name
    job_id: int | None = None
    state: JobState | None = None
    missing: int = 0                           # polls in a row that did not list it
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    stop_reason: str | None = None
    stopper: asyncio.Task | None = None


class SlurmCluster(Adapter):
    """The 'slurm' connector (see the module docstring)."""

    def __init__(self, *, cell: str = "slurm", name: str = "slurm", slurm_conf: str | Path | None = None,
                 node_prefix: str | None = None, run_dir: str | Path | None = None, site: str | None = None,
                 poll_interval_s: float = 1.0, node_poll_s: float = 2.0, kill_grace_s: float = 5.0,
                 tail_chars: int = 500, max_slurm_calls: int = 4, command_timeout_s: float = 60.0,
                 node_fail_report_s: float = 30.0, pollers: bool = True):
        from suanli.config import settings
        from suanli.deploy.slurm import SlurmPaths

        self.name, self.cell = name, cell
        self.site = site or name
        paths = SlurmPaths.of(settings())
        self.slurm_conf = Path(slurm_conf) if slurm_conf else Path(os.environ.get("SLURM_CONF") or paths.conf)
        self.node_prefix = f"{name}-" if node_prefix is None else node_prefix
        self.run_dir = Path(run_dir) if run_dir else paths.jobs / name
        self.poll_interval_s, self.node_poll_s = poll_interval_s, node_poll_s
        self.kill_grace_s, self.tail_chars = kill_grace_s, tail_chars
        self.command_timeout_s, self.node_fail_report_s = command_timeout_s, node_fail_report_s
        self.env = {**os.environ, "SLURM_CONF": str(self.slurm_conf)}
        self.cluster = ""
        self.nodes: dict[str, SlurmNode] = {}          # Slurm name -> latest view
        self.ids: dict[str, str] = {}                  # Suanli node id -> Slurm name
        self._reported: dict[str, str] = {}            # Slurm name -> last status handed out
        self._outbox: list[tuple[str, dict[str, Any]]] = []   # NodeStatusChanged to hand out
        self._down_at_beat: dict[str, int] = {}        # Slurm name -> beat at which its DOWN was handed out
        self._beats = 0
        self._beat = asyncio.Event()                   # replaced at every beat (3.11: no loop bound yet)
        self._start_pollers = pollers                  # False: the views are fed by hand (tests)
        self._jobs: dict[str, _Job] = {}               # dispatch id -> job
        self._calls: asyncio.Semaphore | None = None
        self._max_calls = max_slurm_calls
        self._pollers: list[asyncio.Task] = []
        self.stats = {"sbatch": 0, "sbatch_retries": 0, "scancel": 0, "squeue_polls": 0, "sinfo_polls": 0}

    # -- Slurm commands ----------------------------------------------------------------------
    def _sync(self, argv: Sequence[str]) -> str:
        import subprocess

        try:
            out = subprocess.run(list(argv), capture_output=True, text=True, env=self.env,
                                 timeout=self.command_timeout_s)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise ConnectorError(f"slurm: {argv[0]} failed: {exc}") from None
        if out.returncode != 0:
            raise ConnectorError(f"slurm: {' '.join(argv)} exited {out.returncode}: {out.stderr.strip()}")
        return out.stdout

    async def _call(self, *argv: str) -> tuple[int, str, str]:
        """Run a Slurm client command (at most ``max_slurm_calls`` at once): (rc, stdout, stderr)."""
        if self._calls is None:
            self._calls = asyncio.Semaphore(self._max_calls)
        async with self._calls:
            proc = await asyncio.create_subprocess_exec(*argv, stdin=asyncio.subprocess.DEVNULL,
                                                        stdout=asyncio.subprocess.PIPE,
                                                        stderr=asyncio.subprocess.PIPE, env=self.env)
            try:
                out, err = await asyncio.wait_for(proc.communicate(), self.command_timeout_s)
            except BaseException:
                with suppress(ProcessLookupError):
                    proc.kill()
                await proc.wait()
                raise
            return proc.returncode or 0, out.decode(errors="replace"), err.decode(errors="replace")

    # -- discovery ---------------------------------------------------------------------------
    def discover(self) -> list[dict[str, Any]]:
        nodes = parse_sinfo(self._sync(["sinfo", "--json"]))
        if not nodes:
            raise ConnectorError(f"slurm: the cluster of {self.slurm_conf} has no nodes")
        with suppress(ConnectorError):
            for line in self._sync(["scontrol", "show", "config"]).splitlines():
                key, _, value = line.partition("=")
                if key.strip() == "ClusterName":
                    self.cluster = value.strip()
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self._ensure_pollers()
        return self.adopt(nodes)

    def adopt(self, nodes: list[SlurmNode]) -> list[dict[str, Any]]:
        """Make ``nodes`` this connector's nodes (each READY once registered); their
        NodeRegistered payloads. (discover() after reading sinfo; tests directly.)"""
        self.nodes = {n.name: n for n in nodes}
        self.ids = {self.node_id(n.name): n.name for n in nodes}
        self._reported = {n.name: "READY" for n in nodes}     # a registration makes a node READY
        at = self.now_ms()
        return [node_registered(n, connector=self.name, cell=self.cell, node_id=self.node_id(n.name), site=self.site,
                                cluster=self.cluster, at=at) for n in nodes]

    def node_id(self, slurm_name: str) -> str:
        return f"{self.node_prefix}{slurm_name}"

    def _ensure_pollers(self) -> None:
        """Start the node and job pollers once, on the running loop (the first discover/beat)."""
        if self._pollers or not self._start_pollers:
            return
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return
        self._pollers = [asyncio.create_task(self._poll_nodes(), name=f"{self.name}-sinfo"),
                         asyncio.create_task(self._poll_jobs(), name=f"{self.name}-squeue")]

    async def aclose(self) -> None:
        for task in self._pollers:
            task.cancel()
        await asyncio.gather(*self._pollers, return_exceptions=True)

    # -- monitoring --------------------------------------------------------------------------
    def observe(self, nodes: list[SlurmNode]) -> None:
        """Take a new view of the nodes: queue a NodeStatusChanged for each status change."""
        for node in nodes:
            if node.name not in self._reported:
                continue                                # added after discovery: not ours yet
            self.nodes[node.name] = node
            status, _beat = node_view(node)
            if status is None or status == self._reported[node.name]:
                continue
            self._reported[node.name] = status
            self._outbox.append((node.name, {"node_id": self.node_id(node.name), "cell": self.cell,
                                             "status": status, "reason": f"slurm: {node.describe()}"}))
            log.warning("slurm %s: node %s is %s (%s)", self.name, node.name, status, node.describe())
            if status == "DOWN":
                self._node_down(node.name)

    async def _poll_nodes(self) -> None:
        while True:
            try:
                rc, out, err = await self._call("sinfo", "--json")
                self.stats["sinfo_polls"] += 1
                if rc == 0:
                    self.observe(parse_sinfo(out))
                else:
                    log.warning("slurm %s: sinfo --json exited %d: %s", self.name, rc, err.strip())
            except (ConnectorError, asyncio.TimeoutError, OSError) as exc:
                log.warning("slurm %s: node poll failed: %s", self.name, exc)
            await asyncio.sleep(self.node_poll_s)

    def _status_events(self, at: int, seq: int) -> list[tuple[str, dict[str, Any]]]:
        events = []
        for name, change in self._outbox:
            events.append(("NodeStatusChanged", {"event_id": f"{self.name}/{change['node_id']}/status/{seq}/"
                                                             f"{change['status']}", **change, "at": at}))
            if change["status"] == "DOWN":
                self._down_at_beat[name] = self._beats + 1     # the count once this beat is done
        self._outbox.clear()
        return events

    def heartbeats(self, at: int, seq: int) -> list[tuple[str, dict[str, Any]]]:
        """Status changes first, then a heartbeat for every node that is up in Slurm."""
        self._ensure_pollers()
        events = self._status_events(at, seq)
        for name in sorted(self._reported):
            _status, beat = node_view(self.nodes[name])
            if beat:
                node_id = self.node_id(name)
                events.append(("NodeHeartbeat", {"event_id": f"{self.name}/{node_id}/hb/{seq}", "node_id": node_id,
                                                 "cell": self.cell, "seq": seq, "at": at}))
        self._beats += 1
        self._beat.set()                                # wake the NODE_FAIL reports waiting for a beat
        self._beat = asyncio.Event()
        return events

    def metrics(self, at: int, seq: int, part: int = 0, parts: int = 1) -> list[tuple[str, dict[str, Any]]]:
        out = []
        for name in sorted(self._reported):
            node = self.nodes[name]
            if not node_view(node)[1]:
                continue
            node_id = self.node_id(name)
            jobs = sum(1 for j in self._jobs.values() if j.node == name)
            out.append(("NodeMetrics", {
                "event_id": f"{self.name}/{node_id}/metrics/{seq}", "node_id": node_id, "cell": self.cell, "at": at,
                "cpu_util": round(min(1.0, node.alloc_cpus / node.cpus), 4) if node.cpus else 0.0,
                "memory_used_mib": node.alloc_memory_mib, "gpu_util": [], "gpu_memory_used_mib": [],
                "load1": 0.0, "disk_iops": 0.0, "net_rx_mbps": 0.0, "net_tx_mbps": 0.0, "power_w": 0.0,
                "extended": {"slurm_alloc_cpus": float(node.alloc_cpus), "suanli_jobs": float(jobs)}}))
        return out

    def monitor(self, at: int, seq: int) -> list[tuple[str, dict[str, Any]]]:
        return [*self.heartbeats(at, seq), *self.metrics(at, seq)]

    # -- dispatch ----------------------------------------------------------------------------
    def admit(self, command: dict[str, Any]) -> str | None:
        argv = command.get("command")
        if not argv:
            return ("the DispatchCommand has no command: the slurm connector submits a batch job and needs "
                    "`command` (an argv list)")
        if "=" in argv[0]:
            return f"the command's first word {argv[0]!r} holds '=' (it would be taken for a variable)"
        name = self.ids.get(command["node_id"])
        if name is None:
            return f"node {command['node_id']!r} is not a node of the slurm connector {self.name!r}"
        node = self.nodes[name]
        # A node that is not up is no reason to refuse: a refusal ends the task for good, while
        # a node that dies takes its work with it (NODE_FAIL once its DOWN went out, and the
        # core places the task again); see execute.
        cpus = max(1, math.ceil(command["cpu_milli"] / 1000))
        if cpus > node.cpus:
            return f"slurm node {name} has {node.cpus} CPU(s); the task asks {cpus}"
        if command["memory_mib"] > node.memory_mib:
            return f"slurm node {name} has {node.memory_mib} MiB; the task asks {command['memory_mib']} MiB"
        gpus = len(command.get("gpu_devices") or [])
        if gpus > gpu_count(node.gres):
            return f"slurm node {name} has {gpu_count(node.gres)} GPU(s) in its GRES; the task asks {gpus}"
        have: dict[tuple[str, str], int] = {}
        for acc in parse_gres(node.gres):
            have[(acc["kind"], acc["model"])] = have.get((acc["kind"], acc["model"]), 0) + acc["count"]
        for acc in command.get("accelerators") or []:
            if acc["count"] > have.get((acc["kind"], acc["model"]), 0):
                return (f"slurm node {name} has {have.get((acc['kind'], acc['model']), 0)} {acc['kind']} "
                        f"{acc['model']!r} in its GRES ({node.gres or 'none'}); the task asks {acc['count']}")
        return env_problem(command.get("env") or {})

    async def execute(self, command: dict[str, Any], report: TaskReporter) -> None:
        self._ensure_pollers()
        name = self.ids[command["node_id"]]
        base = self.run_dir / safe_name(command["dispatch_id"])
        # (with_name, not with_suffix: dispatch ids hold dots, which with_suffix would cut at)
        script, output, exit_file = (base.with_name(base.name + ext) for ext in (".sh", ".out", ".exit"))
        job = self._jobs[command["dispatch_id"]] = _Job(command, name)
        try:
            if not await self._node_usable(job):
                if job.stop_reason is not None:
                    await report.failed(None, f"{stopped_message(job.stop_reason)} (before its job was submitted)")
                else:
                    await report.failed(None, f"slurm node {name} went DOWN before its job was submitted "
                                              f"({self.nodes[name].describe()})")
                return
            script.write_text(batch_script(command, name, exit_file))
            exit_file.unlink(missing_ok=True)
            job.job_id = await self._submit(sbatch_argv(command, self.nodes[name], script, output, self.run_dir))
            if job.job_id is None:
                await report.failed(None, f"sbatch refused the job: {job.state.reason if job.state else ''}".strip())
                return
            log.info("slurm %s: task %s is slurm job %d on %s", self.name, command["task_id"], job.job_id, name)
            if job.stop_reason is not None:           # stopped while sbatch ran
                await self._scancel(job, None)
            await self._follow(job, report, exit_file, output)
        except asyncio.CancelledError:
            if job.job_id is not None and not self._ended(job):
                # the connector is stopping: the work stops with it (the runner reports FAILED)
                await asyncio.shield(self._call("scancel", str(job.job_id)))
            raise
        finally:
            self._jobs.pop(command["dispatch_id"], None)
            if job.stopper is not None and not job.stopper.done():
                job.stopper.cancel()

    async def _node_usable(self, job: _Job) -> bool:
        """Whether to submit: True at once for a node that is up or drained (Slurm keeps the job
        pending until it is resumed); for one that slurmctld does not reach, wait until it is
        up again (True) or DOWN (False, once its DOWN went out: the core has placed the task
        elsewhere by then). Stopped meanwhile: False."""
        while True:
            node = self.nodes[job.node]
            if job.stop_reason is not None:
                return False
            status, beat = node_view(node)
            if node.up or (status == "CORDONED" and beat):
                return True
            if status == "DOWN" or self._reported.get(job.node) == "DOWN":
                await self._wait_node_down_seen(job.node)
                return False
            await asyncio.sleep(self.node_poll_s)

    async def _submit(self, argv: list[str]) -> int | None:
        """sbatch, retried (3 tries) when slurmctld is busy or unreachable; None if it refuses."""
        for attempt in range(3):
            rc, out, err = await self._call(*argv)
            self.stats["sbatch"] += 1
            if rc == 0:
                return parse_sbatch(out)
            transient = any(s in err for s in ("timed out", "Unable to contact", "temporarily unavailable",
                                               "Socket", "Zero Bytes"))
            log.warning("slurm %s: sbatch exited %d: %s", self.name, rc, err.strip())
            if not transient or attempt == 2:
                raise ConnectorError(f"sbatch exited {rc}: {err.strip()}")
            self.stats["sbatch_retries"] += 1
            await asyncio.sleep(1 + attempt)
        return None

    @staticmethod
    def _ended(job: _Job) -> bool:
        return job.state is not None and job.state.state not in RUNNING_STATES | WAITING_STATES

    async def _follow(self, job: _Job, report: TaskReporter, exit_file: Path, output: Path) -> None:
        """Wait for the job's states (from the job poller) and report them."""
        assert job.job_id is not None
        where = f"slurm job {job.job_id} on {job.node}"
        while True:
            await job.changed.wait()
            job.changed.clear()
            state = job.state
            if state is None and job.missing == 0:
                continue
            if state is not None and state.state in WAITING_STATES:
                continue
            await report.running(where)              # first, even when it ended between two polls
            if state is not None and state.state in RUNNING_STATES:
                continue
            break
        tail = self._tail(output)
        if state is None:                                  # slurmctld forgot it: its completion record
            code = self._exit_record(exit_file)
            if code is None:
                await report.failed(None, f"{where}: slurmctld no longer knows the job and it left no exit record")
            elif code == 0 and job.stop_reason is None:
                await report.completed(None, f"{where}: {exit_message(0)}")
            else:
                await report.failed(code, self._prefix(job, f"{where}: {exit_message(code, tail)}"))
            return
        code = exit_code_of(state.exit_status)
        if state.state == "COMPLETED" and (code in (0, None)):
            await report.completed(None, f"{where}: {exit_message(0)}")
        elif state.state == "NODE_FAIL" or (job.stop_reason is None and state.reason in NODE_REASONS):
            await self._wait_node_down_seen(job.node)
            await report.failed(None, self._prefix(job, f"{where}: NODE_FAIL: node {job.node} "
                                                        f"{self.nodes[job.node].describe()}"))
        elif state.state == "FAILED" and job.stop_reason is None:
            if code is None:
                code = self._exit_record(exit_file)
            await report.failed(code, f"{where}: {exit_message(code, tail)}")
        elif job.stop_reason is not None:
            await report.failed(code, f"{stopped_message(job.stop_reason)}; {where} {state.state.lower()} "
                                      f"({exit_message(code)})")
        else:
            await report.failed(code, f"{where}: {state.state} ({state.reason}); {exit_message(code, tail)}")

    @staticmethod
    def _prefix(job: _Job, message: str) -> str:
        return f"{stopped_message(job.stop_reason)}; {message}" if job.stop_reason is not None else message

    async def _wait_node_down_seen(self, name: str) -> None:
        """Until the node's DOWN was handed to the runner and one more heartbeat went out (so
        the cell log has the node DOWN before this copy's FAILED); at most ``node_fail_report_s``."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.node_fail_report_s
        while not (name in self._down_at_beat and self._beats > self._down_at_beat[name]):
            left = deadline - loop.time()
            if left <= 0:
                log.warning("slurm %s: node %s DOWN not reported within %.0fs; reporting its job anyway",
                            self.name, name, self.node_fail_report_s)
                return
            with suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._beat.wait(), min(left, 1.0))

    def _node_down(self, name: str) -> None:
        """A node went DOWN: its jobs still PENDING would start there once it is back, after
        Suanli placed them elsewhere; cancel them (their dispatches report NODE_FAIL)."""
        for job in list(self._jobs.values()):
            if job.node == name and job.job_id is not None and (job.state is None or
                                                                job.state.state in WAITING_STATES):
                self._lost_pending(job)

    def _lost_pending(self, job: _Job) -> None:
        """Cancel a job that waits for a DOWN node: Slurm would start it once the node is back
        (it even requeues a job whose launch failed on a dead slurmd, whatever JobRequeue
        says). Its dispatch reports NODE_FAIL."""
        assert job.job_id is not None
        log.warning("slurm %s: cancelling job %d, pending for its node %s, which is DOWN", self.name, job.job_id,
                    job.node)
        job.state = JobState(job.job_id, "NODE_FAIL", job.node, "node down while pending", None)
        job.changed.set()
        asyncio.ensure_future(self._call("scancel", str(job.job_id)))

    async def _poll_jobs(self) -> None:
        while True:
            await asyncio.sleep(self.poll_interval_s)
            tracked = [j for j in self._jobs.values() if j.job_id is not None]
            if not tracked:
                continue
            try:
                rc, out, err = await self._call("squeue", "-h", "-t", "all", "-O", SQUEUE_FORMAT)
            except (asyncio.TimeoutError, OSError) as exc:
                log.warning("slurm %s: squeue failed: %s", self.name, exc)
                continue
            self.stats["squeue_polls"] += 1
            if rc != 0:
                log.warning("slurm %s: squeue exited %d: %s", self.name, rc, err.strip())
                continue
            self.update_jobs(parse_squeue(out))

    def update_jobs(self, jobs: Mapping[int, JobState]) -> None:
        """Take one squeue listing: wake every tracked job whose state changed (or that is gone)."""
        for job in list(self._jobs.values()):
            if job.job_id is None or (job.state is not None and job.state.state == "NODE_FAIL"
                                      and job.state.reason == "node down while pending"):
                continue
            seen = jobs.get(job.job_id)
            if seen is None:
                job.missing += 1
                if job.missing == 2:                # twice: purged (a just-submitted job is always listed)
                    job.state = None
                    job.changed.set()
                continue
            job.missing = 0
            if seen != job.state:
                job.state = seen
                job.changed.set()
                if seen.state in WAITING_STATES and self._reported.get(job.node) == "DOWN":
                    self._lost_pending(job)     # back to PENDING (a failed launch) on a node already DOWN

    def _exit_record(self, exit_file: Path) -> int | None:
        try:
            return int(exit_file.read_text().strip())
        except (OSError, ValueError):
            return None

    def _tail(self, output: Path) -> str:
        try:
            with open(output, "rb") as f:
                size = f.seek(0, os.SEEK_END)
                f.seek(max(0, size - 4 * self.tail_chars))
                text = f.read().decode("utf-8", errors="replace").strip()
        except OSError:
            return ""
        return text[-self.tail_chars:]

    # -- stop --------------------------------------------------------------------------------
    async def stop(self, task_id: str, node_id: str, reason: str, grace_ms: int | None = None) -> bool:
        """scancel the task's job on ``node_id``: SIGTERM to the batch shell and the command,
        ``scancel`` after the grace. Its dispatch reports FAILED, stopped. False if not here."""
        name = self.ids.get(node_id)
        found = [j for j in self._jobs.values() if j.command["task_id"] == task_id and j.node == name]
        grace_s = self.kill_grace_s if grace_ms is None else max(0, grace_ms) / 1000
        for job in found:
            if job.stop_reason is not None:
                continue
            job.stop_reason = reason
            if job.job_id is not None:
                job.stopper = asyncio.create_task(self._scancel(job, grace_s), name=f"{self.name}-scancel-{job.job_id}")
        return bool(found)

    async def _scancel(self, job: _Job, grace_s: float | None) -> None:
        assert job.job_id is not None
        self.stats["scancel"] += 1
        if grace_s and job.state is not None and job.state.state in RUNNING_STATES:
            await self._call("scancel", "--signal=TERM", "--full", str(job.job_id))
            loop = asyncio.get_running_loop()
            deadline = loop.time() + grace_s
            while not self._ended(job) and job.job_id is not None and loop.time() < deadline:
                await asyncio.sleep(min(0.2, max(0.0, deadline - loop.time())))
            if self._ended(job):
                return
        await self._call("scancel", str(job.job_id))


# ---- the command line --------------------------------------------------------------------
def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The slurm connector's own options (a launcher adds them to its 'slurm' sub-command)."""
    parser.add_argument("--cell", default="slurm")
    parser.add_argument("--slurm-conf", type=Path, default=None,
                        help="the cluster's slurm.conf (default: $SLURM_CONF, else <home>/slurm/slurm.conf)")
    parser.add_argument("--node-prefix", default=None, help="Suanli node id = PREFIX + Slurm node name "
                                                            "(default: '<name>-')")
    parser.add_argument("--site", default=None, help="the nodes' site, region and zone (default: the name)")
    parser.add_argument("--run-dir", type=Path, default=None,
                        help="batch scripts, outputs, exit records (default: <home>/slurm/jobs/<name>)")
    parser.add_argument("--poll", type=float, default=1.0, help="seconds between squeue polls of the jobs")
    parser.add_argument("--node-poll", type=float, default=2.0, help="seconds between sinfo polls of the nodes")
    parser.add_argument("--kill-grace", type=float, default=5.0,
                        help="seconds between SIGTERM and scancel for a stop without a grace")


def build_adapter(args: argparse.Namespace) -> SlurmCluster:
    """The adapter of parsed :func:`add_arguments` options (``args.name`` may be None: 'slurm')."""
    return SlurmCluster(cell=args.cell, name=getattr(args, "name", None) or "slurm", slurm_conf=args.slurm_conf,
                        node_prefix=args.node_prefix, run_dir=args.run_dir, site=args.site,
                        poll_interval_s=args.poll, node_poll_s=args.node_poll, kill_grace_s=args.kill_grace)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m suanli.connectors.slurm``: the same as ``python -m suanli.connectors slurm``
    (the common connector options and :func:`add_arguments`'; see ``connectors/launch.py``)."""
    from suanli.connectors.launch import main as launch

    return launch(["slurm", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    sys.exit(main())
