"""bench/core_split.py: every part is timed, nested parts fit in their callers, and the
wrappers are gone afterwards."""
from suanli.bench import core_split
from suanli.processors import core, framework
from suanli.processors.plugins import basic, fgd


def test_parts_are_timed_and_the_functions_restored():
    before = (framework.run_cycle, core.run_cycle, fgd.FGD.score, fgd.node_classes, basic.BestFitRaw.score,
              basic.CpuFit.filter)
    out = core_split.core_workload(200, 120)
    parts = out["parts_us_per_decision"]
    assert out["decisions"] == 100 and out["us_per_decision"] > 0
    for name in ("run_cycle", "total_score", "fgd.score", "fgd: entry lookup", "fgd: class scores (kernel)",
                 "bestfit.score", "strand.score", "filters"):
        assert parts[name] > 0, name
    assert parts["run_cycle"] <= out["us_per_decision"]
    assert parts["total_score"] <= parts["run_cycle"] and parts["fgd.score"] <= parts["total_score"]
    assert parts["fgd: class scores (kernel)"] <= parts["fgd.score"]
    assert (framework.run_cycle, core.run_cycle, fgd.FGD.score, fgd.node_classes, basic.BestFitRaw.score,
            basic.CpuFit.filter) == before
