"""A cell log decided by the ``ppo`` strategy replays IDENTICAL (issue 21): the production
worker's CellRunner decides a synthetic log whose first input sets the policy to ppo, the
log is exported as a log directory, and ``suanli replay --verify`` re-decides it."""
from __future__ import annotations

import json

from synth import CELL_LOG, TOPICS, encode_log, inputs, live_run, offline_codec

from suanli.processors.strategies import ppo
from suanli.cli import main
from suanli.replay.export import build_logdir


def test_a_log_decided_by_ppo_replays_identical_and_names_the_policy(tmp_path, capsys):
    codec, registry = offline_codec()
    policy = ("c1", "PolicyChanged", {"event_id": "c1/policy", "cell": "c1", "strategy": "ppo",
                                      "config_json": json.dumps({"seed": 3}), "at": 0})
    records = encode_log(codec, [policy, *inputs(n_tasks=120, other_cell=None)])
    decisions = live_run(codec, records)
    placed = [codec.decode(r.value) for r in decisions]
    placed = [v for k, v in placed if k == "TaskPlaced"]
    assert len(placed) > 50
    assert all(p["provenance"]["strategy"] == {"name": "ppo", "version": ppo.VERSION,
                                               "config_digest": p["provenance"]["strategy"]["config_digest"]}
               for p in placed)
    assert all(any(line.startswith("score: PPO[") for line in p["provenance"]["path"]) for p in placed
               if not any(line.startswith("preempt:") for line in p["provenance"]["path"]))
    out = tmp_path / "log"
    build_logdir(out, codec, registry, cell="c1", namespace=TOPICS.namespace, cell_log_topic=CELL_LOG, partition=0,
                 lo=0, hi=len(records), prefix=[], inputs=records, decision_candidates=decisions,
                 log=lambda _m: None)
    assert main(["replay", str(out), "--verify", "--quiet"]) == 0
    assert "IDENTICAL" in capsys.readouterr().out
