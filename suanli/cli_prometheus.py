"""``suanli prometheus up|down|status``: Prometheus + node_exporter on loopback (``deploy/prometheus.py``)."""
from __future__ import annotations

import argparse
import json

from suanli.config import settings


def _up(args: argparse.Namespace) -> int:
    from suanli.deploy import prometheus

    report = prometheus.up(settings(), timeout=args.timeout)
    if args.json:
        print(json.dumps(report, indent=2))
    return 0


def _down(args: argparse.Namespace) -> int:
    from suanli.deploy import prometheus

    prometheus.down(settings())
    return 0


def _status(args: argparse.Namespace) -> int:
    from suanli.deploy import prometheus

    rows = prometheus.status(settings())
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        for row in rows:
            pid = f"pid {row['pid']}" if row["pid"] else "not running"
            rss = f", {row['rss_mib']:.0f} MiB" if row["rss_mib"] else ""
            print(f"{row['service']:<13} {'ready' if row['ready'] else 'NOT READY':<9} {row['address']} ({pid}{rss})")
    return 0 if all(r["ready"] for r in rows) else 1


def add_commands(sub: argparse._SubParsersAction) -> None:
    """Register ``prometheus up|down|status``."""
    prom = sub.add_parser("prometheus", help="Prometheus and node_exporter scraping this machine, on loopback")
    prom_sub = prom.add_subparsers(dest="prometheus_command", required=True, metavar="ACTION")
    up = prom_sub.add_parser("up", help="start node_exporter and Prometheus; wait for the first node sample")
    up.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for readiness (default 60)")
    up.add_argument("--json", action="store_true", help="print what was started as JSON")
    up.set_defaults(func=_up)
    prom_sub.add_parser("down", help="stop both (by pid)").set_defaults(func=_down)
    st = prom_sub.add_parser("status", help="show both and whether they are ready")
    st.add_argument("--json", action="store_true", help="print JSON")
    st.set_defaults(func=_status)
