"""bench/ppo_inference.py on a small cell: it times the policy and both strategies' decide()
over the same submissions, and prints figures that add up (the figures themselves are the
benchmark's business)."""
from __future__ import annotations

import json

from suanli.bench import ppo_inference


def test_the_inference_bench_times_the_policy_and_both_strategies(tmp_path, capsys):
    out = tmp_path / "f.json"
    assert ppo_inference.main(["--nodes", "200", "--tasks", "60", "--json", str(out)]) == 0
    figures = json.loads(out.read_text())
    assert json.loads(capsys.readouterr().out) == figures
    for key in ("decide_default", "decide_ppo", "policy"):
        f = figures[key]
        assert f["n"] == 60 and 0 < f["p50_us"] <= f["p99_us"] <= f["max_us"], (key, f)
    assert figures["ppo_over_default_p50"] > 0
