"""The collector's thresholds (``suanli/gc_policy.py``) against CPython's, alternating in one
process: the core bench at 5,000 nodes, replay (25,000 events) and one ``default``
FGD-protocol experiment, ``--rounds`` rounds, the arms' order swapped every round.

``python -m suanli.bench.gc_inprocess_ab [--rounds 3] [--json F]`` (stack up: replay reads
the registry); one JSON line per arm and round.
"""
from __future__ import annotations

import argparse
import gc
import json
from pathlib import Path

from suanli import gc_policy
from suanli.bench import core, replay_speed
from suanli.config import settings
from suanli.schemas.codec import Codec
from suanli.schemas.registry import RegistryClient

ARMS = {"cpython": (700, 10, 10), "policy": gc_policy.THRESHOLDS}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m suanli.bench.gc_inprocess_ab", description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", type=Path, help="also write the lines here")
    args = parser.parse_args(argv)
    openb = settings().openb_dir
    nodes, pods = str(openb / "openb_node_list_gpu_node.csv"), str(openb / "openb_pod_list_default.csv")
    lines = []
    with RegistryClient(settings().registry_url) as registry:
        codec = Codec(registry)
        replay_speed.fgd_experiment(nodes, pods, "bestfit")            # warm-up, unmeasured
        for rnd in range(1, args.rounds + 1):
            for arm in (list(ARMS) if rnd % 2 else list(ARMS)[::-1]):
                gc.set_threshold(*ARMS[arm])
                gc.collect()
                row = {"round": rnd, "arm": arm, "thresholds": ARMS[arm],
                       "core_5k_us_per_decision": core.decisions_per_second(5000, 5000)["us_per_decision"],
                       "replay_events_per_s": replay_speed.replay_events_per_second(codec, 5000, 20000)["events_per_s"],
                       "fgd_default_seconds": replay_speed.fgd_experiment(nodes, pods, "default")["seconds"]}
                lines.append(json.dumps(row))
                print(lines[-1], flush=True)
    if args.json:
        args.json.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
