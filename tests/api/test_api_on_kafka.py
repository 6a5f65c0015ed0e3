"""``suanli api serve`` on the real broker and registry, in a namespace of its own.

No scheduler runs here: submissions stay on the raw topic (status SUBMITTED), which is
what these tests look at. ``test_api_with_plane.py`` follows a task to its placement.
"""
from __future__ import annotations

import asyncio
import time
import uuid

import grpc
import pytest
from api_helpers import ApiProcess, TOKENS, running_api

from suanli.api import suanli_pb2 as pb
from suanli.api import suanli_pb2_grpc as pb_grpc
from suanli.schemas.codec import Codec
from suanli.schemas.registry import RegistryClient
from suanli.streams.kafka_io import end_offsets, read_range
from suanli.streams.topics import TopicNames

pytestmark = pytest.mark.stack


@pytest.fixture(scope="module")
def api(stack, tmp_path_factory):
    with running_api(tmp_path_factory.mktemp("api"), partitions=2) as server:
        yield server


def _record(api: ApiProcess, position: dict):
    with RegistryClient(api.settings.registry_url) as registry:
        codec = Codec(registry)
        [record] = asyncio.run(read_range(api.settings.bootstrap_servers, position["topic"], position["partition"],
                                          position["offset"], position["offset"] + 1))
        kind, payload = codec.decode(record.value)
        return record, kind, payload, codec.encode(kind, payload)


def _raw_ends(api: ApiProcess) -> dict[int, int]:
    return asyncio.run(end_offsets(api.settings.bootstrap_servers, TopicNames(api.settings.namespace).raw_tasks))


def test_rest_submission_is_a_task_submitted_on_the_raw_topic(api):
    doc = {"id": f"rest-{uuid.uuid4().hex[:8]}", "cell": "c1", "resources": {"cpu": 6, "memory": "12Gi", "gpu": 0.46,
           "gpu_models": ["V100M16", "V100M32"]}, "qos": "gold", "labels": {"workload": "training"},
           "duration": "2h", "env": {"EPOCHS": "3"}, "job": "fl-7"}
    with api.client("alpha") as http:
        r = http.post("/v1/tasks", json=doc)
    assert r.status_code == 202, r.text
    body = r.json()
    assert body["position"]["topic"] == TopicNames(api.settings.namespace).raw_tasks
    record, kind, payload, reencoded = _record(api, body["position"])
    assert kind == "TaskSubmitted" and record.key == doc["id"].encode()
    assert payload == {
        "event_id": body["event_id"], "task_id": doc["id"], "tenant": "alpha", "cell": "c1",
        "submitted_at": body["submitted_at"],
        "resources": {"cpu_milli": 6000, "memory_mib": 12288, "gpu_count": 1, "gpu_milli": 460,
                      "gpu_models": ["V100M16", "V100M32"], "gpu_memory_mib": 0, "accelerators": []},
        "qos_tier": "GOLD", "priority": 0, "labels": {"workload": "training"}, "deadline": None,
        "duration_estimate_ms": 7_200_000, "command": None, "profile": None, "env": {"EPOCHS": "3"},
        "job_id": "fl-7"}
    # byte for byte what a direct producer writes with the shared codec (Confluent framing)
    assert record.value == reencoded and record.value[0] == 0


def test_an_urgent_submission_carries_the_lane_header_on_the_raw_topic(api):
    """Intake ends its micro-batch wait for a raw record with the header (streams/batch_wait.py);
    a normal task's record has none."""
    from suanli.streams.records import URGENT_HEADER, is_urgent

    with api.client("alpha") as http:
        positions = {lane: http.post("/v1/tasks", json={"id": f"{lane}-{uuid.uuid4().hex[:8]}", "cell": "c1",
                                                        "resources": {"cpu": 1, "memory": "1Gi"},
                                                        "labels": {"scheduling": lane}})
                     for lane in ("urgent", "batch")}
    for lane, r in positions.items():
        assert r.status_code == 202, r.text
        record, kind, payload, _ = _record(api, r.json()["position"])
        assert kind == "TaskSubmitted" and payload["labels"]["scheduling"] == lane
        assert is_urgent(record.headers) == (lane == "urgent"), record.headers
        assert list(record.headers) == ([URGENT_HEADER] if lane == "urgent" else [])


