"""Operator operations of the API: node drain and uncordon (registered nodes only) and a
cell's policy (checked as the scheduler will); operators only.

Unit tests run the REST app (TestClient) and the gRPC server over a hand-fed read model and
an in-memory sink; the stack test runs ``suanli api serve`` and the intake worker in a
namespace of their own and follows the drain from the REST call to the cell log.
"""
from __future__ import annotations

import asyncio
import json
import time
import uuid
from pathlib import Path

import grpc
import pytest
from api_helpers import TOKENS, ApiProcess, ListSink, feed, make_service

from suanli.api import suanli_pb2 as pb
from suanli.api import suanli_pb2_grpc as pb_grpc
from suanli.api.auth import TokenStore
from suanli.api.grpc_server import build_server
from suanli.errors import ConfigError
from suanli.deploy.waiting import wait_for

OPS_TOKEN = "tok-ops-5555555555"


def _tokens_file(path: Path) -> Path:
    lines = ['operators = ["ops"]', "[tokens]"] + [f'"{t}" = "{tenant}"' for tenant, t in TOKENS.items()]
    path.write_text("\n".join(lines + [f'"{OPS_TOKEN}" = "ops"']) + "\n")
    return path


OPS = {"Authorization": f"Bearer {OPS_TOKEN}"}


def node(node_id: str, cell: str) -> tuple[str, str, dict]:
    return ("cell_log", "NodeRegistered", {
        "event_id": f"reg/{cell}/{node_id}", "node_id": node_id, "cell": cell, "cpu_milli": 8000,
        "memory_mib": 16384, "connector": "sim", "accelerators": []})


@pytest.fixture()
def ops_service():
    service = make_service(ListSink())
    service.operators = frozenset({"ops"})
    feed(service.model, node("n1", "c"), node("n2", "c"), node("n1", "other"))
    return service


@pytest.fixture()
def ops_client(ops_service, tmp_path):
    from fastapi.testclient import TestClient

    from suanli.api.rest import create_app

    with TestClient(create_app(ops_service, TokenStore.from_file(_tokens_file(tmp_path / "t.toml")))) as c:
        yield c


def test_operators_come_from_the_token_file_and_must_own_a_token(tmp_path):
    store = TokenStore.from_file(_tokens_file(tmp_path / "t.toml"))
    assert store.operators == {"ops"} and store.tenant(OPS_TOKEN) == "ops"
    as_json = tmp_path / "t.json"
    as_json.write_text(json.dumps({"tokens": {OPS_TOKEN: "ops"}, "operators": ["ops"]}))
    assert TokenStore.from_file(as_json).operators == {"ops"}
    flat = tmp_path / "flat.json"
    flat.write_text(json.dumps({OPS_TOKEN: "ops"}))
    assert TokenStore.from_file(flat).operators == frozenset()                 # none unless named
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"tokens": {OPS_TOKEN: "ops"}, "operators": ["root"]}))
    with pytest.raises(ConfigError, match=r"operators \['root'\] own no token"):
        TokenStore.from_file(bad)


def test_an_operator_drains_and_uncordons_a_registered_node(ops_client, ops_service):
    r = ops_client.post("/v1/nodes/n2/drain", headers=OPS, json={"reason": "kernel upgrade"})
    assert r.status_code == 202, r.text
    body = r.json()
    assert (body["node_id"], body["cell"], body["status"], body["previous"]) == ("n2", "c", "DRAINING", "READY")
    [(kind, event)] = ops_service.sink.events
    assert kind == "NodeStatusChanged" and event["event_id"] == body["event_id"]
    assert (event["node_id"], event["cell"], event["status"], event["reason"]) == ("n2", "c", "DRAINING",
                                                                                   "kernel upgrade")
    feed(ops_service.model, ("cell_log", "NodeStatusChanged", event))        # intake forwarded it
    nodes = {n["node_id"]: n for n in ops_client.get("/v1/nodes?cell=c", headers=OPS).json()["nodes"]}
    assert nodes["n2"]["status"] == "DRAINING" and nodes["n1"]["status"] == "READY"
    back = ops_client.post("/v1/nodes/n2/uncordon", headers=OPS)              # body optional
    assert back.status_code == 202 and back.json()["status"] == "READY" and back.json()["previous"] == "DRAINING"
    assert ops_service.sink.events[-1][1]["reason"] == "uncordon by ops (API)"


