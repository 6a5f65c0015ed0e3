"""``suanli sim``: the simulated cluster's fault injection, and what node failures did.

``suanli sim fault silence --nodes N | --node ID ... [--seed S] [--busy-for SECONDS] [--cell C]``
    Makes simulated nodes stop heartbeating (and sending metrics), as if cut off from the
    control plane; their running tasks keep running and report completion as usual. With
    ``--nodes N`` the simulator draws N nodes with seed S, first among the nodes running a
    task with at least ``--busy-for`` seconds to go, then other busy nodes, then idle ones.
``suanli sim fault restore [--node ID ...]``   (default: every silenced node)
``suanli sim fault status``
    Requests travel as JSON on the connector's control topic (``TopicNames.control``); the
    running simulator answers on the same topic, and the command prints the answer (which
    nodes, the tasks running on each). No answer within ``--timeout``: exit 2.

``suanli sim health --cell C``
    The node-failure figures of a cell, from its decisions and cell log: per DOWN decision
    the detection latency (its ``decided_at``, a tick's time, minus the node's last heartbeat
    ``last_heartbeat_at``; checked against the last heartbeat the cell log shows), its
    distribution, the tasks lost and placed again (and how long that took), double
    placements, and the statuses stale copies sent from nodes that had lost their task.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import time
import uuid
from typing import Any, Iterable, Optional

from suanli.streams.kafka_security import client_options
from suanli.errors import ConnectorError

HOLDING_RELEASES = ("TaskReleased", "TaskLost", "TaskPreempted")    # decisions that end a task's hold


# --------------------------------------------------------------------------- fault requests
async def control_request(settings: Any, request: dict[str, Any], *, connector: str = "sim",
                          timeout: float = 15.0) -> dict[str, Any]:
    """Send one control request to ``connector`` and return its reply (``ok`` False: refused).

    Raises ConnectorError when no reply arrives within ``timeout`` (no such connector running
    in this namespace, or it was started before the request's topic existed)."""
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

    from suanli.streams.kafka_io import end_offsets, ensure_topics
    from suanli.streams.topics import TopicNames, TopicSpec

    topic = TopicNames(settings.namespace).control(connector)
    bootstrap = settings.bootstrap_servers
    await ensure_topics(bootstrap, [TopicSpec(topic, 1)])
    ends = await end_offsets(bootstrap, topic) or {0: 0}     # a topic just created: empty
    request = {"request_id": uuid.uuid4().hex, "at": int(time.time() * 1000), **request}
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, **client_options(bootstrap), group_id=None, enable_auto_commit=False)
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in sorted(ends)]
        consumer.assign(tps)
        for tp in tps:
            consumer.seek(tp, ends[tp.partition])
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, **client_options(bootstrap), acks="all")
        await producer.start()
        try:
            await producer.send_and_wait(topic, json.dumps(request, sort_keys=True).encode(), key=connector.encode())
        finally:
            await producer.stop()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            fetched = await consumer.getmany(timeout_ms=250)
            for records in fetched.values():
                for record in records:
                    try:
                        reply = json.loads(record.value or b"")
                    except ValueError:
                        continue
                    if isinstance(reply, dict) and reply.get("type") == "reply" \
                            and reply.get("request_id") == request["request_id"]:
                        return reply
    finally:
        await consumer.stop()
    raise ConnectorError(f"no reply from connector {connector!r} on {topic} within {timeout:g}s "
                         "(is it running, in this namespace?)")


def _fault(args: argparse.Namespace) -> int:
    from suanli.config import load_settings, settings

    s = load_settings(namespace=args.namespace) if args.namespace else settings()
    request: dict[str, Any] = {"action": args.fault_action}
    if args.cell:
        request["cell"] = args.cell
    if args.fault_action == "silence":
        if bool(args.node) == bool(args.nodes):
            raise ConnectorError("silence: give --nodes N or --node ID (one or more), not both")
        request.update(nodes=args.node or [], count=args.nodes or 0, seed=args.seed, busy_for_s=args.busy_for)
    elif args.fault_action == "restore":
        request["nodes"] = args.node or []
    reply = asyncio.run(control_request(s, request, connector=args.connector, timeout=args.timeout))
    if args.json:
        print(json.dumps(reply, indent=2, sort_keys=True))
    elif not reply.get("ok"):
        print(f"suanli sim: {args.connector} refused: {reply.get('error')}")
    else:
        nodes = reply.get("nodes") or []
        running = reply.get("running") or {}
        verb = {"silence": "silenced", "restore": "restored", "status": "status of"}[args.fault_action]
        detail = ", ".join(f"{n} ({len(running.get(n, []))} running)" for n in nodes)
        print(f"{verb} {len(nodes)} node(s) of connector {reply['connector']} (cell {reply['cell']})"
              + (f": {detail}" if detail else "") + f"; silenced now: {len(reply.get('silenced') or [])}")
    return 0 if reply.get("ok") else 2


