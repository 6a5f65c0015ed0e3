"""gRPC transport: the ``suanli.v1.Suanli`` service over :class:`~suanli.api.service.ApiService`.

Authentication: metadata ``authorization: Bearer <token>`` (a bare token is accepted too).
Requests are converted to the same pydantic models as REST bodies (so the same
validation and messages apply) and responses from the same response models, through
``json_format`` (which refuses a field the message does not have: a drift shows up as an
error, not as silently dropped data). Errors map as in :mod:`suanli.api.service`.
"""
from __future__ import annotations

import functools
from typing import Any, Awaitable, Callable

import grpc
from google.protobuf import json_format
from google.protobuf.message import Message
from pydantic import BaseModel
from pydantic import ValidationError as PydanticValidationError

from suanli.api import suanli_pb2 as pb
from suanli.api import suanli_pb2_grpc as pb_grpc
from suanli.api.auth import TokenStore
from suanli.api.models import BidSpec, CancelRequest, NodeStatusRequest, PolicyRequest, TaskSpec
from suanli.api.service import MAX_LIMIT, ApiService
from suanli.errors import (AuthError, ConflictError, ForbiddenError, NotFoundError, SuanliError, UnavailableError,
                           ValidationError)
from suanli.schemas.models import format_errors

CODES: dict[type[SuanliError], grpc.StatusCode] = {
    ValidationError: grpc.StatusCode.INVALID_ARGUMENT, AuthError: grpc.StatusCode.UNAUTHENTICATED,
    ForbiddenError: grpc.StatusCode.PERMISSION_DENIED,
    NotFoundError: grpc.StatusCode.NOT_FOUND, ConflictError: grpc.StatusCode.FAILED_PRECONDITION,
    UnavailableError: grpc.StatusCode.UNAVAILABLE,
}


def message_to_dict(message: Message) -> dict[str, Any]:
    """The fields *set* on ``message`` as plain Python values (absent optional fields are absent).

    Unlike ``json_format.MessageToDict`` it keeps 64-bit integers as ints.
    """
    out: dict[str, Any] = {}
    for descriptor, value in message.ListFields():
        if descriptor.message_type is not None and descriptor.message_type.GetOptions().map_entry:
            out[descriptor.name] = dict(value)
        elif descriptor.message_type is not None:
            out[descriptor.name] = ([message_to_dict(v) for v in value] if _repeated(descriptor)
                                    else message_to_dict(value))
        elif _repeated(descriptor):
            out[descriptor.name] = list(value)
        else:
            out[descriptor.name] = value
    return out


def _repeated(descriptor: Any) -> bool:
    is_repeated = getattr(descriptor, "is_repeated", None)
    return bool(is_repeated) if is_repeated is not None else descriptor.label == descriptor.LABEL_REPEATED


def to_message(model: BaseModel, cls: type[Message]) -> Message:
    """A response model as its proto message (same field names)."""
    return json_format.ParseDict(model.model_dump(mode="json", exclude_none=True), cls())


def _validate(model: type[BaseModel], data: dict[str, Any], what: str) -> Any:
    try:
        return model.model_validate(data)
    except PydanticValidationError as exc:
        raise ValidationError(f"invalid {what}: {format_errors(exc)}") from None


def _limit(request: Message, default: int) -> int:
    if not request.HasField("limit"):
        return default
    if not 1 <= request.limit <= MAX_LIMIT:
        raise ValidationError(f"limit: must be between 1 and {MAX_LIMIT}")
    return request.limit


def _optional(request: Message, name: str) -> str | None:
    return getattr(request, name) if request.HasField(name) else None


def _task_id(request: Message) -> str:
    if not 1 <= len(request.task_id) <= 200:
        raise ValidationError("task_id: give the task id (1 to 200 characters)")
    return request.task_id


def _job_id(value: str, field: str) -> str:
    from suanli.schemas.task_spec import _ID
    if not _ID.fullmatch(value):
        raise ValidationError(f"{field}: {value!r} is not a valid job id: use 1-204 letters, digits and . _ : @ + - "
                              "(starting with a letter or digit)")
    return value


Handler = Callable[[Any, Message, str], Awaitable[Message]]


def _rpc(method: Handler) -> Callable[[Any, Message, grpc.aio.ServicerContext], Awaitable[Message]]:
    """Authenticate, run, map SuanliError to a status code with its message."""

    @functools.wraps(method)
    async def wrapper(self: SuanliServicer, request: Message, context: grpc.aio.ServicerContext) -> Message:
        try:
            tenant = self.tenant(context)
            return await method(self, request, tenant)
        except SuanliError as exc:
            code = next((c for cls, c in CODES.items() if isinstance(exc, cls)), grpc.StatusCode.INTERNAL)
            await context.abort(code, str(exc))
            raise AssertionError("unreachable") from None   # abort raises

    return wrapper