@pytest.mark.parametrize("path, headers, body, code, said", [
    ("/v1/nodes/n2/drain", {"Authorization": f"Bearer {TOKENS['alpha']}"}, None, 403, "may not drain nodes"),
    ("/v1/nodes/n2/drain", {}, None, 401, "token"),
    ("/v1/nodes/n9/drain", OPS, None, 404, "no node 'n9' has registered"),
    ("/v1/nodes/n2/drain", OPS, {"cell": "nowhere"}, 404, "no cell 'nowhere'"),
    ("/v1/nodes/n2/drain", OPS, {"cell": "other"}, 404, "no node 'n2' in cell 'other'"),
    ("/v1/nodes/n1/drain", OPS, None, 422, "registered in cells c, other"),
    ("/v1/nodes/n1/drain", OPS, {"cell": "c", "force": True}, 422, "force"),
    ("/v1/nodes/n1/uncordon", {"Authorization": f"Bearer {TOKENS['beta']}"}, None, 403, "may not uncordon nodes"),
])
def test_refused_node_operations_say_why_and_write_nothing(ops_client, ops_service, path, headers, body, code, said):
    r = ops_client.post(path, headers=headers, json=body)
    assert r.status_code == code and said in r.json()["detail"], r.text
    assert ops_service.sink.events == []


def test_an_operator_sets_a_cells_policy_and_it_shows_once_in_the_cell_log(ops_client, ops_service):
    r = ops_client.put("/v1/cells/c/policy", headers=OPS,
                       json={"strategy": "bestfit", "config_json": '{"qos": {"aging_ms": 5000}}'})
    assert r.status_code == 202, r.text
    body = r.json()
    [(kind, event)] = ops_service.sink.events
    assert kind == "PolicyChanged" and event["event_id"] == body["event_id"]
    assert (event["cell"], event["strategy"], event["config_json"], event["changed_by"]) == \
        ("c", "bestfit", '{"qos":{"aging_ms":5000}}', "ops (API)")
    assert (body["strategy"], body["config_json"]) == ("bestfit", '{"qos":{"aging_ms":5000}}')
    assert ops_client.get("/v1/cells/c/policy", headers=OPS).json()["set"] is False     # stored, not yet in force
    feed(ops_service.model, ("cell_log", "PolicyChanged", event))                        # intake forwarded it
    shown = ops_client.get("/v1/cells/c/policy", headers=OPS).json()
    assert (shown["strategy"], shown["aging_ms"], shown["config_digest"]) == ("bestfit", 5000, body["config_digest"])
    default = ops_client.put("/v1/cells/new-cell/policy", headers=OPS, json={})         # any cell; defaults
    assert default.status_code == 202 and default.json()["strategy"] == "default"
    assert default.json()["config_json"] == "{}"


@pytest.mark.parametrize("headers, body, code, said", [
    ({"Authorization": f"Bearer {TOKENS['alpha']}"}, {}, 403, "may not set a cell's policy"),
    ({}, {}, 401, "token"),
    (OPS, {"config_json": "{qos"}, 422, "config_json: not JSON"),
    (OPS, {"config_json": "[1]"}, 422, "must be a JSON object, not list"),
    (OPS, {"config_json": '{"qos": {"agign_ms": 1}}'}, 422, "agign_ms"),
    (OPS, {"config_json": '{"qos": {"aging_ms": -1}}'}, 422, "qos.aging_ms"),
    (OPS, {"strategy": "no-such"}, 422, "unknown strategy 'no-such'"),
    (OPS, {"strategy": "bestfit", "config": {}}, 422, "config"),
])
def test_refused_policies_say_why_and_write_nothing(ops_client, ops_service, headers, body, code, said):
    r = ops_client.put("/v1/cells/c/policy", headers=headers, json=body)
    assert r.status_code == code and said in r.json()["detail"], r.text
    assert ops_service.sink.events == []


