"""CellState on its own: rows, allocations, the queue, node attributes and snapshots."""
from __future__ import annotations

import json

import numpy as np
import pytest
from core_helpers import Feed

from suanli.processors.model import Node, Request, Task
from suanli.processors.plugins.federated import job_members
from suanli.processors.state import HOLDING, CellState, TaskRecord


def _state() -> CellState:
    s = CellState("c")
    s.add_node("a", 8000, 1000, 2, "T4", Node(node_id="a", cpu_milli=8000, memory_mib=1000, gpu_count=2,
                                                gpu_model="T4", zone="z1", price_per_hour=2.5, pricing="SPOT"))
    s.add_node("b", 4000, 500, 0, None)
    s.add_node("c", 16000, 2000, 4, "V100")       # widens nothing: 4 devices fit the padded array
    return s


def test_rows_capacity_and_padding():
    s = _state()
    assert s.node_ids == ["a", "b", "c"] and s.max_gpus == 8
    assert s.gpu_free[1].tolist() == [-1] * 8 and s.gpu_free[2, :4].tolist() == [1000] * 4
    assert s.gpu_capacity_milli() == 6000 and s.gpu_allocated_milli() == 0
    assert s.models == ["T4", "V100"] and s.model_idx.tolist() == [0, -1, 1]
    with pytest.raises(ValueError, match="already registered"):
        s.add_node("a", 1, 1, 0, None)


@pytest.mark.parametrize("node, devices, milli, cpu, mem, error", [
    ("a", [0], 500, 9000, 0, "cpu/memory do not fit"),
    ("a", [0], 500, 0, 2000, "cpu/memory do not fit"),
    ("a", [2], 500, 0, 0, "gpu\\[2\\]"),
    ("a", [0, 0], 400, 0, 0, "duplicate devices"),
    ("b", [0], 100, 0, 0, "gpu\\[0\\]"),
])
def test_allocations_that_do_not_fit_are_refused(node, devices, milli, cpu, mem, error):
    s = _state()
    with pytest.raises(ValueError, match=error):
        s.allocate("t", node, devices, milli, cpu, mem)
    assert s.cpu_free.tolist() == s.cpu_cap.tolist()


def test_allocate_and_free_keep_the_gpu_summaries():
    s = _state()
    s.allocate("t", "c", [1, 3], 1000, 2000, 100)
    s.allocate("u", "c", [0], 300, 0, 0)
    row = s.node_index["c"]
    assert (s.gpu_free_total[row], s.gpu_max_free[row], s.gpu_full_count[row]) == (1700, 1000, 1)
    s.free("c", [1, 3], 1000, 2000, 100)
    assert (s.gpu_free_total[row], s.gpu_full_count[row], s.cpu_free[row]) == (3700, 3, 16000)


def test_queue_orders_by_priority_then_arrival():
    s = _state()
    for seq, (tid, prio) in enumerate([("x", 0), ("y", 5), ("z", 0), ("w", 5)], start=1):
        s.tasks[tid] = TaskRecord(Task(task_id=tid, tenant="t", request=Request(1, 1, 0, 0), priority=prio), seq)
        s.enqueue(tid)
    assert [q[-1] for q in s.queue] == ["y", "w", "x", "z"]
    assert s.queue_position("x") == 2 and s.enqueue("x") == 2        # enqueueing twice keeps one entry
    assert s.dequeue("y") and not s.dequeue("y") and s.queue_position("w") == 0


def test_meta_array_reads_typed_node_fields():
    s = _state()
    assert s.meta_array("price_per_hour").tolist() == [2.5, 0.0, 0.0]
    assert s.meta_array("zone", "none", object).tolist() == ["z1", "none", "none"]      # "" -> the default
    s.update_node(Node(node_id="b", cpu_milli=4000, memory_mib=500, zone="z9"))
    assert s.meta_array("zone", "none", object).tolist() == ["z1", "z9", "none"]


def test_snapshot_roundtrip_through_json_is_equal():
    s = _state()
    s.tasks["t"] = TaskRecord(Task(task_id="t", tenant="a", request=Request(2000, 100, 2, 1000, ("V100",)),
                                   command=("python", "-c", "pass"), env={"K": "V"}, labels={"w": "x"}), 1)
    s.allocate("t", "c", [0, 1], 1000, 2000, 100)
    s.tasks["t"].status, s.tasks["t"].node, s.tasks["t"].devices = "PLACED", "c", (0, 1)
    s.check()
    snap = json.loads(json.dumps(s.to_snapshot()))
    r = CellState.from_snapshot(snap)
    assert r.to_snapshot() == snap and r.tasks == s.tasks and r.nodes == s.nodes
    assert np.array_equal(r.gpu_free, s.gpu_free) and r.gpu_tags()[2] == {"2-gpu": 1}
    r.check()


