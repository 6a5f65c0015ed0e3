"""REST transport: a FastAPI app over :class:`~suanli.api.service.ApiService`.

Serves ``/openapi.json`` and ``/docs``. Every ``/v1`` route needs ``Authorization: Bearer
<token>``; ``/healthz`` does not. Each route's ``operation_id`` is the name of its gRPC
method in ``schemas/proto/suanli.proto`` and its response model has the name and fields of
that method's output message (``tests/api/test_contract.py`` checks both).

Errors are JSON :class:`~suanli.api.models.ErrorResponse` bodies; a malformed request is a
422 whose ``detail`` names each bad field with pydantic's message (``resources.gpu: Input
should be less than or equal to 64``), never a traceback.
"""
from __future__ import annotations

from typing import Annotated, Any, Callable

from fastapi import Body, Depends, FastAPI, Path, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.security import HTTPBearer
from starlette.exceptions import HTTPException as StarletteHTTPException

from suanli.api.auth import TokenStore
from suanli.api.limits import Limits, LimitsMiddleware, header
from suanli.api.models import (AuditList, AuditTrail, BidSpec, BidView, CancelRequest, CancelTaskResponse, CellPolicy,
                               ErrorResponse, Health, JobView, ListBidsResponse, ListNodesResponse, ListReservationsResponse,
                               ListTasksResponse, NodeStatusRequest, NodeStatusResponse, PolicyRequest,
                               SetCellPolicyResponse, SubmitBidResponse,
                               SubmitTaskResponse, TaskSpec, TaskStatus, WhyPendingResponse)
from suanli.api.service import MAX_LIMIT, ApiService
from suanli.errors import (AuthError, ConflictError, ForbiddenError, NotFoundError, SuanliError, UnavailableError,
                           ValidationError)
from suanli.streams.metrics import instrument_api

STATUS: dict[type[SuanliError], int] = {
    ValidationError: 422, AuthError: 401, ForbiddenError: 403, NotFoundError: 404, ConflictError: 409,
    UnavailableError: 503,
}

_bearer = HTTPBearer(auto_error=False, description="The API token of your tenant (see SUANLI_API_TOKENS).")


def _errors(*codes: int) -> dict[int | str, dict[str, Any]]:
    text = {401: "Missing or unknown API token", 403: "Only operators may change nodes",
            404: "No such task (or bid) for this tenant (nodes: no such node or cell)",
            409: "Refused by the current state", 422: "Invalid request: the message names the field",
            503: "The read model is catching up or Kafka is unavailable"}
    return {c: {"model": ErrorResponse, "description": text[c]} for c in codes}


TASK_EXAMPLE = {"id": "train-resnet-42", "cell": "openb",
                "resources": {"cpu": 6, "memory": "12Gi", "gpu": 0.46, "gpu_models": ["V100M16", "V100M32"]},
                "qos": "gold", "priority": 10, "labels": {"workload": "training"}, "duration": "2h",
                "command": ["python", "train.py"]}
BID_EXAMPLE = {"cell": "openb", "resources": {"cpu": 8, "memory": "32Gi", "gpu": 2}, "start_at": 1_900_000_000_000,
               "duration": "4h", "price": 2.5}
BID_WINDOW_EXAMPLE = {"bid_id": "b-train-1", "cell": "openb",
                      "resources": {"cpu": 16, "memory": "64Gi", "gpu": 4, "gpu_models": ["A100"]},
                      "start_at": 1_900_000_000_000, "latest_start_at": 1_900_007_200_000, "duration": "4h",
                      "price": 3.0, "gang": False, "gpu_memory": "40Gi"}


def _field_of(loc: tuple[Any, ...]) -> str:
    parts = [str(p) for p in loc]
    if parts and parts[0] in ("body", "query", "path", "header"):
        parts = parts[1:] or parts
    return ".".join(parts) or "(request)"


def _tenant(request: Request, _creds: Annotated[Any, Depends(_bearer)]) -> str:
    """The caller's tenant, from ``Authorization: Bearer <token>`` (AuthError otherwise)."""
    tokens: TokenStore = request.app.state.tokens
    return tokens.tenant_from_header(request.headers.get("authorization"))


Tenant = Annotated[str, Depends(_tenant)]
TaskId = Annotated[str, Path(min_length=1, max_length=200, description="Task id.")]
BidId = Annotated[str, Path(min_length=1, max_length=200, description="Bid id.")]
NodeId = Annotated[str, Path(min_length=1, max_length=200, description="Node id.")]
CellName = Annotated[str, Path(min_length=1, max_length=256, description="Cell name.")]
Cell = Annotated[str | None, Query(min_length=1, max_length=256, description="Only this cell.")]
Limit = Annotated[int, Query(ge=1, le=MAX_LIMIT, description="At most this many rows.")]
Status = Annotated[str | None, Query(min_length=1, max_length=32, description="Only tasks in this status.")]
TokenStatus = Annotated[str | None, Query(min_length=1, max_length=32,
                                          description="Only tokens in this status (GRANTED, CLAIMED, EXPIRED, "
                                                      "ENDED, RELEASED).")]