def test_the_cell_names_which_node_when_the_id_is_in_two_cells(ops_client, ops_service):
    r = ops_client.post("/v1/nodes/n1/drain", headers=OPS, json={"cell": "other"})
    assert r.status_code == 202 and r.json()["cell"] == "other"
    assert ops_service.sink.events[0][1]["cell"] == "other"


def test_drain_over_grpc_is_the_same_operation(ops_service):
    tokens = TokenStore({**{v: k for k, v in TOKENS.items()}, OPS_TOKEN: "ops"}, frozenset({"ops"}))

    async def main():
        server, port = build_server(ops_service, tokens, "127.0.0.1:0")
        await server.start()
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                stub = pb_grpc.SuanliStub(channel)
                reply = await stub.DrainNode(pb.DrainNodeRequest(node_id="n1", cell="c", reason="rack move"),
                                             metadata=(("authorization", f"Bearer {OPS_TOKEN}"),))
                assert (reply.node_id, reply.cell, reply.status) == ("n1", "c", "DRAINING")
                for request, metadata, code in (
                        (pb.DrainNodeRequest(node_id="n2"), (("authorization", TOKENS["alpha"]),),
                         grpc.StatusCode.PERMISSION_DENIED),
                        (pb.DrainNodeRequest(node_id="ghost"), (("authorization", OPS_TOKEN),),
                         grpc.StatusCode.NOT_FOUND),
                        (pb.DrainNodeRequest(node_id="n1"), (("authorization", OPS_TOKEN),),
                         grpc.StatusCode.INVALID_ARGUMENT)):
                    with pytest.raises(grpc.aio.AioRpcError) as err:
                        await stub.DrainNode(request, metadata=metadata)
                    assert err.value.code() == code, err.value.details()
                back = await stub.UncordonNode(pb.UncordonNodeRequest(node_id="n1", cell="c"),
                                               metadata=(("authorization", OPS_TOKEN),))
                assert back.status == "READY"
                policy = await stub.SetCellPolicy(pb.SetCellPolicyRequest(cell="c", policy=pb.PolicyRequest(strategy="bestfit")),
                                                  metadata=(("authorization", OPS_TOKEN),))
                assert (policy.cell, policy.strategy, policy.config_json) == ("c", "bestfit", "{}")
                for request, metadata, code in (
                        (pb.SetCellPolicyRequest(cell="c"), (("authorization", TOKENS["alpha"]),),
                         grpc.StatusCode.PERMISSION_DENIED),
                        (pb.SetCellPolicyRequest(cell="c", policy=pb.PolicyRequest(config_json='{"nope": 1}')),
                         (("authorization", OPS_TOKEN),), grpc.StatusCode.INVALID_ARGUMENT)):
                    with pytest.raises(grpc.aio.AioRpcError) as err:
                        await stub.SetCellPolicy(request, metadata=metadata)
                    assert err.value.code() == code, err.value.details()
        finally:
            await server.stop(grace=None)

    asyncio.run(main())
    assert [(e["node_id"], e["cell"], e["status"], e["reason"]) for k, e in ops_service.sink.events
            if k == "NodeStatusChanged"] == [("n1", "c", "DRAINING", "rack move"),
                                             ("n1", "c", "READY", "uncordon by ops (API)")]
    assert [(e["cell"], e["strategy"]) for k, e in ops_service.sink.events if k == "PolicyChanged"] == [("c", "bestfit")]


