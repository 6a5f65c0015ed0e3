"""Timed mode on a small seeded subset of openb: arrivals, departures, queueing."""
import pytest

from suanli.errors import ReplayError
from suanli.processors import CellState, decide
from suanli.processors.model import (CellTick, NodeRegistered, PolicyChanged, TaskCancelled, TaskPlaced, TaskStatusChanged,
                                     TaskSubmitted, from_avro)
from suanli.replay import timed
from suanli.replay.timed import next_due
from suanli.replay.openb import read_nodes
from synth import DATA


def test_shrink_is_a_seeded_sample_in_file_order(openb_small):
    nodes = read_nodes(openb_small[0])
    a = timed.shrink(nodes, 0.6, 7)
    b = timed.shrink(nodes, 0.6, 7)
    c = timed.shrink(nodes, 0.6, 8)
    ids = lambda cl: [n["node_id"] for n in cl.nodes]  # noqa: E731
    assert ids(a) == ids(b) != ids(c)
    assert len(a.nodes) == round(0.6 * len(nodes)) == a.description["nodes_kept"]
    order = [n["node_id"] for n in nodes]
    assert ids(a) == sorted(ids(a), key=order.index)
    assert "random.Random(7).sample" in a.description["method"]
    assert timed.shrink(nodes, None, 0).nodes == nodes


def test_events_are_arrivals_and_departures_in_time_order(openb_small):
    w = timed.build(*openb_small, load=100)
    assert len(w.events) == 2 * len(w.tasks)
    assert w.events == sorted(w.events)
    first = {}
    for t, kind, i in w.events:
        if kind == 1:
            first[i] = t
            assert t == w.tasks[i]["submitted_at"]
        else:
            labels = w.tasks[i]["labels"]
            assert t - first[i] == (int(labels["deletion_time"]) - int(labels["creation_time"])) * 1000


@pytest.fixture(scope="module")
def contended(openb_small):
    w = timed.build(*openb_small, shrink_fraction=0.6, shrink_seed=3, load=3000)
    return w, timed.run(w, {"strategy": "bestfit", "config": {}}, seed=42)


def test_contended_run_queues_and_releases(contended):
    w, r = contended
    s = r["summary"]
    t = s["tasks"]
    assert t["submitted"] == len(w.tasks)
    assert t["placed_after_wait"] > 0 and s["queueing_waited_s"]["p50"] > 0     # queueing happened
    assert t["placed"] + t["abandoned"] + t["unschedulable"] + t["pending_at_end"] == t["submitted"]
    assert s["queueing_s"]["p50"] <= s["queueing_s"]["p95"] <= s["queueing_s"]["p99"] <= s["queueing_s"]["max"]
    assert s["gpu_allocation_pct"]["final"] == 0.0          # every placed task departed and released
    assert 0 < s["gpu_allocation_pct"]["peak"] <= 100.0
    assert sum(q["submitted"] for q in s["qos"].values()) == t["submitted"]


def test_queueing_time_is_decision_time_minus_submission(contended):
    """Recompute the waits independently from the core's own decisions."""
    w, r = contended
    state = CellState("openb")
    off = 0
    topic = f"trace.{w.name}"
    for n in w.cluster.nodes:
        state, _ = decide(state, from_avro(NodeRegistered, n), (topic, 0, off))
        off += 1
    state, _ = decide(state, PolicyChanged.of("openb", "bestfit", r["config"]), (topic, 0, off))
    waits = {}
    for at, arrival, i in w.events:
        while (due := next_due(state, at)) is not None:     # the clock rules the run ticks for
            off += 1
            state, outs = decide(state, CellTick(event_id="", cell="openb", at=due), (topic, 0, off))
            for d in outs:
                if isinstance(d, TaskPlaced):
                    waits.setdefault(d.task_id, (d.provenance.decided_at - state.tasks[d.task_id].task.submitted_at) / 1000)
        tid = w.tasks[i]["task_id"]
        rec = state.tasks.get(tid)
        st = rec.status if rec is not None else None
        if arrival:
            event = from_avro(TaskSubmitted, w.tasks[i])
        elif st in ("PLACED", "DISPATCHED", "RUNNING"):
            event = TaskStatusChanged(event_id="", task_id=tid, cell="openb", node_id=rec.node, status="COMPLETED", at=at)
        elif st in ("PENDING", "PREEMPTED"):
            event = TaskCancelled(event_id="", task_id=tid, tenant="", cell="openb", at=at)
        else:
            continue
        off += 1
        state, outs = decide(state, event, (topic, 0, off))
        for d in outs:
            if isinstance(d, TaskPlaced):
                waits.setdefault(d.task_id, (d.provenance.decided_at - state.tasks[d.task_id].task.submitted_at) / 1000)  # first placement
    assert sorted(waits.values()) == sorted(r["series"]["waited_s_sorted"] + [0.0] * (len(waits) - r["series"]["waited_n"]))


def test_deterministic(openb_small, contended):
    w, r = contended
    again = timed.run(w, {"strategy": "bestfit", "config": {}}, seed=42)
    assert again["summary"]["queueing_s"] == r["summary"]["queueing_s"]
    assert again["series"] == r["series"]


def test_untimed_trace_is_refused():
    assert (DATA / "openb_pod_list_multigpu20.csv").exists(), f"openb trace missing at {DATA}"
    with pytest.raises(ReplayError, match="not a timed trace"):
        timed.build(DATA / "openb_node_list_gpu_node.csv", DATA / "openb_pod_list_multigpu20.csv")
