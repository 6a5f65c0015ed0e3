"""How close the ``ppo`` policy comes to overriding ``default``: over one burst episode on a
training seed, for every choice with more than one candidate, the learned part of the
logits (the MLP's output, without the rank prior) and the margin of the best other
candidate over the first (``default``'s node; > 0 means ``ppo`` chooses differently).

    python -m suanli.bench.ppo_margins --seed 1500 --json bench/ppo-margins.json
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any, Optional

import numpy as np

from suanli.processors.plugins.ppo import Observation, acting
from suanli.processors.ppo_policy import DEFAULT_WEIGHTS, Policy
from suanli.replay import burst_whatif as bw


def run(seed: int, policy_file: Optional[str] = None) -> dict[str, Any]:
    policy = Policy.load(policy_file or DEFAULT_WEIGHTS)
    margins: list[float] = []
    spans: list[float] = []
    choices = 0

    def agent(obs: Observation) -> int:
        nonlocal choices
        choices += 1
        z = policy.logits(obs.feats)
        k = obs.rows.size
        if k > 1:
            learned = z + policy.prior * np.arange(k) / (k - 1)
            margins.append(float(z[1:].max() - z[0]))
            spans.append(float(learned.max() - learned.min()))
        return int(np.argmax(z))

    with acting(agent):
        bw.simulate_burst(None, bw.train_scenario(seed), "ppo", {"policy_file": policy_file} if policy_file else {})
    m, s = np.array(margins), np.array(spans)
    pct = lambda a, q: round(float(np.percentile(a, q)), 3) if a.size else None   # noqa: E731
    return {"seed": seed, "policy": f"{policy.version} sha256:{policy.digest[:16]}", "choices": choices,
            "with_several_candidates": int(m.size), "differs_from_default": int((m > 0).sum()),
            "margin_p50": pct(m, 50), "margin_p99": pct(m, 99), "margin_max": pct(m, 100),
            "learned_span_p50": pct(s, 50), "learned_span_p99": pct(s, 99), "learned_span_max": pct(s, 100),
            "prior_gap_first_second": round(policy.prior / 7, 3)}


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m suanli.bench.ppo_margins", description=__doc__.split("\n\n")[0])
    p.add_argument("--seed", type=int, default=1500, help="a training seed (>= 1000)")
    p.add_argument("--policy-file", help="a policy .npz (default: the committed one)")
    p.add_argument("--json", type=Path)
    a = p.parse_args(argv)
    out = run(a.seed, a.policy_file)
    out["command"] = f"python -m suanli.bench.ppo_margins --seed {a.seed}"
    text = json.dumps(out, indent=2)
    print(text)
    if a.json:
        a.json.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
