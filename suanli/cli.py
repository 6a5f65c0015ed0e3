"""The ``suanli`` command line.

Every subcommand maps a :class:`~suanli.errors.SuanliError` to a one-line message on
stderr and exit status 2, so scripts can tell "refused, with a reason" from a crash.

Every leaf subcommand declares the services it needs (``set_defaults(needs=...)``, see
``suanli/cli_services.py``); :func:`main` checks them first, so with the stack stopped a
command says so, and how to start it, with exit status 2 instead of a client's traceback.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from typing import Callable, Sequence

from suanli import gc_policy
from suanli.cli_services import KAFKA, NOTHING, needs_of, require, unreachable
from suanli.config import REPO_ROOT, settings
from suanli.errors import StackNotRunningError, SuanliError


def _stack_up(args: argparse.Namespace) -> int:
    from suanli.deploy import stack

    chosen = settings()
    overrides: dict[str, object] = {}
    if args.brokers is not None:
        overrides["brokers"] = args.brokers                # validated: 1 or 3
    if args.secure:
        overrides["secure"] = True
    if overrides:
        from suanli.config import load_settings

        chosen = load_settings(**overrides)
        said = {"brokers": f"SUANLI_BROKERS={args.brokers}", "secure": "SUANLI_SECURE=1"}
        differ = [said[k] for k, v in overrides.items() if getattr(settings(), k) != v]
        if differ:
            print(f"suanli: give {' and '.join(differ)} to every command that uses this stack "
                  f"(workers inherit it from `suanli up`)", file=sys.stderr)
    report = stack.up(chosen)
    rss = ", ".join(f"{k.removesuffix('_rss_mib')} {v:.0f} MiB" for k, v in report.items()
                    if k.endswith("_rss_mib") and v is not None)
    print(f"stack ready in {report['ready_seconds']:.1f}s" + (f" (RSS: {rss})" if rss else ""))
    if args.json:
        with open(args.json, "w") as out:
            json.dump(report, out, indent=2)
    return 0


def _stack_down(args: argparse.Namespace) -> int:
    from suanli.deploy import stack

    stack.down(settings())
    return 0


def _stack_status(args: argparse.Namespace) -> int:
    from suanli.deploy import stack

    rows = stack.status(settings())
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        for row in rows:
            where = "embedded" if row["embedded"] else "external"
            pid = f"pid {row['pid']}" if row["pid"] else "not running" if row["embedded"] else "-"
            rss = f", {row['rss_mib']:.0f} MiB" if row["rss_mib"] else ""
            state = "ready" if row["ready"] else "NOT READY"
            print(f"{row['service']:<9} {state:<9} {row['address']} ({where}, {pid}{rss})")
    return 0 if all(r["ready"] for r in rows) else 1


def _stack_prune(args: argparse.Namespace) -> int:
    """Remove old namespaces' topics and local state (dry run unless --yes)."""
    from suanli.deploy import namespace_prune

    s = settings()
    found = namespace_prune.survey(s, args.keep, args.match)
    rows = [{"namespace": ns.name, "topics": len(ns.topics), "local_mib": round(ns.local_bytes() / 2**20, 1),
             "running_pids": ns.running} for ns in found]
    if not args.yes:
        if args.json:
            print(json.dumps({"dry_run": True, "kept": sorted({s.namespace, *args.keep}), "namespaces": rows}, indent=2))
        else:
            for r in rows:
                busy = f", RUNNING (pids {', '.join(map(str, r['running_pids']))}): kept" if r["running_pids"] else ""
                print(f"{r['namespace']:<24} {r['topics']:>4} topics, {r['local_mib']:>8.1f} MiB local{busy}")
            idle = sum(1 for r in rows if not r["running_pids"])
            print(f"{idle} namespaces would be pruned (kept: {', '.join(sorted({s.namespace, *args.keep}))}); "
                  "nothing deleted: pass --yes to delete them")
        return 0
    pruned = namespace_prune.prune(s, found, log=lambda m: print(m, file=sys.stderr))
    topics = sum(len(ns.topics) for ns in pruned)
    if args.json:
        print(json.dumps({"dry_run": False, "pruned": [ns.name for ns in pruned], "topics_deleted": topics,
                          "kept_running": [ns.name for ns in found if ns.running]}, indent=2))
    else:
        print(f"pruned {len(pruned)} namespaces: {topics} topics deleted, their local state removed")
    return 0


