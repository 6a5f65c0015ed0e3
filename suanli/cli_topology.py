"""``suanli topology path A B`` and ``suanli topology show [--zone Z]``: the cell's topology
graph (``processors/topology.py``) as the scheduler holds it.

The scheduler's state lives in its worker, so the view is rebuilt the way replay rebuilds
it: the cell's log is folded through the production :class:`CellRunner` (decode, core
``decide``), from Kafka (the cell log of the configured namespace) or from a log directory
written by ``suanli export`` (``--logdir DIR``, no broker). Nodes, racks (``labels.rack``),
measured links (LinkMetrics) and the nodes' health and telemetry conditions are then as the
cell had them at the end of its log.
"""
from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any, Optional

from suanli.errors import SuanliError


class TopologyError(SuanliError):
    """A topology question the cell cannot answer (unknown cell, zone or vertex)."""


# --------------------------------------------------------------------------- folding a log
def state_from_logdir(path: str | Path, cell: Optional[str] = None) -> Any:
    """The cell state at the end of a log directory's inputs (prefix first)."""
    from suanli.replay.logdir import LogDir
    from suanli.streams.cell_runner import CellRunner
    from suanli.streams.topics import TopicNames

    log = LogDir.open(path)
    if cell is not None and cell != log.cell:
        raise TopologyError(f"{path} holds cell {log.cell!r}, not {cell!r}")
    runner = CellRunner(log.codec(), TopicNames(log.namespace))
    runner.catch_up(log.prefix())
    runner.catch_up(log.inputs())
    state = runner.partition(log.partition).cells.get(log.cell)
    if state is None:
        raise TopologyError(f"{path}: no input of cell {log.cell!r}")
    return state


async def state_from_kafka(settings: Any, cell: Optional[str], partition: Optional[int] = None) -> Any:
    """Fold the cell log from Kafka (every partition, or ``partition``) and return the state
    of ``cell`` (the only cell on the log when None)."""
    from suanli.schemas.codec import Codec
    from suanli.schemas.registry import RegistryClient
    from suanli.streams.cell_runner import CellRunner
    from suanli.streams.kafka_io import end_offsets, read_range
    from suanli.streams.records import RawRecord
    from suanli.streams.topics import TopicNames

    names = TopicNames(settings.namespace)
    bootstrap = settings.bootstrap_servers
    ends = await end_offsets(bootstrap, names.cell_log)
    if not ends:
        raise TopologyError(f"topic {names.cell_log} does not exist (wrong namespace?)")
    parts = sorted(ends) if partition is None else [partition]
    with RegistryClient(settings.registry_url) as registry:
        runner = CellRunner(Codec(registry), names)
        key = cell.encode() if cell is not None else None
        for p in parts:
            if p not in ends:
                raise TopologyError(f"{names.cell_log} has no partition {p} (it has {sorted(ends)})")
            records = await read_range(bootstrap, names.cell_log, p, 0, ends[p])
            runner.catch_up(RawRecord(r.topic, r.partition, r.offset, r.timestamp, r.key, r.value)
                            for r in records if key is None or r.key == key)
    cells = {c: st for part in runner.partitions.values() for c, st in part.cells.items()}
    return _pick(cells, cell, names.cell_log)


def _pick(cells: dict[str, Any], cell: Optional[str], where: str) -> Any:
    if cell is not None:
        if cell not in cells:
            raise TopologyError(f"no record of cell {cell!r} on {where}")
        return cells[cell]
    if len(cells) == 1:
        return next(iter(cells.values()))
    if not cells:
        raise TopologyError(f"{where} holds no cell")
    raise TopologyError(f"{where} holds {len(cells)} cells ({', '.join(sorted(cells)[:8])}): name one with --cell")


def load_state(args: argparse.Namespace) -> Any:
    if args.logdir:
        return state_from_logdir(args.logdir, args.cell)
    import asyncio

    from suanli.config import load_settings, settings

    s = load_settings(namespace=args.namespace) if args.namespace else settings()
    return asyncio.run(state_from_kafka(s, args.cell, args.partition))


