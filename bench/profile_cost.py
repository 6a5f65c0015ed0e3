"""What profiles and model locality cost the core, in process (issue 20 against issue 16's hot path).

    python -m suanli.bench.profile_cost [--nodes 5000] [--tasks 2000] [--rounds 3] [--json out.json]

``processors.core.decide`` on the synthetic cluster and tasks of ``bench/core.py`` (no task
carries a model), under four policies in one process, interleaved round by round so machine
noise hits them alike: ``default`` 1.3.0 (before ModelLocality), 1.5.0 (the current default:
ModelLocality, which scores nothing for a task without a model), 1.5.0 with
``profiles.enabled`` (a profile built and carried by every decision), and 1.5.0 with
``prewarm.enabled`` (the planner on CellTicks; none here, so this shows the fold's cost).
Each round decides ``--tasks`` submissions on a fresh cell of ``--nodes`` nodes; the figure
is the median decisions/s over the rounds, and each arm's ratio to 1.3.0 in the same run.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from typing import Any

from suanli.bench import synthetic
from suanli.processors.core import decide
from suanli.processors.model import NodeRegistered, PolicyChanged, TaskSubmitted, from_avro
from suanli.processors.state import CellState
from suanli.streams.topics import TopicNames

LOG = TopicNames("bench").cell_log
ARMS: dict[str, dict[str, Any]] = {
    "default 1.3.0": {"version": "1.3.0"},
    "default 1.5.0": {},
    "1.5.0 + profiles": {"profiles": {"enabled": True}},
    "1.5.0 + prewarm": {"prewarm": {"enabled": True}},
}


def decisions_per_s(config: dict[str, Any], nodes: int, tasks: int) -> float:
    """Decisions per second of ``tasks`` submissions on a fresh ``nodes``-node cell under ``config``."""
    state, offset = CellState("bench"), 0
    for node in synthetic.nodes(nodes):
        decide(state, from_avro(NodeRegistered, node), (LOG, 0, offset))
        offset += 1
    decide(state, PolicyChanged.of("bench", "default", config, event_id="policy"), (LOG, 0, offset))
    offset += 1
    work = [from_avro(TaskSubmitted, t) for t in synthetic.tasks(tasks)]
    started = time.perf_counter()
    for task in work:
        offset += 1
        decide(state, task, (LOG, 0, offset))
    return tasks / (time.perf_counter() - started)


def run(nodes: int, tasks: int, rounds: int) -> dict[str, Any]:
    per_arm: dict[str, list[float]] = {arm: [] for arm in ARMS}
    for _ in range(rounds):
        for arm, config in ARMS.items():
            per_arm[arm].append(decisions_per_s(config, nodes, tasks))
    base = statistics.median(per_arm["default 1.3.0"])
    return {"nodes": nodes, "tasks": tasks, "rounds": rounds,
            "arms": {arm: {"decisions_per_s": round(statistics.median(v), 1),
                           "per_round": [round(x, 1) for x in v],
                           "ratio_to_1.3.0": round(statistics.median(v) / base, 3)} for arm, v in per_arm.items()}}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m suanli.bench.profile_cost", description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=5000)
    ap.add_argument("--tasks", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", help="write the figures here too")
    args = ap.parse_args(argv)
    out = run(args.nodes, args.tasks, args.rounds)
    for arm, f in out["arms"].items():
        print(f"{arm:<18} {f['decisions_per_s']:>9,.1f} decisions/s  x{f['ratio_to_1.3.0']:.3f} of 1.3.0  "
              f"(rounds: {', '.join(f'{x:,.0f}' for x in f['per_round'])})")
    if args.json:
        with open(args.json, "w") as fh:
            shown = sys.argv[1:] if argv is None else argv
            json.dump({"command": " ".join(["python -m suanli.bench.profile_cost", *shown]), **out}, fh, indent=2)
            fh.write("\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
