"""``suanli policy set --cell CELL [--strategy NAME] [--config JSON | --config-file F]`` and
``suanli policy show --cell CELL [--json]``.

A cell's policy (its strategy and that strategy's configuration: QoS, reservations,
profiles, prewarm ...) is a ``PolicyChanged`` on the raw policy topic. This command checks it
first, as the scheduler will (``strategies.validate_policy``: an unknown key or a bad value is
refused here, naming it, with exit 2, instead of being dead-lettered later), then stores it.

Then it waits (``--wait-s``, 30 s; ``--no-wait`` skips this) until intake has forwarded the
policy to the cell log, and prints where it is there. The policy is on the raw policy topic and
tasks are on the raw tasks topic; Kafka orders nothing across topics, so only a policy already
in the cell log is sure to come before every task submitted afterwards. If it is not there in
time (intake not running), the command says so and exits 2; the policy stays stored, and the
scheduler applies it once intake forwards it.

``show`` prints the policy in force in a cell, folded from the cell log as the scheduler
folds it (``projections/lifecycle.PolicyView``: a policy the scheduler refused leaves the one
before in force), or says that the cell runs ``default`` with its defaults.
"""
from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import time
import uuid
from pathlib import Path
from typing import Any

from suanli.errors import StrategyConfigError, UnavailableError, ValidationError

DEFAULT_WAIT_S = 30.0


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
    what = f"policy of cell {args.cell}: {args.strategy} {event['config_json']}"
    if args.no_wait:
        stored = _publish("PolicyChanged", event)
        print(f"{what} stored ({event['event_id']} at {stored.topic}[{stored.partition}]@{stored.offset}); "
              "the scheduler applies it in cell log order")
        return 0
    if args.wait_s <= 0:
        raise ValidationError(f"--wait-s must be > 0 seconds, not {args.wait_s:g} (--no-wait does not wait)")
    stored, (partition, offset), waited_ms = asyncio.run(_store_and_await(event, args.wait_s))
    print(f"{what} in force: cell log [{partition}]@{offset}, {waited_ms} ms after it was stored "
          f"({event['event_id']} at {stored.topic}[{stored.partition}]@{stored.offset}); "
          "every task submitted from now on enters the cell log after it")
    return 0


async def _store_and_await(event: dict[str, Any], wait_s: float) -> tuple[Any, tuple[int, int], int]:
    """Store the PolicyChanged and read the cell log, from its end offsets as they were before,
    until intake has forwarded it: ``(RecordMetadata on the raw topic, (partition, offset) in
    the cell log, ms waited)``. :class:`UnavailableError` if it is not there within ``wait_s``."""
    from aiokafka import TopicPartition

    from suanli.cli_tasks import checked_event
    from suanli.config import settings
    from suanli.schemas.codec import Codec
    from suanli.schemas.registry import RegistryClient
    from suanli.streams.kafka_io import EventConsumer, EventProducer, end_offsets
    from suanli.streams.topics import TopicNames

    checked_event("PolicyChanged", event)
    s = settings()
    cell_log = TopicNames(s.namespace).cell_log
    with RegistryClient(s.registry_url) as registry:
        codec = Codec(registry)
        async with EventConsumer(s.bootstrap_servers, codec, []) as consumer, \
                EventProducer(s.bootstrap_servers, codec, namespace=s.namespace) as producer:
            ends = await end_offsets(s.bootstrap_servers, cell_log)      # before the policy is sent
            if not ends:
                raise UnavailableError(f"no topic {cell_log}: start the control plane (`suanli up`) first, "
                                       "or store the policy without waiting (--no-wait)")
            consumer.raw.assign([TopicPartition(cell_log, p) for p in sorted(ends)])
            for p, end in ends.items():
                consumer.raw.seek(TopicPartition(cell_log, p), end)
            stored = await (await producer.publish("PolicyChanged", event))
            loop = asyncio.get_running_loop()
            began = loop.time()
            async for batch in consumer.batches(timeout_ms=100):
                for r in batch:
                    if r.kind == "PolicyChanged" and r.payload["event_id"] == event["event_id"]:
                        return stored, (r.partition, r.offset), round((loop.time() - began) * 1000)
                if loop.time() - began > wait_s:
                    raise UnavailableError(
                        f"policy {event['event_id']} stored at {stored.topic}[{stored.partition}]@{stored.offset}, "
                        f"but not in the cell log {cell_log} after {wait_s:g} s: is intake running (`suanli up`)? "
                        "The scheduler applies it once intake forwards it (--no-wait stores without waiting)")
    raise AssertionError("unreachable: batches() never ends")


def _show(args: argparse.Namespace) -> int:
    from suanli.cli_tasks import _view

    policy = _view(args.cell, ("cell_log",)).policy(args.cell)
    if args.json:
        print(json.dumps({"set": policy.set, **dataclasses.asdict(policy)}, indent=2, sort_keys=True))
        return 0
    if not policy.set:
        print(f"cell {args.cell}: no policy set: `default` with its defaults (`suanli strategy show default`)")
    else:
        when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(policy.at / 1000))
        print(f"cell {policy.cell}: {policy.strategy} {json.dumps(policy.config, sort_keys=True)}\n"
              f"  set by {policy.changed_by or '?'} at {when} (event {policy.event_id})")
    print(f"  config digest {policy.digest} (decisions cite it in provenance.strategy.config_digest)\n"
          f"  queue aging: one priority point per {policy.aging_ms / 1000:g} s of waiting")
    return 0


def add_commands(sub: argparse._SubParsersAction) -> None:
    """Register ``suanli policy``."""
    from suanli.cli_services import STACK

    p = sub.add_parser("policy", help="set a cell's strategy and its configuration (checked before it is stored), "
                                      "or show the one in force")
    psub = p.add_subparsers(dest="policy_action", required=True)
    s = psub.add_parser("set", help="store a PolicyChanged for a cell", description=__doc__)
    s.add_argument("--cell", required=True)
    s.add_argument("--strategy", default="default", help="a strategy name (`suanli strategy list`)")
    s.add_argument("--config", help='the configuration as JSON, e.g. \'{"profiles": {"enabled": true}}\'')
    s.add_argument("--config-file", help="the configuration from a JSON file")
    s.add_argument("--changed-by", default="suanli policy set", help="who, in the event (audit)")
    s.add_argument("--wait-s", type=float, default=DEFAULT_WAIT_S,
                   help=f"wait this long for the policy to reach the cell log (default {DEFAULT_WAIT_S:g})")
    s.add_argument("--no-wait", action="store_true",
                   help="store the policy and return (e.g. before the plane's workers start)")
    s.set_defaults(func=_set, needs=STACK)
    show = psub.add_parser("show", help="the policy in force in a cell (from the cell log)")
    show.add_argument("--cell", required=True)
    show.add_argument("--json", action="store_true")
    show.set_defaults(func=_show, needs=STACK)
