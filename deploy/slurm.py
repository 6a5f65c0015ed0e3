"""A real Slurm cluster on this machine: MUNGE, slurmctld and several slurmd, on loopback.

``python -m suanli.deploy.slurm up|down|status|kill-node NODE|start-node NODE`` (or
:func:`up` / :func:`down` / :func:`status` / :func:`kill_node` / :func:`start_node`).

Everything is Debian's Slurm 22.05 and MUNGE (``.ci/setup.d/70-slurm.sh`` installs them,
starting no service) run as the project's own pid-file services (``deploy/processes.py``),
under ``<home>/slurm/`` (``home`` from the settings):

* **munged** with a key of its own (``munge/munge.key``, 1 KiB from ``os.urandom``, made
  once) on its own socket (``munge/munge.socket``); Slurm finds it through ``AuthInfo``;
* **slurmctld** on ``127.0.0.1:SUANLI_SLURM_PORT`` (default 16817), state in ``state/``;
* **N slurmd** (default 4: ``n1`` .. ``n4``), each ``slurmd -N nI`` on port ``16817 + I``,
  spool ``spool/nI``. Debian builds Slurm with ``--enable-multiple-slurmd`` (``scontrol show
  config`` says ``MULTIPLE_SLURMD = Yes``), so several slurmd share this host: every node has
  ``NodeHostname`` = this host's name and ``NodeAddr=127.0.0.1`` with a port of its own.

``slurm.conf`` is generated at every start of slurmctld (the host name differs between
machines): ``select/cons_tres`` with ``CR_Core_Memory`` (CPUs and memory are consumable),
``proctrack/linuxproc`` and ``task/none`` (no cgroups here), no accounting database,
``JobRequeue=0`` (Suanli, not Slurm, places a job again when its node dies),
``ReturnToService=2`` (a node that was DOWN for not responding takes work again once its
slurmd registers), ``SlurmdTimeout`` 5 s (a killed slurmd's node is DOWN in about 15 s),
``MinJobAge`` 600 s (finished jobs stay visible to ``squeue`` that long; the connector's
completion records outlive that). Each node has ``cpus`` CPUs (default 2; four nodes
oversubscribe a 2-core machine, which is fine for short jobs) and ``memory_mib`` MiB (default
2048); ``gres`` gives chosen nodes generic resources, by default ``{"n4": "fpga:u250:1"}``:
count-only devices, nothing is bound, so they show accelerators without hardware (Slurm's
``gpu`` GRES needs device files: a count-only ``gpu`` drains its node here).

Ready means ``sinfo`` answers and every node is responding and not DOWN (IDLE, MIXED,
ALLOCATED...). ``up`` is idempotent: running daemons are kept. ``down`` cancels the
cluster's remaining jobs, then stops the slurmd, slurmctld and munged by pid. Client
commands need ``SLURM_CONF`` (:func:`client_env`); ``suanli.connectors.slurm`` sets it
itself from ``--slurm-conf`` or the same default path.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

from suanli.config import Settings, load_settings
from suanli.deploy.processes import ServiceProcess
from suanli.errors import StackError

HOST = "127.0.0.1"
CLUSTER = "suanli"
PARTITION = "main"
DEFAULT_PORT = 16817
# Node states in which a node takes or runs work (sinfo --json "state", lower case).
UP_STATES = frozenset({"idle", "mixed", "allocated", "completing"})


def default_port() -> int:
    """slurmctld's port: ``SUANLI_SLURM_PORT`` or 16817; slurmd ``nI`` listens on port + I."""
    return int(os.environ.get("SUANLI_SLURM_PORT") or DEFAULT_PORT)


@dataclass(frozen=True)
class ClusterSpec:
    """The shape of the local cluster."""

    nodes: int = 4
    cpus: int = 2
    memory_mib: int = 2048
    port: int = field(default_factory=default_port)
    slurmd_timeout_s: int = 5
    min_job_age_s: int = 600
    # node name -> GRES ("fpga:u250:1,..."): by default n4 holds one FPGA, so accelerators show
    gres: Mapping[str, str] = field(default_factory=lambda: {"n4": "fpga:u250:1"})

    @property
    def names(self) -> list[str]:
        return [f"n{i}" for i in range(1, self.nodes + 1)]

    def node_port(self, name: str) -> int:
        return self.port + self.names.index(name) + 1


