"""Every accelerator kind in the core (#19, C1).

Nodes register NPUs, FPGAs, ASICs, QPUs and OTHER devices beside their GPUs; tasks ask
them (kind, model or any, count) and a memory per GPU. The filters keep the nodes that
have them free, placement takes them, every release gives them back, and a task no
registered node could ever serve is refused (RejectedInput: dead-lettered by the runner).
Ordinary tasks are decided as before (old logs replay IDENTICAL: not tested here, see the
issue's report; ``test_ordinary_*`` below check the mechanism)."""
from __future__ import annotations

import itertools
import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from core_helpers import Feed

from suanli.errors import RejectedInput
from suanli.processors import CellState
from suanli.processors.model import Request, Task, TaskResources, AcceleratorRequest
from suanli.processors.state import HOLDING

KINDS = ("NPU", "FPGA", "ASIC", "QPU")


def node(f: Feed, nid: str, accels=(), gpus=0, gpu_model="A100", gpu_mem=0, cpu=32000, mem=65536, labels=None):
    acc = [{"kind": "GPU", "model": gpu_model, "count": gpus, "memory_mib": gpu_mem}] if gpus else []
    acc += [{"kind": a[0], "model": a[1], "count": a[2], "memory_mib": a[3] if len(a) > 3 else 0} for a in accels]
    return f.send("NodeRegistered", {"node_id": nid, "cell": "test", "cpu_milli": cpu, "memory_mib": mem,
                                     "accelerators": acc, "registered_at": 0, "labels": labels or {}})


def task(f: Feed, tid: str, accels=(), gpus=0, gpu_mem=0, cpu=1000, mem=1024, at=1, qos="SILVER", labels=None,
         models=(), offset=None):
    return f.send("TaskSubmitted", offset=offset, event={
        "task_id": tid, "tenant": "t", "cell": "test", "submitted_at": at, "qos_tier": qos, "labels": labels or {},
        "resources": {"cpu_milli": cpu, "memory_mib": mem, "gpu_count": gpus, "gpu_milli": 1000 if gpus else 0,
                      "gpu_models": list(models), "gpu_memory_mib": gpu_mem,
                      "accelerators": [{"kind": a[0], "model": a[1], "count": a[2],
                                        "memory_mib": a[3] if len(a) > 3 else 0} for a in accels]}})


def refused(f: Feed, tid: str, **kw) -> str:
    """The reason ``decide`` refuses the submission (Feed moves to the next offset, as the
    runner does after dead-lettering it)."""
    with pytest.raises(RejectedInput) as exc:
        task(f, tid, **kw)
    f.offset += 1
    return str(exc.value)


def placed(outs) -> dict[str, str]:
    return {d["task_id"]: d["node_id"] for k, d in outs if k == "TaskPlaced"}


# ------------------------------------------------------------------ the request
def test_request_of_keeps_accelerators_and_gpu_memory():
    res = TaskResources(cpu_milli=1, memory_mib=1, gpu_count=2, gpu_milli=1000, gpu_memory_mib=40960,
                        accelerators=(AcceleratorRequest(kind="FPGA", model="u250", count=1),
                                      AcceleratorRequest(kind="NPU", model="", count=2),
                                      AcceleratorRequest(kind="FPGA", model="u250", count=2),
                                      AcceleratorRequest(kind="QPU", model="q", count=0)))
    r = Request.of(res)
    assert r.gpu_mem == 40960 and r.accels == (("FPGA", "u250", 3, 0), ("NPU", "", 2, 0)) and r.has_device_needs
    # asks of one kind and model are summed; each device then needs the most memory any asked
    both = Request.of(TaskResources(cpu_milli=1, memory_mib=1, accelerators=(
        AcceleratorRequest(kind="NPU", model="", count=1, memory_mib=32768),
        AcceleratorRequest(kind="NPU", model="", count=1, memory_mib=65536))))
    assert both.accels == (("NPU", "", 2, 65536),)
    # no GPU asked: no GPU memory either
    assert Request.of(TaskResources(cpu_milli=1, memory_mib=1, gpu_memory_mib=8)).gpu_mem == 0
    plain = Request.of(TaskResources(cpu_milli=1, memory_mib=1, gpu_count=1, gpu_milli=500))
    assert plain == Request(1, 1, 1, 500) and not plain.has_device_needs


