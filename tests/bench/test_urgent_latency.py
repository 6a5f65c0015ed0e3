"""The tiers scenario of ``bench/urgent_latency.py`` (issue 14), small, on the real stack: what the
figures rest on, asserted for correctness only (latency is the benchmark's business).

The helpers first (histogram percentiles and the window difference of two scheduler writes),
then a run: every tenth openb GPU node (121 nodes) filled with trace GPU tasks, 300 normal tasks
queued that cannot fit, 20 batch tasks in a window that stays open, then 40 urgent tasks. Read
back from Kafka: every urgent task is placed although 300 normal tasks were queued ahead of it;
the queued tasks are all still pending and the batch tasks all still waiting in their window
(answered TaskPending, none placed); and the scheduler's own histogram (``streams/app.py``,
``DecisionLatency``) counted exactly the urgent submissions in the window.
"""
from __future__ import annotations

import csv

import pytest

from suanli.bench.urgent_latency import Options, hist_delta, hist_dist, report, run, worker_window
from suanli.config import load_settings


def test_hist_dist_is_nearest_rank_on_bucket_lower_bounds():
    h = {0: 50, 3: 40, 9: 9, 40: 1}
    assert hist_dist(h) == {"count": 100, "p50": 0, "p90": 3, "p99": 9, "max": 40}
    assert hist_dist({}) == {"count": 0}
    assert hist_delta({"1": 5, "2": 3}, {"1": 5, "2": 1}) == {2: 2}


def test_worker_window_takes_the_difference_of_two_writes():
    def write(pid, updated, hist, count, total, batches, events):
        return {"pid": pid, "updated_ms": updated,
                "kinds": {"TaskSubmitted": {"start_ms": hist, "decided_ms": hist, "acked_ms": hist,
                                            "in_batch_100us": {"12": sum(hist.values())}}},
                "apply": {"TaskSubmitted": {"count": count, "total_us": total, "max_us": 900}},
                "batches": batches, "batch_events": events, "batch_max": 7, "snapshots": 1,
                "snapshot_ms_total": 5.0, "snapshot_ms_max": 5.0,
                "gc": {"2": {"count": batches, "total_ms": 40.0 * batches, "max_ms": 95.0}}}

    w = worker_window(write(1, 1000, {"2": 4}, 10, 5000, 3, 9), write(1, 3000, {"2": 5, "7": 2}, 13, 5900, 5, 15))
    assert w["window_s"] == 2.0
    assert w["task_submitted"]["decided_ms"] == {"count": 3, "p50": 7, "p90": 7, "p99": 7, "max": 7}  # {2: 1, 7: 2}
    assert w["task_submitted"]["in_batch_ms"]["p99"] == 1.2
    assert w["apply"]["TaskSubmitted"] == {"count": 3, "mean_us": 300, "max_us_ever": 900}
    assert w["batches"] == {"count": 2, "mean_events": 3.0, "max_events_ever": 7}
    assert w["gc"] == {"2": {"count": 2, "total_ms": 80.0, "max_ms_ever": 95.0}}
    with pytest.raises(RuntimeError, match="restarted"):
        worker_window(write(1, 1000, {}, 0, 0, 0, 0), write(2, 3000, {}, 0, 0, 0, 0))


@pytest.mark.stack
@pytest.mark.timeout(600)
def test_urgent_tasks_are_placed_ahead_of_a_full_queue_and_an_open_batch_window(stack, tmp_path):
    openb = load_settings().openb_dir
    nodes = tmp_path / "nodes.csv"
    with open(openb / "openb_node_list_gpu_node.csv", newline="") as src, open(nodes, "w", newline="") as dst:
        rows = list(csv.reader(src))
        csv.writer(dst).writerows([rows[0], *rows[1::10]])
    o = Options(nodes_csv=nodes, pods_csv=openb / "openb_pod_list_default.csv", queued=300, batch=20, urgent=40,
                rate=20.0, urgent_run_s=2.0, timeout=180)
    f = run(o, say=print, prefix="tul")
    print(report(f))

    assert f["queued_pending_before"] == 300 and f["queued_pending_after"] == 300      # they stay PENDING
    assert f["urgent_answers"] == {"TaskPlaced": 40}                                  # ahead of all of them
    assert f["batch_first_answers"] == {"TaskPending": 20} and f["batch_placed"] == 0  # the window stays open
    assert f["worker"]["task_submitted"]["decided_ms"]["count"] == 40                 # the worker saw exactly them
    assert f["submitted_to_decision_ms"]["count"] == 40
    # measured from the submissions' arrival in the cell log (the broker's append time)
    assert f["timestamp_types"] == {"cell_log": "LogAppendTime", "decisions": "CreateTime"}
    assert "arrival in the cell log" in f["timestamps"]
    # intake marked them urgent (a Kafka header on the cell-log record) and the scheduler sent
    # their decisions at once, not after the producer's linger (streams/scheduler_worker.py);
    # two in one batch count once
    assert 1 <= f["worker"]["batches"]["waits"]["urgent"] <= 40
    # the brokers' side of the window: their partitions, and the GC log the stack's brokers write
    broker = f["broker_during_urgent"]
    assert broker["partitions"] > 0 and broker["gc_pauses"] and all(p is not None for p in broker["gc_pauses"].values())
