"""The batch strategy: CP-SAT places a window of queued tasks jointly, deterministically."""
import json

from kit import Cell


def _script():
    c = Cell("batch", {"window": 4, "max_deterministic_time": 0.5})
    c.node("n1", cpu=8000, gpus=2, model="T4")
    c.task("hog", cpu=8000, gpus=2, milli=1000)          # fills n1
    c.task("q1", cpu=4000, gpus=1, milli=1000)           # queued
    c.task("q2", cpu=4000, gpus=1, milli=1000)           # queued
    c.node("n2", cpu=8000, gpus=2, model="T4")           # capacity arrives: retry
    c.task("new", cpu=2000, gpus=1, milli=500, labels={"workload": "batch"})
    return c


def test_batch_places_queued_tasks_jointly():
    c = _script()
    placed = {p["task_id"]: p for k, p in c.outputs if k == "TaskPlaced"}
    assert {"hog", "q1", "q2"} <= set(placed)
    # q1 took n2 on the retry (window of q1 + q2): q2 was placed jointly in the same decision
    q2 = placed["q2"]["provenance"]["path"]
    assert "batch window: placed jointly with q1 by batch" in q2
    assert placed["q1"]["node_id"] == placed["q2"]["node_id"] == "n2"
    q1 = placed["q1"]["provenance"]["path"]
    assert "batch: CP-SAT OPTIMAL placed 2/2 tasks of the window (objective 2336)" in q1
    # "new" cannot fit anywhere now: queued, with the solver's note
    assert c.state.tasks["new"].status == "PENDING"


def test_batch_is_deterministic():
    a, b = _script(), _script()
    assert json.dumps(a.outputs, sort_keys=True) == json.dumps(b.outputs, sort_keys=True)


def test_batch_records_solver_in_path_and_falls_back():
    c = Cell("batch")
    c.node("n1", cpu=8000, gpus=1, model="T4")
    c.task("a", cpu=1000, gpus=1, milli=300)
    path = c.placed("a")["provenance"]["path"]
    assert any(line.startswith("batch: CP-SAT OPTIMAL") for line in path)
