"""``suanli reserve -f bid.yaml`` and ``suanli reservations``: advance capacity (#15).

``suanli reserve -f bid.yaml [--cell C] [--json]`` validates a bid written in the bid form
(``schemas/task_spec.BidForm``)::

    id: b-train-1          # optional; the token it may win is rsv-b-train-1
    tenant: vision
    cell: openb
    gpus: 4                # whole GPUs, on one node
    gpu_model: A100        # or [A100, H800]; or gpu_memory: 40Gi (per GPU)
    cpu: 16
    memory: 64Gi
    start: +10m            # earliest start: ISO time (UTC unless it names a zone), epoch ms, now, +10m
    latest_start: +2h      # optional (default: start)
    duration: 4h
    price: 2.5             # the most you pay per GPU-hour
    gang: true             # all or nothing (default); false: fewer GPUs (>= 1) will do

and stores it as a ``ReservationBid`` on the raw tasks topic, as ``suanli submit`` stores a task
(same producer, codec, topic routing). Nothing is written when the form is refused (exit 2
with every bad field named). The cell's auction grants a token or refuses the bid; a task runs
on the token with ``reservation: rsv-b-train-1`` in its form.

``suanli reservations [--cell C] [--tenant T] [--status S] [--bids] [--json]`` folds the
namespace's log (``projections/reservations.py``: the cell log, then the decisions) and
prints the tokens: owner, node and GPUs, window, clearing price, status, claimants and use
(GPUs used of those held, and given back). ``--bids`` prints the bids instead, with what
became of them (SUBMITTED, GRANTED with the token, LOST with the reason and the price that
would have won).
"""
from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from suanli.config import settings
from suanli.errors import SuanliError, ValidationError


def read_bid(file: str, cell: str | None, now_ms: int) -> dict[str, Any]:
    """The ReservationBid payload of a bid file (``-``: standard input); ValidationError naming
    every bad field."""
    import yaml

    from suanli.schemas.task_spec import bid_from_document

    path = Path(file)
    try:
        text = sys.stdin.read() if file == "-" else path.read_text()
        doc = yaml.safe_load(text)
    except OSError as exc:
        raise SuanliError(f"cannot read {path}: {exc}") from exc
    except yaml.YAMLError as exc:
        raise ValidationError(f"{path} is not valid YAML: {exc}") from exc
    if cell:
        doc = {**(doc or {}), "cell": cell} if isinstance(doc, dict) else doc
    return bid_from_document(doc, now_ms=now_ms)


def _reserve(args: argparse.Namespace) -> int:
    from suanli.cli_tasks import _publish
    from suanli.schemas.task_spec import utc_iso

    event = read_bid(args.file, args.cell, int(time.time() * 1000))
    stored = _publish("ReservationBid", event)
    if args.json:
        print(json.dumps({**event, "reservation_id": f"rsv-{event['bid_id']}",
                          "stored": {"topic": stored.topic, "partition": stored.partition,
                                     "offset": stored.offset}}, indent=2))
        return 0
    latest = event["latest_start_at"]
    when = utc_iso(event["start_at"]) + (f" .. {utc_iso(latest)}" if latest not in (None, event["start_at"]) else "")
    gpus = event["resources"]["gpu_count"]
    print(f"bid {event['bid_id']} for {gpus} GPU{'s' if gpus != 1 else ''} "
          f"({'all or nothing' if event['gang'] else 'fewer will do'}) starting {when} for "
          f"{event['duration_ms'] / 3_600_000:g}h at up to {event['price']:g} per GPU-hour, cell {event['cell']}; "
          f"if it wins, the token is rsv-{event['bid_id']}: follow it with `suanli reservations --bids`")
    return 0


def _view(cell: str | None):
    from suanli.projections.reader import load_reservations

    return asyncio.run(load_reservations(settings(), cell=cell))


def _when(ms: int | None) -> str:
    from suanli.schemas.task_spec import utc_iso

    return utc_iso(ms).replace("T", " ") if ms else "-"


def _window(start: int, end: int) -> str:
    """``2030-06-01 08:00:00Z .. 12:00:00Z`` (the end's date only when it differs)."""
    a, b = _when(start), _when(end)
    return f"{a} .. {b[11:] if a[:10] == b[:10] else b}"


def token_row(t: Any) -> dict[str, Any]:
    """One token as ``--json`` prints it."""
    return {**asdict(t), "gpus": t.gpus, "used_gpus": len(t.used_devices), "gpus_released": t.gpus_released,
            "use": round(t.use, 4)}


def bid_row(b: Any, view: Any) -> dict[str, Any]:
    """One bid as ``--bids --json`` prints it (with its token's terms when granted)."""
    token = view.tokens.get(b.reservation_id) if b.reservation_id else None
    row = {k: v for k, v in asdict(b).items() if k != "seen"}
    row["gpus"] = b.gpus
    if token is not None:
        row.update(node_id=token.node_id, gpu_devices=list(token.gpu_devices), granted_start_at=token.start_at,
                   granted_end_at=token.end_at, clearing_price=token.clearing_price,
                   reservation_status=token.status)
    return row


