"""The API forgets its oldest finished tasks, on the real stack: tasks submitted over REST run
to completion on a simulated cluster (intake, scheduler, simulator on the broker the tests
start), and an API that keeps 8 finished tasks answers the newest ones whole and the older
ones 404, saying to their tenant that they finished and were forgotten; so does a second API
that reads the same log from the start. The first tasks are one job's members: the job is
forgotten whole once they have finished. The forgotten tasks' and job's audit is still
answered, from the namespace's audit index. A status of a task never submitted, through
intake, makes no task in the API."""
from __future__ import annotations

import time
import uuid

import pytest
from api_helpers import ApiProcess, plane_with_api, write_tokens

pytestmark = pytest.mark.stack

KEEP = 8
TASKS = 30
MEMBERS = 4


@pytest.fixture(scope="module")
def forgetting_api(stack, tmp_path_factory):
    with plane_with_api(tmp_path_factory.mktemp("forgets"), nodes=2, api_finished_tasks=KEEP,
                        api_forgotten_ids=1000) as (plane, server):
        yield plane, server


def _finished_or_forgotten(http, task_id: str) -> str:
    """"kept" (COMPLETED, answered whole), "forgotten" (404 saying so), or "" (not yet)."""
    r = http.get(f"/v1/tasks/{task_id}")
    if r.status_code == 200:
        return "kept" if r.json()["status"] == "COMPLETED" else ""
    assert r.status_code == 404, r.text
    detail = r.json()["detail"]
    if "finished (COMPLETED) and the API no longer keeps it" in detail:
        return "forgotten"
    assert detail == f"no task {task_id!r}", detail      # not read yet
    return ""


def test_tasks_run_to_completion_and_the_oldest_finished_are_forgotten(forgetting_api, tmp_path):
    plane, api = forgetting_api
    ids = [f"fg-{i:02d}-{uuid.uuid4().hex[:6]}" for i in range(TASKS)]
    job = f"fg-job-{uuid.uuid4().hex[:6]}"           # the first MEMBERS tasks are its members
    with api.client("alpha") as http:
        for i, task in enumerate(ids):
            doc = {"id": task, "cell": plane.cell, "resources": {"cpu": 1, "memory": "1Gi"}, "duration": "2s"}
            if i < MEMBERS:
                doc["job"] = job
            assert http.post("/v1/tasks", json=doc).status_code == 202
        deadline = time.monotonic() + 240
        while True:
            answers = {task: _finished_or_forgotten(http, task) for task in ids}
            if all(answers.values()):
                break
            assert time.monotonic() < deadline, f"not finished: {[t for t, a in answers.items() if not a]}"
            plane.check_alive()
            time.sleep(0.5)
        # A sweep is not one instant: a task seen kept early in it may be forgotten by its end.
        # Now that all have finished nothing changes: sweep once more.
        answers = {task: _finished_or_forgotten(http, task) for task in ids}
        kept = [t for t in ids if answers[t] == "kept"]
        forgotten = [t for t in ids if answers[t] == "forgotten"]
        # at most an eighth (one task here) more than KEEP between passes
        assert KEEP <= len(kept) <= KEEP + 1 and len(forgotten) == TASKS - len(kept), answers
        # the kept ones are whole: their decisions, placement to release, come from the wire bytes
        for task in kept:
            kinds = [d["kind"] for d in http.get(f"/v1/tasks/{task}/audit").json()["decisions"]]
            assert kinds[0] == "TaskPlaced" and kinds[-1] == "TaskReleased", (task, kinds)
        # a forgotten one: the API answers its audit from the namespace's audit index, which it
        # catches up with the decisions topic itself (no follower runs here)
        for task in forgotten[-3:]:
            r = http.get(f"/v1/tasks/{task}/audit")
            assert r.status_code == 200, r.text
            trail = r.json()
            assert trail["status"] == "COMPLETED" and trail["cell"] == plane.cell, trail
            kinds = [d["kind"] for d in trail["decisions"]]
            assert kinds[0] == "TaskPlaced" and kinds[-1] == "TaskReleased", (task, kinds)
            assert {d["task_id"] for d in trail["decisions"]} == {task}
        # the job went whole once its members had finished; its audit too comes from the index
        assert set(ids[:MEMBERS]) <= set(forgotten), answers
        r = http.get(f"/v1/jobs/{job}")
        assert r.status_code == 404 and "finished and the API no longer keeps it" in r.json()["detail"], r.text
        r = http.get("/v1/audit", params={"job": job})
        assert r.status_code == 200, r.text
        by_member: dict[str, list[str]] = {}
        for d in r.json()["decisions"]:
            by_member.setdefault(d["task_id"], []).append(d["kind"])
        assert set(by_member) == set(ids[:MEMBERS]), by_member
        assert all(k[0] == "TaskPlaced" and k[-1] == "TaskReleased" for k in by_member.values()), by_member
        # the lists no longer hold the forgotten ones
        listed = {t["task_id"] for t in http.get("/v1/tasks", params={"limit": 100}).json()["tasks"]}
        assert set(kept) <= listed and not listed & set(forgotten)
    with api.client("beta") as http:       # another tenant learns nothing of it
        for path in (f"/v1/tasks/{forgotten[0]}", f"/v1/tasks/{forgotten[0]}/audit"):
            r = http.get(path)
            assert r.status_code == 404 and r.json()["detail"] == f"no task {forgotten[0]!r}"
    # a second API on the same log catches up on all its topics at once and forgets as it goes
    again = ApiProcess(api.settings, write_tokens(tmp_path / "tokens.toml"), tmp_path / "api2.log")
    try:
        again.wait_ready()
        with again.client("alpha") as http:
            answers = {task: _finished_or_forgotten(http, task) for task in ids}
        assert KEEP <= sum(a == "kept" for a in answers.values()) <= KEEP + 1, answers
        assert sum(a == "forgotten" for a in answers.values()) == TASKS - sum(a == "kept" for a in answers.values())
    finally:
        again.stop()