# --------------------------------------------------------------------------- views (pure)
def _ms(x: Optional[float]) -> str:
    if x is None:
        return "down"
    if math.isinf(x):
        return "unreachable"
    return f"{x:.3g} ms"


def _node_state(state: Any, row: int) -> dict[str, str]:
    return {"status": state.node_status[row], "health": state.health[row], "condition": state.condition[row]}


def path_view(state: Any, a: str, b: str) -> dict[str, Any]:
    """The cheapest directed path from ``a`` to ``b`` with the cost of every hop (node
    penalties included)."""
    from suanli.processors.topology import UnknownVertex

    topo = state.topology
    try:
        src, dst = topo.resolve(a), topo.resolve(b)
    except UnknownVertex as exc:
        raise TopologyError(str(exc)) from None
    cost, hops = topo.path(src, dst)
    steps = []
    for u, v in zip(hops, hops[1:]):
        steps.append({"src": u, "dst": v, "ms": topo.edge_cost(u, v),
                      "measured": (u, v) in topo.links})
    pen = topo.penalties()
    notes = {v: p for v, p in pen.items() if v in hops or v in (src, dst)}
    return {"cell": state.cell, "src": src, "dst": dst, "cost_ms": None if math.isinf(cost) else cost,
            "hops": hops, "steps": steps, "penalised": notes, "graph_version": topo.version}


def format_path(v: dict[str, Any]) -> str:
    if v["cost_ms"] is None:
        return f"cell {v['cell']}: no path from {v['src']} to {v['dst']}"
    lines = [f"cell {v['cell']}: {v['src']} -> {v['dst']}: {_ms(v['cost_ms'])} over {len(v['steps'])} "
             f"edge{'s' if len(v['steps']) != 1 else ''}", f"  {v['hops'][0]}"]
    for s in v["steps"]:
        lines.append(f"  -> {s['dst']:<36} {_ms(s['ms']):>10}" + ("  (measured link)" if s["measured"] else ""))
    for vtx, p in sorted(v["penalised"].items()):
        lines.append(f"  note: {vtx} is penalised ({'cut off' if math.isinf(p) else f'+{p:g} ms per edge'})")
    return "\n".join(lines)


def zone_view(state: Any, zone: Optional[str]) -> dict[str, Any]:
    """One zone: its racks and nodes (with status, health, condition and the node's cost to
    its rack or zone), the edges leaving it, and the measured links touching it. Without
    ``zone``: every zone with its node and rack counts."""
    topo = state.topology
    zones, zidx = topo.domain_index("zone")
    racks, ridx = topo.domain_index("rack")
    if zone is None:
        out = []
        for i, z in enumerate(zones):
            rows = [r for r in range(len(zidx)) if zidx[r] == i]
            out.append({"zone": z, "nodes": len(rows), "racks": len({int(ridx[r]) for r in rows if ridx[r] >= 0}),
                        "not_ready": sum(1 for r in rows if not state.ready[r]),
                        "bad_condition": sum(1 for r in rows if not state.condition_ok[r])})
        no_zone = int((zidx < 0).sum())
        return {"cell": state.cell, "zones": out, "nodes_without_zone": no_zone, "links": len(topo.links),
                "graph_version": topo.version}
    name = zone if zone.startswith("zone:") else f"zone:{zone}"
    if name not in zones:
        raise TopologyError(f"cell {state.cell!r} has no zone {zone!r} (zones: {', '.join(zones[:12]) or 'none'})")
    zi = zones.index(name)
    rows = [r for r in range(len(zidx)) if zidx[r] == zi]
    members = {f"node:{state.node_ids[r]}" for r in rows}
    by_rack: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        rack = racks[ridx[r]] if ridx[r] >= 0 else "(no rack)"
        nid = state.node_ids[r]
        up = topo.domain_of(nid, "rack") or name
        by_rack.setdefault(rack, []).append({"node": nid, **_node_state(state, r),
                                             "gpus": int(state.gpu_count[r]), "to": up,
                                             "ms": topo.edge_cost(f"node:{nid}", up)})
    inner = members | set(by_rack) | {name}
    edges = topo.edges([name])
    leaving = [e for e in edges if e["src"] == name and e["dst"] not in inner]
    links = [e for e in topo.edges(inner) if e["link"] is not None]
    return {"cell": state.cell, "zone": name, "nodes": len(rows), "racks": {k: by_rack[k] for k in sorted(by_rack)},
            "up": leaving, "links": links, "graph_version": topo.version}


