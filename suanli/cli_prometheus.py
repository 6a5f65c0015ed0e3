"""``suanli prometheus up|down|status``: Prometheus + node_exporter on loopback (``deploy/prometheus.py``),
scraping the running planes too; ``suanli prometheus targets``: the planes' /metrics targets and their health;
``suanli prometheus source``: NodeMetrics from any Prometheus onto raw.nodes (``connectors/prometheus_source.py``)."""
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


def _targets(args: argparse.Namespace) -> int:
    """The planes' and APIs' targets of the running Prometheus, with their health."""
    import httpx

    from suanli.deploy import prometheus
    from suanli.errors import StackError

    s = settings()
    try:
        found = prometheus.targets(s)
    except httpx.HTTPError as exc:
        raise StackError(f"Prometheus is not reachable at {prometheus.url(s)} ({exc.__class__.__name__}); "
                         "start it with `./bin/suanli prometheus up`") from None
    rows = [{"job": t["labels"].get("job"), "plane": t["labels"].get("plane"), "url": t["scrapeUrl"],
             "health": t["health"], "last_error": t.get("lastError") or ""}
            for t in found if "plane" in t["labels"] and (args.plane is None or t["labels"]["plane"] == args.plane)]
    rows.sort(key=lambda r: (r["plane"], r["job"]))
    if args.json:
        print(json.dumps(rows, indent=2))
    elif not rows:
        print(f"no plane targets in {prometheus.url(s)} (planes announce theirs in {prometheus.targets_dir(s)})")
    else:
        for r in rows:
            print(f"{r['plane']:<16} {r['job']:<17} {r['health']:<7} {r['url']}  {r['last_error']}".rstrip())
    return 0 if all(r["health"] == "up" for r in rows) else 1


def _node_mapping(specs: list[str]) -> dict[str, str]:
    from suanli.errors import ConfigError

    out = {}
    for spec in specs:
        node_id, sep, selector = spec.partition("=")
        if not sep or not node_id or not selector:
            raise ConfigError(f"--node wants NODE_ID=SELECTOR (an instance, a host or {{label matchers}}), not {spec!r}")
        out[node_id] = selector
    return out


def _source(args: argparse.Namespace) -> int:
    import asyncio
    import signal

    from suanli.connectors.prometheus_source import PrometheusSource, nodes_from_mapping, run_source
    from suanli.deploy import prometheus

    s = settings()
    source = PrometheusSource(args.url or prometheus.url(s), nodes_from_mapping(_node_mapping(args.node), args.cell),
                              name=args.name, window=args.window)
    if args.once:
        print(json.dumps(source.sample_blocking(), indent=2))
        return 0

    from suanli.schemas.codec import Codec
    from suanli.schemas.registry import RegistryClient
    from suanli.streams.topics import TopicNames

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        with RegistryClient(s.registry_url) as registry:
            print(f"suanli prometheus source: {len(source.nodes)} node(s) from {source.url} every {args.interval:g}s "
                  f"-> {TopicNames(s.namespace).raw_nodes}", flush=True)
            stats = await run_source(source, codec=Codec(registry), bootstrap=s.bootstrap_servers,
                                     namespace=s.namespace, interval_s=args.interval, partitions=s.partitions,
                                     stop=stop, max_samples=args.samples)
            print(f"suanli prometheus source: {stats.samples} sample(s), {stats.produced} NodeMetrics produced, "
                  f"{stats.errors} failed queries", flush=True)

    asyncio.run(main())
    return 0


def add_commands(sub: argparse._SubParsersAction) -> None:
    """Register ``prometheus up|down|status|targets|source``."""
    from suanli.cli_services import NOTHING, unless

    prom = sub.add_parser("prometheus", help="Prometheus and node_exporter scraping this machine, on loopback")
    prom_sub = prom.add_subparsers(dest="prometheus_command", required=True, metavar="ACTION")
    up = prom_sub.add_parser("up", help="start node_exporter and Prometheus; wait for the first node sample")
    up.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for readiness (default 60)")
    up.add_argument("--json", action="store_true", help="print what was started as JSON")
    up.set_defaults(func=_up, needs=NOTHING)
    prom_sub.add_parser("down", help="stop both (by pid)").set_defaults(func=_down, needs=NOTHING)
    tg = prom_sub.add_parser("targets", help="the running planes' workers and APIs as Prometheus scrapes them",
                             description="List the /metrics targets that planes (suanli up) and APIs (suanli api "
                                         "serve) announce, with the health Prometheus reports for each. Exit 1 "
                                         "if one is not up.")
    tg.add_argument("--plane", help="only this namespace")
    tg.add_argument("--json", action="store_true", help="print JSON")
    tg.set_defaults(func=_targets, needs=NOTHING)
    st = prom_sub.add_parser("status", help="show both and whether they are ready")
    st.add_argument("--json", action="store_true", help="print JSON")
    st.set_defaults(func=_status, needs=NOTHING)
    src = prom_sub.add_parser("source", help="NodeMetrics of the given nodes from a Prometheus, onto raw.nodes",
                              description="Query a Prometheus server (node_exporter, DCGM exporter series) and "
                                          "produce each node's NodeMetrics to <namespace>.raw.nodes until "
                                          "interrupted. See connectors/prometheus_source.py.")
    src.add_argument("--url", help="Prometheus base URL (default: the one `suanli prometheus up` runs)")
    src.add_argument("--node", action="append", required=True, metavar="NODE_ID=SELECTOR",
                     help="a node and its series: an instance (host:port), a host (any port) or "
                          "'{label=\"value\",...}'; repeat for each node")
    src.add_argument("--cell", default="local", help="the nodes' cell (default local)")
    src.add_argument("--name", default="prometheus", help="prefix of event ids (default prometheus)")
    src.add_argument("--interval", type=float, default=15.0, help="seconds between samples (default 15)")
    src.add_argument("--window", default="1m", help="rate window of cpu/net/disk rates (default 1m)")
    src.add_argument("--samples", type=int, default=None, help="stop after this many samples")
    src.add_argument("--once", action="store_true", help="print one sample as JSON; no Kafka")
    src.set_defaults(func=_source, needs=unless("once"))          # --once: no Kafka