def test_task_json_is_unchanged_for_ordinary_tasks_and_round_trips_accelerators():
    plain = Task(task_id="a", tenant="t", request=Request(1000, 10, 1, 1000, ("T4",)))
    assert plain.to_json()["request"] == [1000, 10, 1, 1000, ["T4"]]
    assert Task.from_json(plain.to_json()) == plain
    rich = Task(task_id="b", tenant="t", request=Request(1000, 10, 1, 1000, (), 16384, (("NPU", "", 2, 4096),)))
    back = Task.from_json(json.loads(json.dumps(rich.to_json())))
    assert back == rich and back.request.accels == (("NPU", "", 2, 4096),)
    # a snapshot written before asks had a memory: each ask reads with none
    old = rich.to_json()
    old["request"][-1] = [["NPU", "", 2]]
    assert Task.from_json(old).request.accels == (("NPU", "", 2, 0),)


def test_a_memory_per_device_keeps_the_nodes_whose_devices_have_it():
    """C1: "requests name kinds, counts, models and per-device memory": an NPU ask with a
    memory lands only where that many devices have at least that memory each (any model: all
    of one model that has it); one that no node's devices could hold is refused, saying so."""
    f = Feed(strategy="default", config={})
    node(f, "small", accels=[("NPU", "910a", 4, 32768)])
    node(f, "big", accels=[("NPU", "910a", 1, 32768), ("NPU", "910b", 1, 65536)])
    assert placed(task(f, "one", accels=[("NPU", "", 1, 65536)])) == {"one": "big"}
    assert f.state.tasks["one"].accels == (("NPU", "910b", 1),)
    # no 64 GiB device left: it waits, and the filter's reason names the memory
    outs = task(f, "two", accels=[("NPU", "", 1, 65536)])
    assert placed(outs) == {} and "1 NPU (any model) with 65536 MiB" in json.dumps(outs)
    # 32 GiB devices serve a smaller ask; two of one model are only on "small"
    assert placed(task(f, "three", accels=[("NPU", "", 2, 16384)])) == {"three": "small"}
    f.state.check()
    # more memory per device than any node has: refused with the largest there is
    reason = refused(f, "huge", accels=[("NPU", "", 1, 131072)])
    assert "has 1 free-or-used NPU devices of one model with at least 131072 MiB each" in reason
    assert "the most: 65536 MiB per device ('910b') on node" in reason


# ------------------------------------------------------------------ placement by kind
@pytest.mark.parametrize("kind", KINDS)
def test_a_task_lands_only_on_nodes_with_free_devices_of_its_kind(kind):
    f = Feed(strategy="default", config={})
    node(f, "cpu-only")
    node(f, "gpu", gpus=8, gpu_mem=81920)
    others = [k for k in KINDS if k != kind]
    node(f, "other", accels=[(others[0], "m1", 4), (others[1], "m2", 4)])
    node(f, "mine", accels=[(kind, "m1", 2), (others[2], "m3", 1)], cpu=8000)
    outs = task(f, "t1", accels=[(kind, "", 2)])
    assert placed(outs) == {"t1": "mine"}
    assert f.state.tasks["t1"].accels == ((kind, "m1", 2),)
    # the node's devices of that kind are taken: the next one waits, with the reason
    outs = task(f, "t2", accels=[(kind, "m1", 1)])
    (k, d), = outs
    assert k == "TaskPending"
    assert d["reasons"][0]["reason"] == f"insufficient free accelerators (1 {kind} 'm1')"
    f.state.check()
    # the first one completes: its devices go back and the waiting one takes one of them
    outs = f.status("t1", "COMPLETED")
    assert placed(outs) == {"t2": "mine"}
    f.state.check()
    j = f.state.accel_keys.index((kind, "m1"))
    assert f.state.accel_free[f.state.node_index["mine"], j] == 1


