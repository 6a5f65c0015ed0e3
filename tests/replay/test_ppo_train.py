"""The numpy PPO of replay/ppo_train.py: its forward pass is the strategy's, and its
gradients are the derivatives of its losses (checked by finite differences)."""
from __future__ import annotations

import numpy as np

from suanli.processors.ppo_policy import FEATURES, GLOBAL_FEATURES, initial
from suanli.replay import ppo_train as t


def _batch(rng, B=6, K=8):
    X = rng.normal(size=(B, K, len(FEATURES)))
    mask = np.ones((B, K), dtype=bool)
    mask[0, 3:] = False                      # a cycle with 3 candidates
    mask[1, 1:] = False                      # and one with a single candidate
    return X, mask


def test_the_batched_forward_pass_gives_the_policys_logits():
    rng = np.random.default_rng(1)
    policy = initial(hidden=16, prior=3.0, seed=2)
    arrays = {k: v + rng.normal(0, 0.3, v.shape) for k, v in policy.arrays.items()}
    policy = type(policy)(arrays, 3.0, "x")
    X, mask = _batch(rng)
    z, _h = t.forward(arrays, 3.0, X, mask)
    for b in range(X.shape[0]):
        n = int(mask[b].sum())
        assert np.allclose(z[b, :n], policy.logits(X[b, :n]))
        assert np.all(np.isneginf(z[b, n:]))


def _numeric(f, arrays, name, eps=1e-6):
    g = np.zeros_like(arrays[name])
    it = np.nditer(arrays[name], flags=["multi_index"])
    for _ in it:
        i = it.multi_index
        keep = arrays[name][i]
        arrays[name][i] = keep + eps
        up = f()
        arrays[name][i] = keep - eps
        down = f()
        arrays[name][i] = keep
        g[i] = (up - down) / (2 * eps)
    return g


def test_actor_gradients_match_finite_differences_of_the_clipped_surrogate_and_entropy():
    rng = np.random.default_rng(3)
    arrays = {k: v + rng.normal(0, 0.3, v.shape) for k, v in initial(hidden=5, seed=4).arrays.items()}
    X, mask = _batch(rng)
    actions = np.array([2, 0, 5, 1, 7, 4])
    z, _ = t.forward(arrays, 4.0, X, mask)
    old = t.log_softmax(z)[np.arange(6), actions] + rng.normal(0, 0.1, 6)   # some ratios clip
    adv = rng.normal(size=6)

    def loss():
        z, _ = t.forward(arrays, 4.0, X, mask)
        lp_all = t.log_softmax(z)
        lp = lp_all[np.arange(6), actions]
        r = np.exp(lp - old)
        surr = np.minimum(r * adv, np.clip(r, 0.8, 1.2) * adv).mean()
        p = np.where(mask, np.exp(lp_all), 0.0)
        ent = -(p * np.where(mask, lp_all, 0.0)).sum(axis=1).mean()
        return -surr - 0.05 * ent

    grads, _stats = t.actor_grads(arrays, 4.0, X, mask, actions, old, adv, 0.2, 0.05)
    for name in ("W1", "b1", "w2"):
        assert np.allclose(grads[name], _numeric(loss, arrays, name), atol=1e-6), name


def test_critic_gradients_match_finite_differences():
    rng = np.random.default_rng(5)
    arrays = {k: v + rng.normal(0, 0.3, v.shape) for k, v in initial(hidden=4, seed=6).arrays.items()}
    G = rng.normal(size=(7, len(GLOBAL_FEATURES)))
    R = rng.normal(size=7)

    def loss():
        return 0.5 * ((t.values(arrays, G) - R) ** 2).mean()

    grads, _ = t.critic_grads(arrays, G, R, 0.5)
    for name in ("V1", "c1", "v2", "c2"):
        assert np.allclose(grads[name], _numeric(loss, arrays, name), atol=1e-6), name


def test_gae_of_a_constant_reward_with_a_perfect_critic_is_zero():
    gamma, lam = 0.9, 0.95
    rewards = np.ones(5)
    vals = np.array([sum(gamma ** j for j in range(5 - t)) for t in range(5)])
    adv, ret = t.gae(rewards, vals, gamma, lam)
    assert np.allclose(adv, 0.0) and np.allclose(ret, vals)


def test_a_smoke_training_runs_ppo_on_the_environment_and_writes_a_loadable_policy(tmp_path, capsys):
    from suanli.processors.ppo_policy import Policy
    out, curve = tmp_path / "p.npz", tmp_path / "curve.jsonl"
    assert t.main(["--smoke", "--out", str(out), "--curve", str(curve)]) == 0
    policy = Policy.load(out)
    assert policy.version == "smoke"
    rows = [__import__("json").loads(line) for line in curve.read_text().splitlines()]
    assert [r["iteration"] for r in rows] == [0, 1] and all(r["steps"] > 0 for r in rows)
    assert all(np.isfinite(r["policy_loss"]) and np.isfinite(r["value_loss"]) for r in rows)
    start = initial(t.SMOKE.hidden, t.SMOKE.prior, t.SMOKE.seed, "smoke")
    assert not np.allclose(policy.arrays["W1"], start.arrays["W1"])      # the updates moved the actor
    assert policy.digest in capsys.readouterr().out


def test_the_committed_policy_is_evaluated_beside_default_on_a_small_burst_scenario():
    from suanli.processors.ppo_policy import DEFAULT_WEIGHTS, Policy
    from suanli.processors.strategies import ppo
    from suanli.replay import burst_whatif as bw
    committed = Policy.load(DEFAULT_WEIGHTS)
    assert ppo.VERSION == f"1.0.0+{committed.version}.{committed.digest[:16]}"
    small = bw.BurstScenario(tasks=300, shrink=0.05, bursts=1, burst_minutes=1.0)
    result = bw.evaluate(["ppo", "default"], [1], small)
    agg = result["aggregate"]
    for label in ("ppo", "default"):
        assert agg[label]["runs"] == 1 and agg[label]["success_under_burst_pct"]["mean"] is not None
        assert 0 < agg[label]["gpu_alloc_pct"]["mean"] <= 100
    assert "| ppo | 1 |" in bw.render(result)
