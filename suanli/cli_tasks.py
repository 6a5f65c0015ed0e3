"""``suanli submit | status | nodes [drain|cordon|uncordon] | pending``: the control plane for people.

Reads go to the log itself (cell log, decisions, dead letters), folded by
``projections/lifecycle.py``; writes (submissions, node status changes) go to the raw topics
like any producer's (``_publish``: the shared codec, ``streams/topics.raw_route`` for topic
and key, acks=all), so intake validates them and forwards them to the cell log.

``suanli nodes drain NODE [--cell C] [--reason R]`` writes a ``NodeStatusChanged`` DRAINING
for a registered node: the scheduler places nothing new on it and moves its gold tasks
elsewhere reserve-first (the new place is held before the old copy stops); other tasks
finish where they are. ``cordon`` (CORDONED: nothing new, nothing moved) and ``uncordon``
(READY) write the same event with those statuses. The node must have registered (in
``--cell``, which may be left out when the id is registered in one cell only); otherwise
nothing is written and the command exits 2 with the reason.
"""
from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from suanli.config import settings
from suanli.errors import SuanliError, ValidationError

NODE_ACTIONS = {"drain": "DRAINING", "cordon": "CORDONED", "uncordon": "READY"}


def _view(cell: str | None = None, sources: tuple[str, ...] | None = None):
    from suanli.projections.reader import SOURCES, load_lifecycle

    return asyncio.run(load_lifecycle(settings(), cell=cell, sources=sources or SOURCES))


def checked_event(kind: str, event: dict[str, Any]) -> dict[str, Any]:
    """``event`` if it is a valid ``kind``; :class:`ValidationError` naming the problem otherwise."""
    from suanli.schemas.models import validate_event

    problem = validate_event(kind, event)
    if problem:
        raise ValidationError(problem)
    return event


def _publish(kind: str, event: dict[str, Any]) -> Any:
    """Store one producer event on its raw topic (validated first); its RecordMetadata."""
    from suanli.schemas.codec import Codec
    from suanli.schemas.registry import RegistryClient
    from suanli.streams.kafka_io import EventProducer

    checked_event(kind, event)

    async def send() -> Any:
        s = settings()
        with RegistryClient(s.registry_url) as registry:
            async with EventProducer(s.bootstrap_servers, Codec(registry), namespace=s.namespace) as producer:
                return await (await producer.publish(kind, event))

    return asyncio.run(send())


def node_status_event(node_id: str, cell: str, status: str, reason: str, at: int) -> dict[str, Any]:
    """The NodeStatusChanged an operator writes (``suanli nodes drain|cordon|uncordon``, the
    API's drain); a fresh event id ``{status}/{cell}/{node}/{random}``, so repeating a
    command is a new fact."""
    return {"event_id": f"{status.lower()}/{cell}/{node_id}/{uuid.uuid4().hex[:8]}", "node_id": node_id,
            "cell": cell, "status": status, "reason": reason, "at": at}


def _submit(args: argparse.Namespace) -> int:
    import yaml

    from suanli.schemas.task_spec import task_from_document

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
    _publish("TaskSubmitted", event)
    print(f"submitted {event['task_id']} to cell {event['cell']}; follow it with `suanli status {event['task_id']}`")
    return 0


def _seconds(ms: int) -> str:
    return f"{ms / 1000:g} s"


