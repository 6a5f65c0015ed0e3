"""Bids and reservation tokens over REST and gRPC, without Kafka: validation, the bid's fate
(SUBMITTED -> GRANTED | LOST), the token list with other tenants hidden, the task form's
``reservation`` field, and the dashboard's reservations page."""
from __future__ import annotations

import asyncio

import grpc
import pytest
from api_helpers import TOKENS, feed, provenance

from suanli.api import suanli_pb2 as pb
from suanli.api import suanli_pb2_grpc as pb_grpc
from suanli.api.auth import TokenStore
from suanli.api.grpc_server import build_server
from suanli.api.redact import OTHER_RESERVATION, OTHER_TENANT, OTHER_TENANT_NAME

H = 3_600_000
T0 = 1_900_000_000_000
BID = {"bid_id": "b-1", "cell": "c", "resources": {"cpu": 8, "memory": "32Gi", "gpu": 4, "gpu_models": ["A100"]},
       "start_at": T0, "latest_start_at": T0 + 2 * H, "duration": "4h", "price": 3.0, "gang": False,
       "gpu_memory": "40Gi"}


def _bid_event(sink, client, headers, doc):
    r = client.post("/v1/bids", json=doc, headers=headers)
    assert r.status_code == 202, r.text
    return sink.events[-1]


def granted(bid_id, tenant, node="n1", devices=(0, 1), price=1.75):
    return ("decisions", "ReservationGranted", {
        "event_id": f"grant/{bid_id}", "reservation_id": f"rsv-{bid_id}", "bid_id": bid_id, "tenant": tenant,
        "cell": "c", "node_id": node, "gpu_devices": list(devices), "start_at": T0 + H, "end_at": T0 + 5 * H,
        "clearing_price": price, "provenance": provenance(11, ["auction: cleared"]), "bid_price": 3.0,
        "wanted_gpus": len(devices), "cpu_milli": 8000, "memory_mib": 32768, "purge_at": None, "hold_from": None})


def rejected(bid_id, tenant, needed):
    return ("decisions", "ReservationRejected", {
        "event_id": f"reject/{bid_id}", "bid_id": bid_id, "tenant": tenant, "cell": "c", "reason": "outbid",
        "needed_price": needed, "at": T0, "provenance": provenance(12, ["auction: outbid"])})


def submitted(task_id, tenant, reservation):
    return ("cell_log", "TaskSubmitted", {
        "event_id": f"sub-{task_id}", "task_id": task_id, "tenant": tenant, "cell": "c", "submitted_at": T0,
        "priority": 0, "qos_tier": "SILVER", "labels": {"reservation": reservation},
        "resources": {"cpu_milli": 1000, "memory_mib": 1024, "gpu_count": 1, "gpu_milli": 1000}})


def placed(task_id, tenant, devices, node="n1"):
    return ("decisions", "TaskPlaced", {
        "event_id": f"d-{task_id}", "decision_id": f"c/x/0/{task_id}/0", "task_id": task_id, "tenant": tenant,
        "cell": "c", "node_id": node, "gpu_devices": list(devices), "gpu_milli": 1000, "cpu_milli": 1000,
        "memory_mib": 1024, "provenance": provenance(13, ["reservation rsv-b-1: claimed", f"place on {node}"])})


# ------------------------------------------------------------------ submitting
def test_a_bid_with_a_window_and_gang_becomes_the_reservation_bid(client, sink, alpha):
    kind, event = _bid_event(sink, client, alpha, BID)
    assert kind == "ReservationBid"
    assert {k: event[k] for k in ("bid_id", "tenant", "cell", "start_at", "latest_start_at", "duration_ms", "price",
                                  "gang")} == {"bid_id": "b-1", "tenant": "alpha", "cell": "c", "start_at": T0,
                                               "latest_start_at": T0 + 2 * H, "duration_ms": 4 * H, "price": 3.0,
                                               "gang": False}
    assert event["resources"] == {"cpu_milli": 8000, "memory_mib": 32768, "gpu_count": 4, "gpu_milli": 1000,
                                  "gpu_models": ["A100"], "gpu_memory_mib": 40960, "accelerators": []}


def test_defaults_no_latest_start_and_all_or_nothing(client, sink, alpha):
    doc = {k: v for k, v in BID.items() if k not in ("latest_start_at", "gang", "gpu_memory")}
    _kind, event = _bid_event(sink, client, alpha, doc)
    assert event["latest_start_at"] is None and event["gang"] is True and event["resources"]["gpu_memory_mib"] == 0


