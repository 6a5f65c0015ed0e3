"""The REST app without Kafka: auth, validation, tenant isolation and the read side over a
hand-fed read model (FastAPI's TestClient, an in-memory sink)."""
from __future__ import annotations

import pytest
from api_helpers import TOKENS, feed, node, pending, placed, released, submitted

GOOD = {"id": "job-1", "cell": "c", "resources": {"cpu": 2, "memory": "4Gi", "gpu": 0.5, "gpu_models": ["T4"]},
        "qos": "gold", "priority": 3, "labels": {"team": "x"}, "duration": "2h", "command": ["python", "x.py"]}


# ------------------------------------------------------------------ authentication
@pytest.mark.parametrize("headers", [{}, {"Authorization": "Bearer nope-nope-nope"}, {"Authorization": "Basic abc"},
                                     {"Authorization": "Bearer"}, {"Authorization": TOKENS["alpha"]}])
def test_missing_or_unknown_token_is_401_and_nothing_is_sent(client, sink, headers):
    for method, path in [("post", "/v1/tasks"), ("get", "/v1/tasks"), ("get", "/v1/tasks/job-1"),
                         ("post", "/v1/tasks/job-1/cancel"), ("get", "/v1/tasks/job-1/why-pending"),
                         ("get", "/v1/tasks/job-1/audit"), ("post", "/v1/bids"), ("get", "/v1/bids"),
                         ("get", "/v1/nodes"), ("get", "/v1/cells/c/policy")]:
        r = client.request(method, path, headers=headers, json=GOOD if method == "post" else None)
        assert r.status_code == 401, (method, path, r.text)
        assert r.headers["www-authenticate"] == "Bearer"
        assert "token" in r.json()["detail"]
    assert sink.events == []


def test_health_and_docs_need_no_token(client):
    assert client.get("/healthz").json() == {"ready": True, "namespace": "unit"}
    assert client.get("/openapi.json").json()["info"]["title"] == "Suanli API"
    assert client.get("/docs").status_code == 200


# ------------------------------------------------------------------ submissions
def test_submit_makes_the_task_submitted_event_with_the_token_tenant(client, sink, alpha):
    r = client.post("/v1/tasks", json=GOOD, headers=alpha)
    assert r.status_code == 202, r.text
    body = r.json()
    assert body["task_id"] == "job-1" and body["tenant"] == "alpha" and body["position"]["topic"] == "raw"
    [(kind, event)] = sink.events
    assert kind == "TaskSubmitted"
    assert event["tenant"] == "alpha" and event["task_id"] == "job-1" and event["cell"] == "c"
    assert event["resources"] == {"cpu_milli": 2000, "memory_mib": 4096, "gpu_count": 1, "gpu_milli": 500,
                                  "gpu_models": ["T4"], "gpu_memory_mib": 0, "accelerators": []}
    assert event["qos_tier"] == "GOLD" and event["duration_estimate_ms"] == 7_200_000
    assert event["submitted_at"] == 1_700_000_000_000 and event["event_id"] == body["event_id"]


def test_same_document_as_the_cli_task_form(client, sink, alpha):
    """The REST body is the YAML task form: the event equals task_spec's (bar ids and time)."""
    from suanli.schemas.task_spec import task_from_document

    client.post("/v1/tasks", json=GOOD, headers=alpha)
    expected = task_from_document({**GOOD, "tenant": "alpha"}, now_ms=1_700_000_000_000)
    got = sink.events[0][1]
    assert {k: v for k, v in got.items() if k != "event_id"} == {k: v for k, v in expected.items() if k != "event_id"}