def status_lines(view: Any, task: Any) -> list[str]:
    """``suanli status`` as text lines (pure: the view and one of its tasks)."""
    from suanli.processors.qos import primary_of, standby_id
    from suanli.projections.audit import utc_text

    out = [f"{task.task_id}  {task.status}  (tenant {task.tenant}, cell {task.cell}, {task.qos_tier or '-'})"]
    if task.job_id:
        members = len(view.jobs.get(task.job_id, ())) if hasattr(view, "jobs") else 0
        out.append(f"  job {task.job_id}" + (f" ({members} member tasks: `suanli job show {task.job_id}`)"
                                             if members else ""))
    if task.node_id:
        devices = f", GPU {task.gpu_devices} x {task.gpu_milli} milli" if task.gpu_devices else ""
        out.append(f"  node {task.node_id}{devices}")
    tasks = getattr(view, "tasks", {})
    standby = tasks.get(standby_id(task.task_id))
    if standby is not None:
        out.append(f"  standby copy {standby.task_id}: {standby.status}"
                   + (f" on {standby.node_id}" if standby.node_id else "") + " (qos.gold_standby)")
    primary = primary_of(task.task_id)
    if primary is not None:
        out.append(f"  the gold standby copy of {primary} (`suanli status {primary}`)")
    if task.moving_from:
        out.append(f"  old copy still on {task.moving_from}: its place is held until the copy on {task.node_id} "
                   "runs (reserve-first move)")
    if task.status == "PREEMPTED" and task.preemptions:
        last = task.preemptions[-1]
        out.append(f"  preempted by {last['by'] or '-'} on {last['node_id']} at {utc_text(last['at'])}: "
                   f"{last['reason'] or '-'}")
        out.append(f"  queued again at {utc_text(task.requeue_at)} (grace {_seconds(last['grace_ms'])}, "
                   f"work lost {_seconds(last['work_lost_ms'])})")
    if task.status == "PENDING":
        view.pending(task.cell)
        out.append(f"  queue position {task.queue_position}")
    for reason in task.reasons:
        out.append(f"  reason: {reason['reason']} ({reason['nodes']} nodes)")
    if task.exit_code is not None:
        out.append(f"  exit code {task.exit_code}")
    if task.message:
        out.append(f"  connector: {task.message}")
    history = [(p["at"], f"preempted on {p['node_id']} by {p['by'] or '-'}: {p['reason'] or '-'} "
                         f"(grace {_seconds(p['grace_ms'])}, work lost {_seconds(p['work_lost_ms'])})")
               for p in task.preemptions]
    history += [(mv["at"], f"moved {mv['from']} -> {mv['to']}: {mv['cause'] or '-'}, decided "
                           f"{_seconds(mv['elapsed_ms'])} after it began"
                           + (" (reserve-first)" if mv["reserve_first"] else "")
                           + (f"; preempted {', '.join(mv['preempted'])}" if mv["preempted"] else ""))
                for mv in task.migrations]
    if history:
        out.append("  history:")
        out += [f"    {utc_text(at)}  {what}" for at, what in sorted(history, key=lambda h: h[0])]
    if task.path:
        out.append(f"  decision {task.decision_id} by {task.strategy}:")
        out += [f"    - {step}" for step in task.path]
    return out