def test_an_old_snapshot_version_is_refused():
    snap = _state().to_snapshot()
    snap["version"] = 1
    with pytest.raises(ValueError, match="unsupported snapshot version 1"):
        CellState.from_snapshot(snap)


# ------------------------------------------------------------------ history-free indexes
def _walks(s: CellState) -> dict:
    """What the indexes answer, the slow way: a walk of every task the cell ever saw."""
    by_seq = sorted(s.tasks.values(), key=lambda t: t.seq)
    tags: list[dict[str, int]] = [{} for _ in range(s.n_nodes)]
    for t in by_seq:
        held = [(t.node, t.devices)] if t.status in HOLDING else []
        if t.moving_from:
            held.append(t.moving_from)
        for node, devices in held:
            if devices:
                k = s.gpu_tag(len(devices), t.task.request.gpu_milli)
                tags[s.node_index[node]][k] = tags[s.node_index[node]].get(k, 0) + 1
    return {"holding": sorted(t.task.task_id for t in by_seq if t.status in HOLDING),
            "moving_off": {n: sorted(t.task.task_id for t in by_seq if t.moving_from and t.moving_from[0] == n)
                           for n in s.node_ids},
            "jobs": {j: [t.task.task_id for t in by_seq if t.task.job_id == j] for j in ("j1", "j2")},
            "gangs": {g: sorted(t.task.task_id for t in by_seq if t.task.labels.get("gang") == g) for g in ("g1",)},
            "federated_jobs": {j: [t.task.task_id for t in by_seq if (t.task.job_id or t.task.labels.get("job")) == j]
                               for j in ("j1", "j2")},
            "gpu_tags": tags}


def _indexed(s: CellState) -> dict:
    return {"holding": sorted(t.task.task_id for t in s.holding_records()),
            "moving_off": {n: s.moving_off(n) for n in s.node_ids},
            "jobs": {j: [t.task.task_id for t in s.job_tasks(j)] for j in ("j1", "j2")},
            "gangs": {g: s.gang_members(g) for g in ("g1",)},
            "federated_jobs": {j: list(job_members(s, j)) for j in ("j1", "j2")},
            "gpu_tags": s.gpu_tags()}


def test_the_indexes_that_replace_walks_of_every_task_give_the_walks_answers_after_every_step():
    """``holding_records``, ``moving_off``, ``job_tasks``, ``gang_members``, the federated
    plugins' ``job_members`` (a ``job_id`` or a ``job`` label) and the GPU tags
    (built again when a new GPU model clears the derived caches) answer from indexes, so a
    cell's history does not slow them down. After every input, and after a restore (whose
    tasks come back in id order), each gives what a walk of every task gives."""
    f = Feed(strategy="bestfit", config={"seed": 1, "retry_every_ms": 0})
    f.node("a", cpu=8000, gpus=2)
    steps = [
        lambda: f.task("z-job1-a", gpus=1, milli=500, labels={"job": "j1"}),    # a job named by its label
        lambda: f.send("TaskSubmitted", {"task_id": "b-j1", "tenant": "t", "cell": "test", "submitted_at": 1,
                                         "resources": {"cpu_milli": 1000, "memory_mib": 1024, "gpu_count": 0,
                                                       "gpu_milli": 0, "gpu_models": []},
                                         "qos_tier": "GOLD", "labels": {"gang": "g1"}, "job_id": "j1"}),
        lambda: f.send("TaskSubmitted", {"task_id": "a-j1", "tenant": "t", "cell": "test", "submitted_at": 2,
                                         "resources": {"cpu_milli": 1000, "memory_mib": 1024, "gpu_count": 1,
                                                       "gpu_milli": 1000, "gpu_models": []},
                                         "qos_tier": "GOLD", "labels": {}, "job_id": "j1"}),
        lambda: f.task("done", cpu=500, labels={"gang": "g1"}),
        lambda: f.status("done", "COMPLETED", at=3),
        lambda: f.node("b", cpu=8000, gpus=2, model="A100"),            # a new model: derived caches cleared
        lambda: f.send("NodeStatusChanged", {"node_id": "a", "status": "DRAINING", "reason": "m", "at": 10}),
        lambda: f.status("b-j1", "RUNNING", at=11),                      # the new copy runs: the old one goes
        lambda: f.status("a-j1", "RUNNING", at=12),
    ]
    moved = set()
    for step in steps:
        step()
        s = f.state
        assert _indexed(s) == _walks(s)
        s.check()
        moved |= set(s.moving_off(s.node_ids[0]))
    assert moved, "no reserve-first move happened: the moving index was not exercised"
    assert _walks(f.state)["jobs"]["j1"] == ["b-j1", "a-j1"]                 # arrival order, not id order
    assert _walks(f.state)["federated_jobs"]["j1"] == ["z-job1-a", "b-j1", "a-j1"]
    restored = CellState.from_snapshot(json.loads(json.dumps(f.state.to_snapshot(), sort_keys=True)))
    assert list(restored.tasks) == sorted(restored.tasks)                   # a restore holds them in id order
    assert _indexed(restored) == _walks(restored) == _walks(f.state)


