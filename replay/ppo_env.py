"""The ``ppo`` strategy's training environment: a ``gymnasium.Env`` over the production core (C7).

An episode is one burst scenario (``replay/burst_whatif.py``) run through
``processors.decide`` with the ``ppo`` strategy, so every step uses the real cell state,
filters, QoS pools, queue and provenance: nothing is re-implemented here. Each time the
``PPO`` scorer has to choose (``processors/plugins/ppo.py``), the simulation stops and the
environment hands the choice to the caller:

* **Observation** (``Dict``): ``candidates`` ``(k, F)``, the features of ``default``'s ``k``
  best feasible nodes, best first (``processors/ppo_policy.FEATURES``; rows past the
  feasible ones are zero); ``mask`` ``(k,)``, 1 for a real candidate; ``global`` ``(G,)``,
  the task and the cell (``GLOBAL_FEATURES``). :meth:`BurstEnv.action_masks` gives the mask
  to maskable learners (sb3-contrib's MaskablePPO).
* **Action** (``Discrete(k)``): the candidate to bind. There is no *wait* action: a task
  the policy does not place now would only come back on the next release or retry tick,
  which the core already does for tasks that fit nowhere.
* **Reward** (:class:`RewardWeights`), summed over what happened since the previous step:
  ``success`` (1.0) for each task placed within its tier's deadline, minus ``success`` for
  each task whose deadline passes unplaced and for each gold task preempted; plus
  ``allocation`` (0.2) times the cell's GPU allocation at each step; minus ``cost`` (0.1)
  times the chosen node's price (its share of the dearest node's).
* **Episodes:** training seeds only (``burst_whatif`` refuses the evaluation seeds); the
  episode ends when the scenario's inputs run out, and the last step's ``info`` holds the
  run's figures.

The simulation runs in a worker thread that waits while the caller decides, so exactly one
of the two runs at a time and an episode is as deterministic as the actions given to it.
One environment per process: the ``PPO`` scorer's agent hook is process-wide.
"""
from __future__ import annotations

import dataclasses
import queue
import threading
from dataclasses import dataclass
from typing import Any, Optional, Sequence

import gymnasium as gym
import numpy as np

from suanli.errors import ReplayError
from suanli.processors import model as m
from suanli.processors.plugins.ppo import Observation, acting
from suanli.processors.ppo_policy import FEATURES, GLOBAL_FEATURES

from . import burst_whatif as bw


@dataclass(frozen=True)
class RewardWeights:
    """The reward's weights (see the module docstring)."""
    success: float = 1.0
    allocation: float = 0.2
    cost: float = 0.1


class _Abort(Exception):
    """Ends the simulation thread of an episode the caller abandoned."""


class RewardTracker:
    """The observer of one episode (``burst_whatif`` calls :meth:`after_input`): credits
    placements within deadline and charges missed deadlines and gold preemptions."""

    def __init__(self, deadlines_ms: dict[str, int], weights: RewardWeights):
        self.deadlines, self.w = deadlines_ms, weights
        self.reward = 0.0
        self.due: dict[str, tuple[int, str]] = {}            # task -> (deadline ms, tier), while unplaced
        self.placed = 0
        self.missed = 0

    def take(self) -> float:
        r, self.reward = self.reward, 0.0
        return r

    def after_input(self, at: int, event: Any, outs: list, state: Any) -> None:
        if isinstance(event, m.TaskSubmitted):
            tier = event.qos_tier or "SILVER"
            self.due[event.task_id] = (event.submitted_at + self.deadlines.get(tier, 0), tier)
        for out in outs:
            if isinstance(out, m.TaskPlaced):
                d = self.due.pop(out.task_id, None)
                if d is not None:
                    self.reward += self.w.success
                    self.placed += 1
            elif isinstance(out, m.TaskPreempted):
                rec = state.tasks.get(out.task_id)
                if rec is not None and rec.task.qos_tier == "GOLD":
                    self.reward -= self.w.success
        late = [t for t, (due, _tier) in self.due.items() if due < at]
        for t in late:
            del self.due[t]
            self.reward -= self.w.success
            self.missed += 1


