"""Placement quality of one policy against a reference on the thirteen openb workloads of
BENCHMARKS.md ("Placement quality"): the five shared ones and the eight held-out variants
of ``openb_variants.py`` (made from the default list, seed 0, into ``--variants-dir``).

Each workload runs the FGD protocol (``fgd_protocol.run_protocol``: seeds, tune 1.3,
unallocated GPU % at arrived = 100 %) for ``--policy`` and ``--reference``; the table gives
both means ± sd and the lead (reference - policy, points; positive: the policy leaves less
unallocated). ``--reference-json`` takes the reference's per-seed figures from a JSON
written by ``suanli whatif --protocol fgd`` (e.g. ``bench/placement-fgd-protocol.json``)
instead of re-running it.

    python -m suanli.replay.placement_quality --seeds 42-51 --reference-json \\
        bench/placement-fgd-protocol.json --json out.json
"""
from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Any

from . import fgd_protocol
from .openb_variants import STANDARD, write_variants

SHARED = ("default", "cpu050", "gpushare40", "multigpu20", "gpuspec10")


def _reference(doc: Any, workload: str, policy: str, seeds: list[int], all_seeds: list[int]) -> list[float] | None:
    """Per-seed figures of ``policy`` on ``workload`` from a whatif JSON (a dict keyed by
    workload or ``variant:<name>``, or a list of run_protocol results)."""
    runs = doc.values() if isinstance(doc, dict) else doc
    for r in runs:
        if r.get("workload") == f"openb_pod_list_{workload}" and policy in r.get("policies", {}):
            per = r["policies"][policy]["unallocated_gpu_pct"]["per_seed"]
            if len(per) != len(all_seeds):
                return None
            return [per[all_seeds.index(s)] for s in seeds]
    return None


def main(argv: list[str] | None = None) -> int:
    from suanli.config import load_settings
    d = load_settings().openb_dir
    ap = argparse.ArgumentParser(prog="python -m suanli.replay.placement_quality", description=__doc__.split("\n")[0])
    ap.add_argument("--nodes", default=str(d / "openb_node_list_gpu_node.csv"))
    ap.add_argument("--policy", default="default")
    ap.add_argument("--reference", default="fgd")
    ap.add_argument("--reference-json", help="per-seed reference figures from this whatif JSON (seeds 42-51)")
    ap.add_argument("--reference-seeds", default="42-51", help="the seeds of --reference-json's per-seed lists")
    ap.add_argument("--seeds", default="42-51")
    ap.add_argument("--workloads", default=",".join(SHARED + STANDARD))
    ap.add_argument("--variants-dir", default="/tmp/openb-variants")
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--json", help="write the results here")
    a = ap.parse_args(argv)
    seeds = fgd_protocol.parse_seeds(a.seeds)
    ref_seeds = fgd_protocol.parse_seeds(a.reference_seeds)
    workloads = [w for w in a.workloads.split(",") if w]
    variants = tuple(w for w in workloads if w not in SHARED)
    if variants:
        write_variants(d / "openb_pod_list_default.csv", a.variants_dir, variants)
    ref_doc = json.loads(Path(a.reference_json).read_text()) if a.reference_json else None
    out: dict[str, Any] = {"policy": a.policy, "reference": a.reference, "seeds": seeds, "workloads": {}}
    print(f"{'workload':12s} {a.reference[:22]:>22s} {a.policy[:22]:>22s} {'lead':>7s}")
    for w in workloads:
        pods = d / f"openb_pod_list_{w}.csv" if w in SHARED else Path(a.variants_dir) / f"openb_pod_list_{w}.csv"
        ref = _reference(ref_doc, w, a.reference, seeds, ref_seeds) if ref_doc is not None else None
        pols = [a.policy] if ref is not None else [a.policy, a.reference]
        r = fgd_protocol.run_protocol(a.nodes, str(pods), pols, seeds, a.workers)
        mine = r["policies"][a.policy]["unallocated_gpu_pct"]["per_seed"]
        if ref is None:
            ref = r["policies"][a.reference]["unallocated_gpu_pct"]["per_seed"]
        lead = statistics.fmean(ref) - statistics.fmean(mine)
        sd = (lambda xs: statistics.stdev(xs) if len(xs) > 1 else 0.0)
        out["workloads"][w] = {"policy": mine, "reference": ref, "lead": round(lead, 4),
                               "paired_lead_sd": round(sd([x - y for x, y in zip(ref, mine)]), 4)}
        print(f"{w:12s} {statistics.fmean(ref):13.2f} ± {sd(ref):5.2f} {statistics.fmean(mine):13.2f} ± "
              f"{sd(mine):5.2f} {lead:+7.2f}", flush=True)
    if a.json:
        Path(a.json).write_text(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