@dataclass(frozen=True)
class SlurmPaths:
    """Where the cluster keeps everything: ``<home>/slurm``."""

    root: Path

    @classmethod
    def of(cls, settings: Settings) -> "SlurmPaths":
        return cls(Path(settings.home) / "slurm")

    @property
    def conf(self) -> Path:
        return self.root / "slurm.conf"

    @property
    def gres_conf(self) -> Path:
        return self.root / "gres.conf"

    @property
    def munge(self) -> Path:
        return self.root / "munge"

    @property
    def key(self) -> Path:
        return self.munge / "munge.key"

    @property
    def socket(self) -> Path:
        return self.munge / "munge.socket"

    @property
    def state(self) -> Path:
        return self.root / "state"

    @property
    def logs(self) -> Path:
        return self.root / "log"

    @property
    def jobs(self) -> Path:
        """The connector's default run directory (batch scripts, outputs, completion records)."""
        return self.root / "jobs"

    def spool(self, node: str) -> Path:
        return self.root / "spool" / node


def default_conf(settings: Settings | None = None) -> Path:
    return SlurmPaths.of(settings or load_settings()).conf


def client_env(settings: Settings | None = None) -> dict[str, str]:
    """The environment of Slurm's client commands for this cluster (``SLURM_CONF``)."""
    return {**os.environ, "SLURM_CONF": str(default_conf(settings))}


def _binary(name: str) -> str:
    found = shutil.which(name) or next((p for p in (f"/usr/sbin/{name}", f"/usr/bin/{name}") if os.path.exists(p)),
                                       None)
    if not found:
        raise StackError(f"{name} not found: install Slurm and MUNGE with `bash .ci/setup.d/70-slurm.sh` "
                         "(apt-get install munge slurmctld slurmd slurm-client)")
    return found


def config_text(paths: SlurmPaths, spec: ClusterSpec, hostname: str | None = None) -> str:
    """The generated slurm.conf."""
    host = hostname or socket.gethostname()
    lines = [
        "# Generated by deploy/slurm.py (python -m suanli.deploy.slurm up) at every start of slurmctld.",
        f"ClusterName={CLUSTER}",
        f"SlurmctldHost={host}({HOST})",
        f"SlurmctldPort={spec.port}",
        "SlurmUser=root",
        "SlurmdUser=root",
        "AuthType=auth/munge",
        "CredType=cred/munge",
        f"AuthInfo=socket={paths.socket}",
        f"StateSaveLocation={paths.state}",
        f"SlurmdSpoolDir={paths.root / 'spool'}/%n",
        f"SlurmctldPidFile={paths.root / 'slurmctld.pid'}",
        f"SlurmdPidFile={paths.root / 'spool'}/%n/slurmd.pid",
        f"SlurmctldLogFile={paths.logs / 'slurmctld.log'}",
        f"SlurmdLogFile={paths.logs}/slurmd.%n.log",
        "MailProg=/bin/true",
        # no cgroups on this machine: processes are tracked by their parentage
        "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/none",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_Core_Memory",
        "SchedulerType=sched/backfill",
        "MpiDefault=none",
        "SwitchType=switch/none",
        "AccountingStorageType=accounting_storage/none",
        "JobCompType=jobcomp/none",
        "JobAcctGatherType=jobacct_gather/none",
        # Suanli places a job again when its node dies; Slurm must not requeue it behind its back
        "JobRequeue=0",
        "ReturnToService=2",
        f"SlurmdTimeout={spec.slurmd_timeout_s}",
        f"MinJobAge={spec.min_job_age_s}",
        "KillWait=5",
        "InactiveLimit=0",
        "MessageTimeout=10",
    ]
    gres_types = sorted({g.split(":")[0] for value in spec.gres.values() for g in value.split(",") if g})
    if gres_types:
        lines.append(f"GresTypes={','.join(gres_types)}")
    for name in spec.names:
        gres = f" Gres={spec.gres[name]}" if spec.gres.get(name) else ""
        lines.append(f"NodeName={name} NodeHostname={host} NodeAddr={HOST} Port={spec.node_port(name)} "
                     f"CPUs={spec.cpus} RealMemory={spec.memory_mib}{gres} State=UNKNOWN")
    lines.append(f"PartitionName={PARTITION} Nodes=ALL Default=YES MaxTime=INFINITE State=UP")
    return "\n".join(lines) + "\n"


