import json

import numpy as np
import pytest

from core_helpers import TOPIC, Feed, typed
from suanli.errors import RejectedInput
from suanli.processors import CellState, PluginRegistry, decide
from suanli.processors.framework import CycleContext, DuplicatePluginError, Plugin, Request
from suanli.processors.plugins.basic import BestFit


def _cluster(strategy="bestfit", config=None):
    f = Feed(strategy=strategy, config=config)
    f.node("a", cpu=16000, mem=65536, gpus=2, model="T4")
    f.node("b", cpu=32000, mem=65536, gpus=4, model="V100")
    f.node("c", cpu=8000, mem=16384, gpus=0)
    return f


def _run_script(strategy):
    f = _cluster(strategy, {"seed": 7})
    for i in range(12):
        f.task(f"s{i}", cpu=1000, gpus=1, milli=300 + 50 * (i % 5))
    f.task("w", cpu=2000, gpus=2, milli=1000)
    f.task("cpu", cpu=4000)
    f.status("s0", "COMPLETED")
    f.task("late", cpu=1000, gpus=1, milli=1000)
    return json.dumps(f.outputs, sort_keys=True), json.dumps(f.state.to_snapshot(), sort_keys=True)


@pytest.mark.parametrize("strategy", ["bestfit", "random", "fgd", "default"])
def test_determinism_byte_identical(strategy):
    assert _run_script(strategy) == _run_script(strategy)


@pytest.mark.parametrize("strategy", ["bestfit", "random", "fgd", "default"])
def test_capacity_never_exceeded(strategy):
    f = _cluster(strategy, {"seed": 3})
    rng = np.random.default_rng(0)
    for i in range(80):
        kind = rng.integers(0, 3)
        if kind == 0:
            f.task(f"t{i}", cpu=int(rng.integers(100, 3000)), gpus=1, milli=int(rng.choice([100, 250, 460, 700])))
        elif kind == 1:
            f.task(f"t{i}", cpu=1000, gpus=int(rng.choice([1, 2, 4])), milli=1000, models=["V100"] if i % 2 else [])
        else:
            f.task(f"t{i}", cpu=int(rng.integers(100, 5000)))
        f.state.check()
    for kind, p in f.outputs:
        if kind == "TaskPlaced":
            t = f.state.tasks[p["task_id"]].task.request
            if t.gpu_count == 1 and t.gpu_milli < 1000:
                assert len(p["gpu_devices"]) == 1
            elif t.gpu_count > 0:
                assert len(p["gpu_devices"]) == t.gpu_count and p["gpu_milli"] == 1000
            if t.models:
                assert p["node_id"] == "b"
    # shared tasks pack inside single devices and never exceed 1000 milli
    assert (f.state.gpu_free[f.state.gpu_free >= 0] >= 0).all()


def test_model_constraint_and_unschedulable():
    f = _cluster()
    out = f.task("m", gpus=1, milli=500, models=["A100"])
    assert out[0][0] == "TaskUnschedulable"
    out = f.task("big", gpus=8, milli=1000)
    assert out[0][0] == "TaskUnschedulable"
    out = f.task("v", gpus=1, milli=500, models=["V100"])
    assert out[0][0] == "TaskPlaced" and out[0][1]["node_id"] == "b"


def test_release_frees_and_pending_gets_placed():
    f = Feed()
    f.node("a", cpu=8000, gpus=1)
    assert f.task("x", gpus=1, milli=1000)[0][0] == "TaskPlaced"
    out = f.task("y", gpus=1, milli=600)
    assert out[0][0] == "TaskPending"
    p = out[0][1]
    assert p["queue_position"] == 0
    assert p["reasons"] == [{"reason": "insufficient GPU milli", "nodes": 1}]
    assert f.task("z", gpus=1, milli=600)[0][1]["queue_position"] == 1
    out = f.status("x", "COMPLETED")
    kinds = [k for k, _ in out]
    assert kinds[0] == "TaskReleased" and out[0][1]["cause"] == "COMPLETED"
    placed = [p for k, p in out if k == "TaskPlaced"]
    assert [p["task_id"] for p in placed] == ["y"]      # z no longer fits beside y
    assert f.state.queue[0][-1] == "z"
    assert f.state.gpu_free[0, 0] == 400
    f.state.check()


def test_queue_orders_by_priority_then_arrival():
    f = Feed()
    f.node("a", cpu=1000)
    f.task("hog", cpu=1000)
    f.task("lo", cpu=500, priority=0)
    out = f.task("hi", cpu=500, priority=10)
    assert out[0][1]["queue_position"] == 0
    assert [q[-1] for q in f.state.queue] == ["hi", "lo"]


