"""Elastic federated training (C15): how many clients a job should run, and at what batch
size, given its loss curve and the cell's capacity. Pure and deterministic: the loss
history and the counts are inputs (the caller reads them from the job's reports and the
cell state); no clock, no randomness.

:func:`decide` looks at the relative loss improvement over the last ``window`` rounds,
``(loss[-window-1] - loss[-1]) / |loss[-window-1]|``, and answers, in this order:

1. **shrink** when gold work waits and the job runs more clients than ``min_clients``:
   one client per waiting gold task is released at once (one client takes one task's
   slot), never below ``min_clients``; also when the job runs more than ``max_clients``.
2. **hold** while fewer than ``window + 1`` losses are known (no trend yet), unless the job
   runs fewer than ``min_clients`` and there is room: then **grow** to the minimum.
3. a **loss increase** (improvement below ``-plateau``, or a loss that is not finite):
   **hold**, batch size divided by ``batch_step`` (noisier, smaller steps per example
   seen), not below ``min_batch``.
4. a **plateau** (improvement within ``±plateau``): **hold**, batch size multiplied by
   ``batch_step``, up to ``max_batch`` (a larger batch lowers the gradient noise, as a
   lower learning rate would).
5. still **improving**: **grow** by up to the free slots, to at most ``max_clients``;
   **hold** when no slot is free or the job is at its maximum.

Every decision's ``reason`` names the figures it rests on.

**The job's policy travels on its aggregator task** as the label ``elastic`` (the key
:data:`ELASTIC_LABEL`): a compact JSON object of :class:`ElasticArgs` keys plus
``batch_size``, the starting batch size per client (:func:`elastic_label` writes it,
:func:`parse_label` reads it; the API refuses a submission whose label does not parse).
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Literal, Sequence

from suanli.errors import StrategyConfigError

from .args import Invalid, arg, explicit, parse_args

Action = Literal["grow", "shrink", "hold"]
ELASTIC_LABEL = "elastic"
"""The label of a federated job's aggregator task that turns the elastic policy on."""


@dataclass(frozen=True, slots=True)
class ElasticArgs:
    """The elastic policy of a federated job (defaults here; ``parse`` refuses bad values
    by name)."""
    min_clients: int = arg(2, "fewest clients the job runs (it shrinks to this when gold work waits)", ge=1)
    max_clients: int = arg(16, "most clients the job runs", ge=1)
    window: int = arg(5, "rounds over which the loss improvement is measured", ge=1)
    plateau: float = arg(0.01, "relative loss improvement over the window below which the loss is on a "
                         "plateau (0.01 = 1 %); a worsening beyond it is a loss increase", ge=0, lt=1)
    min_batch: int = arg(16, "smallest batch size per client", ge=1)
    max_batch: int = arg(1024, "largest batch size per client", ge=1)
    batch_step: float = arg(2.0, "factor the batch size is multiplied by on a plateau and divided by on a "
                            "loss increase", gt=1)

    def validate(self) -> None:
        if self.max_clients < self.min_clients:
            raise Invalid("max_clients", self.max_clients, f">= min_clients ({self.min_clients})")
        if self.max_batch < self.min_batch:
            raise Invalid("max_batch", self.max_batch, f">= min_batch ({self.min_batch})")

    @classmethod
    def parse(cls, config: object) -> "ElasticArgs":
        """``config`` (a JSON object, None = defaults); StrategyConfigError if refused."""
        return parse_args(cls, config, "elastic")


@dataclass(frozen=True, slots=True)
class ElasticDecision:
    action: Action
    clients: int            # clients the job should run from now on
    batch_size: int         # batch size per client from now on
    reason: str


def _pct(x: float) -> str:
    return f"{x * 100:+.1f} %"


def improvement(loss_history: Sequence[float], window: int) -> float:
    """Relative loss improvement over the last ``window`` rounds (positive = the loss fell);
    ``-inf`` when a loss in the window is not finite, or the base is 0 and the loss rose.
    Needs ``window + 1`` losses (ValueError otherwise)."""
    if len(loss_history) < window + 1:
        raise ValueError(f"{len(loss_history)} losses, need {window + 1}")
    span = [float(x) for x in loss_history[-window - 1:]]
    if not all(math.isfinite(x) for x in span):
        return -math.inf
    base, last = span[0], span[-1]
    if base == 0:
        return 0.0 if last == 0 else -math.inf
    return (base - last) / abs(base)


