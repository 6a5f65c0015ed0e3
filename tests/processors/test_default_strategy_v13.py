"""``default`` 1.3.0: the CpuStrand term, and 1.2.0 kept selectable and unchanged."""
from __future__ import annotations

import numpy as np
import pytest

from suanli.processors import strategies as S
from suanli.processors.framework import REGISTRY, CycleContext
from suanli.processors.model import Request
from suanli.processors.plugins.strand import CpuStrand, StrandArgs
from suanli.processors.state import CellState
from suanli.processors.strategies import default as D

from core_helpers import Feed

TYPICAL = [{"cpu_milli": 10000, "gpu_count": 1, "gpu_milli": 1000, "count": 3},
           {"cpu_milli": 4000, "gpu_count": 1, "gpu_milli": 500, "count": 2},
           {"cpu_milli": 12000, "gpu_count": 0, "gpu_milli": 0, "count": 5}]


def _profile(config):
    st = S.get_strategy("default", {"seed": 1, "typical_tasks": TYPICAL, **config})
    return st, [(p.name, w, p.args) for p, w in st.profile.scorers]


def test_versions_and_default():
    # 1.4.0: ModelLocality (#20); 1.5.0: its local_points (#20, prewarm)
    assert D.VERSION == "1.5.0" and D.VERSIONS == ("1.2.0", "1.3.0", "1.4.0", "1.5.0")
    assert S.defaults("default")["version"] == "1.5.0"


def test_v120_builds_the_old_profile_whatever_the_new_keys():
    _, old = _profile({"version": "1.2.0"})
    assert [n for n, _, _ in old] == ["FGD", "BestFitRaw", "Scarcity"]
    # the 1.3.0 keys are ignored under 1.2.0: same plugins, weights and arguments
    _, same = _profile({"version": "1.2.0", "strand_weight": 3.0, "strand_cpu_slack": 1.0})
    assert same == old


def test_v130_adds_cpustrand_after_the_v120_scorers():
    _, old = _profile({"version": "1.2.0"})
    _, new = _profile({"version": "1.3.0"})
    assert new[:3] == old
    name, weight, args = new[3]
    assert (name, weight) == ("CpuStrand", 1.5)
    assert args.cpu_slack == 2.5 and args.slack == 1.0
    _, off = _profile({"version": "1.3.0", "strand_weight": 0})
    assert off == old


def test_bad_version_is_refused():
    with pytest.raises(Exception, match="version"):
        S.get_strategy("default", {"seed": 1, "version": "1.1.0"})


def _state():
    """n0: 8 GPUs, 96 cores (12 per GPU); n1: 2 GPUs, 104 cores (CPU-rich); n2: 8 GPUs, all taken."""
    s = CellState("t")
    s.add_node("n0", 96000, 393216, 8, "G2")
    s.add_node("n1", 104000, 524288, 2, "T4")
    s.add_node("n2", 96000, 393216, 8, "G2")
    s.gpu_free[2, :8] = 0
    s.touch(2)
    s._refresh_gpu_row(2)
    return s


def _score(plugin, s, req):
    ctx = CycleContext(state=s, req=req, task_id="x", seed=1, config={})
    return plugin.score(ctx, np.arange(s.n_nodes))


def _typical():
    from suanli.processors.plugins.fgd import TypicalTask
    return tuple(TypicalTask(**t) for t in TYPICAL)


def test_rho_is_the_typical_gpu_tasks_cpu_per_gpu_milli():
    p = REGISTRY.create("CpuStrand", StrandArgs(typical=_typical()))
    assert isinstance(p, CpuStrand)
    # (3 * 10000 + 2 * 4000) / (3 * 1000 + 2 * 500): CPU-only classes do not count
    assert p.rho(_state()) == pytest.approx(38000 / 4000)


def test_cpu_only_task_keeps_off_the_cpu_beside_free_gpus():
    s = _state()
    p = REGISTRY.create("CpuStrand", StrandArgs(typical=_typical(), cpu_slack=2.5))
    sc = _score(p, s, Request(cpu=32000, mem=0, gpu_count=0, gpu_milli=0))
    # n0: 96 cores for 8 free GPUs at 9.5 * 2.5 cores per GPU: already short, 32 more cores
    # strand 32000 / 23.75 GPU milli; n1 (2 GPUs, 104 cores) loses nothing; n2 has no free GPU
    assert sc[0] == pytest.approx(-32000 / 23.75)
    assert sc[1] == 0.0 and sc[2] == 0.0


def test_gpu_task_light_on_cpu_goes_where_cpu_is_short():
    s = _state()
    s.cpu_free[0] = 40000          # n0: 8 free GPUs, 40 cores (needs 76 at 9.5 per GPU)
    s.touch(0)
    p = REGISTRY.create("CpuStrand", StrandArgs(typical=_typical()))
    sc = _score(p, s, Request(cpu=2000, mem=0, gpu_count=1, gpu_milli=1000))
    rho = 9.5
    assert sc[0] == pytest.approx(1000 - 2000 / rho)     # it uses a stranded GPU
    assert sc[1] == 0.0                                   # n1 has CPU for both its GPUs


def test_v120_and_v130_decide_through_the_core():
    for version in ("1.2.0", "1.3.0"):
        f = Feed(strategy="default", config={"seed": 1, "typical_tasks": TYPICAL, "version": version})
        for nid, cpu, gpus in (("a", 96000, 8), ("b", 104000, 2)):
            f.send("NodeRegistered", {"node_id": nid, "cpu_milli": cpu, "memory_mib": 393216,
                                      "accelerators": [{"kind": "GPU", "model": "G2", "count": gpus, "memory_mib": 0}]})
        outs = f.send("TaskSubmitted", {"task_id": "t1", "resources": {"cpu_milli": 32000, "memory_mib": 1024,
                                                                         "gpu_count": 0, "gpu_milli": 0}})
        assert outs and outs[0][0] == "TaskPlaced"
        assert outs[0][1]["node_id"] == "b"          # the CPU-rich 2-GPU node, not the 8-GPU one
