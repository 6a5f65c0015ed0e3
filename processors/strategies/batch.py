"""``batch``: joint placement of a window of queued tasks with an OR-Tools CP-SAT model.

Each decision solves for the arriving task together with up to ``window - 1`` tasks
waiting in the queue (``window``, default 8; ``candidates`` nodes per task, default 16),
maximising placed work (priority first, then GPU milli), then tight fits, and keeping
idle nodes idle (``open_penalty``). Queued tasks the plan places are placed in the same
decision. Deterministic: single worker, fixed seed, ``max_deterministic_time`` (default
0.2 deterministic seconds) rather than wall time; fallback BestFit when the solver has no
plan for the task.

Use it for batch queues (label ``workload=batch``) where throughput of the whole queue
matters more than each task's own best node, e.g. after a large release of capacity.
"""
from __future__ import annotations

from ..framework import REGISTRY, Profile
from ..plugins.basic import FILTERS

NAME = "batch"
VERSION = "1.0.0"


def build(config: dict) -> Profile:
    args = {k: config[k] for k in ("window", "candidates", "open_penalty", "max_deterministic_time",
                                   "solver_seed") if k in config}
    return Profile.build(REGISTRY, FILTERS, [{"name": "CpSatBatch", "args": args}],
                         tie_break="BestFit", secondary=[{"name": "BestFit"}],
                         top_k=int(config.get("top_k", 5)), others=["Capacity"])