def test_a_named_model_is_honoured_and_any_model_takes_one_model():
    f = Feed()
    node(f, "n1", accels=[("FPGA", "u200", 1), ("FPGA", "u250", 1)])
    node(f, "n2", accels=[("FPGA", "u250", 3)])
    # two of any model: n1 has two FPGAs but of two models
    assert placed(task(f, "a", accels=[("FPGA", "", 2)])) == {"a": "n2"}
    assert placed(task(f, "b", accels=[("FPGA", "u200", 1)])) == {"b": "n1"}
    # a named ask and an any ask of one kind: one FPGA is left on each node, so it waits ...
    outs = task(f, "c", accels=[("FPGA", "u250", 1), ("FPGA", "", 1)])
    assert [k for k, _ in outs] == ["TaskPending"]
    # ... until b's u200 is back beside n1's u250
    assert placed(f.status("b", "COMPLETED")) == {"c": "n1"}
    assert f.state.tasks["c"].accels == (("FPGA", "u200", 1), ("FPGA", "u250", 1))
    f.state.check()


def test_several_kinds_at_once_need_them_all_on_one_node():
    f = Feed()
    node(f, "n1", accels=[("NPU", "910", 2)])
    node(f, "n2", accels=[("QPU", "q1", 1)])
    node(f, "n3", accels=[("NPU", "910", 1), ("QPU", "q1", 1), ("ASIC", "x", 1)])
    assert placed(task(f, "t", accels=[("NPU", "", 1), ("QPU", "q1", 1)])) == {"t": "n3"}
    assert f.state.tasks["t"].accels == (("NPU", "910", 1), ("QPU", "q1", 1))
    f.state.check()


def test_gpu_memory_filters_nodes():
    f = Feed()
    node(f, "small", gpus=4, gpu_mem=16384)
    node(f, "unknown", gpus=4, gpu_mem=0)
    node(f, "big", gpus=4, gpu_mem=81920)
    outs = task(f, "t", gpus=1, gpu_mem=40960)
    assert placed(outs) == {"t": "big"}
    (_, d), = outs
    filtered = {x["reason"]: x["nodes"] for x in d["provenance"]["filtered"]}
    assert filtered == {"GPU memory below 40960 MiB": 2}
    # without the ask the small ones are fine
    assert placed(task(f, "u", gpus=1)) != {}


# ------------------------------------------------------------------ every path that frees
def test_lost_preempted_released_and_migrated_tasks_give_their_devices_back():
    f = Feed(config={"seed": 1, "qos": {"gold_share": 0.0}})
    node(f, "n1", accels=[("NPU", "910", 2)])
    node(f, "n2", accels=[("NPU", "910", 2)])
    task(f, "bronze", accels=[("NPU", "", 2)], qos="BRONZE", at=1)
    task(f, "gold", accels=[("NPU", "", 2)], qos="GOLD", at=1)
    f.state.check()
    # a silver one finds both nodes full: it preempts the bronze one
    outs = task(f, "silver", accels=[("NPU", "910", 2)], at=2)
    kinds = [k for k, _ in outs]
    assert "TaskPreempted" in kinds and placed(outs)
    f.state.check()
    # the gold one's node goes DOWN: it moves if it can, else it is lost; either way freed there
    gnode = f.state.tasks["gold"].node
    outs = f.send("NodeStatusChanged", {"node_id": gnode, "cell": "test", "status": "DOWN", "at": 3})
    f.state.check()
    assert {k for k, _ in outs} & {"TaskLost", "TaskMigrated"}
    row = f.state.node_index[gnode]
    assert f.state.accel_free[row].tolist() == f.state.accel_cap[row].tolist() or \
        any(t.node == gnode and t.status in HOLDING for t in f.state.tasks.values())
    f.send("NodeStatusChanged", {"node_id": gnode, "cell": "test", "status": "READY", "at": 4})
    f.state.check()
    for tid in list(f.state.tasks):
        if f.state.tasks[tid].status in HOLDING:
            f.status(tid, "COMPLETED", at=5)
            f.state.check()
    f.send("CellTick", {"cell": "test", "at": 60_000})
    for tid in list(f.state.tasks):
        if f.state.tasks[tid].status in HOLDING:
            f.status(tid, "COMPLETED", at=60_001)
    f.state.check()
    assert (f.state.accel_free == f.state.accel_cap).all()