class BurstEnv(gym.Env):
    """See the module docstring. ``scenario``: the burst scenario (its ``seed`` is replaced
    by a training seed each episode); ``seeds``: the training seeds drawn from;
    ``config``: the ``ppo`` strategy's config (``candidates`` is ``k``)."""

    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(self, scenario: Optional[bw.BurstScenario] = None, seeds: Optional[Sequence[int]] = None,
                 config: Optional[dict[str, Any]] = None, weights: RewardWeights = RewardWeights()):
        self.scenario = scenario or bw.BurstScenario()
        self.seeds = list(seeds) if seeds is not None else bw.train_seeds(1000)
        bad = [s for s in self.seeds if bw.is_eval_seed(s)]
        if bad:
            raise ReplayError(f"training on evaluation seeds {bad[:5]}: use seeds of burst_whatif.TRAIN_SEEDS")
        self.config = dict(config or {})
        self.k = int(self.config.get("candidates", 8))
        self.weights = weights
        nf, ng = len(FEATURES), len(GLOBAL_FEATURES)
        self.observation_space = gym.spaces.Dict({
            "candidates": gym.spaces.Box(-np.inf, np.inf, (self.k, nf), dtype=np.float64),
            "mask": gym.spaces.MultiBinary(self.k),
            "global": gym.spaces.Box(-np.inf, np.inf, (ng,), dtype=np.float64)})
        self.action_space = gym.spaces.Discrete(self.k)
        self._thread: Optional[threading.Thread] = None
        self._to_sim: "queue.Queue[Optional[int]]" = queue.Queue(maxsize=1)
        self._from_sim: "queue.Queue[tuple[str, Any]]" = queue.Queue(maxsize=1)
        self._obs: Optional[Observation] = None
        self._tracker: Optional[RewardTracker] = None
        self.episode_seed: Optional[int] = None

    # ------------------------------------------------------------------ gymnasium
    def reset(self, *, seed: Optional[int] = None, options: Optional[dict[str, Any]] = None):
        super().reset(seed=seed)
        self.close()
        episode_seed = (options or {}).get("episode_seed")
        if episode_seed is None:
            episode_seed = int(self.np_random.choice(self.seeds))
        if bw.is_eval_seed(int(episode_seed)):
            raise ReplayError(f"episode seed {episode_seed} is an evaluation seed")
        self.episode_seed = int(episode_seed)
        self._tracker = RewardTracker(dict(self.scenario.deadlines_ms), self.weights)
        self._to_sim, self._from_sim = queue.Queue(maxsize=1), queue.Queue(maxsize=1)
        self._thread = threading.Thread(target=self._simulate, args=(self.episode_seed,), daemon=True,
                                        name=f"burst-episode-{episode_seed}")
        self._thread.start()
        kind, payload = self._from_sim.get()
        if kind != "obs":
            raise ReplayError(f"episode {episode_seed} made no decision to take: {payload}")
        self._obs = payload
        self._tracker.take()
        return self._observation(payload), {"episode_seed": self.episode_seed}

    def step(self, action: int):
        if self._obs is None:
            raise ReplayError("step() before reset(), or after the episode ended")
        a = int(action)
        n = self._obs.rows.size
        if not 0 <= a < n:
            raise ReplayError(f"action {a} is not a candidate (the mask allows 0..{n - 1})")
        w = self.weights
        step_reward = w.allocation * float(self._obs.glob[6]) - w.cost * float(self._obs.feats[a, 9])
        self._to_sim.put(a)
        kind, payload = self._from_sim.get()
        reward = step_reward + (self._tracker.take() if self._tracker else 0.0)
        if kind == "obs":
            self._obs = payload
            return self._observation(payload), reward, False, False, {}
        self._obs = None
        self._thread = None
        if kind == "error":
            raise ReplayError(f"episode {self.episode_seed} failed: {payload}")
        return self._blank(), reward, True, False, {"figures": payload}

    def action_masks(self) -> np.ndarray:
        mask = np.zeros(self.k, dtype=bool)
        if self._obs is not None:
            mask[: self._obs.rows.size] = True
        return mask

    def close(self) -> None:
        if self._thread is not None and self._thread.is_alive():
            self._to_sim.put(None)                          # the agent raises _Abort in the thread
            self._thread.join(timeout=30)
        self._thread, self._obs = None, None

    # ------------------------------------------------------------------ internals
    def _agent(self, obs: Observation) -> int:
        self._from_sim.put(("obs", obs))
        action = self._to_sim.get()
        if action is None:
            raise _Abort()
        return action

    def _simulate(self, episode_seed: int) -> None:
        try:
            with acting(self._agent):
                figures = bw.simulate_burst(None, dataclasses.replace(self.scenario, seed=episode_seed), "ppo",
                                            self.config, observer=self._tracker)
        except _Abort:
            return
        except Exception as exc:  # noqa: BLE001 - reported to the caller's step()
            self._from_sim.put(("error", f"{type(exc).__name__}: {exc}"))
            return
        self._from_sim.put(("done", figures))

    def _observation(self, obs: Observation) -> dict[str, np.ndarray]:
        out = self._blank()
        n = min(obs.rows.size, self.k)
        out["candidates"][:n] = obs.feats[:n]
        out["mask"][:n] = 1
        out["global"][:] = obs.glob
        return out

    def _blank(self) -> dict[str, np.ndarray]:
        return {"candidates": np.zeros((self.k, len(FEATURES))), "mask": np.zeros(self.k, dtype=np.int8),
                "global": np.zeros(len(GLOBAL_FEATURES))}
