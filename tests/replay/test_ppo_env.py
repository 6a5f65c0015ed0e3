"""The gymnasium environment of the ppo strategy (replay/ppo_env.py) on a small burst
scenario through the production core."""
from __future__ import annotations

import numpy as np
import pytest

from suanli.errors import ReplayError
from suanli.replay import burst_whatif as bw
from suanli.replay.ppo_env import BurstEnv

SMALL = bw.BurstScenario(tasks=300, shrink=0.05, bursts=1, burst_minutes=1.0)


def _episode(env: BurstEnv, seed: int, choose) -> tuple[list[float], dict, int]:
    obs, info = env.reset(options={"episode_seed": seed})
    assert info["episode_seed"] == seed
    rewards, steps = [], 0
    while True:
        assert env.observation_space.contains(obs)
        mask = env.action_masks()
        assert mask.any() and np.array_equal(mask, obs["mask"].astype(bool))
        obs, reward, done, truncated, info = env.step(choose(mask))
        rewards.append(reward)
        steps += 1
        assert np.isfinite(reward) and not truncated
        if done:
            return rewards, info["figures"], steps


def _stable(figures: dict) -> dict:
    return {k: v for k, v in figures.items() if k != "seconds" and not k.startswith("decision_ms")}


def test_an_episode_runs_every_choice_through_the_core_and_replays_the_same():
    env = BurstEnv(SMALL)
    first = _episode(env, 1001, lambda mask: 0)
    again = _episode(env, 1001, lambda mask: 0)
    last = _episode(env, 1001, lambda mask: int(np.flatnonzero(mask)[-1]))
    env.close()
    rewards, figures, steps = first
    assert steps >= 300 and figures["tasks"] == 300            # a choice per scoring cycle, every task seen
    assert figures["success_under_burst_pct"] is not None
    assert again[0] == rewards and _stable(again[1]) == _stable(figures)
    assert last[0] != rewards                                   # the choices reach the core


def test_evaluation_seeds_are_refused_and_an_abandoned_episode_stops():
    with pytest.raises(ReplayError, match="evaluation seeds"):
        BurstEnv(SMALL, seeds=[5, 1002])
    env = BurstEnv(SMALL)
    with pytest.raises(ReplayError, match="evaluation seed"):
        env.reset(options={"episode_seed": 7})
    env.reset(options={"episode_seed": 1003})
    thread = env._thread
    env.step(0)
    env.close()                                                 # mid-episode
    assert thread is not None and not thread.is_alive()
    with pytest.raises(ReplayError, match="not a candidate"):
        env.reset(options={"episode_seed": 1003})
        env.step(99)
    env.close()