# ------------------------------------------------------------------ on the stack
@pytest.mark.stack
@pytest.mark.timeout(300)
def test_a_drain_through_the_api_lands_on_the_cell_log(stack, tmp_path):
    import httpx

    from suanli.config import load_settings, to_env
    from suanli.deploy.plane import worker_processes
    from suanli.schemas.codec import Codec
    from suanli.schemas.registry import RegistryClient
    from suanli.streams.kafka_io import EventConsumer, EventProducer, ensure_topics
    from suanli.streams.topics import TopicNames, core_topics

    settings = load_settings(namespace=f"t{uuid.uuid4().hex[:10]}", partitions=1)
    names, cell = TopicNames(settings.namespace), f"api-drain-{uuid.uuid4().hex[:6]}"
    asyncio.run(ensure_topics(settings.bootstrap_servers, core_topics(settings.partitions, settings.namespace)))
    intake, argv = worker_processes(settings)["intake"]
    intake.start(argv, env=to_env(settings))
    server = ApiProcess(settings, _tokens_file(tmp_path / "tokens.toml"), tmp_path / "api.log")

    async def io(kind: str, payload: dict | None = None) -> list:
        with RegistryClient(settings.registry_url) as registry:
            if payload is not None:
                async with EventProducer(settings.bootstrap_servers, Codec(registry),
                                         namespace=settings.namespace) as producer:
                    await (await producer.publish(kind, payload))
                return []
            async with EventConsumer(settings.bootstrap_servers, Codec(registry), [names.cell_log]) as consumer:
                return [r.payload for r in await consumer.read_until_end() if r.kind == kind]

    try:
        server.wait_ready()
        asyncio.run(io("NodeRegistered", {
            "event_id": f"reg/{cell}/n1", "node_id": "n1", "cell": cell, "site": "s", "region": "r", "zone": "z",
            "tier": "cloud", "arch": "x86_64", "cpu_milli": 8000, "memory_mib": 16384, "accelerators": [],
            "connector": "sim", "registered_at": int(time.time() * 1000)}))
        with httpx.Client(base_url=server.url, headers=OPS, timeout=30) as http:
            wait_for("the node in GET /v1/nodes",
                     lambda: http.get("/v1/nodes", params={"cell": cell}).json()["nodes"])
            r = http.post("/v1/nodes/n1/drain", json={"reason": "firmware"})
            assert r.status_code == 202, r.text
            body = r.json()
            assert body["position"]["topic"] == names.raw_nodes
            landed = wait_for("the DRAINING on the cell log",
                              lambda: [p for p in asyncio.run(io("NodeStatusChanged"))
                                       if p["event_id"] == body["event_id"]])
            assert (landed[0]["node_id"], landed[0]["cell"], landed[0]["status"]) == ("n1", cell, "DRAINING")
            wait_for("DRAINING in GET /v1/nodes",
                     lambda: http.get("/v1/nodes", params={"cell": cell}).json()["nodes"][0]["status"] == "DRAINING")
            alpha = http.post("/v1/nodes/n1/drain", headers={"Authorization": f"Bearer {TOKENS['alpha']}"})
            assert alpha.status_code == 403
            # a policy set through the API reaches the cell log and comes back in force through GET
            assert http.get(f"/v1/cells/{cell}/policy").json()["set"] is False
            put = http.put(f"/v1/cells/{cell}/policy", json={"strategy": "bestfit",
                                                              "config_json": '{"qos": {"aging_ms": 5000}}'})
            assert put.status_code == 202 and put.json()["position"]["topic"] == names.raw_policy, put.text
            shown = wait_for("the policy in GET /v1/cells/CELL/policy",
                             lambda: (p := http.get(f"/v1/cells/{cell}/policy").json())["set"] and p)
            assert (shown["strategy"], shown["config_json"], shown["aging_ms"], shown["event_id"]) == \
                ("bestfit", '{"qos":{"aging_ms":5000}}', 5000, put.json()["event_id"])
            assert [p["event_id"] for p in asyncio.run(io("PolicyChanged"))] == [put.json()["event_id"]]
    finally:
        server.stop()
        intake.stop()