def _up(args: argparse.Namespace) -> int:
    """The main job: the whole control plane on the embedded stack (see deploy/plane.py)."""
    from pathlib import Path

    from suanli.deploy.plane import PlaneOptions, run_plane

    options = PlaneOptions(tasks=args.tasks, rate=args.rate, time_scale=args.time_scale,
                           exit_when_drained=args.exit_when_drained,
                           json_path=Path(args.json) if args.json else None,
                           nodes_csv=Path(args.nodes) if args.nodes else None,
                           pods_csv=Path(args.pods) if args.pods else None, cell=args.cell,
                           metrics_port=None if args.no_metrics else args.metrics_port,
                           schedulers=args.workers, cells=args.cells)
    if args.workers < 1 or args.cells < 1:
        print("suanli up: --workers and --cells must be 1 or more", file=sys.stderr)
        return 2
    try:
        result = run_plane(settings(), options)
    except KeyboardInterrupt:
        print("\nsuanli: stopped")
        return 0
    summary = {k: result[k] for k in ("submitted", "placed", "running", "completed", "pending",
                                      "dead_lettered", "capacity_violations")}
    print(f"suanli: drained in {result['seconds']:.1f}s: {json.dumps(summary)}")
    return 0 if result["capacity_violations"] == 0 else 1


def _test_setup() -> int:
    """Run the test prerequisites' install steps (.ci/setup.d/*.sh, idempotent and quick when
    everything is there already): the clients' toolchain packages, mermaid's parser,
    PostgreSQL and the Connect jars. Output goes to a log that is shown only on failure."""
    import time

    steps = sorted((REPO_ROOT / ".ci" / "setup.d").glob("*.sh"))
    log_path = settings().home / "logs" / "test-setup.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    with open(log_path, "w") as log:
        for step in steps:
            log.write(f"== {step.name}\n")
            log.flush()
            code = subprocess.call(["bash", str(step)], cwd=REPO_ROOT, stdout=log, stderr=subprocess.STDOUT)
            if code != 0:
                log.close()
                tail = "\n".join(log_path.read_text(errors="replace").splitlines()[-30:])
                print(f"{tail}\nsuanli test: setup step {step.name} failed (exit {code}); full log: {log_path}",
                      file=sys.stderr)
                return 2
    print(f"suanli test: {len(steps)} setup steps ready in {time.monotonic() - started:.0f}s (log: {log_path})")
    return 0


