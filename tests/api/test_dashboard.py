"""The dashboard (/ui) without a browser or Kafka: the app over an in-memory read model fed
with hand-made records. (tests/api/test_dashboard_browser.py drives it in Chromium in front
of a real plane.)"""
from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path

import pytest
from api_helpers import TOKENS, ListSink, feed, make_service, node, pending, placed, submitted, write_tokens

from suanli.api.readmodel import ReadModel
from suanli.api.ui import Dashboard
from suanli.api.ui import tree as ui_tree
from suanli.api.ui.routes import COOKIE, _stream
from suanli.api.ui.views import OTHER_TENANT, bucket

ALPHA = {"Authorization": f"Bearer {TOKENS['alpha']}"}
BETA = {"Authorization": f"Bearer {TOKENS['beta']}"}


def registered(node_id: str, zone: str, site: str, gpus: int = 4, cell: str = "c") -> tuple[str, str, dict]:
    role, kind, p = node(node_id, cell, gpus)
    return role, kind, {**p, "region": "r1", "zone": zone, "site": site, "labels": {"rack": "k1"}}


def condition(node_id: str, value: str, cell: str = "c") -> tuple[str, str, dict]:
    return ("cell_log", "NodeConditionChanged", {"event_id": f"cond-{node_id}-{value}", "node_id": node_id,
                                                 "cell": cell, "condition": value, "previous": "NORMAL", "at": 5})


def health(node_id: str, value: str, cell: str = "c") -> tuple[str, str, dict]:
    return ("decisions", "NodeHealthChanged", {"event_id": f"h-{node_id}-{value}", "node_id": node_id, "cell": cell,
                                               "status": value, "last_heartbeat_at": 1})


def preempted(task_id: str, tenant: str, by: str, cell: str = "c", offset: int = 20) -> tuple[str, str, dict]:
    _r, _k, p = placed(task_id, tenant, cell, offset)
    return ("decisions", "TaskPreempted", {
        "event_id": f"pre-{task_id}", "decision_id": f"{cell}/x/0/{offset}/1", "task_id": task_id, "tenant": tenant,
        "cell": cell, "node_id": "n1", "preempted_by": by, "reason": f"preempted by {by} (GOLD priority 0) on n1",
        "grace_ms": 0, "work_lost_ms": 10, "victims": [task_id],
        "provenance": {**p["provenance"], "path": [f"preempted by {by} (GOLD)", f"victims: {task_id}"]}})


def requeued(task_id: str, tenant: str, by: str, cell: str = "c", offset: int = 21) -> tuple[str, str, dict]:
    role, kind, p = pending(task_id, tenant, cell, offset)
    return role, kind, {**p, "reasons": [{"reason": f"preempted by {by}; queued again when its grace ended",
                                          "nodes": 0}]}


@pytest.fixture()
def model() -> ReadModel:
    return ReadModel()


@pytest.fixture()
def ui(model) -> Dashboard:
    return Dashboard(model)


@pytest.fixture()
def app(model, ui, tmp_path):
    from suanli.api.auth import TokenStore
    from suanli.api.rest import create_app

    feed(model, registered("n1", "z1", "z1-dc1"), registered("n2", "z1", "z1-dc2", gpus=8),
         registered("n3", "z2", "z2-dc1", gpus=0),
         submitted("a1", "alpha"), submitted("a2", "alpha"), submitted("b1", "beta"),
         placed("a1", "alpha"), pending("a2", "alpha"), pending("b1", "beta"))
    application = create_app(make_service(ListSink(), model), TokenStore.from_file(write_tokens(tmp_path / "t.toml")))
    ui.mount(application)
    return application


@pytest.fixture()
def client(app):
    from fastapi.testclient import TestClient

    with TestClient(app) as c:
        yield c


# ------------------------------------------------------------------ the state
def test_state_counts_each_tenants_tasks_and_follows_nodes(model, ui):
    feed(model, registered("n1", "z1", "z1-dc1"), submitted("a1", "alpha"), submitted("b1", "beta"))
    assert ui.state.tenant_counts("alpha")["total"] == 1 and ui.state.tenant_counts("alpha")["placed"] == 0
    start = ui.state.node_log_end()
    feed(model, placed("a1", "alpha"), pending("b1", "beta"), condition("n1", "HOT"))
    a, b = ui.state.tenant_counts("alpha"), ui.state.tenant_counts("beta")
    assert (a["placed"], a["running"], a["pending"]) == (1, 1, 0)
    assert (b["placed"], b["pending"]) == (0, 1)
    changed, _end = ui.state.changed_nodes(start)
    assert changed == [("c", "n1")]
    assert ui.state.condition(("c", "n1")) == "HOT"
    place = ui.state.place(("c", "n1"))
    assert (place.region, place.zone, place.site, place.rack) == ("r1", "z1", "z1-dc1", "k1")
    # a redelivered record changes nothing
    feed(model, placed("a1", "alpha"))
    assert ui.state.tenant_counts("alpha")["placed"] == 1


