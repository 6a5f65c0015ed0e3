"""``suanli submit | status | nodes | pending``: the control plane for people.

Reads go to the log itself (cell log, decisions, dead letters), folded by
``projections/lifecycle.py``; submissions go to the raw tasks topic like any producer's.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path

from suanli.config import settings
from suanli.errors import SuanliError, ValidationError


def _view(cell: str | None = None):
    from suanli.projections.reader import load_lifecycle

    return asyncio.run(load_lifecycle(settings(), cell=cell))


def _submit(args: argparse.Namespace) -> int:
    import yaml

    from suanli.schemas.codec import Codec
    from suanli.schemas.models import validate_event
    from suanli.schemas.registry import RegistryClient
    from suanli.schemas.task_spec import task_from_document
    from suanli.streams.kafka_io import EventProducer

    path = Path(args.file)
    try:
        text = sys.stdin.read() if args.file == "-" else path.read_text()
        doc = yaml.safe_load(text)
    except OSError as exc:
        raise SuanliError(f"cannot read {path}: {exc}") from exc
    except yaml.YAMLError as exc:
        raise ValidationError(f"{path} is not valid YAML: {exc}") from exc
    if args.cell:
        doc = {**(doc or {}), "cell": args.cell}
    event = task_from_document(doc, now_ms=int(time.time() * 1000))
    problem = validate_event("TaskSubmitted", event)
    if problem:
        raise ValidationError(problem)

    async def send() -> None:
        s = settings()
        with RegistryClient(s.registry_url) as registry:
            async with EventProducer(s.bootstrap_servers, Codec(registry), namespace=s.namespace) as producer:
                await (await producer.publish("TaskSubmitted", event))

    asyncio.run(send())
    print(f"submitted {event['task_id']} to cell {event['cell']}; follow it with `suanli status {event['task_id']}`")
    return 0


def _status(args: argparse.Namespace) -> int:
    view = _view()
    task = view.tasks.get(args.task)
    if task is None:
        print(f"suanli: no task {args.task!r} in the log of namespace {settings().namespace!r}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(task.__dict__, indent=2, default=str))
        return 0
    print(f"{task.task_id}  {task.status}  (tenant {task.tenant}, cell {task.cell}, {task.qos_tier or '-'})")
    if task.node_id:
        devices = f", GPU {task.gpu_devices} x {task.gpu_milli} milli" if task.gpu_devices else ""
        print(f"  node {task.node_id}{devices}")
    if task.status == "PENDING":
        view.pending(task.cell)
        print(f"  queue position {task.queue_position}")
    for reason in task.reasons:
        print(f"  reason: {reason['reason']} ({reason['nodes']} nodes)")
    if task.exit_code is not None:
        print(f"  exit code {task.exit_code}")
    if task.message:
        print(f"  connector: {task.message}")
    if task.path:
        print(f"  decision {task.decision_id} by {task.strategy}:")
        for step in task.path:
            print(f"    - {step}")
    return 0


def _nodes(args: argparse.Namespace) -> int:
    view = _view(args.cell)
    rows = sorted(view.nodes.values(), key=lambda n: (n.cell, n.node_id))
    if args.json:
        print(json.dumps([n.__dict__ for n in rows], indent=2))
        return 0
    print(f"{'cell':<24} {'node':<18} {'gpus':<12} {'cpu used/total':>18} {'mem used/total MiB':>22}  gpu milli used")
    for n in rows[: args.limit]:
        gpus = f"{n.gpus}x{n.gpu_model}" if n.gpus else "-"
        print(f"{n.cell:<24} {n.node_id:<18} {gpus:<12} {n.cpu_used:>8}/{n.cpu_milli:<9} "
              f"{n.memory_used:>10}/{n.memory_mib:<11} {n.gpu_used if n.gpus else ''}")
    if len(rows) > args.limit:
        print(f"... {len(rows) - args.limit} more (use --limit or --json)")
    return 0


def _pending(args: argparse.Namespace) -> int:
    view = _view(args.cell)
    waiting = view.pending(args.cell)
    if args.json:
        print(json.dumps([{"task_id": t.task_id, "cell": t.cell, "queue_position": t.queue_position,
                           "priority": t.priority, "reasons": t.reasons} for t in waiting], indent=2))
        return 0
    if not waiting:
        print("no pending tasks")
        return 0
    print(f"{'pos':>5}  {'task':<36} {'cell':<24} reasons")
    for t in waiting[: args.limit]:
        reasons = "; ".join(f"{r['reason']} ({r['nodes']} nodes)" for r in t.reasons) or "-"
        print(f"{t.queue_position:>5}  {t.task_id:<36} {t.cell:<24} {reasons}")
    if len(waiting) > args.limit:
        print(f"... {len(waiting) - args.limit} more (use --limit or --json)")
    return 0


def add_commands(sub: argparse._SubParsersAction) -> None:
    """Register submit, status, nodes and pending."""
    p = sub.add_parser("submit", help="submit a task described in YAML (see schemas/task_spec.py)")
    p.add_argument("file", help="task YAML file, or - for standard input")
    p.add_argument("--cell", help="override the task's cell")
    p.set_defaults(func=_submit)
    p = sub.add_parser("status", help="where a task stands, with its reasons and decision path")
    p.add_argument("task")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_status)
    p = sub.add_parser("nodes", help="nodes with their capacity and what is allocated")
    p.add_argument("--cell")
    p.add_argument("--limit", type=int, default=50)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_nodes)
    p = sub.add_parser("pending", help="why tasks are pending, with their queue positions")
    p.add_argument("--cell")
    p.add_argument("--limit", type=int, default=50)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_pending)
