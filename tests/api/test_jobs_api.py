"""Jobs of many tasks (issue 22) through the REST API: ``job`` in the task form, the member
tasks of ``GET /v1/jobs/{id}`` (tenant-scoped), ``job_id`` on task status and the audit filter."""
from __future__ import annotations

import pytest
from api_helpers import feed, placed, submitted

GOOD = {"resources": {"cpu": 1, "memory": "1Gi"}}


def _member(task_id: str, tenant: str, job: str | None) -> tuple[str, str, dict]:
    role, kind, payload = submitted(task_id, tenant)
    return role, kind, {**payload, "job_id": job}


def _placed(task_id: str, tenant: str, job: str | None, offset: int) -> tuple[str, str, dict]:
    role, kind, payload = placed(task_id, tenant, offset=offset)
    return role, kind, {**payload, "job_id": job}


def test_submit_carries_the_job_into_the_task_submitted(client, sink, alpha):
    r = client.post("/v1/tasks", json={**GOOD, "job": "fl-round-7"}, headers=alpha)
    assert r.status_code == 202, r.text
    assert sink.events[-1][1]["job_id"] == "fl-round-7"
    client.post("/v1/tasks", json=GOOD, headers=alpha)
    assert sink.events[-1][1]["job_id"] is None


@pytest.mark.parametrize("job", ["", "a b", "-x", "x/y", "j" * 205, "作业"])
def test_a_bad_job_id_is_422_naming_the_field(client, sink, alpha, job):
    r = client.post("/v1/tasks", json={**GOOD, "job": job}, headers=alpha)
    assert r.status_code == 422, r.text
    assert "job" in r.json()["detail"] and "Traceback" not in r.text
    assert sink.events == []


def test_get_job_lists_the_callers_member_tasks_with_status_and_node(client, service, alpha):
    feed(service.model, _member("m1", "alpha", "j1"), _member("m2", "alpha", "j1"), _member("m3", "alpha", "j1"),
         _member("other", "alpha", "j2"), _member("loner", "alpha", None), _member("theirs", "beta", "j1"),
         _placed("m1", "alpha", "j1", 5))
    r = client.get("/v1/jobs/j1", headers=alpha)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["job_id"] == "j1" and body["tenant"] == "alpha"
    assert [t["task_id"] for t in body["tasks"]] == ["m1", "m2", "m3"]
    assert {t["job_id"] for t in body["tasks"]} == {"j1"}
    assert body["tasks"][0]["status"] == "PLACED" and body["tasks"][0]["node_id"] == "n1"
    assert body["counts"] == {"PLACED": 1, "SUBMITTED": 2}
    assert client.get("/v1/tasks/m2", headers=alpha).json()["job_id"] == "j1"
    assert client.get("/v1/tasks/loner", headers=alpha).json()["job_id"] is None


def test_another_tenants_job_is_404(client, service, alpha):
    feed(service.model, _member("theirs", "beta", "jb"))
    assert client.get("/v1/jobs/jb", headers=alpha).status_code == 404
    assert client.get("/v1/jobs/a%20b", headers=alpha).status_code == 422


def test_the_audit_filters_by_job(client, service, alpha):
    feed(service.model, _member("m1", "alpha", "j1"), _member("m2", "alpha", "j1"), _member("x", "alpha", None),
         _placed("m1", "alpha", "j1", 5), _placed("m2", "alpha", "j1", 6), _placed("x", "alpha", None, 7))
    r = client.get("/v1/audit", params={"job": "j1"}, headers=alpha)
    assert r.status_code == 200, r.text
    decisions = r.json()["decisions"]
    assert [d["task_id"] for d in decisions] == ["m1", "m2"]
    assert {d["job_id"] for d in decisions} == {"j1"}
    assert client.get("/v1/audit", headers=alpha).status_code == 422          # a filter is needed
    assert client.get("/v1/tasks/m1/audit", headers=alpha).json()["decisions"][0]["job_id"] == "j1"
