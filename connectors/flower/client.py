#!/usr/bin/env python3
"""One Flower SuperNode for one data partition: a Suanli task's command (Flower venv python).

    client.py --superlink 127.0.0.1:P --clientappio-port Q --partition-id I --num-partitions N
              [--cloud NAME] [--work-dir DIR] [--poll 0.2] [--heartbeat 10] [--stock]

Runs ``flower-supernode --insecure --superlink ... --port Q --node-config
'partition-id=I num-partitions=N cloud="NAME"'`` in this process (so a SIGTERM/SIGKILL of this
pid is the node's death; its helper processes watch their parent's pid and exit with it). In
Flower 1.42 the old ``--clientappio-api-address`` is the SuperNode's Runtime HTTP API, ``--port``.

**Warm ClientApps** (default; ``--stock`` gives Flower's own behaviour). Flower 1.42 starts a
fresh ``flwr-clientapp`` interpreter for EVERY message (SecAgg+: 4 per round), and importing
flwr + scikit-learn costs ~3 s of CPU each time. Here the SuperNode runs with ``--isolation
process`` and this script starts the SuperExec itself (``--superexec`` mode, a child process)
with flwr, numpy and scikit-learn imported once; its executor forks that warm process per
task and runs Flower's own ``flwr-clientapp`` entry point in the fork, same argv, same token
protocol. Only the process creation changes.

Two timing knobs, because Flower 1.42 hard-codes them (both patched in this process only,
against the pinned 1.42.0; ``--stock`` disables both):

* ``--poll``: the SuperNode sleeps a fixed 3 s after each empty pull from the SuperLink
  (``start_client_internal``); SecAgg+ needs 4 exchanges per round, so this dominates.
* ``--heartbeat``: the interval the node announces (default 30 s; the SuperLink accepts
  10..1800 s and declares a node dead after 2 missed intervals), i.e. dead-node detection.

``FLWR_SUPEREXEC_TASK_POLL_INTERVAL`` (Flower's own setting, default 1 s) is set to ``--poll``
for the SuperExec that starts the ClientApp processes. ``FLWR_HOME`` is ``<work-dir>/flwr-home``.
"""
from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path


class _FastSleep:
    """Stands in for the ``time`` module inside flwr.supernode.start_client_internal."""

    def __init__(self, cap: float) -> None:
        self.cap = cap

    def sleep(self, seconds: float) -> None:
        time.sleep(min(seconds, self.cap))

    def __getattr__(self, name: str):  # everything else is the real time module
        return getattr(time, name)


def _tune(poll: float, heartbeat: float) -> None:
    import flwr.supercore.heartbeat as hb
    import flwr.supernode.fleet_http_connection as conn
    import flwr.supernode.start_client_internal as sci

    sci.time = _FastSleep(poll)                       # type: ignore[assignment]
    conn.HEARTBEAT_DEFAULT_INTERVAL = heartbeat       # announced to the SuperLink
    hb.HEARTBEAT_DEFAULT_INTERVAL = heartbeat         # the sender's own period


def _die_with_parent() -> None:
    """SIGKILL this process when its parent dies (Linux prctl PR_SET_PDEATHSIG). Flower's own
    parent-pid monitor only raises SIGINT, which a SuperExec retrying its connection survives."""
    if sys.platform.startswith("linux"):
        import ctypes

        ctypes.CDLL(None).prctl(1, signal.SIGKILL)    # 1 = PR_SET_PDEATHSIG


def _fork_launch(spec):  # type: ignore[no-untyped-def]
    """SubprocessExecutor.launch for ClientApp tasks: fork the warm SuperExec and run
    ``flwr-clientapp`` (the same argv Flower would exec) in the child."""
    from flwr.supercore.superexec.executor.types import LaunchResult
    from flwr.supernode.cli import flwr_clientapp

    argv = ["flwr-clientapp", "--runtime-api-address", spec.runtime_api_address, "--token", spec.token,
            "--insecure"]
    if spec.parent_pid is not None:
        argv += ["--parent-pid", str(spec.parent_pid)]
    if os.fork() == 0:                                # the child: never returns into the SuperExec
        code = 1
        try:
            _die_with_parent()
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            sys.argv = argv
            flwr_clientapp()
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        except BaseException:                          # noqa: BLE001 - report, then leave the fork
            import traceback
            traceback.print_exc()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    return LaunchResult.accepted()