def test_a_status_of_a_task_never_submitted_makes_no_task_in_the_api(forgetting_api):
    """A connector status naming a task nobody submitted goes through intake into the cell
    log; the API's read model holds it for the task (its /metrics counts it) and makes no
    tenant-less task of it: nobody's lists or tallies show it, and it is not open."""
    import asyncio

    from prometheus_client.parser import text_string_to_metric_families

    from suanli.bench.cells_across_workers import publish

    plane, api = forgetting_api
    ghost = f"never-submitted-{uuid.uuid4().hex[:6]}"
    status = {"event_id": f"{plane.cell}/ghost:running", "task_id": ghost, "cell": plane.cell,
              "node_id": "nowhere", "status": "RUNNING", "at": int(time.time() * 1000)}

    def gauges() -> tuple[float, float]:
        """(statuses of unknown tasks held, tasks kept) from the API's /metrics."""
        with api.client("alpha") as http:
            text = http.get("/metrics").text
        values = {(sample.name, sample.labels.get("held")): sample.value
                  for family in text_string_to_metric_families(text) for sample in family.samples}
        return values[("suanli_api_read_model_orphan_statuses", None)], values[("suanli_api_read_model_tasks", "kept")]

    orphans, kept = gauges()          # the first test left every task finished: nothing changes now
    asyncio.run(publish(api.settings, [("TaskStatusChanged", status)]))     # to the raw status topic
    deadline = time.monotonic() + 60
    while gauges()[0] < orphans + 1:                    # intake forwards it, the API folds it
        assert time.monotonic() < deadline, "the status never reached the API's read model"
        plane.check_alive()
        time.sleep(0.2)
    assert gauges()[1] == kept                          # no task was made of it
    with api.client("alpha") as http:
        r = http.get(f"/v1/tasks/{ghost}")
        assert r.status_code == 404 and r.json()["detail"] == f"no task {ghost!r}", r.text
        listed = {t["task_id"] for t in http.get("/v1/tasks", params={"limit": 100}).json()["tasks"]}
        assert ghost not in listed