def token_lines(tokens: list[Any], limit: int) -> list[str]:
    """``suanli reservations`` as text lines (pure)."""
    if not tokens:
        return ["no reservation tokens"]
    out = [f"{'token':<28} {'owner':<14} {'node':<16} {'GPUs':<10} {'window (UTC)':<41} {'price':>7}  "
           f"{'status':<8} {'claimed by':<24} use"]
    for t in tokens[:limit]:
        window = _window(t.start_at, t.end_at)
        use = f"{len(t.used_devices)}/{t.gpus}" + (f", {t.gpus_released} back" if t.gpus_released else "")
        claimed = ", ".join(t.claimed_by) or "-"
        devices = ",".join(str(d) for d in t.gpu_devices) or "-"
        out.append(f"{t.reservation_id:<28} {t.tenant:<14} {t.node_id:<16} {devices:<10} {window:<41} "
                   f"{t.clearing_price:>7.3g}  {t.status:<8} {claimed:<24} {use}"
                   + (f"  ({t.reason})" if t.reason and t.status != "CLAIMED" else ""))
    if len(tokens) > limit:
        out.append(f"... {len(tokens) - limit} more (use --limit or --json)")
    return out


def bid_lines(bids: list[Any], view: Any, limit: int) -> list[str]:
    """``suanli reservations --bids`` as text lines (pure)."""
    if not bids:
        return ["no bids"]
    out = [f"{'bid':<26} {'owner':<14} {'GPUs':>4} {'earliest start (UTC)':<20} {'for':>6} {'price':>7}  "
           f"{'status':<9} outcome"]
    for b in bids[:limit]:
        token = view.tokens.get(b.reservation_id) if b.reservation_id else None
        if b.status == "GRANTED" and token is not None:
            outcome = (f"{token.reservation_id} on {token.node_id} GPU {list(token.gpu_devices)} "
                       f"{_window(token.start_at, token.end_at)} at {token.clearing_price:g} ({token.status})")
        elif b.status == "LOST":
            need = (f"; {b.needed_price:g} per GPU-hour would have won" if b.needed_price is not None
                    else "; no capacity in the window at any price")
            outcome = f"{b.reason or 'refused'}{need}"
        else:
            outcome = "not cleared yet"
        hours = f"{b.duration_ms / 3_600_000:g}h" if b.duration_ms else "-"
        out.append(f"{b.bid_id:<26} {b.tenant:<14} {b.gpus:>4} {_when(b.start_at):<20} {hours:>6} {b.price:>7.3g}  "
                   f"{b.status:<9} {outcome}")
    if len(bids) > limit:
        out.append(f"... {len(bids) - limit} more (use --limit or --json)")
    return out


def _reservations(args: argparse.Namespace) -> int:
    view = _view(args.cell)
    if args.bids:
        bids = [b for b in view.bids_of(args.tenant, args.cell)
                if args.status is None or b.status == args.status.upper()]
        if args.json:
            print(json.dumps([bid_row(b, view) for b in bids], indent=2))
        else:
            print("\n".join(bid_lines(bids, view, args.limit)))
        return 0
    tokens = view.tokens_of(args.tenant, args.cell, args.status.upper() if args.status else None)
    if args.json:
        print(json.dumps([token_row(t) for t in tokens], indent=2))
    else:
        print("\n".join(token_lines(tokens, args.limit)))
    return 0


def add_commands(sub: argparse._SubParsersAction) -> None:
    """Register ``reserve`` and ``reservations``."""
    from suanli.cli_services import STACK

    p = sub.add_parser("reserve", help="bid for advance capacity: GPUs for a window, at up to a price (YAML, see "
                                       "schemas/task_spec.py)",
                       description="Store a ReservationBid from a bid file: the cell's auction grants a token "
                                   "(rsv-<bid id>) or refuses it. Fields: id, tenant, cell, gpus, gpu_model or "
                                   "gpu_memory, cpu, memory, start, latest_start, duration, price, gang.")
    p.add_argument("-f", "--file", required=True, help="bid YAML file, or - for standard input")
    p.add_argument("--cell", help="override the bid's cell")
    p.add_argument("--json", action="store_true", help="print the event written as JSON")
    p.set_defaults(func=_reserve, needs=STACK)
    p = sub.add_parser("reservations", help="reservation tokens: owners, nodes, windows, prices, claimants and use "
                                            "(--bids: the bids and what became of them)")
    p.add_argument("--cell", help="only this cell")
    p.add_argument("--tenant", help="only this owner's")
    p.add_argument("--status", help="only this status (tokens: GRANTED, CLAIMED, EXPIRED, ENDED, RELEASED; "
                                    "bids: SUBMITTED, GRANTED, LOST)")
    p.add_argument("--bids", action="store_true", help="list the bids instead of the tokens")
    p.add_argument("--limit", type=int, default=50)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_reservations, needs=STACK)