def gres_text(spec: ClusterSpec) -> str:
    """gres.conf: count-only devices (no File=: nothing to bind on a machine without them)."""
    lines = ["# Generated by deploy/slurm.py: count-only generic resources."]
    for name in spec.names:
        for item in filter(None, (spec.gres.get(name) or "").split(",")):
            parts = item.split(":")
            kind, count = parts[0], parts[-1]
            typ = f" Type={parts[1]}" if len(parts) == 3 else ""
            lines.append(f"NodeName={name} Name={kind}{typ} Count={count}")
    return "\n".join(lines) + "\n"


# ---- the services ------------------------------------------------------------------------
def munged_service(settings: Settings) -> ServiceProcess:
    paths, home = SlurmPaths.of(settings), Path(settings.home)
    return ServiceProcess("munged", home / "run" / "slurm-munged.pid", paths.logs / "munged.out",
                          marker=str(paths.socket))


def slurmctld_service(settings: Settings) -> ServiceProcess:
    paths, home = SlurmPaths.of(settings), Path(settings.home)
    return ServiceProcess("slurmctld", home / "run" / "slurm-slurmctld.pid", paths.logs / "slurmctld.out",
                          marker=f"-f {paths.conf}")


def slurmd_service(settings: Settings, node: str) -> ServiceProcess:
    paths, home = SlurmPaths.of(settings), Path(settings.home)
    return ServiceProcess(f"slurmd-{node}", home / "run" / f"slurm-slurmd-{node}.pid",
                          paths.logs / f"slurmd.{node}.out", marker=f"-N {node} -f {paths.conf}")


def _run(argv: list[str], settings: Settings, timeout: float = 15) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=client_env(settings))


def munge_ready(settings: Settings) -> bool:
    """A credential made on munged's socket decodes on it."""
    sock = str(SlurmPaths.of(settings).socket)
    try:
        made = subprocess.run([_binary("munge"), "-n", "-S", sock], capture_output=True, timeout=5)
        if made.returncode != 0:
            return False
        back = subprocess.run([_binary("unmunge"), "-S", sock], input=made.stdout, capture_output=True, timeout=5)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return back.returncode == 0


def node_states(settings: Settings) -> dict[str, dict[str, Any]] | None:
    """``sinfo --json``'s nodes by name, or None when slurmctld does not answer."""
    try:
        out = _run([_binary("sinfo"), "--json"], settings, timeout=10)
    except subprocess.TimeoutExpired:
        return None
    if out.returncode != 0:
        return None
    try:
        return {n["name"]: n for n in json.loads(out.stdout).get("nodes", [])}
    except ValueError:
        return None


def node_up(node: Mapping[str, Any]) -> bool:
    """Responding and able to run work (not DOWN, not NOT_RESPONDING, not DRAIN/FAIL)."""
    flags = {f.upper() for f in node.get("state_flags") or []}
    return (str(node.get("state", "")).lower() in UP_STATES
            and not flags & {"NOT_RESPONDING", "DRAIN", "FAIL", "POWERED_DOWN", "INVALID_REG"})


def _wait(what: str, ready: Callable[[], bool], deadline: float, services: list[ServiceProcess],
          detail: Callable[[], str] = lambda: "") -> None:
    while not ready():
        for svc in services:
            if svc.pid() is None:
                raise StackError(f"{svc.name} exited while waiting for {what}; last lines of {svc.log_file}:\n"
                                 f"{svc.log_tail()}")
        if time.monotonic() > deadline:
            raise StackError(f"{what}: not ready in time. {detail()}")
        time.sleep(0.2)


def _port_taken(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.5)
        return sock.connect_ex((HOST, port)) == 0


