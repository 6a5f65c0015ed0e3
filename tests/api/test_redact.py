"""No REST answer names another tenant's task: a preempted task's decisions name its
preemptor and co-victims, which may belong to other tenants (issue 14 x tenant isolation)."""
from __future__ import annotations

from api_helpers import feed, node, placed, provenance, submitted

from suanli.api.redact import OTHER_TENANT, Redactor


def _preempted(victim: str, tenant: str, by: str, others: list[str], offset: int = 7) -> tuple[str, str, dict]:
    return ("decisions", "TaskPreempted", {
        "event_id": f"d-{victim}-{offset}", "decision_id": f"c/x/0/{offset}/0", "task_id": victim, "tenant": tenant,
        "cell": "c", "node_id": "n1", "preempted_by": by, "reason": f"preempted by {by} (SILVER priority 0) on n1",
        "grace_ms": 0, "work_lost_ms": 5, "victims": [victim, *others],
        "provenance": provenance(offset, [f"preempted by {by} (SILVER)", f"victims: {', '.join([victim, *others])}"])})


def test_the_victims_tenant_never_sees_the_preemptors_id(client, service, alpha, beta):
    feed(service.model, node(), submitted("beta-job", "beta"), submitted("beta-other", "beta"),
         submitted("alpha-job", "alpha"), placed("beta-job", "beta", offset=3), placed("beta-other", "beta", offset=4),
         placed("alpha-job", "alpha", offset=6), _preempted("beta-job", "beta", by="alpha-job", others=["beta-other"]))
    for path in ("/v1/tasks/beta-job", "/v1/tasks/beta-job/why-pending", "/v1/tasks"):
        r = client.get(path, headers=beta)
        assert r.status_code == 200, r.text
        assert "alpha-job" not in r.text, (path, r.text)
    body = client.get("/v1/tasks/beta-job", headers=beta).json()
    assert any(OTHER_TENANT in step for step in body["path"]), body["path"]
    assert "beta-other" in " ".join(body["path"])            # its own tasks stay named
    assert "alpha-job" in client.get("/v1/tasks/alpha-job", headers=alpha).text


def test_redactor_replaces_only_known_foreign_ids():
    class V:
        def __init__(self, tenant):
            self.tenant = tenant
    hide = Redactor({"a-1": V("alpha"), "b-1": V("beta")}, {}, "beta")
    assert hide.text("preempted by a-1: victims b-1, a-1.") == \
        f"preempted by {OTHER_TENANT}: victims b-1, {OTHER_TENANT}."
    assert hide.deep({"k": ["a-1", 3, "unknown-id"]}) == {"k": [OTHER_TENANT, 3, "unknown-id"]}
