"""Where a core decision's time goes: the cycle's parts, timed in place.

``python -m suanli.bench.core_split [--nodes 5000] [--tasks 3000] [--fgd] [--json F]``
wraps the scheduling cycle (``framework.run_cycle``), the scorers, the filters and FGD's
per-class work with a timer each, runs the core bench's workload (``bench/core.py``: the
first sixth of the tasks warm up unmeasured), and prints each part's microseconds per
decision; ``--fgd`` times one FGD-protocol experiment (``default``, seed 42) instead. Nested
parts are included in their callers (FGD's class scores in ``fgd.score``, that in
``total_score``, that in the scores part (``class_scores``), that in ``run_cycle``). A timer costs about half a microsecond a call, so
the total runs a little slower than the core bench.
"""
from __future__ import annotations

import argparse
import collections
import json
import time
from contextlib import contextmanager
from typing import Any, Callable, Iterator

from suanli.bench import synthetic
from suanli.processors import framework
from suanli.processors.core import decide
from suanli.processors.model import NodeRegistered, TaskSubmitted, from_avro
from suanli.processors.plugins import basic, fgd, model_locality, strand
from suanli.processors.state import CellState


def _parts() -> list[tuple[Any, str, str]]:
    """(owner, attribute, label) of each timed function."""
    filters = [(getattr(basic, n), "filter", "filters") for n in basic.FILTERS]
    return [(framework, "run_cycle", "run_cycle"),
            (framework, "class_scores", "scores (the classes found and scored)"),
            (framework, "_rank_compiled", "ranking"), (framework, "_rank_classes", "ranking (by class)"),
            (framework, "total_score", "total_score"),
            (framework, "stable_top", "candidates (stable_top)"), (framework, "_avoid_bad_conditions", "conditions"),
            (fgd.FGD, "score", "fgd.score"), (fgd.FGD, "_entry_of", "fgd: entry lookup"),
            (fgd, "node_classes", "fgd: node classes"), (fgd.FGD, "_scores_compiled", "fgd: class scores (kernel)"),
            (fgd.FGD, "_fill", "fgd._fill (numpy path)"), (fgd, "unknown_classes", "fgd: unknown classes"),
            (fgd.FGD, "_score_states", "fgd: new classes scored"), (fgd.FGD, "select_devices", "fgd.select_devices"),
            (basic.BestFitRaw, "score", "bestfit.score"), (strand.CpuStrand, "score", "strand.score"),
            (fgd.Scarcity, "score", "scarcity.score"), (model_locality.ModelLocality, "score", "model_locality.score"),
            *filters]


@contextmanager
def timed(spent: collections.Counter) -> Iterator[None]:
    """Every part of :func:`_parts` adds its nanoseconds to ``spent`` while inside."""
    saved = []
    for owner, attr, label in _parts():
        fn = owner.__dict__[attr] if attr in owner.__dict__ else getattr(owner, attr)
        saved.append((owner, attr, fn))

        def wrapper(*a: Any, _fn: Callable = fn, _label: str = label, **k: Any) -> Any:
            t = time.perf_counter_ns()
            try:
                return _fn(*a, **k)
            finally:
                spent[_label] += time.perf_counter_ns() - t
        setattr(owner, attr, wrapper)
    # run_cycle is imported by name into the core: time it where the core calls it
    from suanli.processors import core
    core_run_cycle = core.run_cycle
    core.run_cycle = framework.run_cycle
    try:
        yield
    finally:
        core.run_cycle = core_run_cycle
        for owner, attr, fn in reversed(saved):
            setattr(owner, attr, fn)


def core_workload(nodes: int, tasks: int) -> dict[str, Any]:
    state = CellState("bench")
    at = 0
    for node in synthetic.nodes(nodes):
        decide(state, from_avro(NodeRegistered, node), ("bench", 0, at))
        at += 1
    work = [from_avro(TaskSubmitted, t) for t in synthetic.tasks(tasks)]
    warm = len(work) // 6
    for t in work[:warm]:
        decide(state, t, ("bench", 0, at))
        at += 1
    spent: collections.Counter = collections.Counter()
    with timed(spent):
        started = time.perf_counter()
        for t in work[warm:]:
            decide(state, t, ("bench", 0, at))
            at += 1
        seconds = time.perf_counter() - started
    n = len(work) - warm
    return {"nodes": nodes, "decisions": n, "us_per_decision": round(1e6 * seconds / n, 1),
            "parts_us_per_decision": {k: round(v / 1e3 / n, 1) for k, v in spent.most_common()}}


def fgd_experiment() -> dict[str, Any]:
    from suanli.config import load_settings
    from suanli.replay.fgd_protocol import run_experiment
    openb = load_settings().openb_dir
    nodes, pods = str(openb / "openb_node_list_gpu_node.csv"), str(openb / "openb_pod_list_default.csv")
    run_experiment(nodes, pods, "default", 42)                 # warm-up
    spent: collections.Counter = collections.Counter()
    with timed(spent):
        started = time.perf_counter()
        run_experiment(nodes, pods, "default", 42)
        seconds = time.perf_counter() - started
    return {"experiment": "default, seed 42", "seconds": round(seconds, 3),
            "parts_seconds": {k: round(v / 1e9, 3) for k, v in spent.most_common()}}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=5000)
    ap.add_argument("--tasks", type=int, default=3000)
    ap.add_argument("--fgd", action="store_true", help="time one FGD-protocol experiment instead")
    ap.add_argument("--json", help="write the figures to this file too")
    a = ap.parse_args(argv)
    out = fgd_experiment() if a.fgd else core_workload(a.nodes, a.tasks)
    print(json.dumps(out, indent=1))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