def up(settings: Settings | None = None, spec: ClusterSpec | None = None, log: Callable[[str], None] = print,
       timeout: float = 90) -> dict[str, Any]:
    """Start munged, slurmctld and the slurmd nodes unless they run; wait until every node is
    up. Returns what was started, the config path and the seconds it took. StackError (with
    the log's tail) when a daemon exits or the cluster is not ready within ``timeout``."""
    settings = settings or load_settings()
    spec = spec or ClusterSpec()
    began = time.monotonic()
    deadline = began + timeout
    paths = SlurmPaths.of(settings)
    for folder in (paths.root, paths.state, paths.logs, paths.jobs, *(paths.spool(n) for n in spec.names)):
        folder.mkdir(parents=True, exist_ok=True)
    paths.munge.mkdir(mode=0o755, exist_ok=True)
    os.chmod(paths.munge, 0o755)     # the socket must be reachable; the key itself is 0600
    if not paths.key.exists():
        tmp = paths.key.with_suffix(".tmp")
        tmp.write_bytes(os.urandom(1024))
        os.chmod(tmp, 0o600)
        tmp.replace(paths.key)
    started: dict[str, bool] = {}

    munged = munged_service(settings)
    started["munged"] = munged.pid() is None
    if started["munged"]:
        paths.socket.unlink(missing_ok=True)
        munged.start([_binary("munged"), "-F", "--force", f"--key-file={paths.key}", f"--socket={paths.socket}",
                      f"--pid-file={paths.munge / 'munged.pid'}", f"--seed-file={paths.munge / 'munged.seed'}",
                      f"--log-file={paths.logs / 'munged.log'}"])
        log(f"munged: starting on {paths.socket}")
    _wait("munged", lambda: munge_ready(settings), deadline, [munged])

    ctld = slurmctld_service(settings)
    started["slurmctld"] = ctld.pid() is None
    if started["slurmctld"]:
        if _port_taken(spec.port):
            raise StackError(f"slurmctld: {HOST}:{spec.port} is taken by a process that is not ours "
                             "(set SUANLI_SLURM_PORT)")
        text = config_text(paths, spec)
        # A new cluster shape starts from a clean state (-c: no saved jobs, no node states of
        # the old shape such as a DRAIN for GRES it no longer has); the same shape keeps its jobs.
        fresh = not paths.conf.exists() or paths.conf.read_text() != text
        paths.conf.write_text(text)
        paths.gres_conf.write_text(gres_text(spec))
        ctld.start([_binary("slurmctld"), "-D", *(["-c"] if fresh else []), "-f", str(paths.conf)], cwd=paths.root)
        log(f"slurmctld: starting on {HOST}:{spec.port} (config {paths.conf}{', clean state' if fresh else ''})")
    _wait("slurmctld (sinfo answers)", lambda: node_states(settings) is not None, deadline, [munged, ctld])

    names = sorted(node_states(settings) or {})
    for name in names:
        svc = slurmd_service(settings, name)
        started[f"slurmd-{name}"] = svc.pid() is None
        if started[f"slurmd-{name}"]:
            paths.spool(name).mkdir(parents=True, exist_ok=True)
            svc.start([_binary("slurmd"), "-D", "-N", name, "-f", str(paths.conf)], cwd=paths.root)
    daemons = [munged, ctld, *(slurmd_service(settings, n) for n in names)]

    resumed: set[str] = set()

    def all_up() -> bool:
        nodes = node_states(settings)
        if not nodes:
            return False
        for name, node in nodes.items():
            flags = {f.upper() for f in node.get("state_flags") or []}
            held = str(node.get("state", "")).lower() == "down" or "DRAIN" in flags
            if held and "NOT_RESPONDING" not in flags and name not in resumed:
                # left DOWN or DRAINED by an earlier run (a killed slurmd, a GRES it no longer
                # has): its slurmd answers now, so it may take work again; once per call, so a
                # node that is drained again for a real reason fails the start with that reason
                resumed.add(name)
                _run([_binary("scontrol"), "update", f"NodeName={name}", "State=RESUME"], settings)
        return all(node_up(n) for n in nodes.values())

    def what() -> str:
        nodes = node_states(settings) or {}
        return "; ".join(f"{n}: {v.get('state')} {v.get('state_flags')} {v.get('reason')}"
                         for n, v in sorted(nodes.items()))

    _wait(f"{len(names)} slurmd nodes IDLE", all_up, deadline, daemons, what)
    seconds = round(time.monotonic() - began, 2)
    log(f"slurm: {len(names)} node(s) up in {seconds:.1f}s (SLURM_CONF={paths.conf})")
    return {"started": started, "conf": str(paths.conf), "nodes": names, "seconds": seconds}


def cancel_all(settings: Settings, timeout: float = 30) -> int:
    """scancel every job of the cluster that has not ended; wait until none runs. The count."""
    out = _run([_binary("squeue"), "-h", "-o", "%i"], settings)
    ids = out.stdout.split() if out.returncode == 0 else []
    if ids:
        _run([_binary("scancel"), *ids], settings)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            left = _run([_binary("squeue"), "-h", "-o", "%i"], settings)
            if left.returncode != 0 or not left.stdout.split():
                break
            time.sleep(0.2)
    return len(ids)


