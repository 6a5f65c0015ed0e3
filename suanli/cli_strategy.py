"""Subcommands of the ``suanli`` CLI (registered by ``suanli.cli.build_parser``).

``suanli explain TASK [--mermaid]``     the task's decision path, read from the decisions topic
``suanli strategy list``               the named strategies (built-in and entry points)
``suanli strategy show NAME [--json]``  one strategy: when to use it, and each argument's
                                        default, allowed values and meaning
``suanli strategy bench NAME [--workload default] [--seeds 42-51]``
                                        the FGD-protocol table for one strategy
"""
from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

from suanli.config import settings
from suanli.errors import SuanliError



def _read_decisions(task_id: str, timeout_s: float) -> list[tuple[str, dict]]:
    from suanli.config import settings
    from suanli.schemas.codec import Codec
    from suanli.schemas.registry import RegistryClient
    from suanli.streams.kafka_io import EventConsumer
    from suanli.streams.topics import TopicNames

    s = settings()
    topic = TopicNames(s.namespace).decisions

    async def read() -> list[tuple[str, dict]]:
        with RegistryClient(s.registry_url) as registry:
            async with EventConsumer(s.bootstrap_servers, Codec(registry), [topic]) as consumer:
                records = await consumer.read_until_end(timeout_ms=int(timeout_s * 1000))
        out = [r for r in records if r.kind is not None and (r.payload or {}).get("task_id") == task_id]
        out.sort(key=lambda r: (r.partition, r.offset))
        return [(r.kind, r.payload) for r in out]

    try:
        return asyncio.run(read())
    except SuanliError:
        raise
    except Exception as exc:  # noqa: BLE001 - a CLI edge: one line, not a traceback
        raise SuanliError(f"cannot read the decisions topic {topic}: {type(exc).__name__}: {exc}") from exc


def _explain(args: argparse.Namespace) -> int:
    from suanli.processors.explain import render_mermaid, render_text

    decisions = _read_decisions(args.task, args.timeout)
    if not decisions:
        raise SuanliError(f"no decisions for task {args.task!r} on the decisions topic")
    print(render_mermaid(args.task, decisions) if args.mermaid else render_text(args.task, decisions), end="")
    if not args.mermaid:
        print()
    return 0


def _list(args: argparse.Namespace) -> int:
    from suanli.processors import strategies as S

    if not args.no_discover:
        S.discover()
    rows = [S.describe(n) for n in S.names()]
    if args.json:
        import json
        print(json.dumps(rows, indent=2))
        return 0
    w = max(len(r["name"]) for r in rows)
    for r in rows:
        tag = "" if r["origin"] == "builtin" else f"  [{r['origin']}{', sandboxed' if r['sandboxed'] == 'true' else ''}]"
        summary = r["summary"].split(": ", 1)[-1]
        print(f"{r['name']:<{w}}  v{r['version']:<6} {summary[:110]}{tag}")
    for name, err in sorted(S.DISCOVERY_ERRORS.items()):
        print(f"(entry point {name!r} skipped: {err})", file=sys.stderr)
    return 0


def _show(args: argparse.Namespace) -> int:
    import json

    from suanli.processors import strategies as S

    if not args.no_discover:
        S.discover()
    if args.name not in S.names():
        raise SuanliError(f"unknown strategy {args.name!r}; see `suanli strategy list`")
    info = S.describe(args.name)
    rows = S.describe_args(args.name)
    if args.json:
        print(json.dumps({**info, "args": rows}, indent=2))
        return 0
    origin = "" if info["origin"] == "builtin" else f"  [{info['origin']}]"
    print(f"{info['name']} v{info['version']}{origin}")
    print(f"  {info['summary']}")
    print()
    w = max(len(r["name"]) for r in rows)
    dw = min(max(len(json.dumps(r["default"])) for r in rows), 24)
    print(f"  {'argument':<{w}}  {'default':<{dw}}  allowed")
    for r in rows:
        default = json.dumps(r["default"])
        if len(default) > dw:
            default = default[: dw - 3] + "..."
        print(f"  {r['name']:<{w}}  {default:<{dw}}  {r['allowed']}")
        if r["doc"]:
            print(f"  {'':<{w}}  {'':<{dw}}    {r['doc']}")
    return 0