def test_malformed_submissions_are_4xx_naming_the_field_and_reach_no_topic(api):
    before = _raw_ends(api)
    bad = [({"resources": {"cpu": 1, "memory": "1Gi", "gpu": -1}}, 422, "resources.gpu"),
           ({"resources": {"cpu": 1, "memory": "1Gi"}, "qos": "platinum"}, 422, "qos"),
           ({"resources": {"cpu": 1, "memory": "1Gi"}, "tenant": "beta"}, 422, "tenant"),
           ({"resources": {"cpu": 1, "memory": "1Gi"}, "duration_ms": 2**64}, 422, "duration_estimate_ms"),
           ({"resources": {"cpu": 1, "memory": "1Gi"}, "priority": 10**8}, 422, "priority"),
           ({"resource": {"cpu": 1}}, 422, "resource")]
    with api.client("alpha") as http:
        for doc, status, field in bad:
            r = http.post("/v1/tasks", json=doc)
            assert r.status_code == status and field in r.json()["detail"], r.text
        r = http.post("/v1/bids", json={"resources": {"cpu": 1, "memory": "1Gi"}, "start_at": 1, "price": -3,
                                        "duration": "1h"})
        assert r.status_code == 422 and "price" in r.json()["detail"]
    with api.client(None) as anonymous:
        assert anonymous.post("/v1/tasks", json={"resources": {"cpu": 1, "memory": "1Gi"}}).status_code == 401

    async def over_grpc():
        async with grpc.aio.insecure_channel(api.grpc_address) as channel:
            stub = pb_grpc.SuanliStub(channel)
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await stub.SubmitTask(pb.SubmitTaskRequest(task=pb.TaskSpec(resources=pb.ResourcesSpec(
                    cpu=1, memory="1Gi", gpu=100))), metadata=(("authorization", f"Bearer {TOKENS['alpha']}"),))
            return err.value
    err = asyncio.run(over_grpc())
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT and "resources.gpu" in err.details()
    assert _raw_ends(api) == before


def test_tenants_see_only_their_own_tasks(api):
    task = f"iso-{uuid.uuid4().hex[:8]}"
    with api.client("alpha") as alpha, api.client("beta") as beta:
        assert alpha.post("/v1/tasks", json={"id": task, "resources": {"cpu": 1, "memory": "1Gi"}}).status_code == 202
        mine = alpha.get(f"/v1/tasks/{task}")          # read your writes: the follower syncs on a miss
        assert mine.status_code == 200 and mine.json()["status"] == "SUBMITTED" and mine.json()["tenant"] == "alpha"
        before = _raw_ends(api)
        for method, path in [("get", f"/v1/tasks/{task}"), ("get", f"/v1/tasks/{task}/audit"),
                             ("get", f"/v1/tasks/{task}/why-pending"), ("post", f"/v1/tasks/{task}/cancel")]:
            r = beta.request(method, path)
            assert r.status_code == 404 and r.json()["detail"] == f"no task {task!r}", (path, r.text)
        assert _raw_ends(api) == before                   # beta's cancel reached nothing
        assert task not in {t["task_id"] for t in beta.get("/v1/tasks").json()["tasks"]}
        assert task in {t["task_id"] for t in alpha.get("/v1/tasks").json()["tasks"]}
        assert beta.post("/v1/tasks", json={"id": task, "resources": {"cpu": 1, "memory": "1Gi"}}).status_code == 409
        trail = alpha.get(f"/v1/tasks/{task}/audit").json()
        assert trail["decisions"] == [] and trail["status"] == "SUBMITTED"
        r = alpha.post(f"/v1/tasks/{task}/cancel", json={"reason": "test"})
        assert r.status_code == 202, r.text
        _record_, kind, payload, _ = _record(api, r.json()["position"])
        assert kind == "TaskCancelled" and payload["tenant"] == "alpha" and payload["task_id"] == task


def test_bids_round_trip(api):
    bid = {"resources": {"cpu": 8, "memory": "32Gi", "gpu": 4, "gpu_models": ["A100"]},
           "start_at": 1_900_000_000_000, "duration": "4h", "price": 3.5, "cell": "c1"}
    with api.client("beta") as beta, api.client("alpha") as alpha:
        r = beta.post("/v1/bids", json=bid)
        assert r.status_code == 202, r.text
        _record_, kind, payload, _ = _record(api, r.json()["position"])
        assert kind == "ReservationBid" and payload["tenant"] == "beta" and payload["duration_ms"] == 4 * 3_600_000
        bid_id = r.json()["bid_id"]
        for _ in range(50):                               # lists do not wait for the fold: poll
            listed = beta.get("/v1/bids").json()["bids"]
            if listed:
                break
            time.sleep(0.1)
        assert [b["bid_id"] for b in listed] == [bid_id] and listed[0]["resources"]["gpu_count"] == 4
        assert alpha.get("/v1/bids").json()["bids"] == []