def format_zone(v: dict[str, Any]) -> str:
    if "zones" in v:
        lines = [f"cell {v['cell']}: {len(v['zones'])} zones, {v['links']} measured links"
                 + (f", {v['nodes_without_zone']} nodes in no zone" if v["nodes_without_zone"] else "")]
        for z in v["zones"]:
            lines.append(f"  {z['zone']:<28} {z['nodes']:>5} nodes {z['racks']:>4} racks"
                         f"  not ready {z['not_ready']}, bad condition {z['bad_condition']}")
        return "\n".join(lines)
    ups = ", ".join(f"{e['dst']} ({_ms(e['weight_ms'])})" for e in v["up"]) or "nothing"
    lines = [f"cell {v['cell']}: {v['zone']}: {v['nodes']} nodes in {len(v['racks'])} racks; up: {ups}"]
    for rack, nodes in v["racks"].items():
        bad = sum(1 for n in nodes if n["health"] != "READY" or n["condition"] != "NORMAL" or n["status"] != "READY")
        lines.append(f"  {rack}: {len(nodes)} nodes" + (f", {bad} not READY/NORMAL" if bad else ""))
        for n in nodes:
            flags = " ".join(x for x in (n["status"], n["health"], n["condition"]) if x not in ("READY", "NORMAL"))
            lines.append(f"    {n['node']:<24} {n['gpus']:>2} GPU  {_ms(n['ms']):>10} to {n['to']}"
                         + (f"  [{flags}]" if flags else ""))
    if v["links"]:
        lines.append("  measured links:")
        for e in v["links"]:
            ln = e["link"]
            lines.append(f"    {e['src']} -> {e['dst']}: {_ms(e['weight_ms'])} (latency {ln['latency_ms']:g} ms, "
                         f"{ln['bandwidth_mbps']:g} Mbit/s, loss {ln['loss_pct']:g} %, at {ln['at']})")
    return "\n".join(lines)


# --------------------------------------------------------------------------- commands
def _path(args: argparse.Namespace) -> int:
    v = path_view(load_state(args), args.a, args.b)
    print(json.dumps(v, indent=2) if args.json else format_path(v))
    return 0 if v["cost_ms"] is not None else 1


def _show(args: argparse.Namespace) -> int:
    v = zone_view(load_state(args), args.zone)
    print(json.dumps(v, indent=2) if args.json else format_zone(v))
    return 0


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--cell", help="the cell (default: the only one on the log)")
    p.add_argument("--logdir", metavar="DIR", help="fold a log directory from `suanli export` instead of Kafka")
    p.add_argument("--namespace", help="topic namespace (default: the configured one)")
    p.add_argument("--partition", type=int, help="cell-log partition to read (default: all)")
    p.add_argument("--json", action="store_true", help="print JSON")


def add_commands(sub: argparse._SubParsersAction) -> None:
    """Register ``suanli topology`` on the top-level parser."""
    from suanli.cli_services import unless

    tp = sub.add_parser("topology", help="the cell's topology graph: paths and zones, folded from the cell log")
    tsub = tp.add_subparsers(dest="topology_command", required=True, metavar="ACTION")
    pp = tsub.add_parser("path", help="the cheapest directed path between two places (node, rack, zone, region, "
                                      "site or a vertex such as zone:z1), with the cost of each hop")
    pp.add_argument("a", metavar="A")
    pp.add_argument("b", metavar="B")
    _common(pp)
    pp.set_defaults(func=_path, needs=unless("logdir"))
    sp = tsub.add_parser("show", help="a zone's racks, nodes, health, conditions and measured links "
                                      "(all zones in brief without --zone)")
    sp.add_argument("--zone", help="the zone (name or zone:<name>)")
    _common(sp)
    sp.set_defaults(func=_show, needs=unless("logdir"))
