"""``ppo``: a policy trained with PPO on burst scenarios chooses among ``default``'s best nodes (C7).

The candidates are the ``candidates`` (default 8) best feasible nodes by the ``default``
blend, built from this config's ``default`` keys; the policy (``processors/ppo_policy.py``,
a small MLP over each candidate's features) picks one, deterministically: same state, same
choice, so replay is IDENTICAL. Its weights are the committed ``processors/ppo-policy.npz``
(trained by ``python -m suanli.replay.ppo_train``; see BENCHMARKS.md) unless
``policy_file`` names another. Every decision's path names the policy's version and the
sha256 of its weights (``score: PPO[<version> sha256:<digest>] ...``); the committed
policy's are also in this strategy's version (``1.0.0+<version>.<digest>``).

Use it where bursts of arrivals meet tier deadlines, after checking with
``python -m suanli.replay.burst_whatif`` that it beats ``default`` on your trace; it is
not a default. It runs in process; :class:`Sandboxed` (``ppo-sandboxed``) runs it in the
sandbox like a third-party strategy, falling back to ``default`` when it fails.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from suanli.errors import StrategyConfigError

from ..args import arg
from ..framework import Profile
from ..plugins.ppo import PPO
from ..ppo_policy import DEFAULT_WEIGHTS, Policy, load_cached
from . import default

NAME = "ppo"


def _committed_version() -> str:
    try:
        policy = Policy.load(DEFAULT_WEIGHTS)
    except StrategyConfigError:
        return "1.0.0+unavailable"
    return f"1.0.0+{policy.version}.{policy.digest[:16]}"


VERSION = _committed_version()


@dataclass(frozen=True, slots=True)
class Args(default.Args):
    candidates: int = arg(8, "how many of default's best nodes the policy chooses among", ge=1, le=64)
    policy_file: Optional[str] = arg(None, "an .npz policy file (null: the committed processors/ppo-policy.npz)")


class Sandboxed:
    """``ppo-sandboxed``: the same policy as a third-party strategy (the ``suanli.strategies``
    entry point ``ppo-sandboxed = suanli.processors.strategies.ppo:Sandboxed``): its scoring
    runs in the sandbox's subprocess (``processors/sandbox.py``) over the feasible nodes
    alone, and a failure there (a missing policy file, a limit) makes the cell's
    ``fallback_strategy`` (``default``) decide, with the reason in the decision. In the
    subprocess the price feature is scaled by the dearest *feasible* node, so its choices
    can differ from ``ppo``'s in process on clusters of mixed prices."""
    NAME = "ppo-sandboxed"

    @staticmethod
    def build(args: "Args") -> Profile:
        return build(args)


def build(args: Args) -> Profile:
    base = default.build(args)
    policy = load_cached(args.policy_file)
    tie = base.secondary.get(base.tie_break)
    # default's scorers stay in the profile as "others": their pre-filter, device choice,
    # reserve and permit steps run as they do under default; PPO does their scoring
    others = [*base.others, *(p for p, _w in base.scorers)]
    profile = Profile(base.filters, [(PPO(policy, args.candidates, base.scorers, tie), 1.0)], others,
                      tie_break="first", top_k=args.top_k, secondary=base.secondary)
    profile.stable_candidates = True
    return profile


Sandboxed.VERSION = VERSION          # type: ignore[attr-defined]
Sandboxed.Args = Args                # type: ignore[attr-defined]
