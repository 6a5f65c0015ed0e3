"""The ``ppo`` strategy's inference cost, in process (issue 21: p99 <= 1 ms per decision at
5,000 nodes).

A synthetic cell of ``--nodes`` nodes (``bench/synthetic.py``) takes ``--tasks`` submissions
through ``processors.decide`` twice: once under ``default`` and once under ``ppo`` (the
committed policy). Reported per decision, p50 / p99 / max in microseconds:

* ``policy``: what the policy adds to default's scoring: the candidates' features
  (``ppo_policy.candidate_features``) and the MLP's logits and argmax, timed on the cell
  state of each ``ppo`` decision, just before it is made;
* ``decide_ppo`` and ``decide_default``: the whole ``decide()`` call (filters, scorers,
  provenance, state update), and their ratio of medians.

    python -m suanli.bench.ppo_inference --nodes 5000 --tasks 2000 --json bench/ppo-inference.json
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import numpy as np

from suanli.bench import synthetic
from suanli.processors.core import decide
from suanli.processors.framework import CycleContext
from suanli.processors.model import NodeRegistered, PolicyChanged, Task, TaskSubmitted, from_avro
from suanli.processors.plugins.ppo import PPO
from suanli.processors.ppo_policy import candidate_features
from suanli.processors.state import CellState
from suanli.processors.strategies import get_strategy

POS = "bench.ppo"


def _cell(nodes: int, strategy: str) -> tuple[CellState, int]:
    state, off = CellState("bench"), 0
    for node in synthetic.nodes(nodes):
        state, _ = decide(state, from_avro(NodeRegistered, node), (POS, 0, off))
        off += 1
    state, _ = decide(state, PolicyChanged.of("bench", strategy, event_id="p"), (POS, 0, off))
    return state, off + 1


def _pcts(us: list[float]) -> dict[str, float]:
    a = np.array(us)
    return {"p50_us": round(float(np.percentile(a, 50)), 1), "p99_us": round(float(np.percentile(a, 99)), 1),
            "max_us": round(float(a.max()), 1), "n": int(a.size)}


def run(nodes: int, tasks: int) -> dict[str, Any]:
    work = [from_avro(TaskSubmitted, t) for t in synthetic.tasks(tasks)]
    out: dict[str, Any] = {"nodes": nodes, "tasks": tasks}
    for strategy in ("default", "ppo"):
        state, off = _cell(nodes, strategy)
        plugin = next(p for p, _w in get_strategy("ppo", {}).profile.scorers) if strategy == "ppo" else None
        assert plugin is None or isinstance(plugin, PPO)
        decide_us, policy_us = [], []
        for task in work:
            if plugin is not None:
                req = Task.of(task).request
                ask = req.gpu_count * req.gpu_milli if req.kind != "cpu" else 0
                rows = np.flatnonzero(state.ready & (state.cpu_free >= req.cpu) & (state.gpu_free_total >= ask))
                if rows.size == 0:
                    rows = np.flatnonzero(state.ready)
                ctx = CycleContext(state, req, task.task_id, 0, {})
                order, obs = plugin.observe(ctx, rows)
                base = plugin.base_scores(ctx, rows[order])
                t0 = time.perf_counter()
                feats = candidate_features(state, req, obs.rows, base)
                int(np.argmax(plugin.policy.logits(feats)))
                policy_us.append(1e6 * (time.perf_counter() - t0))
            t0 = time.perf_counter()
            state, _ = decide(state, task, (POS, 0, off))
            decide_us.append(1e6 * (time.perf_counter() - t0))
            off += 1
        out[f"decide_{strategy}"] = _pcts(decide_us)
        if policy_us:
            out["policy"] = _pcts(policy_us)
    out["ppo_over_default_p50"] = round(out["decide_ppo"]["p50_us"] / out["decide_default"]["p50_us"], 3)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m suanli.bench.ppo_inference", description=__doc__.split("\n\n")[0])
    p.add_argument("--nodes", type=int, default=5000)
    p.add_argument("--tasks", type=int, default=2000)
    p.add_argument("--json", type=Path, help="also write the figures here")
    a = p.parse_args(argv)
    figures = run(a.nodes, a.tasks)
    figures["command"] = f"python -m suanli.bench.ppo_inference --nodes {a.nodes} --tasks {a.tasks}"
    text = json.dumps(figures, indent=2)
    print(text)
    if a.json:
        a.json.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
