"""Subcommands of the ``suanli`` CLI (registered by ``suanli.cli.build_parser``).

``suanli audit why|list|rebuild|follow``: queries over the decision history, answered from
the namespace's audit index (``<SUANLI_HOME>/audit/<namespace>``, RocksDB) after catching
it up with the decisions topic. Every answer cites its log positions.

``suanli connect up|down|status``: Kafka Connect with PostgreSQL, the JDBC sink of the
decisions and the CDC source of the ``nodes`` inventory table (``deploy/connect.py``).
"""
from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import re
import sys
import time
from typing import Any

from suanli.config import settings
from suanli.errors import AuditError
from suanli.streams.topics import TopicNames

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_time(text: str | None, now_ms: int) -> int | None:
    """Epoch ms from ``1h``/``30m``/``2d`` (ago), an ISO 8601 time, or epoch milliseconds."""
    if text is None:
        return None
    t = text.strip()
    m = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([smhdw])", t)
    if m:
        return now_ms - int(float(m.group(1)) * _UNITS[m.group(2)] * 1000)
    if re.fullmatch(r"\d{10,}", t):
        return int(t)
    try:
        when = dt.datetime.fromisoformat(t.replace("Z", "+00:00"))
    except ValueError:
        raise AuditError(f"cannot read time {text!r}: use 90s, 15m, 1h, 2d, 1w (ago), an ISO 8601 time, "
                         "or epoch milliseconds") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.timezone.utc)
    return int(when.timestamp() * 1000)


def _note(stats: Any) -> None:
    if stats.read_only:
        print("suanli: the audit index is held by a running follower; answering from its current state",
              file=sys.stderr)


def _audit_why(args: argparse.Namespace) -> int:
    from suanli.projections.audit import render_why
    from suanli.projections.audit_follower import opened_index

    async def run() -> tuple[dict, Any]:
        async with opened_index(settings()) as (index, stats):
            return index.why(args.task, tenant=args.tenant), stats

    answer, stats = asyncio.run(run())
    _note(stats)
    if args.json:
        print(json.dumps({"answer": answer, "index": stats.as_dict()}, indent=2))
    else:
        print(render_why(answer, candidates=args.candidates))
    return 0


def _audit_list(args: argparse.Namespace) -> int:
    from suanli.projections.audit import AuditQuery, normalize_kind, render_rows
    from suanli.projections.audit_follower import opened_index

    now = int(time.time() * 1000)
    query = AuditQuery(tenant=args.tenant, task=args.task, node=args.node, strategy=args.strategy,
                       kind=normalize_kind(args.kind), since=parse_time(args.since, now),
                       until=parse_time(args.until, now), limit=args.limit or None,
                       preempted_by=args.preempted_by, job=args.job)

    async def run() -> tuple[list, Any]:
        async with opened_index(settings()) as (index, stats):
            return index.query(query), stats

    rows, stats = asyncio.run(run())
    _note(stats)
    if args.json:
        print(json.dumps({"query": {k: v for k, v in vars(query).items() if v is not None},
                          "decisions": rows, "index": stats.as_dict()}, indent=2))
    else:
        print(render_rows(rows))
    return 0


def _audit_rebuild(args: argparse.Namespace) -> int:
    from suanli.projections.audit_follower import index_dir, rebuild
    from suanli.replay.progress import wanted

    stats = asyncio.run(rebuild(settings(), progress=wanted(quiet=args.quiet, json=args.json)))
    if args.json:
        print(json.dumps(stats.as_dict(), indent=2))
    else:
        print(f"audit index {index_dir(settings())} rebuilt from {stats.topic}: {stats.records} records, "
              f"{stats.result.applied} decisions ({stats.result.duplicates} duplicates dropped) "
              f"in {stats.seconds:.1f}s ({stats.rate:.0f} events/s)")
    return 0


def _audit_follow(args: argparse.Namespace) -> int:
    import signal

    from suanli.projections.audit_follower import follow, index_dir

    async def run() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        print(f"suanli: following {TopicNames(settings().namespace).decisions} into {index_dir(settings())} (Ctrl-C stops)")

        def report(result: Any) -> None:
            if result.applied and not args.quiet:
                print(f"audit: +{result.applied} decisions ({result.duplicates} duplicates dropped)", flush=True)

        await follow(settings(), stop, on_batch=report)

    asyncio.run(run())
    return 0


