"""The simulator runs each openb task for its trace duration times the time scale.

Unit checks of the measurement, then a real headless plane run (stack, workers, simulated
cluster, workload driver) on a handful of trace tasks whose durations differ by 10x: each
must run between 0.9 x and (expected + 2 s), where expected = trace duration x time scale. A
simulator that ignored the estimate (its 60 s default: 6 s here) or did not sleep at all
fails this. A correctness check, not a timing benchmark: the slack absorbs scheduling jitter.
"""
from __future__ import annotations

import csv
import json
import uuid

import pytest

from suanli.bench.sim_durations import expected_ms, from_run, measure, percentile, report, run, within
from suanli.config import load_settings
from suanli.replay.openb import read_pods


def test_expected_run_time_is_the_trace_duration_times_the_scale_or_the_default():
    assert expected_ms({"duration_estimate_ms": 3_600_000}, 1e-4) == pytest.approx(360.0)
    assert expected_ms({"duration_estimate_ms": None}, 1e-4) == pytest.approx(6.0)  # 60 s default
    assert expected_ms({}, 0.5, default_ms=10) == pytest.approx(5.0)


def test_measure_pairs_running_and_terminal_times_per_task():
    tasks = [{"task_id": "a", "duration_estimate_ms": 10_000}, {"task_id": "b", "duration_estimate_ms": 20_000},
             {"task_id": "c", "duration_estimate_ms": None}, {"task_id": "d", "duration_estimate_ms": 5}]
    statuses = [{"task_id": "a", "status": "RUNNING", "at": 100}, {"task_id": "b", "status": "RUNNING", "at": 50},
                {"task_id": "a", "status": "COMPLETED", "at": 1110}, {"task_id": "b", "status": "FAILED", "at": 2060},
                {"task_id": "a", "status": "RUNNING", "at": 999},   # a duplicate: the first one counts
                {"task_id": "c", "status": "RUNNING", "at": 0}]     # still running: not measured
    m = measure(tasks, statuses, time_scale=0.1)
    rows = {r["task_id"]: r for r in m["rows"]}
    assert rows["a"]["measured_ms"] == 1010 and rows["a"]["expected_ms"] == pytest.approx(1000)
    assert rows["b"]["measured_ms"] == 2010 and rows["b"]["outcome"] == "FAILED"
    assert rows["c"]["measured_ms"] is None and rows["c"]["expected_ms"] == pytest.approx(6000)
    assert rows["d"]["outcome"] is None
    assert (m["measured"], m["completed"], m["without_trace_duration"], m["long"]) == (2, 1, 1, 2)
    assert m["ratio"]["p50"] == pytest.approx(1.005) and m["ratio"]["max"] == pytest.approx(1.01)
    assert m["excess_ms"]["min"] == pytest.approx(10) and m["excess_ms"]["max"] == pytest.approx(10)
    assert within(rows["a"]) and not within({"measured_ms": 899, "expected_ms": 1000})
    assert not within({"measured_ms": 3001, "expected_ms": 1000}) and not within(rows["c"])
    assert percentile([3, 1, 2, 4], 50) == 2 and percentile([3, 1, 2, 4], 95) == 4


def _trace_sample(tmp_path) -> tuple:
    """The first task of the trace in each duration band (50 min .. 8.3 h, no GPU model constraint)."""
    settings = load_settings()
    source = settings.openb_dir / "openb_pod_list_default.csv"
    with open(source, newline="") as f:
        reader = csv.DictReader(f)
        rows, header = list(reader), reader.fieldnames
    bands = [(3_000_000, 5_000_000), (5_000_000, 8_000_000), (8_000_000, 12_000_000), (12_000_000, 18_000_000),
             (18_000_000, 24_000_000), (24_000_000, 30_000_000)]
    pods = read_pods(source)
    picked = []
    for low, high in bands:
        picked.append(next(row for row, pod in zip(rows, pods)
                           if pod["duration_estimate_ms"] is not None and low <= pod["duration_estimate_ms"] < high
                           and not row["gpu_spec"] and int(row["num_gpu"]) <= 1))
    path = tmp_path / "pods.csv"
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=header)
        writer.writeheader()
        writer.writerows(picked)
    return path, len(picked)


@pytest.mark.stack
@pytest.mark.timeout(600)
def test_simulated_tasks_run_for_their_trace_duration_times_the_time_scale(stack, tmp_path):
    pods, count = _trace_sample(tmp_path)
    time_scale = 1e-4                                           # 50 min .. 8.3 h -> 0.3 .. 3 s
    settings = load_settings(namespace=f"t{uuid.uuid4().hex[:10]}", partitions=1)
    result = run(count, time_scale, rate=0, timeout=240, pods_csv=pods, settings=settings)
    print(report(result))

    assert result["plane"]["capacity_violations"] == 0 and result["plane"]["dead_lettered"] == 0, result["plane"]
    assert (result["measured"], result["completed"]) == (count, count), result["rows"]
    expected = sorted(r["expected_ms"] for r in result["rows"])
    assert expected[0] >= 300 and expected[-1] >= 5 * expected[0]     # the durations really differ
    for row in result["rows"]:
        assert within(row, low=0.9, slack_ms=2000), row

    # Read back after the fact from the log, as for a `suanli up --json` run: the same figures.
    up_json = tmp_path / "up.json"
    up_json.write_text(json.dumps({"cell": result["cell"], "run_id": result["run_id"]}))
    again = from_run(up_json, time_scale, settings)
    assert {r["task_id"]: (r["trace_ms"], r["measured_ms"]) for r in again["rows"]} == \
        {r["task_id"]: (r["trace_ms"], r["measured_ms"]) for r in result["rows"]}