@pytest.mark.parametrize("doc, field", [
    ({"resources": {"cpu": 1, "memory": "1Gi", "gpu": -1}}, "resources.gpu"),
    ({"resources": {"cpu": 1, "memory": "1Gi"}, "qos": "platinum"}, "qos"),
    ({"resources": {"cpu": 1, "memory": "1Gi"}, "colour": "red"}, "colour"),
    ({"resources": {"memory": "1Gi"}}, "resources"),
    ({"resources": {"cpu": 1, "memory": "lots"}}, "memory"),
    ({"resources": {"cpu": 1, "memory": "1Gi"}, "duration": "soon"}, "duration"),
    ({"resources": {"cpu": 1, "memory": "1Gi", "gpu": 1.5}}, "gpu"),
    ({"resources": {"cpu": 1e12, "memory": "1Gi"}}, "resources.cpu_milli"),
    ({"resources": {"cpu": 1, "memory": "1Gi"}, "priority": 10**9}, "priority"),
    ({"resources": {"cpu": 1, "memory": "1Gi"}, "tenant": "beta"}, "tenant"),
    ({"resources": {"cpu": 1, "memory": "1Gi"}, "id": "a/b"}, "id"),
    ({"resources": {"cpu": 1, "memory": "1Gi"}, "duration_ms": 2**70}, "duration_estimate_ms"),
    ({}, "resources"),
])
def test_bad_submission_is_422_naming_the_field_and_nothing_is_sent(client, sink, alpha, doc, field):
    r = client.post("/v1/tasks", json=doc, headers=alpha)
    assert r.status_code == 422, r.text
    detail = r.json()["detail"]
    assert field in detail, detail
    assert "Traceback" not in r.text
    assert sink.events == []


def test_malformed_json_is_422(client, sink, alpha):
    r = client.post("/v1/tasks", content=b"{not json", headers={**alpha, "content-type": "application/json"})
    assert r.status_code == 422 and "JSON" in r.json()["detail"]
    assert sink.events == []


def test_task_id_in_use_is_409(client, service, sink, alpha, beta):
    feed(service.model, submitted("job-1", "beta"))
    r = client.post("/v1/tasks", json=GOOD, headers=alpha)
    assert r.status_code == 409 and "already in use" in r.json()["detail"]
    assert sink.events == []


# ------------------------------------------------------------------ reads and isolation
@pytest.fixture()
def history(service):
    feed(service.model, node("n1"), submitted("a1", "alpha"), submitted("b1", "beta"), submitted("a2", "alpha"),
         submitted("a3", "alpha", priority=5), placed("a1", "alpha"), pending("b1", "beta"), pending("a2", "alpha"),
         pending("a3", "alpha", offset=7))
    return service.model


def test_status_of_own_tasks(client, history, alpha):
    a1 = client.get("/v1/tasks/a1", headers=alpha).json()
    assert a1["status"] == "PLACED" and a1["placed"] and a1["node_id"] == "n1" and a1["gpu_devices"] == [0]
    assert a1["path"][-1] == "place on n1 GPU 0" and a1["strategy"] == "bestfit"
    a2 = client.get("/v1/tasks/a2", headers=alpha).json()
    assert a2["status"] == "PENDING" and a2["reasons"] == [{"reason": "insufficient gpu milli", "nodes": 4}]
    listed = client.get("/v1/tasks", headers=alpha).json()["tasks"]
    assert {t["task_id"] for t in listed} == {"a1", "a2", "a3"}
    assert [t["task_id"] for t in client.get("/v1/tasks?status=PENDING&limit=1", headers=alpha).json()["tasks"]] \
        == ["a2"]


def test_a_submission_answers_until_the_lifecycle_knows_its_task_and_lists_filter_alike(client, service, alpha):
    raw = ("raw_tasks",) + submitted("s1", "alpha")[1:]
    feed(service.model, node(), raw)
    assert client.get("/v1/tasks/s1", headers=alpha).json()["status"] == "SUBMITTED"
    assert [t["task_id"] for t in client.get("/v1/tasks?status=SUBMITTED", headers=alpha).json()["tasks"]] == ["s1"]
    feed(service.model, submitted("s1", "alpha"), pending("s1", "alpha", offset=3), raw)   # a raw copy read late
    assert service.model.submissions == {}            # the lifecycle answers for it now
    assert client.get("/v1/tasks/s1", headers=alpha).json()["status"] == "PENDING"
    assert [t["task_id"] for t in client.get("/v1/tasks?status=PENDING", headers=alpha).json()["tasks"]] == ["s1"]
    assert client.get("/v1/tasks?status=SUBMITTED", headers=alpha).json()["tasks"] == []
    feed(service.model, placed("s1", "alpha", offset=4), released("s1", "alpha", offset=5))
    assert [t["task_id"] for t in client.get("/v1/tasks?status=COMPLETED", headers=alpha).json()["tasks"]] == ["s1"]
    assert client.get("/v1/tasks?status=PENDING", headers=alpha).json()["tasks"] == []


