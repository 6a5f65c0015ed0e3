"""The arguments every strategy takes, as the base of each strategy's own ``Args``.

A strategy module declares ``Args``, a frozen dataclass deriving from
:class:`StrategyArgs` (its defaults and validation, see ``processors/args.py``), and
``build(args: Args) -> Profile``. :func:`~suanli.processors.strategies.get_strategy` parses
the policy config into ``Args`` once (refusing an unknown key or a bad value with
:class:`~suanli.errors.StrategyConfigError`) and exposes it as ``Strategy.args``.

The common keys, read by ``get_strategy`` and the core rather than by the builders:
``seed``, ``retry_budget``, ``rules`` (label routing), ``fallback_strategy`` /
``fallback_config`` (what decides when a sandboxed strategy fails); and the profile's
``top_k`` and ``tie_break`` (whose default and allowed values each strategy sets).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from ..args import DEFAULT, arg
from ..matching import Rule
from ..prewarm import PrewarmArgs
from ..profiler import ProfileArgs
from ..qos import QosArgs
from ..reservation_args import ReservationArgs
from ..retention import RetentionArgs
from ..telemetry import TelemetryArgs

# equal scores: a seeded draw, the smallest node id, the lowest row, or the BestFit score
TieBreak = Literal["random", "name", "first", "BestFit"]
# the paper's baselines have no secondary scorer, so no BestFit tie-break
BaselineTieBreak = Literal["random", "name", "first"]

TIE_BREAK_DOC = ("equal scores: a seeded draw (random), the smallest node id (name), the lowest row "
                 "(first) or the BestFit score (BestFit)")


@dataclass(frozen=True, slots=True)
class StrategyArgs:
    """The keys every strategy accepts. ``rules`` and ``fallback_config`` hold other
    strategies' configs as given (the core builds those strategies with them; their digest
    is over exactly those bytes); :func:`~suanli.processors.strategies.validate_policy`
    checks them too."""
    seed: int = arg(0, "seeds the tie-break draws together with the input position")
    top_k: int = arg(5, "candidates kept in provenance", ge=1)
    retry_budget: int = arg(32, "pending tasks retried per input after a release", ge=0)
    tie_break: TieBreak = arg("random", TIE_BREAK_DOC)
    rules: tuple[Rule, ...] = arg((), "label rules routing tasks to other strategies or blends "
                                  "(processors/matching.py); the first match wins", null=DEFAULT)
    fallback_strategy: str = arg("default", "strategy deciding when this one fails in the sandbox", nonempty=True)
    fallback_config: dict[str, Any] = arg({}, "config of the fallback strategy", null=DEFAULT)
    # node health and time (the cell clock: the largest event time its log has shown)
    suspect_after_ms: int = arg(10_000, "a node with no heartbeat for this long is SUSPECT: no new placements "
                                "go there (only nodes that have sent a heartbeat are watched)", ge=1)
    down_after_ms: int = arg(15_000, "a node with no heartbeat for this long is DOWN: its tasks are lost and "
                             "placed again elsewhere", ge=1)
    telemetry: TelemetryArgs = arg(TelemetryArgs(), "thresholds of the telemetry worker's conditions "
                                   "(HOT, CONGESTED, DEGRADED; processors/telemetry.py)")
    retry_every_ms: int = arg(5_000, "on the cell clock, the head of the pending queue is retried this often "
                              "(CellTick); 0 = only when resources are released", ge=0)
    qos: QosArgs = arg(QosArgs(), "QoS pools, preemption, aging, migration and the urgent and batch "
                       "scheduling tiers (processors/qos.py)")
    reservations: ReservationArgs = arg(ReservationArgs(), "advance reservations: the auction clearing bids "
                                        "and the tokens' holds, lending, purge and release "
                                        "(processors/reservation_args.py)")
    prewarm: PrewarmArgs = arg(PrewarmArgs(), "model prewarming: the planner fetching model weights to edge "
                               "sites ahead of demand, its period, bandwidth and cache budgets (processors/prewarm.py)")
    profiles: ProfileArgs = arg(ProfileArgs(), "the task profiler: a profile of each task in its decisions' "
                                "provenance and offered to plugins (processors/profiler.py)")
    retention: RetentionArgs = arg(RetentionArgs(), "how many finished tasks a cell remembers whole, and how many "
                                   "forgotten ids it still recognises (processors/retention.py)")


@dataclass(frozen=True, slots=True)
class ExternalArgs(StrategyArgs):
    """A third-party strategy that declares no ``Args``: the common keys are checked, its
    own keys are kept in ``extra`` and handed to its ``build(config)`` unchecked (they
    cannot be known here). ``tie_break`` is its own business too."""
    EXTRA: ClassVar[str] = "extra"
    tie_break: str = arg("random", "passed to the strategy as it is")
    extra: dict[str, Any] = field(default_factory=dict)