def test_a_reserve_first_move_holds_both_places_until_the_new_copy_runs():
    f = Feed(config={"seed": 1, "qos": {"gold_share": 0.0}})
    node(f, "n1", accels=[("ASIC", "a", 1)])
    node(f, "n2", accels=[("ASIC", "a", 1)])
    task(f, "g", accels=[("ASIC", "a", 1)], qos="GOLD")
    old = f.state.tasks["g"].node
    outs = f.send("NodeStatusChanged", {"node_id": old, "cell": "test", "status": "DRAINING", "at": 2})
    (k, d), = [o for o in outs if o[0] == "TaskMigrated"]
    assert d["reserve_first"]
    t = f.state.tasks["g"]
    assert t.moving_accels == (("ASIC", "a", 1),) and t.accels == (("ASIC", "a", 1),)
    assert f.state.accel_free.sum() == 0
    f.state.check()
    f.send("TaskStatusChanged", {"task_id": "g", "cell": "test", "node_id": t.node, "status": "RUNNING", "at": 3})
    assert f.state.tasks["g"].moving_accels == () and f.state.accel_free.sum() == 1
    f.state.check()


# ------------------------------------------------------------------ refusals
def test_an_impossible_request_is_refused_with_its_reason():
    f = Feed()
    node(f, "n1", accels=[("FPGA", "xilinx-u250", 1)])
    node(f, "n3", accels=[("FPGA", "xilinx-u250", 1), ("NPU", "910", 1)])
    assert refused(f, "t1", accels=[("FPGA", "xilinx-u250", 2)]).startswith(
        "TaskSubmitted 't1': no node in cell 'test' has 2 free-or-used FPGA devices of model 'xilinx-u250' "
        "(largest: 1 on node n1)")
    assert "has 1 free-or-used QPU devices of one model (the cell has no QPU)" in refused(f, "t2", accels=[("QPU", "", 1)])
    assert "has 2 free-or-used NPU devices of one model (largest: 1 of model '910' on node n3)" in \
        refused(f, "t3", accels=[("NPU", "", 2)])
    assert "has all it asks together" in refused(f, "t4", accels=[("FPGA", "", 1), ("NPU", "", 1)], cpu=64000)
    assert "accelerators names GPU" in refused(f, "t5", accels=[("GPU", "A100", 1)])
    # refused: not in the state, its offset applied (a redelivery is skipped), nothing decided
    assert not f.state.tasks and f.state.offsets["cell.test/0"] == f.offset - 1
    assert task(f, "t1", accels=[("FPGA", "xilinx-u250", 2)], offset=f.offset - 1) == []
    f.state.check()


def test_impossible_gpu_memory_is_refused():
    f = Feed()
    node(f, "n1", gpus=2, gpu_mem=81920)
    node(f, "n2", gpus=1, gpu_mem=0)
    assert ("has 1 GPUs with at least 100000 MiB each (largest: 81920 MiB on node n1; a node that reports no "
            "GPU memory counts as 0)") in refused(f, "t", gpus=1, gpu_mem=100000)
    assert "has 4 GPUs with at least 1024 MiB each (no node has 4 GPUs" in refused(f, "u", gpus=4, gpu_mem=1024)


def test_a_task_before_any_node_that_could_serve_it_is_refused_but_an_ordinary_one_waits():
    f = Feed()
    assert "the cell has no NPU" in refused(f, "npu", accels=[("NPU", "", 1)])
    (k, _), = task(f, "plain")
    assert k == "TaskPending"
    node(f, "n", accels=[("NPU", "910", 1)])
    assert placed(task(f, "npu", accels=[("NPU", "", 1)], at=2)) == {"npu": "n"}


def test_ordinary_tasks_are_never_refused_and_read_as_before():
    f = Feed(strategy="default", config={})
    node(f, "n1", accels=[("FPGA", "u", 1)])
    task(f, "too-big", cpu=10**6)                  # Capacity: TaskUnschedulable, as before
    assert f.outputs[-1][0] == "TaskUnschedulable"
    outs = task(f, "t")
    (k, d), = outs
    assert k == "TaskPlaced"
    assert not any("accelerat" in p or "GPU memory" in p for p in d["provenance"]["path"])


def test_the_filters_say_nothing_for_ordinary_tasks():
    from suanli.processors.framework import REGISTRY, CycleContext

    s = CellState("c")
    s.add_node("n", 1000, 1000, 0, None)
    ctx = CycleContext(s, Request(1, 1, 0, 0), "t", 0, {})
    assert REGISTRY.create("AcceleratorFit").filter(ctx) is None
    assert REGISTRY.create("GpuMemory").filter(ctx) is None