JobId = Annotated[str, Path(min_length=1, max_length=204, pattern=r"^[A-Za-z0-9][A-Za-z0-9._:@+-]*$",
                            description="Job id (the tasks' ``job``).")]
JobFilter = Annotated[str | None, Query(min_length=1, max_length=204, pattern=r"^[A-Za-z0-9][A-Za-z0-9._:@+-]*$",
                                        description="Only decisions about members of this job.")]
TaskFilter = Annotated[str | None, Query(min_length=1, max_length=200, description="Only decisions about this task.")]
Mine = Annotated[bool, Query(description="Only your own tokens (default: every tenant's, others' ids hidden).")]


def caller_tenant(tokens: TokenStore) -> Callable[[dict[str, Any]], str | None]:
    """For the rate limiter: the tenant of a request's bearer token, else of the dashboard's
    sign-in cookie; None when neither names a known token."""
    from http.cookies import CookieError, SimpleCookie

    from suanli.api.ui.routes import COOKIE

    def tenant_of(scope: dict[str, Any]) -> str | None:
        tenant = tokens.tenant_or_none(header(scope, b"authorization"))
        cookies = header(scope, b"cookie")
        if tenant is None and cookies and COOKIE in cookies:
            try:
                morsel = SimpleCookie(cookies).get(COOKIE)
            except CookieError:
                return None
            tenant = tokens.tenant_or_none(f"Bearer {morsel.value}") if morsel is not None else None
        return tenant

    return tenant_of