def test_registering_many_nodes_grows_the_arrays_in_place_and_keeps_every_write():
    """Per-row arrays are views of buffers with spare rows (``_append_row``): writes made
    between registrations survive the buffers' doubling, and arrays replaced wholesale (a
    wider GPU row, a new accelerator column, an array a snapshot restore sets) are taken over."""
    from suanli.processors.model import Accelerator
    s = CellState("t", max_gpus=2)
    want_cpu, want_fpga = [], []
    for i in range(300):
        gpus = 4 if i == 150 else i % 3                          # row 150 widens gpu_free
        accels = (Accelerator(kind="FPGA", model="u", count=2),) if i >= 200 and i % 2 else ()
        node = Node(node_id=f"n{i}", cpu_milli=1000 + i, memory_mib=2048, gpu_count=gpus,
                    gpu_model="A10" if gpus else None, accelerators=accels)
        s.add_node(node.node_id, node.cpu_milli, node.memory_mib, gpus, node.gpu_model, node)
        want_cpu.append(1000 + i)
        want_fpga.append(2 if accels else 0)
        if i % 7 == 0:
            s.allocate(f"t{i}", f"n{i}", [0] if gpus else [], 300 if gpus else 0, 10, 1)
            want_cpu[i] -= 10
        if i == 100:                                                 # replaced, as a snapshot restore does,
            s.cpu_free = s.cpu_free.copy()                           # then written before the next row
            s.cpu_free[3] -= 5
            want_cpu[3] -= 5
    assert s.cpu_free.tolist() == want_cpu and s.cpu_cap.tolist() == [1000 + i for i in range(300)]
    assert s.gpu_free.shape == (300, 4) and s.gpu_free[150].tolist() == [1000] * 4
    # allocated before the widening and several doublings (7: one GPU, 14: two), and after (154)
    assert [s.gpu_free[r].tolist() for r in (7, 14, 154)] == [[700, -1, -1, -1], [700, 1000, -1, -1],
                                                              [700, -1, -1, -1]]
    assert s.accel_free[:, 0].tolist() == want_fpga and s.accel_cap[:, 0].tolist() == want_fpga
    assert all(getattr(s, name).shape[0] == 300 for name in s._row_buffers)


def test_free_gives_each_named_device_back_once():
    """``free`` changes each device it names once, as numpy's fancy assignment did before it
    worked on the row as a list (a device named twice is not given back twice)."""
    s = CellState("t")
    s.add_node("n", 4000, 4096, 2, "A10")
    s.allocate("t1", "n", [0], 600, 1000, 1024)
    s.free("n", [0, 0], 200, 1000, 1024)
    assert s.gpu_free[0, :2].tolist() == [600, 1000]
    assert (s.gpu_free_total[0], s.gpu_max_free[0], s.gpu_full_count[0]) == (1600, 1000, 1)


def test_the_derived_caches_keep_a_none_value():
    """None is a value like any other (the gold pool's "no pool"): computed once per key."""
    s = CellState("t")
    calls = []
    for _ in range(3):
        assert s.derived(("k",), lambda: calls.append(1)) is None
        assert s.derived_recent("g", "k", lambda: calls.append(2)) is None
    assert calls == [1, 2]