def test_cancel_pending_and_running():
    f = Feed()
    f.node("a", cpu=1000)
    f.task("r", cpu=1000)
    f.task("p", cpu=1000)
    out = f.send("TaskCancelled", {"task_id": "p", "cell": "test", "tenant": "t", "reason": "x", "at": 3})
    assert out[0][0] == "TaskReleased" and out[0][1]["node_id"] == ""
    assert "StopCommand" not in [k for k, _ in out]          # it never ran: nothing to stop
    assert f.state.queue == []
    out = f.send("TaskCancelled", {"task_id": "r", "cell": "test", "tenant": "t", "reason": "x", "at": 4})
    assert out[0][1]["node_id"] == "a" and f.state.cpu_free[0] == 1000
    # the running copy is told to stop (its node's connector), not only released in the books
    stops = [p for k, p in out if k == "StopCommand"]
    assert [(p["task_id"], p["node_id"], p["reason"]) for p in stops] == [("r", "a", "cancelled: x")]


def test_idempotence_old_offsets_and_duplicates():
    f = Feed()
    f.node("a", cpu=4000, gpus=1)
    f.task("x", gpus=1, milli=500)
    snap = json.dumps(f.state.to_snapshot(), sort_keys=True)
    # redelivery of an old offset: ignored
    assert f.send("TaskSubmitted", {"task_id": "other", "resources": {"cpu_milli": 1, "memory_mib": 1}}, offset=1) == []
    assert json.dumps(f.state.to_snapshot(), sort_keys=True) == snap
    # same task id again at a new offset: no new decision
    assert f.task("x", gpus=1, milli=500) == []
    # status for an unknown task: nothing
    assert f.status("ghost", "COMPLETED") == []
    f.status("x", "COMPLETED")
    assert f.status("x", "COMPLETED") == []    # second completion: nothing
    f.state.check()


def test_snapshot_roundtrip_and_continue_identically():
    a = _cluster("fgd", {"seed": 5})
    for i in range(6):
        a.task(f"t{i}", gpus=1, milli=300)
    snap = a.state.to_snapshot()
    restored = CellState.from_snapshot(json.loads(json.dumps(snap)))
    assert restored.to_snapshot() == snap
    ev = typed("TaskSubmitted", {"task_id": "n", "tenant": "t", "submitted_at": 9,
                                 "resources": {"cpu_milli": 500, "memory_mib": 1, "gpu_count": 1, "gpu_milli": 200}})
    _, o1 = decide(a.state, ev, ("cell.test", 0, 100))
    _, o2 = decide(restored, ev, ("cell.test", 0, 100))
    assert o1 and o1 == o2


def test_registry_rejects_duplicates():
    reg = PluginRegistry()

    class P(Plugin):
        name = "P"

    reg.register(P)
    with pytest.raises(DuplicatePluginError):
        reg.register(P)


def test_bestfit_formula_hand_computed():
    s = CellState("x")
    s.add_node("n0", 64000, 1000, 2, "T4")      # free: cpu 64000, gpu 2000
    s.add_node("n1", 96000, 1000, 8, "G2")      # free: cpu 96000, gpu 8000
    req = Request(cpu=8000, mem=0, gpu_count=1, gpu_milli=500)
    ctx = CycleContext(s, req, "t", 0, {})
    sc = BestFit().score(ctx, np.array([0, 1]))
    # n0: 1 - (0.5*56000/128000 + 0.5*1500/8000) = 1 - (0.21875 + 0.09375) = 0.6875 -> 68
    # n1: 1 - (0.5*88000/128000 + 0.5*7500/8000) = 1 - (0.34375 + 0.46875) = 0.1875 -> 18
    assert sc.tolist() == [68.0, 18.0]


def test_provenance_shape():
    f = _cluster()
    out = f.task("p", cpu=1000, gpus=1, milli=460, at=1234)
    k, p = out[0]
    prov = p["provenance"]
    assert prov["input"] == {"topic": "cell.test", "partition": 0, "offset": f.offset - 1}
    assert prov["decided_at"] == 1234
    assert prov["strategy"]["name"] == "bestfit" and len(prov["strategy"]["config_digest"]) == 64
    assert prov["candidates"][0]["node_id"] == p["node_id"] and prov["candidates"][0]["rank"] == 1
    assert {"reason": "too few GPUs", "nodes": 1, "sample": ["c"]} in prov["filtered"]
    assert prov["path"][-1] == f"bind {p['node_id']}"


@pytest.mark.parametrize("strategy, config, named", [
    ("default", {"bestfit_wieght": 2.0}, "bestfit_wieght"),          # unknown argument
    ("default", {"bestfit_weight": -1.0}, "bestfit_weight"),          # out of range
    ("fgd", {"threshold_pct": 250}, "threshold_pct"),
    ("bestfit", {"top_k": 0}, "top_k"),
    ("no-such-strategy", {}, "no-such-strategy"),
])
def test_a_bad_policy_is_refused_with_its_reason_and_changes_nothing(strategy, config, named):
    f = _cluster("bestfit", {"seed": 1})
    before = f.state.policy
    with pytest.raises(RejectedInput, match=named):
        decide(f.state, typed("PolicyChanged", {"strategy": strategy, "config": config}), (TOPIC, 0, f.offset))
    f.offset += 1
    assert f.state.policy == before
    assert f.task("after", cpu=1000)[0][0] == "TaskPlaced"          # the cell goes on with its policy
