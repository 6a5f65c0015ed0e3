"""Start a built-in connector: ``python -m suanli.connectors sim|local|k8s|quantum|slurm [options]``.

``build_adapter(kind, **options)`` makes the adapter; ``run_connector(adapter, ...)`` runs it
until cancelled; ``main(argv)`` is the command line (one start line on stdout, logs on
stderr, exit 0 on SIGTERM/SIGINT, 2 on a refused configuration).

The adapters of outside systems (:data:`EXTERNAL`: Kubernetes, ...) live in modules of
their own, each with ``add_arguments(parser)`` (its options) and ``build_adapter(args)``
(the adapter from the parsed options); they are imported only when their kind is started,
so this command line does not pay for their clients.
"""
from __future__ import annotations

import argparse
import asyncio
import importlib
import logging
import signal
import sys
from pathlib import Path
from typing import Any, Callable, Sequence

from suanli import gc_policy
from suanli.config import settings
from suanli.connectors.kit import Adapter, ConnectorRunner
from suanli.errors import ConnectorError, SuanliError

# kind -> (module, one-line help): adapters of outside systems, imported when started
EXTERNAL: dict[str, tuple[str, str]] = {
    "k8s": ("suanli.connectors.kubernetes", "a Kubernetes API server: its nodes, and pods with schedulerName suanli"),
    "quantum": ("suanli.connectors.quantum", "QPU nodes backed by qiskit-aer simulators, running OpenQASM circuits"),
    "slurm": ("suanli.connectors.slurm", "a Slurm cluster: sinfo nodes, tasks as sbatch jobs, scancel to stop"),
}
KINDS = ("sim", "local", *EXTERNAL)


def build_adapter(kind: str, **options: Any) -> Adapter:
    """The built-in adapter ``kind`` ('sim' or 'local') with its keyword options."""
    if kind == "sim":
        from suanli.connectors.simulated import SimulatedCluster
        return SimulatedCluster(**options)
    if kind == "local":
        from suanli.connectors.local_process import LocalProcesses
        return LocalProcesses(**options)
    raise ConnectorError(f"unknown connector {kind!r}; built in: {', '.join(KINDS)}")


async def run_connector(adapter: Adapter, *, bootstrap: str | None = None, registry_url: str | None = None,
                        on_ready: Callable[[ConnectorRunner], None] | None = None, **runner_options: Any) -> None:
    """Run ``adapter`` against Kafka until this coroutine is cancelled (Kafka/registry from settings)."""
    from suanli.schemas.codec import Codec
    from suanli.schemas.registry import RegistryClient

    with RegistryClient(registry_url or settings().registry_url) as registry:
        runner = ConnectorRunner(adapter, codec=Codec(registry), bootstrap=bootstrap, **runner_options)
        run = asyncio.create_task(runner.run(), name=f"connector-{adapter.name}")
        if on_ready is not None:
            ready = asyncio.create_task(runner.ready.wait())
            await asyncio.wait({run, ready}, return_when=asyncio.FIRST_COMPLETED)
            if ready.done():
                on_ready(runner)
            else:
                ready.cancel()
        try:
            await run
        finally:
            run.cancel()  # when we are cancelled, stop the runner and wait for its clean shutdown
            await asyncio.gather(run, return_exceptions=True)