def test_why_pending_gives_reasons_and_the_current_queue_position(client, history, alpha, beta):
    # queue of cell c: a3 (priority 5), then b1, then a2 (arrival order)
    a2 = client.get("/v1/tasks/a2/why-pending", headers=alpha).json()
    assert a2["pending"] and a2["queue_position"] == 3 and a2["queue_length"] == 3
    assert "position 3 of 3" in a2["explanation"] and "insufficient gpu milli (4 nodes)" in a2["explanation"]
    assert client.get("/v1/tasks/a3/why-pending", headers=alpha).json()["queue_position"] == 1
    a1 = client.get("/v1/tasks/a1/why-pending", headers=alpha).json()
    assert not a1["pending"] and a1["explanation"] == "not pending: PLACED on n1"


def test_another_tenants_task_is_404_like_a_missing_one(client, history, sink, alpha, beta):
    for path in ("/v1/tasks/b1", "/v1/tasks/b1/why-pending", "/v1/tasks/b1/audit"):
        theirs, missing = client.get(path, headers=alpha), client.get(path.replace("b1", "zz"), headers=alpha)
        assert theirs.status_code == missing.status_code == 404
        assert theirs.json()["detail"] == "no task 'b1'"
    r = client.post("/v1/tasks/b1/cancel", headers=alpha, json={"reason": "mine now"})
    assert r.status_code == 404
    assert sink.events == []
    assert client.get("/v1/tasks/b1", headers=beta).status_code == 200
    assert [t["task_id"] for t in client.get("/v1/tasks", headers=beta).json()["tasks"]] == ["b1"]


def test_audit_is_the_decision_path_with_provenance(client, history, service, alpha):
    feed(service.model, released("a1", "alpha"))
    trail = client.get("/v1/tasks/a1/audit", headers=alpha).json()
    assert trail["status"] == "COMPLETED" and [d["kind"] for d in trail["decisions"]] == ["TaskPlaced", "TaskReleased"]
    first = trail["decisions"][0]
    assert first["node_id"] == "n1" and first["provenance"]["strategy"]["name"] == "bestfit"
    assert first["provenance"]["candidates"] == [{"node_id": "n1", "score": 0.75, "rank": 1}]
    assert first["provenance"]["input"] == {"topic": "x.cells", "partition": 0, "offset": 5}
    assert first["position"]["topic"] == "x.decisions"
    assert trail["decisions"][1]["cause"] == "COMPLETED"


def test_cancel_own_task_and_refuse_a_finished_one(client, history, service, sink, alpha):
    r = client.post("/v1/tasks/a2/cancel", headers=alpha, json={"reason": "no longer needed"})
    assert r.status_code == 202, r.text
    [(kind, event)] = sink.events
    assert kind == "TaskCancelled" and event["tenant"] == "alpha" and event["cell"] == "c"
    assert event["reason"] == "no longer needed"
    assert client.post("/v1/tasks/a1/cancel", headers=alpha).status_code == 202    # body optional
    feed(service.model, released("a1", "alpha"))
    r = client.post("/v1/tasks/a1/cancel", headers=alpha)
    assert r.status_code == 409 and "COMPLETED" in r.json()["detail"]