# ------------------------------------------------------------------ gangs, re-registration, snapshots
def test_gang_members_sharing_a_node_share_its_accelerators():
    f = Feed()
    node(f, "n1", accels=[("NPU", "910", 1)], cpu=64000)
    node(f, "n2", accels=[("NPU", "910", 1)], cpu=64000)
    gang = {"gang": "g", "gang-size": "2"}
    task(f, "a", accels=[("NPU", "", 1)], labels=gang)
    outs = task(f, "b", accels=[("NPU", "", 1)], labels=gang)
    assert sorted(placed(outs).values()) == ["n1", "n2"]
    f.state.check()


def test_a_re_registration_keeps_the_accelerators_first_registered():
    f = Feed()
    node(f, "n", accels=[("FPGA", "u", 2)])
    task(f, "t", accels=[("FPGA", "u", 1)])
    node(f, "n", accels=[("FPGA", "u", 8), ("QPU", "q", 1)])
    assert f.state.nodes["n"].accel_capacity == {("FPGA", "u"): 2}
    assert f.state.accel_keys == [("FPGA", "u")] and f.state.accel_free.tolist() == [[1]]
    f.state.check()
    assert CellState.from_snapshot(f.state.to_snapshot()).to_snapshot() == f.state.to_snapshot()


def test_snapshots_keep_free_counts_and_old_ones_load_with_all_free():
    f = Feed()
    node(f, "n", accels=[("FPGA", "u", 2), ("NPU", "a", 1), ("NPU", "b", 3)])
    node(f, "plain")
    task(f, "t", accels=[("NPU", "", 2)])
    snap = json.loads(json.dumps(f.state.to_snapshot()))
    assert snap["accel_free"] == {"n": [["FPGA", "u", 2], ["NPU", "a", 1], ["NPU", "b", 1]]}
    back = CellState.from_snapshot(snap)
    back.check()
    assert back.accel_free.tolist() == f.state.accel_free.tolist() and back.to_snapshot() == f.state.to_snapshot()
    # a snapshot written before C1: no accel_free, no holdings: every device free
    old = {**snap, "tasks": {}, "queue": []}
    del old["accel_free"]
    restored = CellState.from_snapshot(old)
    assert restored.accel_free.tolist() == restored.accel_cap.tolist() == [[2, 1, 3], [0, 0, 0]]
    # a cell without accelerators snapshots as before: no new key
    g = Feed()
    node(g, "plain", gpus=2)
    task(g, "t", gpus=1)
    assert "accel_free" not in g.state.to_snapshot()
    assert "accels" not in g.state.to_snapshot()["tasks"]["t"]


# ------------------------------------------------------------------ properties
ACCEL_KEYS = [("FPGA", "u250"), ("FPGA", "u200"), ("NPU", "910"), ("ASIC", "tpu"), ("QPU", "q1"), ("OTHER", "x")]
MEMS = [0, 8192, 32768]         # MiB per device, registered and asked

node_st = st.fixed_dictionaries({
    "gpus": st.integers(0, 4),
    "gpu_mem": st.sampled_from([0, 16384, 40960, 81920]),
    "accels": st.lists(st.tuples(st.sampled_from(ACCEL_KEYS), st.integers(1, 3), st.sampled_from(MEMS)),
                       max_size=4),
    "cpu": st.sampled_from([8000, 16000, 32000]),
})
ask_st = st.tuples(st.sampled_from(ACCEL_KEYS), st.booleans(), st.integers(1, 2), st.sampled_from([0, 0] + MEMS))
submit_st = st.tuples(st.just("submit"), st.lists(ask_st, max_size=2), st.sampled_from([0, 0, 1, 2]),
              st.sampled_from([0, 0, 20000, 50000]), st.sampled_from(["GOLD", "SILVER", "BRONZE", "BRONZE"]),
              st.sampled_from([1000, 4000, 8000]))
op_st = st.one_of(
    submit_st, submit_st,
    st.tuples(st.just("end"), st.integers(0, 50), st.sampled_from(["COMPLETED", "FAILED", "RUNNING"])),
    st.tuples(st.just("cancel"), st.integers(0, 50)),
    st.tuples(st.just("node"), st.integers(0, 5), st.sampled_from(["DOWN", "READY", "DRAINING"])),
    st.tuples(st.just("tick")),
    st.tuples(st.just("gang"), st.lists(ask_st, min_size=1, max_size=1)),
)