def test_the_same_bid_as_the_cli_bid_form(client, sink, alpha):
    from suanli.schemas.task_spec import bid_from_document

    _kind, event = _bid_event(sink, client, alpha, BID)
    form = bid_from_document({"id": "b-1", "tenant": "alpha", "cell": "c", "gpus": 4, "gpu_model": "A100",
                              "gpu_memory": "40Gi", "cpu": 8, "memory": "32Gi", "start": T0,
                              "latest_start": T0 + 2 * H, "duration": "4h", "price": 3.0, "gang": False},
                             now_ms=1_700_000_000_000)
    drop = ("event_id",)
    assert {k: v for k, v in event.items() if k not in drop} == {k: v for k, v in form.items() if k not in drop}


@pytest.mark.parametrize("change, says", [
    ({"latest_start_at": T0 - 1}, "latest_start_at: 2030-03-17T17:46:39Z is before the earliest start"),
    ({"duration": "0h"}, "duration: the window must be longer than 0"),
    ({"duration": None, "duration_ms": 0}, "duration_ms"),
    ({"duration": None}, "duration: give duration"),
    ({"price": -0.5}, "price"),
    ({"resources": {"cpu": 1, "memory": "1Gi"}}, "resources.gpu: a reservation holds whole GPUs: give at least 1"),
    ({"resources": {"cpu": 1, "memory": "1Gi", "gpu": 0.5}}, "resources.gpu: a reservation holds whole GPUs, not a "
                                                             "share"),
    ({"resources": {"cpu": 1, "memory": "1Gi", "gpu": 1.5}}, "whole GPUs must be an integer"),
    ({"resources": {"gpu": 1}}, "give cpu"),
    ({"gpu_memory": "lots"}, "gpu_memory"),
    ({"gang": "sometimes"}, "gang"),
    ({"start_at": "tomorrow"}, "start_at"),
    ({"bid_id": "no spaces"}, "bid_id"),
    ({"surprise": 1}, "surprise"),
])
def test_bad_bids_are_422_naming_the_field_and_nothing_is_sent(client, sink, alpha, change, says):
    r = client.post("/v1/bids", json={**BID, **change}, headers=alpha)
    assert r.status_code == 422, r.text
    assert says in r.json()["detail"], r.json()["detail"]
    assert "Traceback" not in r.text and sink.events == []


# ------------------------------------------------------------------ what became of it
def test_a_bid_goes_from_submitted_to_granted_with_the_tokens_terms(client, service, sink, alpha, beta):
    feed(service.model, ("raw_tasks", *_bid_event(sink, client, alpha, BID)))
    r = client.get("/v1/bids/b-1", headers=alpha)
    assert r.status_code == 200 and r.json()["status"] == "SUBMITTED" and r.json()["reservation_id"] == ""
    assert r.json()["latest_start_at"] == T0 + 2 * H and r.json()["gang"] is False
    assert r.json()["clearing_price"] is None
    feed(service.model, granted("b-1", "alpha"))
    got = client.get("/v1/bids/b-1", headers=alpha).json()
    assert {k: got[k] for k in ("status", "reservation_id", "node_id", "gpu_devices", "granted_start_at",
                                "granted_end_at", "clearing_price", "reservation_status", "decided_at")} == {
        "status": "GRANTED", "reservation_id": "rsv-b-1", "node_id": "n1", "gpu_devices": [0, 1],
        "granted_start_at": T0 + H, "granted_end_at": T0 + 5 * H, "clearing_price": 1.75,
        "reservation_status": "GRANTED", "decided_at": 1011}
    assert [b["status"] for b in client.get("/v1/bids", headers=alpha).json()["bids"]] == ["GRANTED"]
    # another tenant's bid is not found, like a missing one
    for who, path in [(beta, "/v1/bids/b-1"), (alpha, "/v1/bids/nope")]:
        r = client.get(path, headers=who)
        assert r.status_code == 404 and r.json()["detail"].startswith("no bid"), r.text
    assert client.get("/v1/bids", headers=beta).json()["bids"] == []