class LimitedApp(FastAPI):
    """A FastAPI app whose request limits (:class:`LimitsMiddleware`) come before anything
    else, FastAPI's own middleware included: a flood of refused requests then costs only the
    HTTP parse and the limits' check (``python -m suanli.bench.api_abuse``). A middleware
    added with ``add_middleware`` would run inside FastAPI's error and telemetry layers."""

    gate: LimitsMiddleware

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        await self.gate(scope, receive, send)

    async def _inner(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        await super().__call__(scope, receive, send)


def create_app(service: ApiService, tokens: TokenStore, limits: Limits | None = None) -> FastAPI:
    """The REST app. ``service`` must be usable from the app's event loop. ``limits``: the
    body cap and rate limit (:mod:`suanli.api.limits`; default :class:`Limits`), checked
    before anything else (:class:`LimitedApp`)."""
    app = LimitedApp(title="Suanli API", version="1",
                  description="Submit and follow tasks, bids, nodes and the decision audit of a Suanli "
                              "control plane. The same operations are served over gRPC "
                              "(schemas/proto/suanli.proto).")
    app.state.tokens = tokens
    app.state.service = service
    app.gate = LimitsMiddleware(app._inner, limits if limits is not None else Limits(),
                                tenant_of=caller_tenant(tokens))

    @app.exception_handler(SuanliError)
    async def _suanli_error(_request: Request, exc: SuanliError) -> JSONResponse:
        code = next((c for cls, c in STATUS.items() if isinstance(exc, cls)), 500)
        headers = {"WWW-Authenticate": "Bearer"} if code == 401 else None
        return JSONResponse(ErrorResponse(detail=str(exc)).model_dump(), status_code=code, headers=headers)

    @app.exception_handler(RequestValidationError)
    async def _invalid(_request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = [{"field": _field_of(tuple(e.get("loc", ()))),
                   "message": str(e.get("msg", "invalid")).removeprefix("Value error, ")} for e in exc.errors()]
        detail = "invalid request: " + "; ".join(f"{e['field']}: {e['message']}" for e in errors)
        return JSONResponse(ErrorResponse(detail=detail, errors=errors).model_dump(), status_code=422)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(_request: Request, exc: StarletteHTTPException) -> JSONResponse:
        if exc.status_code == 400:     # the body could not be parsed at all (bad bytes, bad encoding)
            detail = f"invalid request: body: {exc.detail}"
            return JSONResponse(ErrorResponse(detail=detail, errors=[{"field": "body", "message": str(exc.detail)}])
                                .model_dump(), status_code=422)
        return JSONResponse(ErrorResponse(detail=str(exc.detail)).model_dump(), status_code=exc.status_code,
                            headers=getattr(exc, "headers", None))

    @app.get("/healthz", operation_id="GetHealth", response_model=Health, tags=["health"])
    async def health() -> Health:
        """Whether the API has caught up with the log (no token needed)."""
        return service.health()

    @app.post("/v1/tasks", operation_id="SubmitTask", status_code=202, response_model=SubmitTaskResponse,
              responses=_errors(401, 409, 422, 503), tags=["tasks"])
    async def submit_task(caller: Tenant, spec: Annotated[TaskSpec, Body(openapi_examples={
        "gpu-share": {"summary": "A training task on half a V100", "value": TASK_EXAMPLE},
        "cpu-only": {"summary": "The smallest task", "value": {"resources": {"cpu": 1, "memory": "1Gi"}}}})]) -> SubmitTaskResponse:
        """Submit a task (the YAML task form as JSON); it becomes a TaskSubmitted on the raw tasks topic.

        ``tenant`` may be omitted: it is always the token's tenant.
        """
        return await service.submit_task(caller, spec)

    @app.get("/v1/tasks", operation_id="ListTasks", response_model=ListTasksResponse,
             responses=_errors(401, 422, 503), tags=["tasks"])
    async def list_tasks(caller: Tenant, cell: Cell = None,
                         status: Status = None,
                         limit: Limit = 100) -> ListTasksResponse:
        """Your tasks, oldest first."""
        return await service.list_tasks(caller, status=status, cell=cell, limit=limit)

    @app.get("/v1/tasks/{task_id}", operation_id="GetTask", response_model=TaskStatus,
             responses=_errors(401, 404, 422, 503), tags=["tasks"])
    async def get_task(caller: Tenant, task_id: TaskId) -> TaskStatus:
        """Where one of your tasks stands: status, node and GPUs, reasons, decision path."""
        return await service.get_task(caller, task_id)

    @app.post("/v1/tasks/{task_id}/cancel", operation_id="CancelTask", status_code=202,
              response_model=CancelTaskResponse, responses=_errors(401, 404, 409, 422, 503), tags=["tasks"])
    async def cancel_task(caller: Tenant, task_id: TaskId,
                          request: Annotated[CancelRequest | None, Body()] = None) -> CancelTaskResponse:
        """Cancel one of your tasks (a TaskCancelled on the raw tasks topic)."""
        return await service.cancel_task(caller, task_id, request or CancelRequest())

    @app.get("/v1/tasks/{task_id}/why-pending", operation_id="WhyPending", response_model=WhyPendingResponse,
             responses=_errors(401, 404, 422, 503), tags=["tasks"])
    async def why_pending(caller: Tenant, task_id: TaskId) -> WhyPendingResponse:
        """Why a task waits: reasons and its current queue position."""
        return await service.why_pending(caller, task_id)

    @app.get("/v1/tasks/{task_id}/audit", operation_id="GetAudit", response_model=AuditTrail,
             responses=_errors(401, 404, 422, 503), tags=["audit"])
    async def get_audit(caller: Tenant, task_id: TaskId) -> AuditTrail:
        """Every decision about one of your tasks, with its provenance and decision path; a
        finished task the API no longer keeps is answered from the audit index."""
        return await service.get_audit(caller, task_id)

    @app.get("/v1/audit", operation_id="ListAudit", response_model=AuditList,
             responses=_errors(401, 422, 503), tags=["audit"])
    async def list_audit(caller: Tenant, job: JobFilter = None, task_id: TaskFilter = None,
                         limit: Limit = 1000) -> AuditList:
        """Decisions about your tasks, filtered by ``job`` (its member tasks) and/or ``task_id``, in log
        order, the newest ``limit``; give one filter at least."""
        return await service.list_audit(caller, job=job, task_id=task_id, limit=limit)

    @app.get("/v1/jobs/{job_id}", operation_id="GetJob", response_model=JobView,
             responses=_errors(401, 404, 422, 503), tags=["tasks"])
    async def get_job(caller: Tenant, job_id: JobId) -> JobView:
        """One of your jobs: its member tasks (submitted with ``job``) with their status and node, and
        how many are in each status."""
        return await service.get_job(caller, job_id)

    @app.post("/v1/bids", operation_id="SubmitBid", status_code=202, response_model=SubmitBidResponse,
              responses=_errors(401, 409, 422, 503), tags=["bids"])
    async def submit_bid(caller: Tenant, bid: Annotated[BidSpec, Body(openapi_examples={
        "two-gpus": {"summary": "Two whole GPUs for four hours", "value": BID_EXAMPLE},
        "window": {"summary": "Four A100s (40 GiB or more) for 4h starting within 2h; fewer will do",
                   "value": BID_WINDOW_EXAMPLE}})]) -> SubmitBidResponse:
        """Bid for advance capacity (a ReservationBid on the raw tasks topic).

        Whole GPUs (``resources.gpu`` >= 1) on one node, for ``duration`` starting between
        ``start_at`` and ``latest_start_at`` (epoch ms), at up to ``price`` per GPU-hour. The
        cell's auction grants a token ``rsv-<bid_id>`` or refuses the bid (``GetBid``); a task
        runs on the token with ``reservation: rsv-<bid_id>`` in its form.
        """
        return await service.submit_bid(caller, bid)

    @app.get("/v1/bids", operation_id="ListBids", response_model=ListBidsResponse,
             responses=_errors(401, 422, 503), tags=["bids"])
    async def list_bids(caller: Tenant, cell: Cell = None, limit: Limit = 100) -> ListBidsResponse:
        """Your bids and what became of them (SUBMITTED, GRANTED or LOST)."""
        return await service.list_bids(caller, cell=cell, limit=limit)

    @app.get("/v1/bids/{bid_id}", operation_id="GetBid", response_model=BidView,
             responses=_errors(401, 404, 422, 503), tags=["bids"])
    async def get_bid(caller: Tenant, bid_id: BidId) -> BidView:
        """One of your bids: SUBMITTED, GRANTED (token, node, GPUs, window, clearing price) or LOST
        (reason, and the lowest price that would have won)."""
        return await service.get_bid(caller, bid_id)

    @app.get("/v1/reservations", operation_id="ListReservations", response_model=ListReservationsResponse,
             responses=_errors(401, 422, 503), tags=["bids"])
    async def list_reservations(caller: Tenant, cell: Cell = None, status: TokenStatus = None, mine: Mine = False,
                                limit: Limit = 100) -> ListReservationsResponse:
        """Reservation tokens by window start: node, GPUs, window, clearing price, status, claimants and
        use. Every tenant's are listed (they hold capacity); another tenant's ids are hidden."""
        return await service.list_reservations(caller, cell=cell, status=status, mine=mine, limit=limit)

    @app.get("/v1/nodes", operation_id="ListNodes", response_model=ListNodesResponse,
             responses=_errors(401, 422, 503), tags=["nodes"])
    async def list_nodes(caller: Tenant, cell: Cell = None, limit: Limit = 1000) -> ListNodesResponse:
        """Nodes with their capacity and what is allocated (shared by all tenants)."""
        return await service.list_nodes(caller, cell=cell, limit=limit)

    @app.get("/v1/cells/{cell}/policy", operation_id="GetCellPolicy", response_model=CellPolicy,
             responses=_errors(401, 404, 422, 503), tags=["nodes"])
    async def get_cell_policy(caller: Tenant, cell: CellName) -> CellPolicy:
        """The policy in force in a cell (shared by all tenants): strategy, configuration, the digest
        its decisions cite, the queue's aging, and the PolicyChanged that set it. ``set`` false: none
        has reached the cell, which runs ``default`` with its defaults."""
        return await service.get_cell_policy(caller, cell)

    @app.put("/v1/cells/{cell}/policy", operation_id="SetCellPolicy", status_code=202,
             response_model=SetCellPolicyResponse, responses=_errors(401, 403, 422, 503), tags=["nodes"])
    async def set_cell_policy(caller: Tenant, cell: CellName, request: PolicyRequest) -> SetCellPolicyResponse:
        """Operators: store a cell's new policy (a PolicyChanged on the raw policy topic), checked first as
        the scheduler will: an unknown strategy, key or a bad value is a 422 naming it. Intake forwards it
        to the cell's log and the scheduler applies it in log order (``GetCellPolicy`` shows it then)."""
        return await service.set_cell_policy(caller, cell, request)

    @app.post("/v1/nodes/{node_id}/drain", operation_id="DrainNode", status_code=202,
              response_model=NodeStatusResponse, responses=_errors(401, 403, 404, 422, 503), tags=["nodes"])
    async def drain_node(caller: Tenant, node_id: NodeId,
                         request: Annotated[NodeStatusRequest | None, Body()] = None) -> NodeStatusResponse:
        """Operators: drain a node (a NodeStatusChanged DRAINING on the raw nodes topic). Nothing new is
        placed on it; its gold tasks move elsewhere reserve-first (the new place is held before the old
        copy stops); other tasks finish where they are. ``cell`` is needed only when the node id is
        registered in several cells."""
        return await service.drain_node(caller, node_id, request or NodeStatusRequest())

    @app.post("/v1/nodes/{node_id}/uncordon", operation_id="UncordonNode", status_code=202,
              response_model=NodeStatusResponse, responses=_errors(401, 403, 404, 422, 503), tags=["nodes"])
    async def uncordon_node(caller: Tenant, node_id: NodeId,
                            request: Annotated[NodeStatusRequest | None, Body()] = None) -> NodeStatusResponse:
        """Operators: make a drained (or cordoned) node take new work again (NodeStatusChanged READY)."""
        return await service.uncordon_node(caller, node_id, request or NodeStatusRequest())

    metrics = instrument_api(app, service.namespace, service.model)      # GET /metrics; every request counted and timed
    app.gate.on_reject = metrics.count_refused            # and those the limits answer before the app
    return app