def _status(args: argparse.Namespace) -> int:
    view = _view()
    task = view.tasks.get(args.task)
    if task is None:
        print(f"suanli: no task {args.task!r} in the log of namespace {settings().namespace!r}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(dataclasses.asdict(task), indent=2, default=str))
        return 0
    print("\n".join(status_lines(view, task)))
    return 0


def _nodes(args: argparse.Namespace) -> int:
    if getattr(args, "node_action", None):
        return _node_status(args)
    view = _view(args.cell)
    rows = sorted(view.nodes.values(), key=lambda n: (n.cell, n.node_id))
    if args.json:
        print(json.dumps([n.__dict__ for n in rows], indent=2))
        return 0
    print(f"{'cell':<24} {'node':<18} {'gpus':<12} {'cpu used/total':>18} {'mem used/total MiB':>22}  gpu milli used"
          "  state")
    for n in rows[: args.limit]:
        gpus = f"{n.gpus}x{n.gpu_model}" if n.gpus else "-"
        state = "/".join(dict.fromkeys(x for x in (n.status, n.health) if x != "READY")) or "READY"
        print(f"{n.cell:<24} {n.node_id:<18} {gpus:<12} {n.cpu_used:>8}/{n.cpu_milli:<9} "
              f"{n.memory_used:>10}/{n.memory_mib:<11} {n.gpu_used if n.gpus else ''}  {state}")
    if len(rows) > args.limit:
        print(f"... {len(rows) - args.limit} more (use --limit or --json)")
    return 0


def _node_status(args: argparse.Namespace) -> int:
    """``suanli nodes drain|cordon|uncordon NODE``: a NodeStatusChanged for a registered node."""
    status = NODE_ACTIONS[args.node_action]
    view = _view(sources=("cell_log",))
    node = view.find_node(args.node, args.node_cell or args.cell)       # NotFoundError / ValidationError: exit 2
    reason = args.reason or f"suanli nodes {args.node_action}"
    event = node_status_event(node.node_id, node.cell, status, reason, int(time.time() * 1000))
    stored = _publish("NodeStatusChanged", event)
    where = {"topic": stored.topic, "partition": stored.partition, "offset": stored.offset}
    if args.json:
        print(json.dumps({**event, "previous": node.status, "stored": where}, indent=2))
        return 0
    effect = {"DRAINING": "nothing new is placed on it; its gold tasks move elsewhere reserve-first, the others "
                          f"finish where they are (`suanli nodes uncordon {node.node_id}` undoes it)",
              "CORDONED": f"nothing new is placed on it (`suanli nodes uncordon {node.node_id}` undoes it)",
              "READY": "it takes new work again"}[status]
    print(f"node {node.node_id} (cell {node.cell}): {node.status} -> {status} requested ({event['event_id']} at "
          f"{stored.topic}[{stored.partition}]@{stored.offset}); {effect}")
    return 0


def pending_rows(view: Any, cell: str | None, include_grace: bool = False) -> list[dict[str, Any]]:
    """``suanli pending --json``: the queue in order (status PENDING, positions 1..n); with
    ``include_grace`` (``--grace``) then the preempted tasks still in their grace (status
    PREEMPTED, ``queue_position`` null, ``requeue_at``: when they are queued again)."""
    rows = [{"task_id": t.task_id, "cell": t.cell, "status": t.status, "queue_position": t.queue_position,
             "priority": t.priority, "qos_tier": t.qos_tier, "reasons": t.reasons,
             "preempted_by": t.preempted_by or None} for t in view.pending(cell)]
    if include_grace:
        rows += [{"task_id": t.task_id, "cell": t.cell, "status": t.status, "queue_position": None,
                  "priority": t.priority, "qos_tier": t.qos_tier, "reasons": [],
                  "preempted_by": t.preempted_by or None, "requeue_at": t.requeue_at}
                 for t in view.preempted_waiting(cell)]
    return rows


def pending_lines(view: Any, cell: str | None, limit: int) -> list[str]:
    """``suanli pending`` as text lines (pure)."""
    from suanli.projections.audit import utc_text

    waiting, grace = view.pending(cell), view.preempted_waiting(cell)
    if not waiting and not grace:
        return ["no pending tasks"]
    out = []
    if waiting:
        out.append(f"{'pos':>5}  {'task':<36} {'cell':<24} reasons")
        for t in waiting[:limit]:
            reasons = "; ".join(f"{r['reason']} ({r['nodes']} nodes)" for r in t.reasons) or "-"
            out.append(f"{t.queue_position:>5}  {t.task_id:<36} {t.cell:<24} {reasons}")
        if len(waiting) > limit:
            out.append(f"... {len(waiting) - limit} more (use --limit or --json)")
    if grace:
        out.append(f"preempted, in their grace ({len(grace)}):")
        for t in grace[:limit]:
            last = t.preemptions[-1] if t.preemptions else {"node_id": "-"}
            out.append(f"       {t.task_id:<36} {t.cell:<24} by {t.preempted_by or '-'} on {last['node_id']}; "
                       f"queued again at {utc_text(t.requeue_at)}")
        if len(grace) > limit:
            out.append(f"... {len(grace) - limit} more (use --limit or --json)")
    return out


def _pending(args: argparse.Namespace) -> int:
    view = _view(args.cell)
    if args.json:
        print(json.dumps(pending_rows(view, args.cell, include_grace=args.grace), indent=2))
        return 0
    print("\n".join(pending_lines(view, args.cell, args.limit)))
    return 0


def add_commands(sub: argparse._SubParsersAction) -> None:
    """Register submit, status, nodes and pending."""
    from suanli.cli_services import STACK

    p = sub.add_parser("submit", help="submit a task described in YAML (see schemas/task_spec.py)")
    p.add_argument("file", help="task YAML file, or - for standard input")
    p.add_argument("--cell", help="override the task's cell")
    p.set_defaults(func=_submit, needs=STACK)
    p = sub.add_parser("status", help="where a task stands, with its reasons and decision path")
    p.add_argument("task")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_status, needs=STACK)
    p = sub.add_parser("nodes", help="nodes with their capacity and what is allocated; drain, cordon, uncordon")
    p.add_argument("--cell")
    p.add_argument("--limit", type=int, default=50)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_nodes, node_action=None, needs=STACK)
    actions = p.add_subparsers(dest="node_action", metavar="ACTION")
    what = {"drain": "no new work; its gold tasks move elsewhere reserve-first, the others finish (DRAINING)",
            "cordon": "no new work, nothing moved (CORDONED)",
            "uncordon": "take new work again (READY), after a drain or a cordon"}
    for action, text in what.items():
        a = actions.add_parser(action, help=text, description=f"{text}: a NodeStatusChanged on the raw nodes topic")
        a.add_argument("node", metavar="NODE", help="node id")
        a.add_argument("--cell", dest="node_cell", metavar="CELL",
                       help="the node's cell (needed only when the id is registered in several cells)")
        a.add_argument("--reason", help="why (kept in the event)")
        a.add_argument("--json", action="store_true", dest="json", help="print the event written as JSON")
        a.set_defaults(func=_nodes, needs=STACK)
    p = sub.add_parser("pending", help="why tasks are pending, with their queue positions (and the preempted "
                                       "ones waiting out their grace)")
    p.add_argument("--cell")
    p.add_argument("--limit", type=int, default=50)
    p.add_argument("--json", action="store_true")
    p.add_argument("--grace", action="store_true",
                   help="with --json: add the preempted tasks still in their grace after the queue (the text "
                        "always shows them)")
    p.set_defaults(func=_pending, needs=STACK)