@pytest.mark.parametrize("needed", [2.5, None])
def test_a_lost_bid_says_why_and_what_would_have_won(client, service, sink, alpha, needed):
    feed(service.model, ("raw_tasks", *_bid_event(sink, client, alpha, BID)), rejected("b-1", "alpha", needed))
    got = client.get("/v1/bids/b-1", headers=alpha).json()
    assert (got["status"], got["reason"], got["needed_price"], got["reservation_id"]) == ("LOST", "outbid", needed, "")


def test_reservations_list_every_token_hiding_other_tenants_ids(client, service, sink, alpha, beta):
    feed(service.model, ("raw_tasks", *_bid_event(sink, client, alpha, BID)))
    feed(service.model, ("raw_tasks", *_bid_event(sink, client, beta, {**BID, "bid_id": "secret-b"})))
    feed(service.model, granted("b-1", "alpha"), granted("secret-b", "beta", node="n2", devices=(3,), price=2.0),
         submitted("job", "alpha", "rsv-b-1"), placed("job", "alpha", [1]),
         ("decisions", "ReservationReleased", {"event_id": "rel", "reservation_id": "rsv-b-1", "cell": "c",
                                               "reason": "unused", "at": T0 + H, "gpu_devices": [0],
                                               "node_id": "n1", "claimed_by": "job", "provenance": None}))
    rows = client.get("/v1/reservations", headers=alpha).json()["reservations"]
    assert [r["mine"] for r in rows] == [True, False]
    mine, other = rows
    assert {k: mine[k] for k in ("reservation_id", "bid_id", "tenant", "node_id", "gpu_devices", "start_at", "end_at",
                                 "clearing_price", "status", "claimed_by", "used_gpus", "gpus_released", "use",
                                 "bid_price")} == {
        "reservation_id": "rsv-b-1", "bid_id": "b-1", "tenant": "alpha", "node_id": "n1", "gpu_devices": [0, 1],
        "start_at": T0 + H, "end_at": T0 + 5 * H, "clearing_price": 1.75, "status": "CLAIMED",
        "claimed_by": ["job"], "used_gpus": 1, "gpus_released": 1, "use": 0.5, "bid_price": 3.0}
    assert {k: other[k] for k in ("reservation_id", "bid_id", "tenant", "node_id", "gpu_devices", "clearing_price",
                                  "status", "bid_price")} == {
        "reservation_id": OTHER_RESERVATION, "bid_id": OTHER_RESERVATION, "tenant": OTHER_TENANT_NAME,
        "node_id": "n2", "gpu_devices": [3], "clearing_price": 2.0, "status": "GRANTED", "bid_price": 0.0}
    assert "secret-b" not in client.get("/v1/reservations", headers=alpha).text
    # beta sees its own, and alpha's claimant hidden
    rows = client.get("/v1/reservations", headers=beta).json()["reservations"]
    assert [(r["reservation_id"], r["claimed_by"]) for r in rows] == [(OTHER_RESERVATION, [OTHER_TENANT]),
                                                                      ("rsv-secret-b", [])]
    # filters
    only = client.get("/v1/reservations?mine=true", headers=beta).json()["reservations"]
    assert [r["reservation_id"] for r in only] == ["rsv-secret-b"]
    claimed = client.get("/v1/reservations?status=claimed", headers=alpha).json()["reservations"]
    assert [r["reservation_id"] for r in claimed] == ["rsv-b-1"]
    assert client.get("/v1/reservations?cell=elsewhere", headers=alpha).json()["reservations"] == []
    assert client.get("/v1/reservations?limit=0", headers=alpha).status_code == 422
    assert client.get("/v1/reservations").status_code == 401


def test_a_claimants_decision_path_does_not_leak_another_tenants_token(client, service, sink, alpha, beta):
    """A decision that names beta's token (e.g. a bronze victim's) is redacted for alpha."""
    from suanli.api.redact import Redactor

    feed(service.model, granted("secret-b", "beta"))
    hide = Redactor(service.model.lifecycle.tasks, service.model.submissions, "alpha", service.model.reservations)
    assert hide.text("lent from rsv-secret-b: preempted") == f"lent from {OTHER_RESERVATION}: preempted"
    assert Redactor({}, {}, "beta", service.model.reservations).text("rsv-secret-b.") == "rsv-secret-b."