def _test(args: argparse.Namespace) -> int:
    """Install the test prerequisites, start the stack if needed, run pytest, stop what
    this command started."""
    from suanli.deploy import stack

    if not args.skip_setup and _test_setup() != 0:
        return 2
    s = settings()
    was_running = all(r["ready"] for r in stack.status(s))
    stack.up(s)
    try:
        cmd = [sys.executable, "-m", "pytest", *args.pytest_args]
        return subprocess.call(cmd, cwd=REPO_ROOT)
    finally:
        if not was_running and not args.keep_stack:
            stack.down(s)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="suanli", description="Suanli: an event-sourced control plane for heterogeneous compute.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    stack_p = sub.add_parser("stack", help="the embedded Kafka broker and schema registry")
    stack_sub = stack_p.add_subparsers(dest="stack_command", required=True, metavar="ACTION")
    up_p = stack_sub.add_parser("up", help="start the embedded stack and register the schemas")
    up_p.add_argument("--json", metavar="FILE", help="write start-up time and memory to FILE")
    up_p.add_argument("--brokers", type=int, choices=(1, 3), default=None,
                      help="embedded Kafka brokers: 1 (default) or 3, a KRaft quorum with every topic replicated "
                           "3 times and min.insync.replicas=2 (the same as SUANLI_BROKERS)")
    up_p.add_argument("--secure", action="store_true",
                      help="clients reach the broker only over SASL_SSL (SCRAM-SHA-512 over TLS), with ACLs; makes the "
                           "CA and credentials in <home>/secure (the same as SUANLI_SECURE=1)")
    up_p.set_defaults(func=_stack_up, needs=NOTHING)          # starts (or, external, checks) the services
    stack_sub.add_parser("down", help="stop everything the stack started").set_defaults(func=_stack_down,
                                                                                         needs=NOTHING)
    st_p = stack_sub.add_parser("status", help="show each service and whether it is ready")
    st_p.add_argument("--json", action="store_true", help="print JSON")
    st_p.set_defaults(func=_stack_status, needs=NOTHING)
    pr_p = stack_sub.add_parser(
        "prune", help="remove the topics and local state of other namespaces (old test and bench runs); "
                      "a dry run unless --yes",
        description="Every test run and bench makes a namespace of its own; this lists them (topics on the "
                    "broker; state under <home>/workers and <home>/audit; its processes' logs and pid files) and, "
                    "with --yes, deletes them. "
                    "The configured namespace (SUANLI_NAMESPACE) and --keep ones are never touched, nor any "
                    "namespace whose plane processes are running.")
    pr_p.add_argument("--keep", action="append", default=[], metavar="NS", help="a namespace to keep (repeatable)")
    pr_p.add_argument("--match", metavar="GLOB", help="prune only namespaces matching GLOB (e.g. 'bench*')")
    pr_p.add_argument("--yes", action="store_true", help="delete (without it: only list what would go)")
    pr_p.add_argument("--json", action="store_true", help="print JSON")
    pr_p.set_defaults(func=_stack_prune, needs=(KAFKA,))

    up = sub.add_parser("up", help="run the control plane locally: stack, workers, simulated cluster, workload")
    up.add_argument("--tasks", type=int, default=2000, help="openb tasks to submit (default 2000)")
    up.add_argument("--rate", type=float, default=500.0, help="submissions per second (0 = unthrottled)")
    up.add_argument("--time-scale", type=float, default=0.0001,
                    help="wall seconds per simulated second of task run time (default 0.0001)")
    up.add_argument("--exit-when-drained", action="store_true",
                    help="exit once every task has a decision (running, terminal, or pending with a reason)")
    up.add_argument("--json", metavar="FILE", help="write the final figures to FILE")
    up.add_argument("--nodes", help="node list CSV (default: openb all nodes)")
    up.add_argument("--pods", help="pod list CSV (default: openb default workload)")
    up.add_argument("--cell", help="cell name (default: a new cell per run)")
    up.add_argument("--metrics-port", type=int, default=19200, metavar="PORT",
                    help="Prometheus /metrics of intake, scheduler and telemetry on 127.0.0.1 PORT, PORT+1, PORT+2 "
                         "(a taken port is replaced by a free one; 0: free ports; default 19200)")
    up.add_argument("--no-metrics", action="store_true", help="no /metrics servers")
    up.add_argument("--workers", type=int, default=1, metavar="M",
                    help="scheduler workers sharing the cell log's partitions (default 1; with one cell the "
                         "others stand by and take it over when its worker dies)")
    up.add_argument("--cells", type=int, default=1, metavar="N",
                    help="cells of the run (default 1): the nodes and tasks are dealt among them, one simulated "
                         "cluster each, and the cells spread over the cell log's partitions (each its own when "
                         "there are N or more: SUANLI_PARTITIONS for a fresh namespace)")
    up.set_defaults(func=_up, needs=NOTHING)                  # starts the stack itself

    from suanli import (cli_api, cli_cost, cli_policy, cli_profile, cli_prometheus, cli_reserve, cli_sim,
                        cli_strategy, cli_tasks, cli_tenant, cli_topology)
    from suanli.bench import cli as bench_cli
    from suanli.projections import cli as projections_cli
    from suanli.replay import cli as replay_cli

    for module in (cli_tasks, cli_reserve, replay_cli, cli_strategy, cli_policy, cli_profile, projections_cli, cli_api,
                   bench_cli, cli_prometheus, cli_topology, cli_sim, cli_cost, cli_tenant):
        module.add_commands(sub)
    __import__("suanli.cli_job", fromlist=["add_commands"]).add_commands(sub)     # suanli job (issue 19)

    test_p = sub.add_parser("test", help="run the test suite against the embedded stack")
    test_p.add_argument("--keep-stack", action="store_true", help="leave the stack running afterwards")
    test_p.add_argument("--skip-setup", action="store_true",
                        help="do not run the install steps in .ci/setup.d (they are idempotent)")
    test_p.add_argument("pytest_args", nargs=argparse.REMAINDER, help="arguments passed to pytest")
    test_p.set_defaults(func=_test, needs=NOTHING)            # starts the stack itself
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    func: Callable[[argparse.Namespace], int] = args.func
    needs: tuple[str, ...] = ()
    try:
        gc_policy.apply()                # a process's first act: see suanli/gc_policy.py
        needs = needs_of(args)
        if needs:
            require(settings(), needs)
        return func(args)
    except StackNotRunningError as exc:
        print(f"suanli: {exc}", file=sys.stderr)
        return 2
    except SuanliError as exc:
        if needs and unreachable(exc):      # a service stopped after the check: the same advice
            return _lost_connection(needs, exc)
        print(f"suanli: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except Exception as exc:
        if unreachable(exc):                # a failed connection is not a bug: no traceback
            if needs:
                return _lost_connection(needs, exc)
            print(f"suanli: cannot connect: {type(exc).__name__}: {exc}", file=sys.stderr)
            return 2
        raise                               # a bug: keep its traceback


def _lost_connection(needs: tuple[str, ...], exc: BaseException) -> int:
    """A connection failed during the command: say which service is down and how to start it
    (or, if all answer again, what failed)."""
    from suanli.cli_services import KAFKA, REGISTRY, advice, kafka_ready, registry_ready

    s = settings()
    down = [name for name, ready in ((KAFKA, kafka_ready), (REGISTRY, registry_ready))
            if name in needs and not ready(s)]
    if down:
        print(f"suanli: {advice(s, down)}", file=sys.stderr)
    else:
        print(f"suanli: a connection failed during the command ({type(exc).__name__}: {exc}); the services "
              "answer again, so retry it", file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
