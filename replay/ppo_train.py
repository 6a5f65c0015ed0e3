"""Train the ``ppo`` strategy's policy: PPO, in numpy, on the burst environment (C7).

    python -m suanli.replay.ppo_train --config replay/ppo-train.json --out processors/ppo-policy.npz

The learner is a small PPO of our own (Schulman et al. 2017: clipped surrogate, GAE, an
entropy bonus, Adam), written against ``replay/ppo_env.BurstEnv`` and the policy of
``processors/ppo_policy.py``, whose forward pass it shares, so the weights it writes are
the ones the strategy runs. Hand-written backpropagation of a one-hidden-layer MLP is a
few lines; torch would add a 700 MB install to get the same on CPU.

Each iteration collects ``episodes_per_iteration`` episodes on training seeds (actions
sampled from the softmax of the logits, seeded), then makes ``epochs`` passes of
minibatch updates. After every iteration it writes the policy (``--out``) and appends one
line to the training curve (``--curve``, JSON lines: iteration, steps, mean return, the
episodes' success under burst and GPU allocation, the losses, seconds). ``--smoke``
trains for seconds on a tiny scenario (CI); the committed policy comes from the full
configuration, which names its own budget (``max_minutes``).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Optional

import numpy as np

from suanli.errors import ReplayError
from suanli.processors.ppo_policy import Policy, initial

from . import burst_whatif as bw
from .ppo_env import BurstEnv, RewardWeights


@dataclass(frozen=True)
class TrainConfig:
    """Everything a training run depends on (the committed ``replay/ppo-train.json``)."""
    iterations: int = 40
    episodes_per_iteration: int = 2
    epochs: int = 4
    minibatch: int = 256
    learning_rate: float = 3e-4
    gamma: float = 0.99
    gae_lambda: float = 0.95
    clip: float = 0.2
    entropy: float = 0.01
    value_coef: float = 0.5
    max_grad_norm: float = 0.5
    reward_scale: float = 0.05          # returns of hundreds of placements, brought near 1 for the critic
    hidden: int = 32
    prior: float = 4.0
    candidates: int = 8
    seed: int = 0
    max_minutes: float = 110.0
    version: str = "burst-v1"
    scenario: dict[str, Any] = field(default_factory=dict)      # BurstScenario overrides
    reward: dict[str, float] = field(default_factory=dict)      # RewardWeights overrides

    @classmethod
    def from_file(cls, path: Path) -> "TrainConfig":
        raw = json.loads(path.read_text())
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(raw) - known)
        if unknown:
            raise ReplayError(f"{path}: unknown keys {unknown}; known: {sorted(known)}")
        return cls(**raw)


# ------------------------------------------------------------------------- the maths
def forward(arrays: dict[str, np.ndarray], prior: float, X: np.ndarray, mask: np.ndarray):
    """Batched actor: ``X`` (B, K, F), ``mask`` (B, K) bool. Returns (logits with -inf on
    masked rows, hidden activations). The same logits as :meth:`Policy.logits`."""
    K = X.shape[1]
    h = np.tanh(X @ arrays["W1"] + arrays["b1"])                       # (B, K, H)
    # the rank prior spans each cycle's own candidates, as in Policy.logits
    n = mask.sum(axis=1)
    rank = np.arange(K)[None, :] / np.maximum(n - 1, 1)[:, None]
    z = -prior * rank + h @ arrays["w2"] + arrays["b2"][0]
    return np.where(mask, z, -np.inf), h


def log_softmax(z: np.ndarray) -> np.ndarray:
    top = np.max(z, axis=1, keepdims=True)
    e = np.exp(z - top)
    return z - top - np.log(e.sum(axis=1, keepdims=True))


def actor_grads(arrays, prior, X, mask, actions, old_logp, adv, clip, ent_coef):
    """Gradients (to *descend*) of the clipped surrogate plus the entropy bonus, and stats."""
    B = X.shape[0]
    z, h = forward(arrays, prior, X, mask)
    logp_all = log_softmax(z)
    p = np.where(mask, np.exp(logp_all), 0.0)
    logp = logp_all[np.arange(B), actions]
    ratio = np.exp(logp - old_logp)
    unclipped, clipped = ratio * adv, np.clip(ratio, 1 - clip, 1 + clip) * adv
    active = unclipped <= clipped                                       # the min is the unclipped term
    # d(-surrogate)/d logp_a
    g_logp = np.where(active, -ratio * adv, 0.0) / B
    onehot = np.zeros_like(p)
    onehot[np.arange(B), actions] = 1.0
    gz = g_logp[:, None] * (onehot - p)
    safe = np.where(mask, logp_all, 0.0)
    entropy = -(p * safe).sum(axis=1)
    # d(-ent_coef * H)/dz = ent_coef * p * (log p + H)
    gz += ent_coef * p * (safe + entropy[:, None]) / B
    gz = np.where(mask, gz, 0.0)
    grads = {"w2": np.einsum("bk,bkh->h", gz, h), "b2": np.zeros(1)}
    dpre = gz[:, :, None] * arrays["w2"][None, None, :] * (1 - h ** 2)
    grads["W1"] = np.einsum("bkf,bkh->fh", X, dpre)
    grads["b1"] = dpre.sum(axis=(0, 1))
    stats = {"policy_loss": float(-np.minimum(unclipped, clipped).mean()), "entropy": float(entropy.mean()),
             "clip_frac": float((~active).mean())}
    return grads, stats


def critic_grads(arrays, G, returns, coef):
    h = np.tanh(G @ arrays["V1"] + arrays["c1"])
    v = h @ arrays["v2"] + arrays["c2"][0]
    err = v - returns
    gv = coef * 2 * err / G.shape[0]
    grads = {"v2": h.T @ gv, "c2": np.array([gv.sum()])}
    dpre = gv[:, None] * arrays["v2"][None, :] * (1 - h ** 2)
    grads["V1"] = G.T @ dpre
    grads["c1"] = dpre.sum(axis=0)
    return grads, {"value_loss": float((err ** 2).mean())}


def values(arrays, G):
    return np.tanh(G @ arrays["V1"] + arrays["c1"]) @ arrays["v2"] + arrays["c2"][0]


class Adam:
    def __init__(self, arrays: dict[str, np.ndarray], lr: float):
        self.lr, self.t = lr, 0
        self.m = {k: np.zeros_like(v) for k, v in arrays.items()}
        self.v = {k: np.zeros_like(v) for k, v in arrays.items()}

    def step(self, arrays: dict[str, np.ndarray], grads: dict[str, np.ndarray], max_norm: float) -> None:
        norm = np.sqrt(sum(float((g ** 2).sum()) for g in grads.values()))
        scale = min(1.0, max_norm / (norm + 1e-8))
        self.t += 1
        for k, g in grads.items():
            g = g * scale
            self.m[k] = 0.9 * self.m[k] + 0.1 * g
            self.v[k] = 0.999 * self.v[k] + 0.001 * g * g
            mh, vh = self.m[k] / (1 - 0.9 ** self.t), self.v[k] / (1 - 0.999 ** self.t)
            arrays[k] -= self.lr * mh / (np.sqrt(vh) + 1e-8)


def gae(rewards: np.ndarray, vals: np.ndarray, gamma: float, lam: float) -> tuple[np.ndarray, np.ndarray]:
    """Advantages and returns of one episode (terminal at its end)."""
    n = rewards.size
    adv = np.zeros(n)
    last = 0.0
    for t in range(n - 1, -1, -1):
        nxt = vals[t + 1] if t + 1 < n else 0.0
        delta = rewards[t] + gamma * nxt - vals[t]
        last = delta + gamma * lam * last
        adv[t] = last
    return adv, adv + vals


# ------------------------------------------------------------------------- the loop
def rollout(env: BurstEnv, policy_arrays: dict[str, np.ndarray], prior: float, rng: np.random.Generator,
            episode_seed: int) -> dict[str, Any]:
    """One episode with actions sampled from the current policy."""
    obs, _info = env.reset(options={"episode_seed": episode_seed})
    X, M, G, A, LP, R = [], [], [], [], [], []
    while True:
        mask = obs["mask"].astype(bool)
        z, _h = forward(policy_arrays, prior, obs["candidates"][None], mask[None])
        lp = log_softmax(z)[0]
        p = np.where(mask, np.exp(lp), 0.0)
        a = int(rng.choice(p.size, p=p / p.sum()))
        X.append(obs["candidates"].copy()), M.append(mask), G.append(obs["global"].copy())
        A.append(a), LP.append(float(lp[a]))
        obs, reward, done, _trunc, info = env.step(a)
        R.append(reward)
        if done:
            return {"X": np.array(X), "M": np.array(M), "G": np.array(G), "A": np.array(A),
                    "LP": np.array(LP), "R": np.array(R), "figures": info.get("figures", {})}


def train(cfg: TrainConfig, out: Path, curve: Optional[Path] = None, log=sys.stderr) -> Policy:
    """Run PPO per ``cfg``; writes the policy to ``out`` after every iteration."""
    scenario = bw.BurstScenario(**cfg.scenario) if cfg.scenario else bw.BurstScenario()
    env = BurstEnv(scenario, config={"candidates": cfg.candidates}, weights=RewardWeights(**cfg.reward))
    rng = np.random.default_rng(cfg.seed)
    policy = initial(cfg.hidden, cfg.prior, cfg.seed, cfg.version)
    arrays = {k: np.array(v) for k, v in policy.arrays.items()}
    opt = Adam(arrays, cfg.learning_rate)
    began = time.monotonic()
    seeds = bw.train_seeds(1000)
    if curve is not None:
        curve.write_text("")
    env.config["policy_file"] = str(out)
    try:
        for it in range(cfg.iterations):
            if (time.monotonic() - began) / 60 > cfg.max_minutes:
                print(f"ppo_train: stopping at iteration {it}: the budget of {cfg.max_minutes:g} min is spent",
                      file=log)
                break
            Policy(arrays, cfg.prior, cfg.version, {"iteration": it}).save(out)
            _forget_cached(out)
            eps = [rollout(env, arrays, cfg.prior, rng, int(rng.choice(seeds)))
                   for _ in range(cfg.episodes_per_iteration)]
            X = np.concatenate([e["X"] for e in eps]); M = np.concatenate([e["M"] for e in eps])
            G = np.concatenate([e["G"] for e in eps]); A = np.concatenate([e["A"] for e in eps])
            LP = np.concatenate([e["LP"] for e in eps])
            advs, rets = [], []
            for e in eps:
                a, r = gae(cfg.reward_scale * e["R"], values(arrays, e["G"]), cfg.gamma, cfg.gae_lambda)
                advs.append(a), rets.append(r)
            ADV, RET = np.concatenate(advs), np.concatenate(rets)
            ADV = (ADV - ADV.mean()) / (ADV.std() + 1e-8)
            stats: dict[str, float] = {}
            for _epoch in range(cfg.epochs):
                order = rng.permutation(A.size)
                for lo in range(0, A.size, cfg.minibatch):
                    idx = order[lo:lo + cfg.minibatch]
                    ga, sa = actor_grads(arrays, cfg.prior, X[idx], M[idx], A[idx], LP[idx], ADV[idx], cfg.clip,
                                         cfg.entropy)
                    gc, sc = critic_grads(arrays, G[idx], RET[idx], cfg.value_coef)
                    opt.step(arrays, {**ga, **gc}, cfg.max_grad_norm)
                    stats = {**sa, **sc}
            figs = [e["figures"] for e in eps]
            row = {"iteration": it, "steps": int(A.size), "mean_return": float(np.mean([e["R"].sum() for e in eps])),
                   "success_under_burst_pct": _mean(figs, "success_under_burst_pct"),
                   "gpu_alloc_pct": _mean(figs, "gpu_alloc_pct"), **{k: round(v, 5) for k, v in stats.items()},
                   "minutes": round((time.monotonic() - began) / 60, 2)}
            print(json.dumps(row), file=log, flush=True)
            if curve is not None:
                with curve.open("a") as fh:
                    fh.write(json.dumps(row) + "\n")
    finally:
        env.close()
    final = Policy(arrays, cfg.prior, cfg.version, {"iterations": cfg.iterations, "config": asdict(cfg)})
    final.save(out)
    _forget_cached(out)
    return final


def _forget_cached(path: Path) -> None:
    from suanli.processors import ppo_policy
    ppo_policy._LOADED.pop(str(path), None)
    from suanli.processors.strategies import _CACHE
    _CACHE.clear()                 # the ppo strategy is cached by config; its policy file changed


def _mean(figs: list[dict[str, Any]], key: str) -> Optional[float]:
    xs = [f[key] for f in figs if isinstance(f.get(key), (int, float))]
    return round(float(np.mean(xs)), 3) if xs else None


SMOKE = TrainConfig(iterations=2, episodes_per_iteration=1, epochs=1, minibatch=64, version="smoke",
                    scenario={"tasks": 300, "shrink": 0.05, "bursts": 1, "burst_minutes": 1.0})


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m suanli.replay.ppo_train", description=__doc__.split("\n\n")[0])
    p.add_argument("--config", type=Path, help="training configuration (JSON; keys of TrainConfig)")
    p.add_argument("--out", type=Path, required=True, help="where to write the policy (.npz)")
    p.add_argument("--curve", type=Path, help="the training curve (JSON lines)")
    p.add_argument("--smoke", action="store_true", help="a seconds-long run on a tiny scenario (CI)")
    args = p.parse_args(argv)
    cfg = SMOKE if args.smoke else (TrainConfig.from_file(args.config) if args.config else TrainConfig())
    policy = train(cfg, args.out, args.curve)
    print(json.dumps({"out": str(args.out), "version": policy.version, "digest": policy.digest}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