def _bench(args: argparse.Namespace) -> int:
    from suanli.processors import strategies as S
    from suanli.replay.fgd_protocol import parse_seeds, run_protocol

    if args.name not in S.names():
        raise SuanliError(f"unknown strategy {args.name!r}; see `suanli strategy list`")
    data = Path(args.data)
    pods = data / f"openb_pod_list_{args.workload}.csv"
    nodes = data / "openb_node_list_gpu_node.csv"
    if not pods.exists() or not nodes.exists():
        raise SuanliError(f"openb trace not found under {data} (need {pods.name} and {nodes.name})")
    from suanli.replay.progress import wanted

    r = run_protocol(str(nodes), str(pods), [args.name], parse_seeds(args.seeds), args.workers, args.node_names,
                     progress=wanted())
    v = r["policies"][args.name]
    u, f = v["unallocated_gpu_pct"], v["frag_gpu_pct"]
    print(f"{r['workload']}  (seeds {args.seeds}, FGD protocol, node names {args.node_names}, "
          f"{len(u['per_seed'])} runs)")
    print(f"  {'policy':16s} {'unalloc GPU %':>16s} {'frag GPU %':>16s} {'wall s':>8s}")
    print(f"  {args.name:16s} {u['mean']:8.2f} ± {u['sd']:5.2f} {f['mean']:8.2f} ± {f['sd']:5.2f} {v['seconds']:8.2f}")
    print(f"  per seed: {', '.join(f'{x:.2f}' for x in u['per_seed'])}")
    return 0


def add_commands(sub: argparse._SubParsersAction) -> None:
    """Register this module's subcommands on the top-level parser."""
    from suanli.cli_services import NOTHING, STACK

    ex = sub.add_parser("explain", help="why a task was placed where it was (its decision path)")
    ex.add_argument("task", help="task id")
    ex.add_argument("--mermaid", action="store_true", help="print a Mermaid `graph TD` instead of text")
    ex.add_argument("--timeout", type=float, default=60.0,
                    help="seconds to wait for the decisions topic to be read up to its end (default 60)")
    ex.set_defaults(func=_explain, needs=STACK)

    st = sub.add_parser("strategy", help="the strategy library: list, show and benchmark")
    st_sub = st.add_subparsers(dest="strategy_cmd", required=True)
    ls = st_sub.add_parser("list", help="named strategies with when to use them")
    ls.add_argument("--json", action="store_true")
    ls.add_argument("--no-discover", action="store_true", help="skip entry-point discovery")
    ls.set_defaults(func=_list, needs=NOTHING)
    sh = st_sub.add_parser("show", help="one strategy's arguments: defaults, allowed values, meaning")
    sh.add_argument("name")
    sh.add_argument("--json", action="store_true")
    sh.add_argument("--no-discover", action="store_true", help="skip entry-point discovery")
    sh.set_defaults(func=_show, needs=NOTHING)
    b = st_sub.add_parser("bench", help="FGD-protocol table (unallocated GPU %% at arrived = 100%%)")
    b.add_argument("name")
    b.add_argument("--workload", default="default", help="openb_pod_list_<workload>.csv (default: default)")
    b.add_argument("--seeds", default="42-51")
    b.add_argument("--workers", type=int, default=2)
    b.add_argument("--node-names", choices=("shuffled", "csv"), default="shuffled",
                   help="opaque per-seed node names (default) or the CSV's sn (see `suanli whatif --help`)")
    b.add_argument("--data", default=str(settings().openb_dir), help="directory of the openb trace")
    b.set_defaults(func=_bench, needs=NOTHING)
