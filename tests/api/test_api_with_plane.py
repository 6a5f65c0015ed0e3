"""The API in front of a real control plane (intake, scheduler, simulated cluster of 4 nodes):
a task submitted over REST is PLACED, and its status, audit, why-pending and cancel work
end to end."""
from __future__ import annotations

import json
import time
import uuid

import pytest
from api_helpers import plane_with_api, run_go

pytestmark = pytest.mark.stack


@pytest.fixture(scope="module")
def plane_api(stack, tmp_path_factory):
    with plane_with_api(tmp_path_factory.mktemp("plane"), nodes=4) as (plane, server):
        with server.client("alpha") as http:
            deadline = time.monotonic() + 180
            while len(http.get("/v1/nodes", params={"cell": plane.cell}).json()["nodes"]) < 4:
                assert time.monotonic() < deadline, "the simulated nodes did not register"
                plane.check_alive()
                time.sleep(0.5)
        yield plane, server


def _wait_status(http, task_id: str, done, timeout: float = 120.0) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        r = http.get(f"/v1/tasks/{task_id}")
        assert r.status_code == 200, r.text
        if done(r.json()):
            return r.json()
        assert time.monotonic() < deadline, f"{task_id} stayed {r.json()['status']}"
        time.sleep(0.3)


def test_task_submitted_over_rest_is_placed(plane_api):
    plane, api = plane_api
    task = f"api-{uuid.uuid4().hex[:8]}"
    doc = {"id": task, "cell": plane.cell, "resources": {"cpu": 1, "memory": "1Gi", "gpu": 0.5},
           "duration": "1h", "labels": {"via": "rest"}}
    with api.client("alpha") as http:
        assert http.post("/v1/tasks", json=doc).status_code == 202
        status = _wait_status(http, task, lambda s: s["placed"])
        assert status["status"] in ("PLACED", "DISPATCHED", "RUNNING"), status
        assert status["node_id"] and len(status["gpu_devices"]) == 1 and status["gpu_milli"] == 500
        assert status["decision_id"] and status["path"]
        trail = http.get(f"/v1/tasks/{task}/audit").json()
        placed = [d for d in trail["decisions"] if d["kind"] == "TaskPlaced"]
        assert len(placed) == 1 and placed[0]["node_id"] == status["node_id"]
        assert placed[0]["provenance"]["candidates"] and placed[0]["provenance"]["strategy"]["name"]
        assert placed[0]["provenance"]["input"]["topic"] == f"{plane.s.namespace}.cells"
        why = http.get(f"/v1/tasks/{task}/why-pending").json()
        assert not why["pending"] and why["explanation"].startswith("not pending")
        node = next(n for n in http.get("/v1/nodes", params={"cell": plane.cell}).json()["nodes"]
                    if n["node_id"] == status["node_id"])
        assert node["gpu_used"][status["gpu_devices"][0]] >= 500

        assert http.post(f"/v1/tasks/{task}/cancel", json={"reason": "done testing"}).status_code == 202
        final = _wait_status(http, task, lambda s: s["status"] == "CANCELLED")
        assert final["placed"]
        kinds = [d["kind"] for d in http.get(f"/v1/tasks/{task}/audit").json()["decisions"]]
        assert kinds[-1] == "TaskReleased"
        assert http.post(f"/v1/tasks/{task}/cancel").status_code == 409


def test_a_job_of_three_tasks_reads_back_by_job_and_through_the_audit(plane_api):
    """Issue 22: three tasks submitted over REST with one ``job`` are placed; ``GET /v1/jobs/{id}``
    lists exactly them with status and node, each task's status names the job, and the audit
    filtered by the job holds their placements, each carrying the job id; another tenant sees
    no such job."""
    plane, api = plane_api
    job = f"fl-{uuid.uuid4().hex[:8]}"
    tasks = [f"{job}-client-{i}" for i in range(3)]
    with api.client("alpha") as http:
        for task in tasks:
            doc = {"id": task, "cell": plane.cell, "resources": {"cpu": 1, "memory": "1Gi"}, "duration": "1h",
                   "job": job}
            assert http.post("/v1/tasks", json=doc).status_code == 202
        http.post("/v1/tasks", json={"id": f"{job}-outsider", "cell": plane.cell,
                                     "resources": {"cpu": 1, "memory": "1Gi"}, "duration": "1h"})
        for task in tasks:
            status = _wait_status(http, task, lambda s: s["placed"])
            assert status["job_id"] == job and status["node_id"]
        view = http.get(f"/v1/jobs/{job}")
        assert view.status_code == 200, view.text
        body = view.json()
        assert sorted(t["task_id"] for t in body["tasks"]) == tasks
        assert all(t["node_id"] and t["job_id"] == job and t["placed"] for t in body["tasks"])
        assert sum(body["counts"].values()) == 3
        audit = http.get("/v1/audit", params={"job": job})
        assert audit.status_code == 200, audit.text
        decisions = audit.json()["decisions"]
        placed = [d for d in decisions if d["kind"] == "TaskPlaced"]
        assert sorted(d["task_id"] for d in placed) == tasks
        assert {d["job_id"] for d in decisions} == {job}
        assert {d["task_id"] for d in decisions} == set(tasks)
    with api.client("beta") as http:
        assert http.get(f"/v1/jobs/{job}").status_code == 404
        assert http.get("/v1/audit", params={"job": job}).json()["decisions"] == []


def test_a_task_that_does_not_fit_says_why(plane_api):
    plane, api = plane_api
    task = f"big-{uuid.uuid4().hex[:8]}"
    doc = {"id": task, "cell": plane.cell, "resources": {"cpu": 1, "memory": "1Gi", "gpu": 8,
                                                          "gpu_models": ["NO-SUCH-GPU"]}}
    with api.client("beta") as http:
        assert http.post("/v1/tasks", json=doc).status_code == 202
        status = _wait_status(http, task, lambda s: s["status"] in ("PENDING", "UNSCHEDULABLE"))
        why = http.get(f"/v1/tasks/{task}/why-pending").json()
        assert why["reasons"] and why["reasons"][0]["nodes"] > 0, why
        assert why["status"] == status["status"] and why["explanation"]
        if why["pending"]:
            assert why["queue_position"] >= 1 and why["queue_length"] >= why["queue_position"]


def test_go_client_submits_and_sees_the_placement(plane_api, go_client):
    plane, api = plane_api
    task = f"go-{uuid.uuid4().hex[:8]}"
    out = run_go(go_client, api, "beta", "submit", "-id", task, "-cell", plane.cell, "-cpu", "1", "-memory", "1Gi",
                 "-gpu", "0.3", "-duration", "1h")
    assert out.returncode == 0, out.stderr
    deadline = time.monotonic() + 120
    while True:
        status = run_go(go_client, api, "beta", "status", task)
        assert status.returncode == 0, status.stderr
        body = json.loads(status.stdout)
        if body["placed"]:
            break
        assert time.monotonic() < deadline, body
        time.sleep(0.3)
    assert body["node_id"] and body["gpu_milli"] == 300 and body["tenant"] == "beta"
    assert run_go(go_client, api, "beta", "cancel", task, "-reason", "done").returncode == 0