# ------------------------------------------------------------------------------ connect
def _connect_up(args: argparse.Namespace) -> int:
    from suanli.deploy import connect

    report = connect.up(settings(), sink=not args.no_sink, source=not args.no_source)
    if args.json:
        print(json.dumps(report, indent=2))
    return 0


def _connect_down(args: argparse.Namespace) -> int:
    from suanli.deploy import connect

    connect.down(settings())
    return 0


def _connect_status(args: argparse.Namespace) -> int:
    from suanli.deploy import connect

    rows = connect.status(settings())
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        for row in rows:
            state = "ready" if row["ready"] else "NOT READY"
            pid = f"pid {row['pid']}" if row.get("pid") else "not running"
            extra = f" {row['detail']}" if row.get("detail") else ""
            print(f"{row['service']:<22} {state:<9} {row['address']} ({pid}){extra}")
    return 0 if all(r["ready"] for r in rows) else 1


def add_commands(sub: argparse._SubParsersAction) -> None:
    """Register this module's subcommands on the top-level parser."""
    from suanli.cli_services import NOTHING, STACK

    audit = sub.add_parser("audit", help="query the decision history: why a task went where it did, who decided what")
    asub = audit.add_subparsers(dest="audit_command", required=True, metavar="ACTION")

    why = asub.add_parser("why", help="every decision about one task: path, candidates, rejected nodes, positions")
    why.add_argument("task", metavar="TASK", help="task id")
    why.add_argument("--tenant", help="only this tenant's task (another tenant's task is 'not found')")
    why.add_argument("--candidates", type=int, default=5, help="candidates shown per decision (text output)")
    why.add_argument("--json", action="store_true", help="print JSON")
    why.set_defaults(func=_audit_why, needs=STACK)

    ls = asub.add_parser("list", help="decisions filtered by task, job, node, tenant, strategy, kind and time")
    ls.add_argument("--task")
    ls.add_argument("--job", help="decisions about the member tasks of this job (their submission's job)")
    ls.add_argument("--node", help="decisions about this node (placements, releases, migrations from/to)")
    ls.add_argument("--tenant", help="only this tenant's decisions")
    ls.add_argument("--strategy", help="strategy name, e.g. fgd")
    ls.add_argument("--kind", help="placement, pending, preemption, migration, rejection (unschedulable), release, "
                                   "lost, resize (an elastic job's JobResized)")
    ls.add_argument("--preempted-by", metavar="TASK", help="the preemptions of which TASK was the preemptor")
    ls.add_argument("--since", help="decided at or after: 1h, 30m, 2d (ago), ISO 8601, or epoch ms")
    ls.add_argument("--until", help="decided before (same forms as --since)")
    ls.add_argument("--limit", type=int, default=200, help="newest N decisions (0 = all; default 200)")
    ls.add_argument("--json", action="store_true", help="print JSON")
    ls.set_defaults(func=_audit_list, needs=STACK)

    rb = asub.add_parser("rebuild", help="delete the local audit index and re-read the decisions topic")
    rb.add_argument("--json", action="store_true", help="print JSON")
    rb.add_argument("--quiet", action="store_true", help="no progress bar (there is none with --json or off a terminal)")
    rb.set_defaults(func=_audit_rebuild, needs=STACK)

    fo = asub.add_parser("follow", help="keep the audit index current by tailing the decisions topic")
    fo.add_argument("--quiet", action="store_true", help="no line per batch")
    fo.set_defaults(func=_audit_follow, needs=STACK)

    connect = sub.add_parser("connect", help="Kafka Connect + PostgreSQL: decisions sink, nodes inventory source")
    csub = connect.add_subparsers(dest="connect_command", required=True, metavar="ACTION")
    up = csub.add_parser("up", help="start PostgreSQL, the Connect worker, the connectors and the nodes bridge")
    up.add_argument("--no-sink", action="store_true", help="do not register the decisions JDBC sink")
    up.add_argument("--no-source", action="store_true", help="do not register the nodes CDC source and bridge")
    up.add_argument("--json", action="store_true", help="print what was started as JSON")
    up.set_defaults(func=_connect_up, needs=STACK)
    csub.add_parser("down", help="stop everything `connect up` started").set_defaults(func=_connect_down,
                                                                                            needs=NOTHING)
    st = csub.add_parser("status", help="PostgreSQL, the worker, each connector and task")
    st.add_argument("--json", action="store_true", help="print JSON")
    st.set_defaults(func=_connect_status, needs=NOTHING)