class SuanliServicer(pb_grpc.SuanliServicer):
    """The gRPC methods; one per REST operation (same names as the REST operation ids)."""

    def __init__(self, service: ApiService, tokens: TokenStore):
        self.service = service
        self.tokens = tokens

    def tenant(self, context: grpc.aio.ServicerContext) -> str:
        values = [v for k, v in (context.invocation_metadata() or ()) if k == "authorization"]
        value = values[0] if values else None
        if value and " " not in value.strip():
            return self.tokens.tenant(value.strip())
        return self.tokens.tenant_from_header(value)

    async def GetHealth(self, request: pb.HealthRequest, context: grpc.aio.ServicerContext) -> pb.Health:
        return to_message(self.service.health(), pb.Health)

    @_rpc
    async def SubmitTask(self, request: pb.SubmitTaskRequest, tenant: str) -> Message:
        spec = _validate(TaskSpec, message_to_dict(request.task), "task")
        return to_message(await self.service.submit_task(tenant, spec), pb.SubmitTaskResponse)

    @_rpc
    async def ListTasks(self, request: pb.ListTasksRequest, tenant: str) -> Message:
        result = await self.service.list_tasks(tenant, status=_optional(request, "status"),
                                               cell=_optional(request, "cell"), limit=_limit(request, 100))
        return to_message(result, pb.ListTasksResponse)

    @_rpc
    async def GetTask(self, request: pb.GetTaskRequest, tenant: str) -> Message:
        return to_message(await self.service.get_task(tenant, _task_id(request)), pb.TaskStatus)

    @_rpc
    async def CancelTask(self, request: pb.CancelTaskRequest, tenant: str) -> Message:
        body = _validate(CancelRequest, {"reason": request.reason}, "cancel request")
        return to_message(await self.service.cancel_task(tenant, _task_id(request), body), pb.CancelTaskResponse)

    @_rpc
    async def WhyPending(self, request: pb.WhyPendingRequest, tenant: str) -> Message:
        return to_message(await self.service.why_pending(tenant, _task_id(request)), pb.WhyPendingResponse)

    @_rpc
    async def GetAudit(self, request: pb.GetAuditRequest, tenant: str) -> Message:
        return to_message(await self.service.get_audit(tenant, _task_id(request)), pb.AuditTrail)

    @_rpc
    async def ListAudit(self, request: pb.ListAuditRequest, tenant: str) -> Message:
        job = _optional(request, "job")
        if job is not None:
            _job_id(job, "job")
        task_id = _optional(request, "task_id")
        if task_id is not None and not 1 <= len(task_id) <= 200:
            raise ValidationError("task_id: give the task id (1 to 200 characters)")
        result = await self.service.list_audit(tenant, job=job, task_id=task_id, limit=_limit(request, 1000))
        return to_message(result, pb.AuditList)

    @_rpc
    async def GetJob(self, request: pb.GetJobRequest, tenant: str) -> Message:
        return to_message(await self.service.get_job(tenant, _job_id(request.job_id, "job_id")), pb.JobView)

    @_rpc
    async def SubmitBid(self, request: pb.SubmitBidRequest, tenant: str) -> Message:
        bid = _validate(BidSpec, message_to_dict(request.bid), "bid")
        return to_message(await self.service.submit_bid(tenant, bid), pb.SubmitBidResponse)

    @_rpc
    async def ListBids(self, request: pb.ListBidsRequest, tenant: str) -> Message:
        result = await self.service.list_bids(tenant, cell=_optional(request, "cell"), limit=_limit(request, 100))
        return to_message(result, pb.ListBidsResponse)

    @_rpc
    async def GetBid(self, request: pb.GetBidRequest, tenant: str) -> Message:
        if not 1 <= len(request.bid_id) <= 200:
            raise ValidationError("bid_id: give the bid id (1 to 200 characters)")
        return to_message(await self.service.get_bid(tenant, request.bid_id), pb.BidView)

    @_rpc
    async def GetCellPolicy(self, request: pb.GetCellPolicyRequest, tenant: str) -> Message:
        return to_message(await self.service.get_cell_policy(tenant, request.cell), pb.CellPolicy)

    @_rpc
    async def SetCellPolicy(self, request: pb.SetCellPolicyRequest, tenant: str) -> Message:
        body = _validate(PolicyRequest, message_to_dict(request.policy), "policy")
        return to_message(await self.service.set_cell_policy(tenant, request.cell, body), pb.SetCellPolicyResponse)

    @_rpc
    async def ListReservations(self, request: pb.ListReservationsRequest, tenant: str) -> Message:
        result = await self.service.list_reservations(tenant, cell=_optional(request, "cell"),
                                                      status=_optional(request, "status"),
                                                      mine=request.mine, limit=_limit(request, 100))
        return to_message(result, pb.ListReservationsResponse)

    @_rpc
    async def ListNodes(self, request: pb.ListNodesRequest, tenant: str) -> Message:
        result = await self.service.list_nodes(tenant, cell=_optional(request, "cell"), limit=_limit(request, 1000))
        return to_message(result, pb.ListNodesResponse)

    @_rpc
    async def DrainNode(self, request: pb.DrainNodeRequest, tenant: str) -> Message:
        body = _validate(NodeStatusRequest, {"cell": _optional(request, "cell"), "reason": request.reason},
                         "drain request")
        return to_message(await self.service.drain_node(tenant, request.node_id, body), pb.NodeStatusResponse)

    @_rpc
    async def UncordonNode(self, request: pb.UncordonNodeRequest, tenant: str) -> Message:
        body = _validate(NodeStatusRequest, {"cell": _optional(request, "cell"), "reason": request.reason},
                         "uncordon request")
        return to_message(await self.service.uncordon_node(tenant, request.node_id, body), pb.NodeStatusResponse)


def build_server(service: ApiService, tokens: TokenStore, address: str,
                 tls: tuple[bytes, bytes] | None = None) -> tuple[grpc.aio.Server, int]:
    """An (unstarted) grpc.aio server bound to ``address``; returns it and the bound port.
    ``tls``: (PEM private key, PEM certificate chain) to serve TLS only; None: plaintext."""
    server = grpc.aio.server()
    pb_grpc.add_SuanliServicer_to_server(SuanliServicer(service, tokens), server)
    if tls is None:
        port = server.add_insecure_port(address)
    else:
        port = server.add_secure_port(address, grpc.ssl_server_credentials([tls]))
    if port == 0:
        raise UnavailableError(f"cannot bind the gRPC port {address}")
    return server, port