# ------------------------------------------------------------------ the task form
def test_a_task_names_its_token_with_the_reservation_field(client, sink, alpha):
    doc = {"id": "on-token", "cell": "c", "resources": {"cpu": 1, "memory": "1Gi", "gpu": 1}, "reservation": "rsv-b-1"}
    r = client.post("/v1/tasks", json=doc, headers=alpha)
    assert r.status_code == 202, r.text
    assert sink.events[-1][1]["labels"] == {"reservation": "rsv-b-1"}
    r = client.post("/v1/tasks", json={**doc, "id": "x2", "labels": {"reservation": "rsv-other"}}, headers=alpha)
    assert r.status_code == 422 and "contradicts" in r.json()["detail"]


# ------------------------------------------------------------------ gRPC
def _grpc(service, scenario):
    async def main():
        server, port = build_server(service, TokenStore({v: k for k, v in TOKENS.items()}), "127.0.0.1:0")
        await server.start()
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                return await scenario(pb_grpc.SuanliStub(channel))
        finally:
            await server.stop(grace=None)
    return asyncio.run(main())


def test_bids_and_reservations_over_grpc(service, sink):
    auth = (("authorization", f"Bearer {TOKENS['alpha']}"),)

    async def scenario(stub):
        reply = await stub.SubmitBid(pb.SubmitBidRequest(bid=pb.BidSpec(
            bid_id="g-1", cell="c", resources=pb.ResourcesSpec(cpu=2, memory="4Gi", gpu=2), start_at=T0,
            latest_start_at=T0 + H, duration="1h", price=1.0, gang=False)), metadata=auth)
        assert reply.bid_id == "g-1"
        feed(service.model, ("raw_tasks", *sink.events[-1]), granted("g-1", "alpha"))
        got = await stub.GetBid(pb.GetBidRequest(bid_id="g-1"), metadata=auth)
        assert (got.status, got.reservation_id, got.clearing_price, got.gang) == ("GRANTED", "rsv-g-1", 1.75, False)
        assert got.latest_start_at == T0 + H and not got.HasField("needed_price")
        listed = await stub.ListReservations(pb.ListReservationsRequest(mine=True), metadata=auth)
        assert [r.reservation_id for r in listed.reservations] == ["rsv-g-1"]
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await stub.GetBid(pb.GetBidRequest(bid_id="nope"), metadata=auth)
        assert err.value.code() == grpc.StatusCode.NOT_FOUND
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await stub.SubmitBid(pb.SubmitBidRequest(bid=pb.BidSpec(
                cell="c", resources=pb.ResourcesSpec(cpu=2, memory="4Gi", gpu=2), start_at=T0, latest_start_at=1,
                duration="1h", price=1.0)), metadata=auth)
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "latest_start_at" in err.value.details()
    _grpc(service, scenario)
    assert sink.events[0][1]["gang"] is False and len(sink.events) == 1


# ------------------------------------------------------------------ the dashboard
@pytest.fixture()
def ui_client(service, tokens_file):
    from fastapi.testclient import TestClient

    from suanli.api.auth import TokenStore
    from suanli.api.rest import create_app
    from suanli.api.ui.routes import Dashboard

    ui = Dashboard(service.model)
    app = create_app(service, TokenStore.from_file(tokens_file))
    ui.mount(app)
    with TestClient(app) as c:
        yield c
    ui.close()


def test_the_reservations_page_lists_bids_and_tokens(ui_client, service, sink, alpha, beta):
    feed(service.model, ("raw_tasks", *_bid_event(sink, ui_client, alpha, BID)))
    feed(service.model, ("raw_tasks", *_bid_event(sink, ui_client, beta, {**BID, "bid_id": "secret-b"})))
    feed(service.model, granted("b-1", "alpha"), rejected("secret-b", "beta", 4.0),
         granted("secret-c", "beta", node="n2", devices=(5,)))
    r = ui_client.get("/ui/reservations", headers=alpha)
    assert r.status_code == 200 and "Reservation tokens" in r.text and 'href="/ui/reservations"' in r.text
    assert "rsv-b-1" in r.text and "GRANTED" in r.text and OTHER_TENANT_NAME in r.text
    assert "secret" not in r.text and "beta" not in r.text
    r = ui_client.get("/ui/reservations?fragment=1&status=GRANTED", headers=beta)
    assert r.status_code == 200 and "LOST" in r.text and "4 per GPU-hour would have won" in r.text
    assert "rsv-secret-c" in r.text and "rsv-b-1" not in r.text
    assert ui_client.get("/ui/reservations?fragment=1").status_code == 401
    assert ui_client.get("/ui/reservations", follow_redirects=False).status_code == 303