def test_a_dashboard_made_late_takes_the_model_as_it_is(model):
    feed(model, node("n1"), submitted("a1", "alpha"), placed("a1", "alpha"))
    late = Dashboard(model)
    assert late.state.tenant_counts("alpha")["placed"] == 1
    assert ("c", "n1") in late.state.index


def test_bucket_is_the_heat_scale():
    assert [bucket(x) for x in (0, 1, 100, 101, 500, 999, 1000, 1500)] == [0, 1, 1, 2, 5, 10, 10, 10]
    assert bucket(16000, 32000) == 5 and bucket(0, 0) == 0


# ------------------------------------------------------------------ sign-in
def test_pages_ask_to_sign_in_and_the_rest_answers_401(client):
    for path in ("/ui/", "/ui/queues", "/ui/tasks", "/ui/tasks/a1"):
        r = client.get(path, follow_redirects=False)
        assert r.status_code == 303 and r.headers["location"].startswith("/ui/login?next=")
    for path in ("/ui/events", "/ui/nodes/0", "/ui/queues?fragment=1", "/ui/tasks/a1/audit.json"):
        assert client.get(path).status_code == 401
    client.cookies.set(COOKIE, "not-a-token-at-all")
    assert client.get("/ui/", follow_redirects=False).status_code == 303
    assert client.get("/ui/", headers={"Authorization": "Bearer nope-nope-nope"}).status_code == 401


