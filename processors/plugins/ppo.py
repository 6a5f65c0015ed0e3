"""``PPO``: the learned policy of the ``ppo`` strategy as a scorer (``processors/ppo_policy.py``).

It scores the feasible nodes with the ``default`` blend's own scorers (``base``), keeps the
``k`` best (score descending, then row: the same on every machine; the first is the node
``default`` would bind, its tie-break included), describes each with
:func:`~suanli.processors.ppo_policy.candidate_features` and lets the policy choose. The
chosen node gets the highest score, the other candidates their logits below it, every
other node ``-1e9``: ``run_cycle`` then binds the choice, and the provenance lists the
candidates in the policy's order.

**Training hook.** Inside :func:`acting`, an *agent* chooses instead of the policy's
argmax: it gets an :class:`Observation` and returns the index of a candidate. Training and
the gymnasium environment (``replay/ppo_env.py``) use it to sample actions and record
them. Nothing in the control plane enters it: a live cell always takes the argmax.
"""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable, Iterator

import numpy as np

from ..framework import CycleContext, Plugin, total_score
from ..ppo_policy import Policy, candidate_features, global_features


@dataclass(frozen=True, slots=True)
class Observation:
    """One choice: the task, the cell time, the candidates' rows (best first by
    ``default``), their features and the global features."""
    task_id: str
    at: int
    tier: str
    rows: np.ndarray
    feats: np.ndarray
    glob: np.ndarray


Agent = Callable[[Observation], int]
_AGENTS: list[Agent] = []


@contextmanager
def acting(agent: Agent) -> Iterator[None]:
    """Let ``agent`` choose every ``PPO`` decision made in this thread's simulation while
    the block runs (training only)."""
    _AGENTS.append(agent)
    try:
        yield
    finally:
        _AGENTS.remove(agent)


class PPO(Plugin):
    """Scorer; built by the ``ppo`` strategy with the policy, ``k`` and the base scorers."""
    name = "PPO"

    def __init__(self, policy: Policy, k: int, base: list[tuple[Plugin, float]],
                 tie: Plugin | None = None):
        """``base``: default's scorers and weights; ``tie``: its tie-break scorer, which picks
        among the best-scored rows as ``run_cycle`` does, so candidate 0 is always the node
        ``default`` would bind."""
        super().__init__()
        self.policy, self.k, self.base, self.tie = policy, k, base, tie
        # every decision's path names the policy: "score: PPO[<version> sha256:<digest>] top=..."
        self.name = f"PPO[{policy.version} sha256:{policy.digest[:16]}]"

    def base_scores(self, ctx: CycleContext, rows: np.ndarray) -> np.ndarray:
        """``default``'s total over ``rows``, summed as ``run_cycle`` sums it."""
        return total_score(self.base, ctx, rows)

    def observe(self, ctx: CycleContext, rows: np.ndarray) -> tuple[np.ndarray, Observation]:
        """The candidates (positions in ``rows``, best first) and what the policy sees."""
        base = self.base_scores(ctx, rows)
        order = np.argsort(-base, kind="stable")[: self.k]          # ties: lowest row first
        tied = np.flatnonzero(base == base[order[0]]) if order.size else order
        if self.tie is not None and tied.size > 1:
            # default's own pick first: its tie-break scorer over the rows tied for the best
            # (run_cycle's rule; the scorer normalises over the rows it is given)
            pick = int(tied[int(np.argmax(self.tie.score(ctx, rows[tied])))])
            order = np.concatenate([[pick], order[order != pick]])[: self.k]
        cand = rows[order]
        feats = candidate_features(ctx.state, ctx.req, cand, base[order])
        rec = ctx.task
        tier = rec.task.qos_tier if rec is not None else ""
        glob = global_features(ctx.state, ctx.req, tier, int(order.size), self.k)
        return order, Observation(ctx.task_id, ctx.state.now, tier, cand, feats, glob)

    def score(self, ctx: CycleContext, rows: np.ndarray) -> np.ndarray:
        order, obs = self.observe(ctx, rows)
        logits = self.policy.logits(obs.feats)
        pick = int(_AGENTS[-1](obs)) if _AGENTS else int(np.argmax(logits))
        if not 0 <= pick < order.size:
            raise ValueError(f"PPO agent chose candidate {pick} of {order.size}")
        out = np.full(rows.size, -1e9, dtype=np.float64)
        out[order] = logits
        top = float(logits.max())
        out[order[pick]] = top + 1.0 if np.count_nonzero(logits == top) > 1 or logits[pick] < top else top
        return out