def _fits(free: dict, asks, memory: dict) -> bool:
    """Oracle: ``asks`` fit in ``free`` ((kind, model) -> n), each any-model ask taking all its
    devices from one model of its kind (every choice tried), every ask only devices with at
    least its memory (``memory``: (kind, model) -> MiB per device on that node)."""
    named: dict = {}
    for k, m, c, mem in asks:
        if m:
            if memory.get((k, m), 0) < mem:
                return False
            named[(k, m)] = named.get((k, m), 0) + c
    anys = [(k, c, mem) for k, m, c, mem in asks if not m]
    for choice in itertools.product(*[[key for key in free if key[0] == k and memory.get(key, 0) >= mem]
                                      for k, _, mem in anys]):
        need = dict(named)
        for (_, c, _), key in zip(anys, choice):
            need[key] = need.get(key, 0) + c
        if all(free.get(key, 0) >= n for key, n in need.items()):
            return True
    return False


def _memory(node) -> dict:
    """Oracle: MiB per device of each (kind, model) a node registered, from its registration
    (the least, should two entries of one model differ)."""
    out: dict = {}
    for a in node.accelerators:
        if a.kind != "GPU" and a.count > 0:
            out[(a.kind, a.model)] = min(out.get((a.kind, a.model), a.memory_mib), a.memory_mib)
    return out


def _freed_by(before: dict, held: dict, outs: list) -> dict:
    """Free devices per node before the input, plus those its own preemptions gave back
    (a gold task may evict the bronze work holding what it needs, in the same input)."""
    free = {nid: dict(v) for nid, v in before.items()}
    for kind, d in outs:
        if kind == "TaskPreempted" and d["task_id"] in held:
            node, accels = held[d["task_id"]]
            for k, m, c in accels:
                free[node][(k, m)] = free[node].get((k, m), 0) + c
    return free


def _run(ops, nodes, f: Feed, start: int, clock: list, counter: list, log: list) -> None:
    s = f.state
    for op in ops:
        clock[0] += 700
        at = clock[0]
        tids = sorted(s.tasks)
        before = {nid: {k: int(s.accel_free[r, j]) for j, k in enumerate(s.accel_keys)}
                  for nid, r in s.node_index.items()}
        held = {tid: (t.node, t.accels) for tid, t in s.tasks.items() if t.accels}
        if op[0] in ("submit", "gang"):
            if op[0] == "submit":
                _, asks, gpus, gmem, qos, cpu = op
                members = [(None, asks, gpus, gmem, qos, cpu)]
            else:
                gid = f"g{counter[0]}"
                members = [({"gang": gid, "gang-size": "2"}, op[1], 0, 0, "SILVER", 1000)] * 2
            for labels, asks, gpus, gmem, qos, cpu in members:
                counter[0] += 1
                tid = f"t{counter[0]:03d}"
                accels = [(k, m if named else "", c, mem) for (k, m), named, c, mem in asks]
                try:
                    outs = task(f, tid, accels=accels, gpus=gpus, gpu_mem=gmem, qos=qos, cpu=cpu, at=at,
                                labels=labels)
                except RejectedInput as exc:
                    f.offset += 1                               # dead-lettered: the log moves on
                    log.append(("refused", tid, str(exc)))
                    req = Request.of(TaskResources(
                        cpu_milli=cpu, memory_mib=1024, gpu_count=gpus, gpu_milli=1000 if gpus else 0,
                        gpu_memory_mib=gmem, accelerators=tuple(AcceleratorRequest(kind=k, model=m, count=c,
                                                                                   memory_mib=mem)
                                                                for k, m, c, mem in accels)))
                    assert req.has_device_needs                 # ordinary tasks are never refused
                    # no registered node could ever hold it (the oracle on capacities)
                    for nid, r in s.node_index.items():
                        cap = {k: int(s.accel_cap[r, j]) for j, k in enumerate(s.accel_keys)}
                        n = s.nodes[nid]
                        assert not (_fits(cap, req.accels, _memory(n)) and s.cpu_cap[r] >= req.cpu
                                    and n.gpu_count >= req.gpu_count
                                    and (not req.gpu_mem or n.gpu_memory_mib >= req.gpu_mem)), (nid, req)
                    continue
                log.append(("submit", tid, outs))
                for k, d in outs:
                    if k == "TaskPlaced" and d["task_id"] == tid:
                        # it went on a node that had its devices free before this input
                        assert _fits(_freed_by(before, held, outs)[d["node_id"]], s.tasks[tid].task.request.accels,
                                     _memory(s.nodes[d["node_id"]])), (tid, d["node_id"])
                        n = s.nodes[d["node_id"]]
                        assert n.gpu_memory_mib >= s.tasks[tid].task.request.gpu_mem
        elif op[0] == "end" and tids:
            tid = tids[op[1] % len(tids)]
            t = s.tasks[tid]
            if t.node:
                log.append(("end", tid, f.send("TaskStatusChanged", {"task_id": tid, "cell": "test", "node_id": t.node,
                                                                      "status": op[2], "at": at, "exit_code": 0})))
        elif op[0] == "cancel" and tids:
            tid = tids[op[1] % len(tids)]
            log.append(("cancel", tid, f.send("TaskCancelled", {"task_id": tid, "tenant": "t", "cell": "test",
                                                                 "at": at})))
        elif op[0] == "node":
            nid = f"n{op[1] % len(nodes)}"
            log.append(("node", nid, f.send("NodeStatusChanged", {"node_id": nid, "cell": "test",
                                                                   "status": op[2], "at": at})))
        elif op[0] == "tick":
            clock[0] += 6000
            log.append(("tick", "", f.send("CellTick", {"cell": "test", "at": clock[0]})))
        s.check()
        for t in s.tasks.values():                      # what each holder holds is what it asked
            if t.status in HOLDING:
                r = s.node_index[t.node]
                for k, m, c in t.accels:
                    assert s.accel_cap[r, s.accel_keys.index((k, m))] >= c


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(nodes=st.lists(node_st, min_size=2, max_size=6), ops=st.lists(op_st, min_size=20, max_size=60),
       split=st.integers(0, 40), strategy=st.sampled_from(["bestfit", "default"]))
