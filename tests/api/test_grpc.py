"""The gRPC service without Kafka: an in-process grpc.aio server on loopback over the
in-memory read model and sink."""
from __future__ import annotations

import asyncio

import grpc
import pytest
from api_helpers import TOKENS, feed, node, pending, placed, submitted

from suanli.api import suanli_pb2 as pb
from suanli.api import suanli_pb2_grpc as pb_grpc
from suanli.api.auth import TokenStore
from suanli.api.grpc_server import build_server, message_to_dict


def _run(service, scenario):
    async def main():
        server, port = build_server(service, TokenStore({v: k for k, v in TOKENS.items()}), "127.0.0.1:0")
        await server.start()
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                return await scenario(pb_grpc.SuanliStub(channel))
        finally:
            await server.stop(grace=None)
    return asyncio.run(main())


def _auth(tenant: str, bare: bool = False) -> tuple[tuple[str, str]]:
    return (("authorization", TOKENS[tenant] if bare else f"Bearer {TOKENS[tenant]}"),)


SPEC = pb.TaskSpec(id="g-1", cell="c", resources=pb.ResourcesSpec(cpu=1.5, memory="2Gi", gpu=0.25), qos="bronze",
                   labels={"k": "v"}, duration="30m")


def test_submit_over_grpc_is_the_same_event_as_over_rest(service, sink):
    async def scenario(stub):
        reply = await stub.SubmitTask(pb.SubmitTaskRequest(task=SPEC), metadata=_auth("alpha"))
        assert reply.task_id == "g-1" and reply.tenant == "alpha" and reply.position.topic == "raw"
        return reply
    _run(service, scenario)
    [(kind, event)] = sink.events
    assert kind == "TaskSubmitted" and event["tenant"] == "alpha" and event["qos_tier"] == "BRONZE"
    assert event["resources"]["cpu_milli"] == 1500 and event["resources"]["memory_mib"] == 2048
    assert event["resources"]["gpu_milli"] == 250 and event["duration_estimate_ms"] == 1_800_000
    assert event["labels"] == {"k": "v"} and event["command"] is None


@pytest.mark.parametrize("metadata", [(), (("authorization", "Bearer nope-nope-nope"),),
                                      (("authorization", "Basic x"),)])
def test_missing_or_unknown_token_is_unauthenticated(service, sink, metadata):
    async def scenario(stub):
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await stub.SubmitTask(pb.SubmitTaskRequest(task=SPEC), metadata=metadata)
        assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await stub.ListNodes(pb.ListNodesRequest(), metadata=metadata)
        assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
    _run(service, scenario)
    assert sink.events == []


def test_invalid_task_is_invalid_argument_naming_the_field(service, sink):
    async def scenario(stub):
        bad = pb.TaskSpec(resources=pb.ResourcesSpec(cpu=1, memory="1Gi", gpu=-2))
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await stub.SubmitTask(pb.SubmitTaskRequest(task=bad), metadata=_auth("alpha", bare=True))
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "resources.gpu" in err.value.details()
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await stub.SubmitTask(pb.SubmitTaskRequest(), metadata=_auth("alpha"))
        assert "resources" in err.value.details()
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await stub.ListTasks(pb.ListTasksRequest(limit=0), metadata=_auth("alpha"))
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "limit" in err.value.details()
    _run(service, scenario)
    assert sink.events == []


def test_reads_and_isolation_over_grpc(service, sink):
    feed(service.model, node("n1"), submitted("a1", "alpha"), submitted("b1", "beta"), placed("a1", "alpha"),
         pending("b1", "beta"))

    async def scenario(stub):
        status = await stub.GetTask(pb.GetTaskRequest(task_id="a1"), metadata=_auth("alpha"))
        assert status.status == "PLACED" and status.placed and list(status.gpu_devices) == [0]
        trail = await stub.GetAudit(pb.GetAuditRequest(task_id="a1"), metadata=_auth("alpha"))
        assert trail.decisions[0].provenance.strategy.name == "bestfit"
        assert trail.decisions[0].provenance.input.offset == 5
        why = await stub.WhyPending(pb.WhyPendingRequest(task_id="b1"), metadata=_auth("beta"))
        assert why.pending and why.queue_position == 1 and why.reasons[0].nodes == 4
        for call, request in [(stub.GetTask, pb.GetTaskRequest(task_id="b1")),
                              (stub.GetAudit, pb.GetAuditRequest(task_id="b1")),
                              (stub.WhyPending, pb.WhyPendingRequest(task_id="b1")),
                              (stub.CancelTask, pb.CancelTaskRequest(task_id="b1"))]:
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await call(request, metadata=_auth("alpha"))
            assert err.value.code() == grpc.StatusCode.NOT_FOUND and "no task 'b1'" in err.value.details()
        nodes = await stub.ListNodes(pb.ListNodesRequest(cell="c"), metadata=_auth("alpha"))
        assert [n.node_id for n in nodes.nodes] == ["n1"] and list(nodes.nodes[0].gpu_used) == [500, 0]
        tasks = await stub.ListTasks(pb.ListTasksRequest(), metadata=_auth("beta"))
        assert [t.task_id for t in tasks.tasks] == ["b1"]
        health = await stub.GetHealth(pb.HealthRequest())
        assert health.ready and health.namespace == "unit"
    _run(service, scenario)
    assert sink.events == []


def test_message_to_dict_keeps_presence_and_64_bit_ints():
    spec = pb.TaskSpec(priority=0, duration_ms=2**40, resources=pb.ResourcesSpec(cpu=0), labels={"a": "b"})
    assert message_to_dict(spec) == {"priority": 0, "duration_ms": 2**40, "resources": {"cpu": 0.0},
                                     "labels": {"a": "b"}}


def test_a_cells_policy_over_grpc_is_the_rest_answer(service, client):
    feed(service.model, node("n1"), ("cell_log", "PolicyChanged", {
        "event_id": "p1", "cell": "c", "strategy": "bestfit", "config_json": '{"qos":{"aging_ms":5000}}',
        "changed_by": "ops", "at": 77}))

    async def scenario(stub):
        got = await stub.GetCellPolicy(pb.GetCellPolicyRequest(cell="c"), metadata=_auth("beta"))
        with pytest.raises(grpc.aio.AioRpcError) as missing:
            await stub.GetCellPolicy(pb.GetCellPolicyRequest(cell="nowhere"), metadata=_auth("beta"))
        with pytest.raises(grpc.aio.AioRpcError) as empty:
            await stub.GetCellPolicy(pb.GetCellPolicyRequest(cell=""), metadata=_auth("beta"))
        return got, missing.value, empty.value
    got, missing, empty = _run(service, scenario)
    rest = client.get("/v1/cells/c/policy", headers={"Authorization": f"Bearer {TOKENS['beta']}"}).json()
    assert message_to_dict(got) == rest and rest["strategy"] == "bestfit" and rest["aging_ms"] == 5000
    assert missing.code() == grpc.StatusCode.NOT_FOUND and "no cell 'nowhere'" in missing.details()
    assert empty.code() == grpc.StatusCode.INVALID_ARGUMENT and "cell" in empty.details()
