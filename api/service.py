"""The API's operations, shared by REST (``rest.py``) and gRPC (``grpc_server.py``).

Every method takes the caller's tenant (from the token, never from the request) and
pydantic models, and returns a response model from :mod:`suanli.api.models`. Errors are
:mod:`suanli.errors` classes that both transports map the same way:

========================  ====  ===================
ValidationError           422   INVALID_ARGUMENT
AuthError                 401   UNAUTHENTICATED
ForbiddenError            403   PERMISSION_DENIED
NotFoundError             404   NOT_FOUND
ConflictError             409   FAILED_PRECONDITION
UnavailableError          503   UNAVAILABLE
========================  ====  ===================

Writes validate completely (task form, ``schemas/models.validate_event``, Avro encoding)
before anything is produced, so a refused request leaves no record in Kafka. Submissions
become the same ``TaskSubmitted`` events a direct producer writes (same codec, topic and
key, see ``streams/topics.raw_route``), with ``tenant`` set to the caller's.

Tenant isolation: a task, bid or decision whose tenant is not the caller's is reported as
not found (404), exactly like one that does not exist. Reservation tokens are listed for
every tenant (like nodes, they say what capacity is taken), with another tenant's ids,
tenant, claimants and bid price hidden.

Bids (``submit_bid``) are checked like the bid form of ``suanli reserve``
(``schemas/task_spec.bid_problems``): whole GPUs (at least one), a window longer than 0, a
price of at least 0, a latest start not before the earliest. ``get_bid`` / ``list_bids``
show what became of them (SUBMITTED, GRANTED with the token's terms, LOST with the reason
and the price that would have won); ``list_reservations`` the tokens.

Nodes are shared: every tenant lists them, and only an *operator* (a tenant named in the
token file's ``operators``, see ``auth.py``) may change one. ``drain_node`` writes the
``NodeStatusChanged`` DRAINING that ``suanli nodes drain`` writes (the scheduler then places
nothing new there and moves its gold tasks elsewhere reserve-first; other tasks finish where
they are), ``uncordon_node`` the READY that undoes it. The node must be registered: an
unknown node or cell is a 404, an id registered in several cells without ``cell`` a 422.
"""
from __future__ import annotations

import heapq
import json
import re
import time
import uuid
from functools import cache
from typing import Any, Callable, Protocol

import fastavro
from fastavro.validation import ValidationError as AvroValidationError
from pydantic import ValidationError as PydanticValidationError

from suanli.api.audit import AuditArchive, AuditSource
from suanli.api.models import (AuditDecision, AuditList, AuditTrail, BidSpec, BidView, CancelRequest, CellPolicy,
                               CancelTaskResponse, Health, JobView, ListBidsResponse, ListNodesResponse, ListReservationsResponse,
                               ListTasksResponse, LogPosition, NodeStatusRequest, NodeStatusResponse, NodeView,
                               PendingReason, PolicyRequest, Provenance, ReservationView, SetCellPolicyResponse,
                               SubmitBidResponse, SubmitTaskResponse,
                               TaskResources, TaskSpec, TaskStatus, WhyPendingResponse)
from suanli.api.readmodel import LogFollower, ReadModel, Submission
from suanli.errors import ConflictError, ForbiddenError, NotFoundError, StrategyError, ValidationError
from suanli.processors.strategies import config_digest
from suanli.processors.model import canonical_json
from suanli.projections.lifecycle import TERMINAL, TaskView
from suanli.projections.reservations import BidState, TokenState
from suanli.schemas.catalog import catalog
from suanli.schemas.codec import parse_plain
from suanli.schemas.models import TaskResourcesModel, format_errors, validate_event
from suanli.schemas.task_spec import bid_problems, memory_mib

ID_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:@+-]{0,199}$")
MAX_LIMIT = 10_000


class EventSink(Protocol):
    """Where accepted writes go: the raw topics (``sink.KafkaSink``), or a list in tests."""

    async def publish(self, kind: str, payload: dict[str, Any]) -> LogPosition:
        """Encode (raising ValidationError if the value does not fit), store, return where."""
        ...


@cache
def _avro(kind: str) -> Any:
    return parse_plain(catalog()[kind].schema)