def down(settings: Settings | None = None, log: Callable[[str], None] = print) -> dict[str, bool]:
    """Cancel the remaining jobs, then stop every slurmd, slurmctld and munged, by pid."""
    settings = settings or load_settings()
    ctld = slurmctld_service(settings)
    if ctld.pid() is not None:
        with_jobs = cancel_all(settings)
        if with_jobs:
            log(f"slurm: cancelled {with_jobs} job(s)")
    stopped: dict[str, bool] = {}
    run_dir = Path(settings.home) / "run"
    nodes = sorted(p.name[len("slurm-slurmd-"):-len(".pid")] for p in run_dir.glob("slurm-slurmd-*.pid"))
    for svc in [*(slurmd_service(settings, n) for n in nodes), ctld, munged_service(settings)]:
        stopped[svc.name] = svc.stop(timeout=30)
        log(f"{svc.name}: {'stopped' if stopped[svc.name] else 'not running'}")
    return stopped


def kill_node(settings: Settings, node: str) -> int:
    """SIGKILL node ``node``'s slurmd (a node failure: its jobs' processes are not touched,
    slurmctld stops hearing from it and marks it DOWN after SlurmdTimeout). Its pid."""
    import signal

    svc = slurmd_service(settings, node)
    pid = svc.pid()
    if pid is None:
        raise StackError(f"slurmd {node} is not running")
    os.kill(pid, signal.SIGKILL)
    return pid


def start_node(settings: Settings, node: str) -> int:
    """Start node ``node``'s slurmd again (after :func:`kill_node`); returns at once."""
    svc = slurmd_service(settings, node)
    pid = svc.pid()
    if pid is not None:
        return pid
    paths = SlurmPaths.of(settings)
    return svc.start([_binary("slurmd"), "-D", "-N", node, "-f", str(paths.conf)], cwd=paths.root)


def status(settings: Settings | None = None) -> list[dict[str, Any]]:
    """One row per daemon: name, pid, resident MiB; and each node's Slurm state."""
    settings = settings or load_settings()
    run_dir = Path(settings.home) / "run"
    nodes = sorted(p.name[len("slurm-slurmd-"):-len(".pid")] for p in run_dir.glob("slurm-slurmd-*.pid"))
    states = node_states(settings) if slurmctld_service(settings).pid() is not None else None
    rows = []
    for svc in [munged_service(settings), slurmctld_service(settings), *(slurmd_service(settings, n) for n in nodes)]:
        row: dict[str, Any] = {"service": svc.name, "pid": svc.pid(), "rss_mib": svc.rss_mib()}
        if svc.name.startswith("slurmd-") and states is not None:
            node = states.get(svc.name[len("slurmd-"):]) or {}
            row["state"] = "+".join([str(node.get("state", "?")), *node.get("state_flags", [])]).lower()
        rows.append(row)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m suanli.deploy.slurm",
                                     description="A local Slurm cluster (MUNGE, slurmctld, N slurmd) on 127.0.0.1.")
    sub = parser.add_subparsers(dest="action", required=True)
    start = sub.add_parser("up", help="start (or find running) and wait until every node is up")
    start.add_argument("--nodes", type=int, default=4)
    start.add_argument("--cpus", type=int, default=2, help="CPUs per node")
    start.add_argument("--memory-mib", type=int, default=2048, help="memory per node, MiB")
    start.add_argument("--gres", action="append", default=[], metavar="NODE=GRES",
                       help="generic resources of a node, e.g. n4=fpga:u250:1 (repeatable; default: that one; "
                            "'none': no GRES)")
    sub.add_parser("down", help="cancel the jobs, stop every daemon")
    sub.add_parser("status", help="the daemons and node states")
    kill = sub.add_parser("kill-node", help="SIGKILL a node's slurmd (failure injection)")
    kill.add_argument("node")
    revive = sub.add_parser("start-node", help="start a node's slurmd again")
    revive.add_argument("node")
    args = parser.parse_args(argv)
    settings = load_settings()
    try:
        if args.action == "up":
            gres = (ClusterSpec().gres if not args.gres else
                    {} if args.gres == ["none"] else dict(item.split("=", 1) for item in args.gres))
            up(settings, ClusterSpec(nodes=args.nodes, cpus=args.cpus, memory_mib=args.memory_mib, gres=gres))
        elif args.action == "down":
            down(settings)
        elif args.action == "status":
            for row in status(settings):
                print(json.dumps(row))
        elif args.action == "kill-node":
            print(f"slurmd {args.node}: killed (pid {kill_node(settings, args.node)})")
        else:
            print(f"slurmd {args.node}: started (pid {start_node(settings, args.node)})")
    except StackError as exc:
        print(f"slurm: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