def _parser(load: str | None = None) -> argparse.ArgumentParser:
    """The command line; the external kind ``load`` (the one being started) with its module's
    own options (the others list only the common ones: their modules are not imported)."""
    parser = argparse.ArgumentParser(prog="python -m suanli.connectors", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="kind", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--name", help="connector name (dispatch topic suffix); default: the kind")
    common.add_argument("--interval", type=float, default=15.0, help="seconds between metrics samples (0: off)")
    common.add_argument("--heartbeat", type=float, default=5.0,
                        help="seconds between heartbeats (0: off; then heartbeats go with the metrics)")
    common.add_argument("--partitions", type=int, help="partitions for topics it creates (default: settings)")
    common.add_argument("--no-recover", action="store_true", help="do not rebuild seen dispatch ids from the log")
    common.add_argument("--log-level", default="INFO")
    sim = sub.add_parser("sim", parents=[common], help="simulated cluster from an openb node list")
    sim.add_argument("--nodes", type=Path, default=None, help="node list CSV (default: openb all nodes)")
    sim.add_argument("--cell", default="openb")
    sim.add_argument("--time-scale", type=float, default=0.001, help="wall seconds per simulated second")
    sim.add_argument("--default-duration-ms", type=int, default=60_000)
    sim.add_argument("--fail-fraction", type=float, default=0.0)
    sim.add_argument("--seed", type=int, default=0)
    sim.add_argument("--gold-pool-share", type=float, default=0.0,
                     help="share of each GPU model's nodes labelled pool=gold (the gold pool; default 0: none)")
    sim.add_argument("--stop-grace-ms", type=int, default=0,
                     help="simulated grace of a StopCommand without one (default 0: stop at once)")
    local = sub.add_parser("local", parents=[common], help="run commands as processes on this machine")
    local.add_argument("--cell", default="local")
    local.add_argument("--node-id", default=None)
    local.add_argument("--max-procs", type=int, default=None, help="max concurrent processes (default: CPUs)")
    local.add_argument("--site", default="local", help="the node's site (also its region and zone)")
    local.add_argument("--tier", default="onprem", choices=("cloud", "edge", "onprem"))
    local.add_argument("--model-cache", type=Path, default=None,
                       help="directory of the model weights cache (default: <home>/connectors/<name>/models)")
    local.add_argument("--model-cache-mib", type=int, default=None,
                       help="what the model cache may hold, MiB; registered, so the scheduler places by model and "
                            "prewarms (default: no limit but the disk, and not registered)")
    for kind, (module, what) in EXTERNAL.items():
        external = sub.add_parser(kind, parents=[common], help=what)
        if kind == load:
            importlib.import_module(module).add_arguments(external)
    return parser


def _adapter_from_args(args: argparse.Namespace) -> Adapter:
    name = args.name or args.kind
    if args.kind in EXTERNAL:
        args.name = name
        return importlib.import_module(EXTERNAL[args.kind][0]).build_adapter(args)
    if args.kind == "sim":
        options: dict[str, Any] = {"cell": args.cell, "name": name, "time_scale": args.time_scale,
                                   "default_duration_ms": args.default_duration_ms,
                                   "fail_fraction": args.fail_fraction, "seed": args.seed,
                                   "gold_pool_share": args.gold_pool_share, "stop_grace_ms": args.stop_grace_ms}
        if args.nodes is not None:
            options["nodes_csv"] = args.nodes
        return build_adapter("sim", **options)
    return build_adapter("local", cell=args.cell, name=name, node_id=args.node_id, max_concurrent=args.max_procs,
                         site=args.site, tier=args.tier, model_cache=args.model_cache,
                         model_cache_mib=args.model_cache_mib)


def _announce(runner: ConnectorRunner) -> None:
    d = runner.describe()
    print(f"suanli connector {d['connector']}: {d['nodes']} node(s) in cell {d['cell']}, consuming "
          f"{d['dispatch_topic']} as {d['group']} on {d['kafka']} "
          f"(recovered {d['recovered_seen']} dispatch id(s))"
          + (f"; control requests on {d['control_topic']}" if d.get("control_topic") else ""), flush=True)


async def _main(args: argparse.Namespace) -> None:
    adapter = _adapter_from_args(args)
    task = asyncio.create_task(run_connector(adapter, on_ready=_announce, monitor_interval_s=args.interval,
                                             heartbeat_interval_s=args.heartbeat, partitions=args.partitions,
                                             recover=not args.no_recover))
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, task.cancel)
    try:
        await task
    except asyncio.CancelledError:
        pass  # a signal: the runner has shut down cleanly


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    kind = next((a for a in argv if not a.startswith("-")), None)
    args = _parser(load=kind if kind in EXTERNAL else None).parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        gc_policy.apply()                # see suanli/gc_policy.py
        asyncio.run(_main(args))
    except SuanliError as exc:
        print(f"suanli connector {args.kind}: {exc}", file=sys.stderr)
        return 2
    return 0