# --------------------------------------------------------------------------- health figures
def _dist(values: list[int]) -> dict[str, Any]:
    if not values:
        return {"count": 0}
    v = sorted(values)
    return {"count": len(v), "min": v[0], "p50": v[(len(v) - 1) // 2], "p90": v[(len(v) * 9 - 1) // 10],
            "max": v[-1]}


def health_figures(decisions: Iterable[tuple[str, dict[str, Any]]],
                   inputs: Optional[Iterable[tuple[int, str, dict[str, Any]]]] = None) -> dict[str, Any]:
    """Node-failure figures of one cell.

    ``decisions``: ``(kind, payload)`` in decisions-topic order (duplicate event ids are
    dropped here). ``inputs``: optional ``(offset, kind, payload)`` of the cell's log partition,
    to check each DOWN's ``last_heartbeat_at`` against the log and to count stale statuses.
    """
    seen: set[str] = set()
    holding: dict[str, str] = {}                  # task -> node it holds
    health: dict[str, str] = {}                   # node -> READY | SUSPECT | DOWN
    unhealthy_placements: list[str] = []          # placed on a SUSPECT or DOWN node
    release_mismatch: list[str] = []              # released from a node it did not hold
    lost_mismatch: list[str] = []                 # DOWN's lost_tasks != what the node held
    lost_at: dict[str, list[dict[str, Any]]] = {}  # task -> its TaskLost payloads, in order
    down: list[dict[str, Any]] = []
    suspects, ready_again, double, replaced, same_node, delays = 0, 0, [], 0, [], []
    awaiting: dict[str, dict[str, Any]] = {}       # task lost, not placed again yet -> its TaskLost
    health_moves: dict[str, int] = {}
    clock = 0            # the latest decided_at so far: a lower bound of the cell clock (a decision's
    # decided_at is its input's time, and a late input, e.g. a connector status, can be older)
    for kind, p in decisions:
        if p.get("event_id") in seen:
            continue
        seen.add(p.get("event_id"))
        clock = max(clock, p["provenance"]["decided_at"])
        if kind == "TaskPlaced":
            tid = p["task_id"]
            if tid in holding:
                double.append(f"{tid}: placed on {p['node_id']} while holding {holding[tid]} ({p['decision_id']})")
            if health.get(p["node_id"], "READY") != "READY":
                unhealthy_placements.append(f"{tid} on {p['node_id']} ({health[p['node_id']]}, {p['decision_id']})")
            holding[tid] = p["node_id"]
            lost = awaiting.pop(tid, None)
            if lost is not None:
                if p["node_id"] == lost["node_id"]:
                    same_node.append(tid)
                else:
                    replaced += 1
                delays.append(clock - lost["provenance"]["decided_at"])
        elif kind == "TaskMigrated":
            # a gold task moved (its node DOWN, drained or DEGRADED): it holds its new node now;
            # a move off a DOWN node counts as a lost task placed again at once
            tid = p["task_id"]
            held = holding.get(tid)
            if held is not None and held != p["from_node"]:
                release_mismatch.append(f"{tid}: moved from {p['from_node']} while placed on {held}")
            holding[tid] = p["to_node"]
            if p.get("cause") == "NODE_DOWN":
                lost_at.setdefault(tid, []).append(p)
                replaced += 1
                delays.append(0)
        elif kind in HOLDING_RELEASES:
            held = holding.pop(p["task_id"], None)
            if held is not None and p.get("node_id") and p["node_id"] != held:
                release_mismatch.append(f"{p['task_id']}: {kind} on {p['node_id']} while placed on {held}")
            if kind == "TaskLost":
                lost_at.setdefault(p["task_id"], []).append(p)
                awaiting[p["task_id"]] = p
        elif kind == "NodeHealthChanged":
            health[p["node_id"]] = p["status"]
            health_moves[p["status"]] = health_moves.get(p["status"], 0) + 1
            if p["status"] == "SUSPECT":
                suspects += 1
            elif p["status"] == "READY":
                ready_again += 1
            elif p["status"] == "DOWN":
                held_there = sorted(t for t, n in holding.items() if n == p["node_id"])
                if held_there != sorted(p["lost_tasks"]):
                    lost_mismatch.append(f"{p['node_id']}: held {held_there}, lost {sorted(p['lost_tasks'])}")
                down.append({"node_id": p["node_id"], "decided_at": p["provenance"]["decided_at"],
                             "last_heartbeat_at": p["last_heartbeat_at"],
                             "latency_ms": p["provenance"]["decided_at"] - p["last_heartbeat_at"],
                             "lost": len(p["lost_tasks"]), "lost_tasks": list(p["lost_tasks"]),
                             "input_offset": p["provenance"]["input"]["offset"]})
    out: dict[str, Any] = {
        "nodes_down": len(down), "down_latency_ms": _dist([d["latency_ms"] for d in down]),
        "suspect_transitions": suspects, "ready_again": ready_again, "health_transitions": health_moves,
        "tasks_lost": sum(len(v) for v in lost_at.values()), "distinct_tasks_lost": len(lost_at),
        "replaced_elsewhere": replaced, "replaced_on_same_node": len(same_node),
        "not_replaced": sorted(awaiting), "replace_delay_ms": _dist(delays), "replace_delays": delays,
        "double_placements": double, "placed_on_unhealthy": unhealthy_placements,
        "release_mismatch": release_mismatch, "lost_mismatch": lost_mismatch, "down": down,
    }
    if inputs is not None:
        beats: dict[str, list[tuple[int, int]]] = {}
        stale: dict[str, int] = {}
        tick, behind = None, []      # how far each heartbeat's time is behind the last tick before it
        lost_nodes = {(t, lp.get("node_id", lp.get("from_node"))): lp["provenance"]["input"]["offset"] for t, lps in lost_at.items() for lp in lps}
        for offset, kind, p in inputs:
            if kind == "CellTick":
                tick = p["at"]
            elif kind == "NodeHeartbeat":
                for node_id in (p["node_id"], *(p.get("nodes") or ())):      # a batch names several
                    beats.setdefault(node_id, []).append((offset, p["at"]))
                if tick is not None:
                    behind.append(tick - p["at"])
            elif kind == "TaskStatusChanged":
                at = lost_nodes.get((p["task_id"], p.get("node_id")))
                if at is not None and offset > at:
                    stale[p["status"]] = stale.get(p["status"], 0) + 1
        mismatches = []
        for d in down:
            before = [at for off, at in beats.get(d["node_id"], []) if off < d["input_offset"]]
            last = max(before) if before else None
            d["log_last_heartbeat_at"] = last
            if last != d["last_heartbeat_at"]:
                mismatches.append(d["node_id"])
        out.update(heartbeat_mismatches=mismatches, stale_statuses=stale, heartbeat_behind_tick_ms=_dist(behind))
    return out


async def read_cell(settings: Any, cell: str) -> tuple[list[tuple[str, dict]], list[tuple[int, str, dict]]]:
    """The cell's decisions ``(kind, payload)`` and its cell-log inputs ``(offset, kind, payload)``."""
    from suanli.schemas.codec import Codec
    from suanli.schemas.registry import RegistryClient
    from suanli.streams.kafka_io import EventConsumer
    from suanli.streams.topics import TopicNames

    names = TopicNames(settings.namespace)
    key = cell.encode()
    with RegistryClient(settings.registry_url) as registry:
        codec = Codec(registry)
        out = []
        for topic in (names.decisions, names.cell_log):
            async with EventConsumer(settings.bootstrap_servers, codec, [topic]) as consumer:
                out.append([r for r in await consumer.read_until_end()
                            if r.kind is not None and r.key == key])
    decisions, log = out
    return ([(r.kind, r.payload) for r in decisions],
            [(r.offset, r.kind, r.payload) for r in sorted(log, key=lambda r: r.offset)])


def describe_health(f: dict[str, Any]) -> str:
    lat = f["down_latency_ms"]
    lines = [f"nodes DOWN: {f['nodes_down']}"
             + (f"; detection latency (decided_at - last heartbeat) min {lat['min']} / p50 {lat['p50']} / "
                f"max {lat['max']} ms" if lat["count"] else ""),
             f"health transitions: {json.dumps(f['health_transitions'], sort_keys=True)}",
             f"tasks lost: {f['tasks_lost']} ({f['distinct_tasks_lost']} distinct); placed again elsewhere: "
             f"{f['replaced_elsewhere']}, on the same node: {f['replaced_on_same_node']}, not yet: "
             f"{len(f['not_replaced'])}",
             f"double placements: {len(f['double_placements'])}; placements on SUSPECT/DOWN nodes: "
             f"{len(f['placed_on_unhealthy'])}; releases from another node: {len(f['release_mismatch'])}; "
             f"DOWN decisions whose lost tasks differ from what the node held: {len(f['lost_mismatch'])}"]
    d = f["replace_delay_ms"]
    if d["count"]:
        lines.append(f"lost -> placed again: min {d['min']} / p50 {d['p50']} / max {d['max']} ms of cell time "
                     f"({sum(1 for x in f['replace_delays'] if x == 0)} of {d['count']} in the DOWN decision's own step)")
    if "stale_statuses" in f:
        lines.append(f"statuses from nodes that had lost the task: {json.dumps(f['stale_statuses'], sort_keys=True)}; "
                     f"DOWN decisions whose last heartbeat differs from the log: {len(f['heartbeat_mismatches'])}")
        b = f["heartbeat_behind_tick_ms"]
        if b["count"]:
            lines.append(f"heartbeats reaching the cell log after a tick, behind it by: p50 {b['p50']} / "
                         f"p90 {b['p90']} / max {b['max']} ms (past 5 s, healthy nodes turn SUSPECT)")
    return "\n".join(lines)


def _health(args: argparse.Namespace) -> int:
    from suanli.config import load_settings, settings

    s = load_settings(namespace=args.namespace) if args.namespace else settings()
    decisions, inputs = asyncio.run(read_cell(s, args.cell))
    if not decisions and not inputs:
        raise ConnectorError(f"no record of cell {args.cell!r} in namespace {s.namespace!r}")
    figures = health_figures(decisions, inputs)
    print(describe_health(figures))
    if args.json:
        with open(args.json, "w") as out:
            json.dump(figures, out, indent=2)
    return 0


# --------------------------------------------------------------------------- the parser
def add_commands(sub: argparse._SubParsersAction) -> None:
    from suanli.cli_services import KAFKA, STACK

    sim = sub.add_parser("sim", help="the simulated cluster: fault injection, node-failure figures")
    sim_sub = sim.add_subparsers(dest="sim_command", required=True, metavar="ACTION")

    fault = sim_sub.add_parser("fault", help="silence or restore simulated nodes' heartbeats")
    fault_sub = fault.add_subparsers(dest="fault_action", required=True, metavar="FAULT")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--cell", help="only if the connector serves this cell")
    common.add_argument("--connector", default="sim", help="the simulator's connector name (default sim)")
    common.add_argument("--namespace", help="topic namespace (default: the configured one)")
    common.add_argument("--timeout", type=float, default=15.0, help="seconds to wait for the answer")
    common.add_argument("--json", action="store_true", help="print the connector's reply as JSON")
    silence = fault_sub.add_parser("silence", parents=[common], help="stop the heartbeats of chosen nodes")
    silence.add_argument("--nodes", type=int, help="how many nodes (the simulator draws them with --seed)")
    silence.add_argument("--node", action="append", help="a node id (repeat for several)")
    silence.add_argument("--seed", type=int, default=0, help="seed of the draw (default 0)")
    silence.add_argument("--busy-for", type=float, default=0.0,
                         help="prefer nodes running a task with at least this many wall seconds to go")
    restore = fault_sub.add_parser("restore", parents=[common], help="let silenced nodes heartbeat again")
    restore.add_argument("--node", action="append", help="a node id (default: every silenced node)")
    fault_sub.add_parser("status", parents=[common], help="which nodes are silenced")
    fault.set_defaults(func=_fault, needs=(KAFKA,))       # JSON on the control topic: no registry

    health = sim_sub.add_parser("health", help="node-failure figures of a cell: DOWN latency, lost and re-placed tasks")
    health.add_argument("--cell", required=True)
    health.add_argument("--namespace", help="topic namespace (default: the configured one)")
    health.add_argument("--json", metavar="FILE", help="write every figure to FILE")
    health.set_defaults(func=_health, needs=STACK)