def test_sign_in_sets_a_strict_http_only_cookie(client):
    r = client.post("/ui/login", data={"token": "wrong-token-123", "next": "/ui/"}, follow_redirects=False)
    assert r.status_code == 401 and "not known" in r.text and COOKIE not in r.headers.get("set-cookie", "")
    r = client.post("/ui/login", data={"token": TOKENS["alpha"], "next": "/ui/queues"}, follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == "/ui/queues"
    cookie = r.headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie and "Path=/ui" in cookie
    assert client.get("/ui/tasks").status_code == 200
    r = client.post("/ui/logout", follow_redirects=False)
    assert r.status_code == 303 and 'Max-Age=0' in r.headers["set-cookie"] or "expires" in r.headers["set-cookie"]


@pytest.mark.parametrize("target", ["//evil.example/x", "https://evil.example/", "/v1/tasks", "/ui\\..\\x"])
def test_sign_in_goes_nowhere_but_the_dashboard(client, target):
    r = client.post("/ui/login", data={"token": TOKENS["alpha"], "next": target}, follow_redirects=False)
    assert r.headers["location"] == "/ui/"


def test_pages_carry_a_strict_content_security_policy_and_no_other_origin(client):
    r = client.get("/ui/", headers=ALPHA)
    csp = r.headers["content-security-policy"]
    assert "default-src 'self'" in csp and "script-src 'self'" in csp and "unsafe" not in csp
    ui_dir = Path(__file__).resolve().parents[2] / "api" / "ui"
    for f in [*ui_dir.glob("static/*"), *ui_dir.glob("templates/*")]:
        text = f.read_text()
        assert not re.search(r"(https?:)?//[a-z0-9.-]+\.[a-z]{2,}", text.replace("http://www.w3.org/2000/svg", "")), f
    assert client.get("/ui/static/dashboard.js").status_code == 200
    assert not [p for p in client.get("/openapi.json").json()["paths"] if p.startswith("/ui")]


# ------------------------------------------------------------------ pages and isolation
def test_cluster_page_groups_nodes_by_zone_and_site_with_health_and_conditions(model, client):
    feed(model, condition("n2", "HOT"), health("n1", "SUSPECT"))
    html = client.get("/ui/", headers=ALPHA).text
    assert html.index('data-zone="z1"') < html.index('data-zone="z2"')
    assert 'data-site="z1|z1-dc1"' in html and 'data-site="z1|z1-dc2"' in html
    n1 = re.search(r'<b id="n\d+" class="([^"]*)"></b>', html)
    assert n1.group(1) == "n hs k4 a0-5"              # SUSPECT, 4 GPUs, GPU 0 half allocated (a1's 500 milli)
    assert re.search(r'class="n cH k8"></b>', html)                               # n2: HOT, 8 GPUs idle
    assert re.search(r'class="n cpu"></b>', html)                                 # n3: CPU only, idle
    assert re.search(r'data-count="placed">1<', html) and re.search(r'data-count="pending">1<', html)


def test_each_tenant_sees_only_its_own_tasks(client):
    alpha = client.get("/ui/tasks", headers=ALPHA).text + client.get("/ui/queues", headers=ALPHA).text
    beta = client.get("/ui/tasks", headers=BETA).text + client.get("/ui/queues", headers=BETA).text
    assert "a1" in alpha and "a2" in alpha and ">b1<" not in alpha
    assert ">b1<" in beta and ">a1<" not in beta and ">a2<" not in beta
    assert client.get("/ui/tasks/b1", headers=ALPHA).status_code == 404
    assert "b1" not in client.get("/ui/tasks/b1", headers=ALPHA).text
    assert client.get("/ui/tasks/b1/audit/0", headers=ALPHA).status_code == 404
    assert client.get("/ui/tasks/b1/audit.json", headers=ALPHA).status_code == 404
    assert client.get("/ui/tasks/a1/audit.json", headers=ALPHA).json()["decisions"][0]["position"]["offset"] == 6


def test_the_task_list_and_page_show_the_job_and_filter_by_it(model, client):
    """Issue 22: a member task's job in the list (a link that filters by it) and on its page."""
    for task, job in (("fl-c1", "fl-7"), ("fl-c2", "fl-7"), ("solo", None)):
        role, kind, payload = submitted(task, "alpha")
        feed(model, (role, kind, {**payload, "job_id": job}))
    listed = client.get("/ui/tasks", headers=ALPHA).text
    assert 'href="/ui/tasks?job=fl-7" class="job">fl-7</a>' in listed and ">solo<" in listed
    only = client.get("/ui/tasks?job=fl-7", headers=ALPHA).text
    assert ">fl-c1<" in only and ">fl-c2<" in only and ">solo<" not in only and ">a1<" not in only
    assert 'id="job-shown"' in only and 'value="fl-7"' in only
    assert client.get("/ui/tasks?job=fl-7", headers=BETA).text.count("fl-c1") == 0
    page = client.get("/ui/tasks/fl-c1", headers=ALPHA).text
    assert '<a href="/ui/tasks?job=fl-7" id="task-job">fl-7</a>' in page
    assert 'id="task-job"' not in client.get("/ui/tasks/solo", headers=ALPHA).text


def test_the_queue_page_names_each_cells_policy_and_its_aging(model, client):
    assert '<span class="policy">default policy</span>' in client.get("/ui/queues", headers=BETA).text
    feed(model, ("cell_log", "PolicyChanged", {"event_id": "p1", "cell": "c", "strategy": "bestfit",
                                               "config_json": '{"qos":{"aging_ms":5000}}', "changed_by": "ops",
                                               "at": 1}))
    html = client.get("/ui/queues", headers=BETA).text
    assert '<span class="policy">bestfit, one priority point per 5 s waiting</span>' in html


def test_task_page_draws_the_decision_tree_with_the_chosen_node(client):
    html = client.get("/ui/tasks/a1", headers=ALPHA).text
    svg = html[html.index("<svg"):html.index("</svg>")]
    assert re.search(r'<g class="box box-chosen chosen" data-node="n1">', svg)
    assert "excluded: insufficient gpu milli" in svg and "placed on n1" in svg
    assert 'href="/ui/tasks/a1/audit/0"' in html and "x.decisions/0@6" in html      # the record's log position
    record = client.get("/ui/tasks/a1/audit/0", headers=ALPHA).text
    assert "TaskPlaced" in record and "&quot;offset&quot;: 6" in record


def test_a_pending_decision_has_no_chosen_node():
    _r, kind, p = pending("t", "alpha")
    svg = ui_tree.svg("t", kind, p)
    assert "box-chosen" not in svg and "box-pending" in svg and "pending at queue position 1" in svg


def test_hostile_text_is_escaped_in_the_tree_and_pages(model, client):
    evil = '<script>alert(1)</script>'
    _r, kind, p = placed("x", "alpha")
    p["provenance"]["candidates"] = [{"node_id": evil, "score": 1.0, "rank": 1}]
    svg = ui_tree.svg(evil, kind, {**p, "node_id": evil})
    assert "<script>" not in svg and "&lt;script&gt;" in svg
    role, kind, p = pending("a9", "alpha")
    feed(model, submitted("a9", "alpha"), (role, kind, {**p, "reasons": [{"reason": evil, "nodes": 1}]}))
    assert "<script>alert" not in client.get("/ui/queues", headers=ALPHA).text


def test_other_tenants_task_ids_are_never_shown(model, client):
    """A victim's decisions name its preemptor (another tenant's task): the victim's pages
    say 'another tenant's task' instead, everywhere (tree, path, reasons, audit JSON)."""
    feed(model, submitted("g1", "beta"), placed("g1", "beta", offset=19),
         preempted("a1", "alpha", by="g1"), requeued("a1", "alpha", by="g1"))
    pages = [client.get(p, headers=ALPHA).text for p in
             ("/ui/tasks/a1", "/ui/tasks/a1?d=1", "/ui/tasks/a1/audit/1", "/ui/queues", "/ui/tasks")]
    pages.append(json.dumps(client.get("/ui/tasks/a1/audit.json", headers=ALPHA).json()))
    assert not [p for p in pages if re.search(r"\bg1\b", p)]
    assert OTHER_TENANT.replace("'", "&#x27;") in pages[0] and OTHER_TENANT.replace("'", "&#x27;") in pages[3]
    # the same tenant's preemptor is named
    feed(model, submitted("a3", "alpha"), submitted("a4", "alpha"), placed("a3", "alpha", offset=30),
         preempted("a3", "alpha", by="a4", offset=31))
    assert "preempted on n1 by a4" in client.get("/ui/tasks/a3", headers=ALPHA).text


# ------------------------------------------------------------------ the stream
class _Request:
    async def is_disconnected(self) -> bool:
        return False


def test_the_stream_sends_counts_and_changed_nodes_then_ends_on_close(model, ui, app):
    async def run() -> list[str]:
        out: list[str] = []
        stream = _stream(ui, _Request(), "alpha", "cluster", "c", "")
        out.append(await anext(stream))            # hello
        out.append(await anext(stream))            # counts and figures
        feed(model, submitted("a5", "alpha"), placed("a5", "alpha", offset=40), health("n3", "DOWN"))
        out.append(await anext(stream))
        ui.close()
        async for rest in stream:
            out.append(rest)
        return out

    messages = asyncio.run(run())
    assert messages[0].startswith("retry:") and "event: hello" in messages[0]
    first = _events(messages[1])
    assert first["counts"]["placed"] == 1 and first["cluster"]["nodes"] == 3
    later = _events(messages[2])
    assert later["counts"]["placed"] == 2
    changed = {entry[9]: entry for entry in later["nodes"]}
    assert set(changed) == {"n1", "n3"} and changed["n3"][1] == "DOWN" and changed["n1"][4][0] == 1000
    assert later["cluster"]["health"]["DOWN"] == 1


def test_the_stream_of_a_task_page_says_when_the_task_changed(model, ui, app):
    async def run() -> list[str]:
        stream = _stream(ui, _Request(), "alpha", "task", "", "a2")
        out = [await anext(stream), await anext(stream)]
        feed(model, placed("a2", "alpha", offset=50))
        out.append(await anext(stream))
        ui.close()
        return out

    messages = asyncio.run(run())
    assert "event: changed" not in messages[1] and "event: changed" in messages[2]


def _events(text: str) -> dict[str, object]:
    out = {}
    for block in text.strip().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in block.splitlines() if ": " in line)
        if "event" in lines:
            out[lines["event"]] = json.loads(lines["data"])
    return out


def test_a_cluster_page_drawn_before_any_node_follows_the_first_cell_to_register(model, ui):
    async def run() -> list[str]:
        stream = _stream(ui, _Request(), "alpha", "cluster", "", "")
        out = [await anext(stream), await anext(stream)]
        feed(model, registered("m1", "z9", "z9-dc1", cell="late"), registered("m2", "z9", "z9-dc2", cell="late"))
        out.append(await anext(stream))
        ui.close()
        return out

    messages = asyncio.run(run())
    assert "event: nodes" not in messages[1]
    later = _events(messages[2])
    assert later["cell"] == {"cell": "late"}
    assert sorted(entry[9] for entry in later["nodes"]) == ["m1", "m2"]
    assert [entry[7:9] for entry in later["nodes"] if entry[9] == "m1"] == [["z9", "z9-dc1"]]