def test_nodes_are_listed(client, history, alpha):
    nodes = client.get("/v1/nodes", headers=alpha).json()["nodes"]
    assert nodes[0]["node_id"] == "n1" and nodes[0]["gpus"] == 2 and nodes[0]["gpu_used"] == [500, 0]
    assert client.get("/v1/nodes?cell=other", headers=alpha).json()["nodes"] == []
    assert client.get("/v1/nodes?limit=0", headers=alpha).status_code == 422


def test_a_cells_policy_in_force_is_shown_and_a_refused_one_changes_nothing(client, service, history, alpha, beta):
    from suanli.processors.strategies import config_digest

    default = client.get("/v1/cells/c/policy", headers=alpha)           # a node, no policy yet
    assert default.status_code == 200, default.text
    assert default.json() == {"cell": "c", "set": False, "strategy": "default", "config_json": "{}",
                              "config_digest": config_digest({}), "aging_ms": 60_000, "event_id": "",
                              "changed_by": "", "at": 0}
    unknown = client.get("/v1/cells/nowhere/policy", headers=alpha)
    assert unknown.status_code == 404 and "no cell 'nowhere'" in unknown.json()["detail"]

    def policy(event_id: str, strategy: str, config_json: str) -> tuple[str, str, dict]:
        return ("cell_log", "PolicyChanged", {"event_id": event_id, "cell": "c", "strategy": strategy,
                                              "config_json": config_json, "changed_by": "ops", "at": 77})

    feed(service.model, policy("p1", "bestfit", '{"qos":{"aging_ms":5000}}'),
         policy("p2", "default", '{"qos":{"agign_ms":1}}'))                 # refused by the scheduler: no change
    for caller in (alpha, beta):                                           # shared by every tenant, as nodes are
        got = client.get("/v1/cells/c/policy", headers=caller).json()
        assert got == {"cell": "c", "set": True, "strategy": "bestfit", "config_json": '{"qos":{"aging_ms":5000}}',
                       "config_digest": config_digest({"qos": {"aging_ms": 5000}}), "aging_ms": 5000,
                       "event_id": "p1", "changed_by": "ops", "at": 77}
    feed(service.model, ("cell_log", "PolicyChanged", {"event_id": "p3", "cell": "only-policy", "strategy": "fgd",
                                                       "config_json": "{}", "changed_by": "ops", "at": 78}))
    assert client.get("/v1/cells/only-policy/policy", headers=alpha).json()["strategy"] == "fgd"   # no node needed
    assert client.get("/v1/cells/" + "x" * 257 + "/policy", headers=alpha).status_code == 422


# ------------------------------------------------------------------ bids
def test_bids_are_validated_submitted_and_listed_per_tenant(client, service, sink, alpha, beta):
    bid = {"bid_id": "bid-1", "cell": "c", "resources": {"cpu": 4, "memory": "8Gi", "gpu": 2}, "start_at": 2_000,
           "duration": "1h", "price": 2.5}
    r = client.post("/v1/bids", json=bid, headers=alpha)
    assert r.status_code == 202, r.text
    [(kind, event)] = sink.events
    assert kind == "ReservationBid" and event["tenant"] == "alpha" and event["duration_ms"] == 3_600_000
    assert event["resources"]["gpu_count"] == 2 and event["resources"]["gpu_milli"] == 1000
    feed(service.model, ("raw_tasks", kind, event))
    listed = client.get("/v1/bids", headers=alpha).json()["bids"]
    assert [(b["bid_id"], b["status"]) for b in listed] == [("bid-1", "SUBMITTED")]
    assert client.get("/v1/bids", headers=beta).json()["bids"] == []
    for bad, field in [({**bid, "price": -1}, "price"), ({**bid, "duration": None}, "duration"),
                       ({**bid, "start_at": -5}, "start_at"), ({**bid, "tenant": "beta"}, "tenant")]:
        r = client.post("/v1/bids", json=bad, headers=alpha)
        assert r.status_code == 422 and field in r.json()["detail"], r.text
    assert client.post("/v1/bids", json=bid, headers=alpha).status_code == 409
    assert len(sink.events) == 1