def decide(loss_history: Sequence[float], current_clients: int, free_slots: int, gold_waiting: int,
           batch_size: int, args: ElasticArgs = ElasticArgs()) -> ElasticDecision:
    """The next step of a job (rules in the module docstring). ``loss_history``: one loss
    per completed round, oldest first; ``free_slots``: clients the cell could add now;
    ``gold_waiting``: gold tasks waiting for capacity. Raises ValueError for negative
    counts or a batch size below 1."""
    if current_clients < 0 or free_slots < 0 or gold_waiting < 0:
        raise ValueError(f"counts must be >= 0 (clients {current_clients}, free {free_slots}, gold {gold_waiting})")
    if batch_size < 1:
        raise ValueError(f"batch size must be >= 1, not {batch_size}")
    a, n, b = args, current_clients, batch_size

    # 1. capacity first: gold work waits for nobody's loss curve
    if gold_waiting and n > a.min_clients:
        to = max(a.min_clients, n - gold_waiting)
        return ElasticDecision("shrink", to, b, f"{gold_waiting} gold tasks wait: shrink {n} -> {to} clients "
                               f"(min {a.min_clients}), releasing {n - to} slots now")
    if n > a.max_clients:
        return ElasticDecision("shrink", a.max_clients, b, f"{n} clients is above the max {a.max_clients}: shrink")

    def grow_to(limit: int) -> int:
        return min(limit, n + free_slots)

    # 2. too few rounds for a trend
    if len(loss_history) < a.window + 1:
        if n < a.min_clients and free_slots and not gold_waiting:
            to = grow_to(a.min_clients)
            return ElasticDecision("grow", to, b, f"{n} clients is below the min {a.min_clients} and {free_slots} "
                                   f"slots are free: grow {n} -> {to}")
        return ElasticDecision("hold", n, b, f"{len(loss_history)} of {a.window + 1} losses needed for a trend: "
                               f"hold {n} clients, batch {b}")

    imp = improvement(loss_history, a.window)
    first, last = loss_history[-a.window - 1], loss_history[-1]
    trend = (f"loss {first:.4g} -> {last:.4g} over {a.window} rounds "
             f"({'not finite' if not math.isfinite(imp) else _pct(-imp)}, plateau within ±{a.plateau * 100:g} %)")

    # 3. the loss rose (or diverged): smaller batches
    if imp < -a.plateau:
        nb = max(a.min_batch, int(b / a.batch_step))
        if nb < b:
            return ElasticDecision("hold", n, nb, f"{trend}: loss increased, lower the batch size {b} -> {nb}")
        return ElasticDecision("hold", n, b, f"{trend}: loss increased, batch size already at the min {a.min_batch}")

    # 4. a plateau: larger batches
    if imp < a.plateau:
        nb = min(a.max_batch, int(math.ceil(b * a.batch_step)))
        if nb > b:
            return ElasticDecision("hold", n, nb, f"{trend}: plateau, raise the batch size {b} -> {nb}")
        return ElasticDecision("hold", n, b, f"{trend}: plateau, batch size already at the max {a.max_batch}")

    # 5. improving: use the free capacity
    if gold_waiting:
        return ElasticDecision("hold", n, b,
                               f"{trend}: improving, but {gold_waiting} gold tasks wait: hold {n} clients")
    if n >= a.max_clients:
        return ElasticDecision("hold", n, b, f"{trend}: improving, already at the max {a.max_clients} clients")
    if not free_slots:
        return ElasticDecision("hold", n, b, f"{trend}: improving, no free slots: hold {n} clients")
    to = grow_to(a.max_clients)
    return ElasticDecision("grow", to, b, f"{trend}: improving and {free_slots} slots free: grow {n} -> {to} "
                           f"clients (max {a.max_clients})")


def elastic_label(args: ElasticArgs, batch_size: int) -> str:
    """The value of the ``elastic`` label for ``args`` and the starting ``batch_size``."""
    if not args.min_batch <= batch_size <= args.max_batch:
        raise StrategyConfigError(f"elastic: bad value for batch_size: {batch_size}; allowed: "
                                  f"from min_batch ({args.min_batch}) to max_batch ({args.max_batch})")
    return json.dumps({**explicit(args), "batch_size": batch_size}, sort_keys=True, separators=(",", ":"))


def parse_label(text: str) -> tuple[ElasticArgs, int]:
    """The policy and the starting batch size in an ``elastic`` label; StrategyConfigError
    naming what is wrong (not JSON, an unknown key, a bad value)."""
    try:
        doc = json.loads(text)
    except ValueError:
        raise StrategyConfigError(f"elastic: the label is not a JSON object: {text[:80]!r}") from None
    if not isinstance(doc, dict):
        raise StrategyConfigError(f"elastic: the label is not a JSON object: {text[:80]!r}")
    doc = dict(doc)
    batch = doc.pop("batch_size", None)
    args = ElasticArgs.parse(doc)
    if batch is None:
        batch = args.min_batch
    if isinstance(batch, bool) or not isinstance(batch, int) or not args.min_batch <= batch <= args.max_batch:
        raise StrategyConfigError(f"elastic: bad value for batch_size: {batch!r}; allowed: an integer from "
                                  f"min_batch ({args.min_batch}) to max_batch ({args.max_batch})")
    return args, batch