def test_a_bid_with_a_window_is_granted_from_the_decisions_topic(api):
    """The new bid fields reach the raw topic; a ReservationGranted on the decisions topic (the
    scheduler's, written here by hand) turns the bid GRANTED and lists its token, hidden from
    the other tenant."""
    from suanli.processors import model as m
    from suanli.streams.kafka_io import EventProducer

    bid_id = f"win-{uuid.uuid4().hex[:8]}"
    bid = {"bid_id": bid_id, "cell": "c1", "resources": {"cpu": 4, "memory": "16Gi", "gpu": 2},
           "start_at": 1_900_000_000_000, "latest_start_at": 1_900_003_600_000, "duration": "2h", "price": 2.0,
           "gang": False, "gpu_memory": "40Gi"}
    with api.client("alpha") as alpha, api.client("beta") as beta:
        r = alpha.post("/v1/bids", json={**bid, "latest_start_at": 1})
        assert r.status_code == 422 and "latest_start_at" in r.json()["detail"], r.text
        r = alpha.post("/v1/bids", json=bid)
        assert r.status_code == 202, r.text
        _record_, kind, payload, _ = _record(api, r.json()["position"])
        assert kind == "ReservationBid" and payload["latest_start_at"] == 1_900_003_600_000
        assert payload["gang"] is False and payload["resources"]["gpu_memory_mib"] == 40960
        got = alpha.get(f"/v1/bids/{bid_id}")       # read your writes
        assert got.status_code == 200 and got.json()["status"] == "SUBMITTED", got.text
        assert beta.get(f"/v1/bids/{bid_id}").status_code == 404

        grant = m.ReservationGranted(
            event_id=f"grant/{bid_id}", reservation_id=f"rsv-{bid_id}", bid_id=bid_id, tenant="alpha", cell="c1",
            node_id="n3", gpu_devices=(0, 1), start_at=1_900_001_000_000, end_at=1_900_008_200_000,
            clearing_price=1.5, bid_price=2.0, wanted_gpus=2, cpu_milli=4000, memory_mib=16384,
            provenance=m.Provenance(input=m.LogPosition(topic="x", partition=0, offset=0),
                                    strategy=m.StrategyRef(name="auction", version="1", config_digest="d"),
                                    candidates=(), filtered=(), path=("auction: cleared",),
                                    decided_at=1_900_000_500_000))

        async def decide():
            with RegistryClient(api.settings.registry_url) as registry:
                async with EventProducer(api.settings.bootstrap_servers, Codec(registry)) as producer:
                    topic = TopicNames(api.settings.namespace).decisions
                    await (await producer.send(topic, grant.KIND, m.to_avro(grant), key="c1"))
        asyncio.run(decide())
        for _ in range(100):                              # the follower folds it within a poll or two
            got = alpha.get(f"/v1/bids/{bid_id}").json()
            if got["status"] == "GRANTED":
                break
            time.sleep(0.1)
        assert (got["status"], got["reservation_id"], got["node_id"], got["clearing_price"]) == \
            ("GRANTED", f"rsv-{bid_id}", "n3", 1.5)
        mine = [t for t in alpha.get("/v1/reservations").json()["reservations"] if t["mine"]]
        assert [(t["reservation_id"], t["status"], t["gpu_devices"]) for t in mine] == \
            [(f"rsv-{bid_id}", "GRANTED", [0, 1])]
        seen_by_beta = beta.get("/v1/reservations").json()["reservations"]
        assert seen_by_beta and all(not t["mine"] for t in seen_by_beta) and bid_id not in str(seen_by_beta)


def test_grpc_submit_and_status_from_python(api):
    task = f"grpc-{uuid.uuid4().hex[:8]}"

    async def scenario():
        async with grpc.aio.insecure_channel(api.grpc_address) as channel:
            stub = pb_grpc.SuanliStub(channel)
            auth = (("authorization", f"Bearer {TOKENS['beta']}"),)
            reply = await stub.SubmitTask(pb.SubmitTaskRequest(task=pb.TaskSpec(
                id=task, cell="c2", resources=pb.ResourcesSpec(cpu_milli=500, memory_mib=256))), metadata=auth)
            status = await stub.GetTask(pb.GetTaskRequest(task_id=task), metadata=auth)
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await stub.GetTask(pb.GetTaskRequest(task_id=task),
                                   metadata=(("authorization", f"Bearer {TOKENS['alpha']}"),))
            return reply, status, err.value
    reply, status, err = asyncio.run(scenario())
    assert reply.tenant == "beta" and reply.cell == "c2"
    assert status.task_id == task and status.status == "SUBMITTED" and status.tenant == "beta"
    assert err.code() == grpc.StatusCode.NOT_FOUND
    _record_, kind, payload, _ = _record(api, {"topic": reply.position.topic, "partition": reply.position.partition,
                                               "offset": reply.position.offset})
    assert kind == "TaskSubmitted" and payload["resources"]["cpu_milli"] == 500