def test_random_clusters_and_streams_keep_free_counts_exact(nodes, ops, split, strategy):
    cfg = {"seed": 3, "qos": {"gold_share": 0.0}} if strategy == "bestfit" else {"qos": {"gold_share": 0.0}}
    f = Feed(strategy=strategy, config=cfg)
    for i, n in enumerate(nodes):
        node(f, f"n{i}", accels=[(k, m, c, mem) for (k, m), c, mem in n["accels"]], gpus=n["gpus"], gpu_mem=n["gpu_mem"],
             cpu=n["cpu"])
    f.state.check()
    clock, counter = [10], [0]
    head, tail = ops[:split], ops[split:]
    _run(head, nodes, f, 0, clock, counter, [])
    # a snapshot round trip mid-stream continues identically
    twin = Feed.__new__(Feed)
    twin.state = CellState.from_snapshot(json.loads(json.dumps(f.state.to_snapshot())))
    twin.offset, twin.outputs = f.offset, []
    twin.state.check()
    log_a, log_b = [], []
    _run(tail, nodes, f, 0, list(clock), list(counter), log_a)
    _run(tail, nodes, twin, 0, list(clock), list(counter), log_b)
    assert log_a == log_b
    assert twin.state.to_snapshot() == f.state.to_snapshot()


def test_the_state_check_lets_two_asks_of_one_kind_split_the_held_devices():
    """An any-model ask for an FPGA of 8 GiB and a named ask for a u250 of no memory, served by
    a u200 of 8 GiB and a u250 of 0 MiB: valid (the case a random stream found)."""
    from suanli.processors.state import _serves

    memory = {("FPGA", "u250"): 0, ("FPGA", "u200"): 8192}
    asks = (("FPGA", "", 1, 8192), ("FPGA", "u250", 1, 0))
    assert _serves({("FPGA", "u200"): 1, ("FPGA", "u250"): 1}, asks, memory)
    assert not _serves({("FPGA", "u250"): 2}, asks, memory)                  # no 8 GiB device held
    assert not _serves({("FPGA", "u200"): 2}, asks, memory)                  # no u250 held