def run_superexec(runtime_api_address: str, parent_pid: int) -> None:
    """The warm SuperExec (``--superexec`` mode): Flower's own ``flower-superexec`` main, with
    ClientApp launches forked from this already-imported process."""
    _die_with_parent()
    if os.getppid() != parent_pid:                    # the SuperNode died before prctl took effect
        return
    import numpy  # noqa: F401  - the imports every ClientApp would otherwise repeat
    import sklearn.datasets  # noqa: F401
    import sklearn.model_selection  # noqa: F401
    import flwr.client  # noqa: F401
    import flwr.client.mod  # noqa: F401
    import flwr.supernode.cli  # noqa: F401
    from flwr.supercore.cli import flower_superexec
    from flwr.supercore.constant import TaskType
    from flwr.supercore.superexec.executor import subprocess_executor as sx

    stock_launch = sx.SubprocessExecutor.launch

    def launch(self, spec):  # type: ignore[no-untyped-def]
        if spec.task_type == TaskType.CLIENT_APP:
            return _fork_launch(spec)
        return stock_launch(self, spec)

    sx.SubprocessExecutor.launch = launch             # type: ignore[method-assign]
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)     # the kernel reaps the forks (no zombies)
    sys.argv = ["flower-superexec", "--insecure", "--runtime-api-address", runtime_api_address,
                "--parent-pid", str(parent_pid)]
    flower_superexec()


def main(argv: list[str] | None = None) -> int:
    if argv is None:
        argv = sys.argv[1:]
    if argv[:1] == ["--superexec"]:                   # internal: the warm SuperExec child
        run_superexec(argv[1], int(argv[2]))
        return 0
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--superlink", required=True, help="host:port of the SuperLink (its one HTTP port)")
    ap.add_argument("--clientappio-port", type=int, required=True, help="this SuperNode's Runtime API port")
    ap.add_argument("--partition-id", type=int, required=True)
    ap.add_argument("--num-partitions", type=int, required=True)
    ap.add_argument("--cloud", default="default")
    ap.add_argument("--work-dir", type=Path, default=None)
    ap.add_argument("--poll", type=float, default=0.2, help="max sleep between pulls, s (Flower: 3)")
    ap.add_argument("--heartbeat", type=float, default=10.0, help="heartbeat interval, s, 10..1800 (Flower: 30)")
    ap.add_argument("--stock", action="store_true",
                    help="Flower's own behaviour: cold ClientApp processes, 3 s polls, 30 s heartbeats")
    args = ap.parse_args(argv)
    if not 0 <= args.partition_id < args.num_partitions:
        ap.error("--partition-id must be in [0, --num-partitions)")
    if not 10 <= args.heartbeat <= 1800:
        ap.error("--heartbeat must be within 10..1800 s (the SuperLink rejects other values)")
    if '"' in args.cloud or " " in args.cloud:
        ap.error("--cloud must not contain spaces or quotes")
    work = args.work_dir or Path(tempfile.mkdtemp(prefix=f"flwr-node{args.partition_id}-"))
    (work / "flwr-home").mkdir(parents=True, exist_ok=True)
    os.environ.update(FLWR_HOME=str(work / "flwr-home"), FLWR_TELEMETRY_ENABLED="0",
                      FLWR_DISABLE_UPDATE_CHECK="1")
    # The ClientApp processes are `flwr-clientapp` of this venv, found on PATH.
    os.environ["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    if not args.stock:
        os.environ["FLWR_SUPEREXEC_TASK_POLL_INTERVAL"] = str(max(args.poll, 0.01))
        _tune(args.poll, args.heartbeat)
    from flwr.supernode.cli import flower_supernode

    isolation = []
    if not args.stock:
        isolation = ["--isolation", "process"]
        subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--superexec",
                          f"127.0.0.1:{args.clientappio_port}", str(os.getpid())], stdin=subprocess.DEVNULL)
    sys.argv = ["flower-supernode", "--insecure", "--superlink", args.superlink, *isolation,
                "--host", "127.0.0.1", "--port", str(args.clientappio_port),
                "--node-config", f'partition-id={args.partition_id} num-partitions={args.num_partitions} '
                                 f'cloud="{args.cloud}"']
    flower_supernode()
    return 0


if __name__ == "__main__":
    sys.exit(main())
