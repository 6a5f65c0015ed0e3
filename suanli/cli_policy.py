"""``suanli policy set --cell CELL [--strategy NAME] [--config JSON | --config-file F]``.

A cell's policy (its strategy and that strategy's configuration: QoS, reservations,
profiles, prewarm ...) is a ``PolicyChanged`` on the raw policy topic. This command checks it
first, as the scheduler will (``strategies.validate_policy``: an unknown key or a bad value is
refused here, naming it, with exit 2, instead of being dead-lettered later), then stores it.
"""
from __future__ import annotations

import argparse
import json
import time
import uuid
from pathlib import Path
from typing import Any

from suanli.errors import StrategyConfigError, ValidationError


def policy_event(cell: str, strategy: str, config: dict[str, Any], at: int, changed_by: str) -> dict[str, Any]:
    """The PolicyChanged payload (checked: :class:`StrategyConfigError` names what is wrong)."""
    from suanli.processors.model import canonical_json
    from suanli.processors.strategies import validate_policy

    validate_policy(strategy, config)
    return {"event_id": f"policy/{cell}/{uuid.uuid4().hex[:12]}", "cell": cell, "strategy": strategy,
            "config_json": canonical_json(config), "changed_by": changed_by, "at": at}


def _config(args: argparse.Namespace) -> dict[str, Any]:
    if args.config is not None and args.config_file is not None:
        raise ValidationError("give --config or --config-file, not both")
    text = args.config if args.config is not None else (
        Path(args.config_file).read_text() if args.config_file is not None else "{}")
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValidationError(f"the config is not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise ValidationError(f"the config must be a JSON object, not {type(value).__name__}")
    return value


def _set(args: argparse.Namespace) -> int:
    from suanli.cli_tasks import _publish

    try:
        event = policy_event(args.cell, args.strategy, _config(args), int(time.time() * 1000), args.changed_by)
    except StrategyConfigError as exc:
        raise ValidationError(f"policy refused: {exc}") from None
    stored = _publish("PolicyChanged", event)
    print(f"policy of cell {args.cell}: {args.strategy} {event['config_json']} stored ({event['event_id']} at "
          f"{stored.topic}[{stored.partition}]@{stored.offset}); the scheduler applies it in log order")
    return 0


def add_commands(sub: argparse._SubParsersAction) -> None:
    """Register ``suanli policy``."""
    from suanli.cli_services import STACK

    p = sub.add_parser("policy", help="set a cell's strategy and its configuration (checked before it is stored)")
    psub = p.add_subparsers(dest="policy_action", required=True)
    s = psub.add_parser("set", help="store a PolicyChanged for a cell", description=__doc__)
    s.add_argument("--cell", required=True)
    s.add_argument("--strategy", default="default", help="a strategy name (`suanli strategy list`)")
    s.add_argument("--config", help='the configuration as JSON, e.g. \'{"profiles": {"enabled": true}}\'')
    s.add_argument("--config-file", help="the configuration from a JSON file")
    s.add_argument("--changed-by", default="suanli policy set", help="who, in the event (audit)")
    s.set_defaults(func=_set, needs=STACK)