def check_avro(kind: str, payload: dict[str, Any]) -> None:
    """ValidationError (naming the field) unless ``payload`` fits the Avro schema of ``kind``."""
    try:
        fastavro.validation.validate(payload, _avro(kind), raise_errors=True)
    except AvroValidationError as exc:
        try:
            messages = json.loads(str(exc))
        except ValueError:
            messages = [str(exc)]
        said = "; ".join(dict.fromkeys(str(m).replace(f"{catalog()[kind].fullname}.", "") for m in messages))
        raise ValidationError(f"invalid {kind}: does not fit the Avro schema: {said}") from None


def _check_id(field: str, value: str | None) -> None:
    if value is not None and not ID_PATTERN.match(value):
        raise ValidationError(f"{field}: {value!r} is not a valid id: use letters, digits and . _ : @ + - "
                              "(starting with a letter or digit, at most 200 characters)")


def _check_tenant(what: str, given: str | None, tenant: str) -> None:
    if given is not None and given != tenant:
        raise ValidationError(f"invalid {what}: tenant: {given!r} is not the tenant of your token "
                              f"({tenant!r}); omit it")


class ApiService:
    """The operations (see the module docstring for the error contract)."""

    def __init__(self, model: ReadModel, sink: EventSink, audit: AuditSource, *, namespace: str,
                 follower: LogFollower | None = None, clock: Callable[[], float] = time.time,
                 ready_timeout: float = 10.0, sync_timeout: float = 2.0, operators: frozenset[str] = frozenset(),
                 archive: AuditArchive | None = None):
        """``audit`` answers for the tasks the read model keeps; ``archive``, when given, for
        the finished ones it has forgotten (``api/audit.py`` ``IndexedAuditArchive``)."""
        self.model = model
        self.operators = frozenset(operators)
        self.sink = sink
        self.audit = audit
        self.archive = archive
        self.namespace = namespace
        self.follower = follower
        self.clock = clock
        self.ready_timeout = ready_timeout
        self.sync_timeout = sync_timeout

    def _now_ms(self) -> int:
        return int(self.clock() * 1000)

    async def _ready(self) -> None:
        if self.follower is not None:
            await self.follower.wait_ready(self.ready_timeout)

    async def _sync(self) -> None:
        if self.follower is not None:
            await self.follower.sync(self.sync_timeout)

    # ------------------------------------------------------------------ lookups
    def _find_local(self, task_id: str) -> TaskView | Submission | None:
        return self.model.lifecycle.tasks.get(task_id) or self.model.submissions.get(task_id)

    async def _find(self, tenant: str, task_id: str) -> TaskView | Submission:
        """The caller's task, or NotFoundError (also for another tenant's task)."""
        await self._ready()
        task = self._find_local(task_id)
        if task is None or task.tenant != tenant:
            # Read your writes: it may have been stored a moment ago. (Another tenant's task
            # takes the same path, so the answer's timing does not tell it from a missing one.)
            await self._sync()
            task = self._find_local(task_id)
        if task is None or task.tenant != tenant:
            status = self._forgotten_status(tenant, task_id)
            if status is not None:
                where = (f"GET /v1/tasks/{task_id}/audit or `suanli audit why {task_id}`" if self.archive is not None
                         else f"`suanli audit why {task_id}`")
                raise NotFoundError(f"task {task_id!r} finished ({status}) and the API no longer keeps it: it "
                                    f"keeps the newest {self.model.keep_finished} finished tasks "
                                    f"(SUANLI_API_FINISHED_TASKS); its decisions stay in the audit: {where}")
            raise NotFoundError(f"no task {task_id!r}")
        return task

    def _forgotten_status(self, tenant: str, task_id: str) -> str | None:
        """The last status of the caller's task that the read model has forgotten; None for a
        task it never forgot, or another tenant's."""
        gone = self.model.lifecycle.forgotten.get(task_id)
        return gone[1] if gone is not None and gone[0] == tenant else None

    async def _task_decisions(self, tenant: str, task_id: str) -> list[Any]:
        """The caller's decision records about ``task_id``: from the read model, or from the
        archive once the model has forgotten the task."""
        source = self.audit
        if self.archive is not None and self._forgotten_status(tenant, task_id) is not None:
            source = self.archive
        return [r for r in await source.task_decisions(task_id) if r.payload.get("tenant") == tenant]

    @staticmethod
    def _status(task: TaskView | Submission) -> TaskStatus:
        if isinstance(task, Submission):
            return TaskStatus(task_id=task.task_id, tenant=task.tenant, cell=task.cell, status="SUBMITTED",
                              placed=False, node_id="", gpu_devices=[], gpu_milli=0, cpu_milli=0, memory_mib=0,
                              reasons=[], queue_position=0, priority=task.priority, qos_tier=task.qos_tier,
                              submitted_at=task.submitted_at, decision_id="", decided_at=0, strategy="",
                              path=[], message="", job_id=task.job_id or None)
        return TaskStatus(task_id=task.task_id, tenant=task.tenant, cell=task.cell, status=task.status,
                          placed=task.placed_once, node_id=task.node_id, gpu_devices=list(task.gpu_devices),
                          gpu_milli=task.gpu_milli, cpu_milli=task.cpu_milli, memory_mib=task.memory_mib,
                          reasons=[PendingReason(reason=r["reason"], nodes=r["nodes"]) for r in task.reasons],
                          queue_position=task.queue_position if task.status == "PENDING" else 0,
                          priority=task.priority, qos_tier=task.qos_tier, submitted_at=task.submitted_at,
                          decision_id=task.decision_id, decided_at=task.decided_at, strategy=task.strategy,
                          path=list(task.path), message=task.message, job_id=task.job_id or None)

    def _refresh_queue(self, cell: str) -> list[TaskView]:
        return self.model.lifecycle.pending(cell)     # recomputes queue_position for the cell

    # ------------------------------------------------------------------ tasks
    async def submit_task(self, tenant: str, spec: TaskSpec) -> SubmitTaskResponse:
        """Validate ``spec`` fully, then store its TaskSubmitted on the raw tasks topic."""
        _check_tenant("task", spec.tenant if "tenant" in spec.model_fields_set else None, tenant)
        _check_id("id", spec.id)
        try:
            event = spec.model_copy(update={"tenant": tenant}).to_event(self._now_ms())
        except (ValueError, OverflowError, TypeError) as exc:
            raise ValidationError(f"invalid task: {exc}") from None
        problem = validate_event("TaskSubmitted", event)
        if problem:
            raise ValidationError(problem)
        check_avro("TaskSubmitted", event)
        await self._ready()
        if self._find_local(event["task_id"]) is not None:
            raise ConflictError(f"task id {event['task_id']!r} is already in use: choose another id or omit it")
        position = await self.sink.publish("TaskSubmitted", event)
        return SubmitTaskResponse(task_id=event["task_id"], tenant=tenant, cell=event["cell"],
                                  event_id=event["event_id"], submitted_at=event["submitted_at"], position=position)

    async def cancel_task(self, tenant: str, task_id: str, request: CancelRequest) -> CancelTaskResponse:
        """Store a TaskCancelled for the caller's task; ConflictError if it already ended."""
        task = await self._find(tenant, task_id)
        status = "SUBMITTED" if isinstance(task, Submission) else task.status
        if status in TERMINAL:
            raise ConflictError(f"task {task_id!r} is already {status}")
        now = self._now_ms()
        event = {"event_id": f"cancel/{task_id}/{uuid.uuid4().hex[:8]}", "task_id": task_id, "tenant": tenant,
                 "cell": task.cell, "reason": request.reason, "at": now}
        problem = validate_event("TaskCancelled", event)
        if problem:
            raise ValidationError(problem)
        check_avro("TaskCancelled", event)
        position = await self.sink.publish("TaskCancelled", event)
        return CancelTaskResponse(task_id=task_id, event_id=event["event_id"], position=position)

    def _hide(self, tenant: str, answer: Any) -> Any:
        """``answer`` (a pydantic model) with every other tenant's task id in its text replaced
        (``redact.py``): a victim's decisions name its preemptor and co-victims."""
        from .redact import Redactor
        hide = Redactor(self.model.lifecycle.tasks, self.model.submissions, tenant, self.model.reservations)
        return type(answer).model_validate(hide.deep(answer.model_dump()))

    async def get_task(self, tenant: str, task_id: str) -> TaskStatus:
        task = await self._find(tenant, task_id)
        if isinstance(task, TaskView) and task.status == "PENDING":
            self._refresh_queue(task.cell)
        return self._hide(tenant, self._status(task))

    async def list_tasks(self, tenant: str, status: str | None = None, cell: str | None = None,
                         limit: int = 100) -> ListTasksResponse:
        """The caller's tasks (optionally of one status and cell), oldest submission first."""
        await self._ready()
        lifecycle = self.model.lifecycle
        cells = {t.cell for t in lifecycle.open_tasks() if t.tenant == tenant and t.status == "PENDING"}
        for c in cells:
            self._refresh_queue(c)
        if status is not None and status not in TERMINAL:   # only open tasks can have it: read those
            rows: list[TaskView | Submission] = [t for t in lifecycle.open_tasks() if t.tenant == tenant]
        else:
            rows = lifecycle.tenant_tasks(tenant)
        rows += [s for s in self.model.submissions.values() if s.tenant == tenant and s.task_id not in lifecycle.tasks]
        rows = [t for t in rows if (status is None or getattr(t, "status", "SUBMITTED") == status)
                and (cell is None or t.cell == cell)]
        first = heapq.nsmallest(limit, rows, key=lambda t: (t.submitted_at, t.task_id))
        return self._hide(tenant, ListTasksResponse(tasks=[self._status(t) for t in first]))

    async def why_pending(self, tenant: str, task_id: str) -> WhyPendingResponse:
        """The reasons of the latest decision and the task's current place in its cell's queue."""
        task = await self._find(tenant, task_id)
        if isinstance(task, Submission):
            return WhyPendingResponse(task_id=task_id, status="SUBMITTED", pending=False, reasons=[],
                                      queue_position=0, queue_length=0, decision_id="", decided_at=0, strategy="",
                                      path=[], explanation="accepted, not decided yet: the scheduler has not seen it")
        queue = self._refresh_queue(task.cell) if task.status == "PENDING" else []
        reasons = [PendingReason(reason=r["reason"], nodes=r["nodes"]) for r in task.reasons]
        said = "; ".join(f"{r.reason} ({r.nodes} nodes)" for r in reasons)
        if task.status == "PENDING":
            explanation = (f"waiting at position {task.queue_position} of {len(queue)} in cell {task.cell}"
                           + (f": {said}" if said else ""))
        elif task.status == "SUBMITTED":
            explanation = "not decided yet: the scheduler has not decided on it"
        elif task.status == "UNSCHEDULABLE":
            explanation = "no node of the cell can ever hold it" + (f": {said}" if said else "")
        else:
            where = f" on {task.node_id}" if task.node_id else ""
            explanation = f"not pending: {task.status}{where}"
        return self._hide(tenant, WhyPendingResponse(
            task_id=task_id, status=task.status, pending=task.status == "PENDING", reasons=reasons,
            queue_position=task.queue_position if queue else 0, queue_length=len(queue),
            decision_id=task.decision_id, decided_at=task.decided_at, strategy=task.strategy, path=list(task.path),
            explanation=explanation))

    # ------------------------------------------------------------------ bids
    async def submit_bid(self, tenant: str, bid: BidSpec) -> SubmitBidResponse:
        """Validate ``bid`` and store it as a ReservationBid on the raw tasks topic."""
        _check_tenant("bid", bid.tenant, tenant)
        _check_id("bid_id", bid.bid_id)
        if bid.duration is None and bid.duration_ms is None:
            raise ValidationError("invalid bid: duration: give duration (e.g. 2h) or duration_ms")
        try:   # the task form's rules for resources and lengths
            shaped = TaskSpec(resources=bid.resources, duration=bid.duration, duration_ms=bid.duration_ms).to_event(0)
            TaskResourcesModel.model_validate(shaped["resources"])
            gpu_memory = memory_mib(bid.gpu_memory) if bid.gpu_memory is not None else 0
        except PydanticValidationError as exc:
            raise ValidationError(f"invalid bid: {format_errors(exc)}") from None
        except (ValueError, OverflowError, TypeError) as exc:
            field = "gpu_memory: " if "memory" in str(exc) and bid.gpu_memory is not None else ""
            raise ValidationError(f"invalid bid: {field}{exc}") from None
        duration_ms = shaped["duration_estimate_ms"]
        resources = {**shaped["resources"], "gpu_memory_mib": gpu_memory}
        problems = bid_problems(start_at=bid.start_at, latest_start_at=bid.latest_start_at, duration_ms=duration_ms,
                                price=bid.price, gpu_count=resources["gpu_count"], gpu_milli=resources["gpu_milli"],
                                gpus_field="resources.gpu", latest_field="latest_start_at")
        if problems:
            raise ValidationError("invalid bid: " + "; ".join(problems))
        await self._ready()
        bid_id = bid.bid_id or f"bid-{uuid.uuid4().hex[:12]}"
        if bid_id in self.model.reservations.bids:
            raise ConflictError(f"bid id {bid_id!r} is already in use: choose another id or omit it")
        event = {"event_id": f"bid/{bid_id}/{uuid.uuid4().hex[:8]}", "bid_id": bid_id, "tenant": tenant,
                 "cell": bid.cell, "resources": resources,
                 "start_at": bid.start_at, "duration_ms": duration_ms, "price": bid.price, "at": self._now_ms(),
                 "latest_start_at": bid.latest_start_at, "gang": bid.gang}
        check_avro("ReservationBid", event)
        position = await self.sink.publish("ReservationBid", event)
        return SubmitBidResponse(bid_id=bid_id, tenant=tenant, cell=bid.cell, event_id=event["event_id"],
                                 position=position)

    def _bid_view(self, b: BidState) -> BidView:
        token = self.model.reservations.tokens.get(b.reservation_id) if b.reservation_id else None
        resources = b.resources or {"cpu_milli": token.cpu_milli if token else 0,
                                    "memory_mib": token.memory_mib if token else 0,
                                    "gpu_count": token.wanted_gpus if token else 0}
        return BidView(bid_id=b.bid_id, tenant=b.tenant, cell=b.cell, resources=TaskResources.model_validate(resources),
                       start_at=b.start_at, duration_ms=b.duration_ms, price=b.price, at=b.at, status=b.status,
                       reservation_id=b.reservation_id, node_id=token.node_id if token else "",
                       latest_start_at=b.latest_start_at, gang=b.gang,
                       gpu_devices=list(token.gpu_devices) if token else [],
                       granted_start_at=token.start_at if token else 0, granted_end_at=token.end_at if token else 0,
                       clearing_price=token.clearing_price if token else None,
                       reservation_status=token.status if token else "", reason=b.reason,
                       needed_price=b.needed_price, decided_at=b.decided_at)

    async def get_bid(self, tenant: str, bid_id: str) -> BidView:
        """One of the caller's bids and what became of it (NotFoundError for another tenant's)."""
        await self._ready()
        bid = self.model.reservations.bid(bid_id)
        if bid is None or bid.tenant != tenant:
            await self._sync()          # read your writes
            bid = self.model.reservations.bid(bid_id)
        if bid is None or bid.tenant != tenant:
            raise NotFoundError(f"no bid {bid_id!r}")
        return self._hide(tenant, self._bid_view(bid))

    async def list_bids(self, tenant: str, cell: str | None = None, limit: int = 100) -> ListBidsResponse:
        """The caller's bids (optionally of one cell), oldest first, with what became of them."""
        await self._ready()
        rows = self.model.reservations.bids_of(tenant, cell)
        return self._hide(tenant, ListBidsResponse(bids=[self._bid_view(b) for b in rows[:limit]]))

    # ------------------------------------------------------------------ reservations
    @staticmethod
    def _token_view(t: TokenState, tenant: str) -> ReservationView:
        from .redact import OTHER_RESERVATION, OTHER_TENANT, OTHER_TENANT_NAME

        mine = t.tenant == tenant
        return ReservationView(
            reservation_id=t.reservation_id if mine else OTHER_RESERVATION,
            bid_id=t.bid_id if mine else OTHER_RESERVATION, tenant=t.tenant if mine else OTHER_TENANT_NAME,
            cell=t.cell, node_id=t.node_id, gpu_devices=list(t.gpu_devices), start_at=t.start_at, end_at=t.end_at,
            clearing_price=t.clearing_price, status=t.status,
            claimed_by=list(t.claimed_by) if mine else [OTHER_TENANT for _ in t.claimed_by],
            claimed_at=t.claimed_at, used_gpus=len(t.used_devices), gpus_released=t.gpus_released,
            use=round(t.use, 4), mine=mine, bid_price=t.bid_price if mine else 0.0, wanted_gpus=t.wanted_gpus,
            cpu_milli=t.cpu_milli, memory_mib=t.memory_mib, granted_at=t.granted_at, ended_at=t.ended_at,
            reason=t.reason, purge_at=t.purge_at, hold_from=t.hold_from)

    async def list_reservations(self, tenant: str, cell: str | None = None, status: str | None = None,
                                mine: bool = False, limit: int = 100) -> ListReservationsResponse:
        """Reservation tokens by window start: every tenant's (others' ids hidden), or only the
        caller's (``mine``); optionally of one cell and status."""
        await self._ready()
        rows = self.model.reservations.tokens_of(tenant if mine else None, cell, status.upper() if status else None)
        out = [self._token_view(t, tenant) for t in rows[:limit]]
        return self._hide(tenant, ListReservationsResponse(reservations=out))

    # ------------------------------------------------------------------ nodes
    async def list_nodes(self, tenant: str, cell: str | None = None, limit: int = 1000) -> ListNodesResponse:
        """Every node (nodes are shared by all tenants), with capacity and allocation."""
        await self._ready()
        rows = sorted((n for n in self.model.lifecycle.nodes.values() if cell in (None, n.cell)),
                      key=lambda n: (n.cell, n.node_id))
        return ListNodesResponse(nodes=[
            NodeView(node_id=n.node_id, cell=n.cell, cpu_milli=n.cpu_milli, memory_mib=n.memory_mib, gpus=n.gpus,
                     gpu_model=n.gpu_model, connector=n.connector, cpu_used=n.cpu_used, memory_used=n.memory_used,
                     gpu_used=list(n.gpu_used), status=n.status, health=n.health) for n in rows[:limit]])

    async def get_cell_policy(self, tenant: str, cell: str) -> CellPolicy:
        """The policy in force in ``cell`` (policies are shared by all tenants, as nodes are).
        :class:`NotFoundError` for a cell with neither a registered node nor a policy."""
        if not 1 <= len(cell) <= 256:
            raise ValidationError("cell: give the cell name (1 to 256 characters)")
        await self._ready()
        view = self.model.lifecycle
        policy = view.policy(cell)
        if not policy.set and not any(c == cell for c, _n in view.nodes):
            raise NotFoundError(f"no cell {cell!r}: no node has registered in it and no policy was set for it")
        return CellPolicy(cell=cell, set=policy.set, strategy=policy.strategy, config_json=canonical_json(policy.config),
                          config_digest=policy.digest, aging_ms=policy.aging_ms, event_id=policy.event_id,
                          changed_by=policy.changed_by, at=policy.at)

    async def set_cell_policy(self, tenant: str, cell: str, request: PolicyRequest) -> SetCellPolicyResponse:
        """Operators: store a PolicyChanged for ``cell``, checked first as the scheduler will
        (:class:`ValidationError` names an unknown strategy, key or a bad value)."""
        from suanli.cli_policy import policy_event

        if tenant not in self.operators:
            raise ForbiddenError(f"tenant {tenant!r} may not set a cell's policy: cells are shared, so only the "
                                 "operators named in the API token file may change them")
        if not 1 <= len(cell) <= 256:
            raise ValidationError("cell: give the cell name (1 to 256 characters)")
        try:
            config = json.loads(request.config_json)
        except json.JSONDecodeError as exc:
            raise ValidationError(f"config_json: not JSON: {exc}") from None
        if not isinstance(config, dict):
            raise ValidationError(f"config_json: must be a JSON object, not {type(config).__name__}")
        try:
            event = policy_event(cell, request.strategy, config, self._now_ms(), f"{tenant} (API)")
        except StrategyError as exc:             # an unknown strategy, key or value, named
            raise ValidationError(f"policy refused: {exc}") from None
        await self._ready()
        problem = validate_event("PolicyChanged", event)
        if problem:
            raise ValidationError(problem)
        check_avro("PolicyChanged", event)
        position = await self.sink.publish("PolicyChanged", event)
        return SetCellPolicyResponse(cell=cell, strategy=event["strategy"], config_json=event["config_json"],
                                     config_digest=config_digest(config), event_id=event["event_id"],
                                     position=position)

    async def drain_node(self, tenant: str, node_id: str, request: NodeStatusRequest) -> NodeStatusResponse:
        """Operators: store a NodeStatusChanged DRAINING for a registered node."""
        return await self._node_status(tenant, node_id, "DRAINING", request, "drain")

    async def uncordon_node(self, tenant: str, node_id: str, request: NodeStatusRequest) -> NodeStatusResponse:
        """Operators: store a NodeStatusChanged READY (undoes a drain or a cordon)."""
        return await self._node_status(tenant, node_id, "READY", request, "uncordon")

    async def _node_status(self, tenant: str, node_id: str, status: str, request: NodeStatusRequest,
                           action: str) -> NodeStatusResponse:
        if tenant not in self.operators:
            raise ForbiddenError(f"tenant {tenant!r} may not {action} nodes: nodes are shared, so only the "
                                 "operators named in the API token file may change them")
        if not 1 <= len(node_id) <= 200:
            raise ValidationError("node_id: give the node id (1 to 200 characters)")
        await self._ready()
        try:
            node = self.model.lifecycle.find_node(node_id, request.cell)
        except NotFoundError:
            await self._sync()           # read your writes: it may have registered a moment ago
            node = self.model.lifecycle.find_node(node_id, request.cell)
        event = {"event_id": f"{status.lower()}/{node.cell}/{node.node_id}/{uuid.uuid4().hex[:8]}",
                 "node_id": node.node_id, "cell": node.cell, "status": status,
                 "reason": request.reason or f"{action} by {tenant} (API)", "at": self._now_ms()}
        problem = validate_event("NodeStatusChanged", event)
        if problem:
            raise ValidationError(problem)
        check_avro("NodeStatusChanged", event)
        position = await self.sink.publish("NodeStatusChanged", event)
        return NodeStatusResponse(node_id=node.node_id, cell=node.cell, status=status, previous=node.status,
                                  event_id=event["event_id"], position=position)

    # ------------------------------------------------------------------ audit
    @staticmethod
    def _decision(r: Any) -> AuditDecision:
        p = r.payload
        return AuditDecision(
                kind=r.kind, event_id=p["event_id"], decision_id=p["decision_id"], task_id=p["task_id"],
                tenant=p["tenant"], cell=p["cell"], node_id=p.get("node_id", ""),
                gpu_devices=list(p.get("gpu_devices") or []), gpu_milli=p.get("gpu_milli", 0),
                cpu_milli=p.get("cpu_milli", 0), memory_mib=p.get("memory_mib", 0),
                reasons=[PendingReason.model_validate(x) for x in p.get("reasons") or []],
                queue_position=p.get("queue_position", 0), cause=p.get("cause", ""),
                provenance=Provenance.model_validate(p["provenance"]),
                position=LogPosition(topic=r.topic, partition=r.partition, offset=r.offset), job_id=p.get("job_id"))

    async def get_audit(self, tenant: str, task_id: str) -> AuditTrail:
        """The caller's task's decisions with their provenance, in log order. A finished task
        the read model has forgotten is answered from the archive, with its last status."""
        try:
            task = await self._find(tenant, task_id)
        except NotFoundError:
            status = self._forgotten_status(tenant, task_id)
            if status is None or self.archive is None:
                raise
            records = await self._task_decisions(tenant, task_id)
            if not records:
                raise NotFoundError(f"task {task_id!r} finished ({status}) and the API no longer keeps it, and the "
                                    f"audit index holds no decision about it (was the decisions topic's "
                                    f"retention shorter than the task's life?)") from None
            return self._hide(tenant, AuditTrail(task_id=task_id, tenant=tenant, cell=records[0].payload["cell"],
                                                 status=status, decisions=[self._decision(r) for r in records]))
        decisions = [self._decision(r) for r in await self._task_decisions(tenant, task_id)]
        status = "SUBMITTED" if isinstance(task, Submission) else task.status
        return self._hide(tenant, AuditTrail(task_id=task_id, tenant=tenant, cell=task.cell, status=status,
                                             decisions=decisions))

    async def list_audit(self, tenant: str, job: str | None = None, task_id: str | None = None,
                         limit: int = 1000) -> AuditList:
        """The caller's decisions about the members of ``job`` and/or about ``task_id``, in log
        order (the newest ``limit``). One filter at least: an answer about every task is not offered."""
        if job is None and task_id is None:
            raise ValidationError("invalid request: job: give a job (or a task_id) to filter the audit by")
        await self._ready()
        if job is not None:
            await self._sync()         # read your writes: members submitted a moment ago
            ids = [v.task_id for v in self.model.lifecycle.job_tasks(job, tenant)]
            ids += [s.task_id for s in self.model.submissions.values()
                    if s.job_id == job and s.tenant == tenant and s.task_id not in self.model.lifecycle.tasks]
            if task_id is not None:
                ids = [t for t in ids if t == task_id]
        else:
            ids = [task_id]
        records = []
        for tid in dict.fromkeys(ids):
            records += [r for r in await self._task_decisions(tenant, tid)
                        if job is None or r.payload.get("job_id") == job]
        if job is not None and self.archive is not None \
                and tenant in self.model.lifecycle.forgotten_jobs.get(job, ()):
            # a job the read model forgot whole: its members are no longer known here (and a
            # member that came after started the job anew; the archive has both)
            have = {r.payload["event_id"] for r in records}
            records += [r for r in await self.archive.job_decisions(job)
                        if r.payload.get("tenant") == tenant and r.payload["event_id"] not in have
                        and (task_id is None or r.payload["task_id"] == task_id)]
        records.sort(key=lambda r: (r.payload["provenance"].get("decided_at", 0), r.topic, r.partition, r.offset))
        return self._hide(tenant, AuditList(decisions=[self._decision(r) for r in records[-limit:]]))

    async def get_job(self, tenant: str, job_id: str) -> JobView:
        """The caller's member tasks of ``job_id`` with their status; NotFoundError when it has none
        (also when the job is another tenant's)."""
        await self._ready()

        def members() -> list[TaskView | Submission]:
            lifecycle = self.model.lifecycle
            out: list[TaskView | Submission] = list(lifecycle.job_tasks(job_id, tenant))
            out += [s for s in self.model.submissions.values()
                    if s.job_id == job_id and s.tenant == tenant and s.task_id not in lifecycle.tasks]
            return out

        rows = members()
        if not rows:
            await self._sync()
            rows = members()
        if not rows:
            if tenant in self.model.lifecycle.forgotten_jobs.get(job_id, ()):
                raise NotFoundError(f"job {job_id!r} finished and the API no longer keeps it: it keeps the newest "
                                    f"{self.model.keep_finished} finished tasks (SUANLI_API_FINISHED_TASKS), a "
                                    f"job's members together; its decisions stay in the audit: "
                                    f"GET /v1/audit?job={job_id} or `suanli audit list --job {job_id}`")
            raise NotFoundError(f"no job {job_id!r}")
        for c in {t.cell for t in rows if isinstance(t, TaskView) and t.status == "PENDING"}:
            self._refresh_queue(c)
        tasks = sorted((self._status(t) for t in rows), key=lambda t: (t.submitted_at, t.task_id))
        counts: dict[str, int] = {}
        for t in tasks:
            counts[t.status] = counts.get(t.status, 0) + 1
        return self._hide(tenant, JobView(job_id=job_id, tenant=tenant, tasks=tasks, counts=counts))

    def health(self) -> Health:
        return Health(ready=self.follower is None or self.follower.ready, namespace=self.namespace)
