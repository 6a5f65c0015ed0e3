"""Pydantic models at the API boundary: what REST bodies and gRPC messages carry.

Requests reuse the task form of ``schemas/task_spec.py`` (:class:`TaskSpec`,
:class:`ResourcesSpec`), so the API, the CLI and YAML files accept the same documents.
Responses mirror the read model (``projections/lifecycle.py``) and, where an Avro record
is shown as it is (pending reasons, provenance, log positions, task resources), the Avro
record field for field. ``schemas/proto/suanli.proto`` has one message per model here with
the same name and fields; ``tests/api/test_contract.py`` keeps the two from drifting.

Times are epoch milliseconds (Avro ``timestamp-millis``); enums are their Avro symbols as
strings.
"""
from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, create_model

from suanli.schemas.task_spec import ResourcesSpec, TaskSpec

__all__ = [
    "TaskSpec", "ResourcesSpec", "BidSpec", "CancelRequest", "LogPosition", "SubmitTaskResponse",
    "CancelTaskResponse", "SubmitBidResponse", "PendingReason", "TaskStatus", "ListTasksResponse",
    "WhyPendingResponse", "CellPolicy", "PolicyRequest", "SetCellPolicyResponse", "AcceleratorRequest", "TaskResources", "BidView", "ListBidsResponse",
    "NodeView", "ListNodesResponse", "StrategyRef", "Candidate", "FilterOutcome", "Provenance",
    "AuditDecision", "AuditTrail", "Health", "FieldError", "ErrorResponse", "MAX_EPOCH_MS",
    "NodeStatusRequest", "NodeStatusResponse", "ReservationView", "ListReservationsResponse",
    "AuditList", "JobView",
]

MAX_EPOCH_MS = 253_402_300_799_999      # 9999-12-31T23:59:59.999Z: keeps times inside Avro long and sane
TASK_ID = Field(min_length=1, max_length=200, description="Task id.")


class _Out(BaseModel):
    # Built from Avro payloads too: a field a newer schema adds is dropped here (and the
    # contract test asks for it to be added to the model and the proto), never a 500.
    model_config = ConfigDict(extra="ignore")


# ----------------------------------------------------------------------- requests
class BidSpec(BaseModel):
    """A bid for advance capacity: becomes a ``ReservationBid`` on the raw tasks topic.

    It asks for ``resources.gpu`` whole GPUs (at least 1, on one node; ``gpu_models`` or
    ``gpu_memory`` narrow which) and the CPU and memory beside them, for ``duration``,
    starting between ``start_at`` and ``latest_start_at``, at up to ``price`` per GPU-hour.
    The cell's auction grants it a token (``rsv-<bid_id>``) or refuses it; see ``GetBid``.
    """

    model_config = ConfigDict(extra="forbid")
    bid_id: str | None = Field(None, min_length=1, max_length=200, description="Bid id; generated when absent.")
    tenant: str | None = Field(None, min_length=1, description="Must be the token's tenant when given.")
    cell: str = Field("openb", min_length=1, max_length=256)
    resources: ResourcesSpec
    start_at: int = Field(ge=0, le=MAX_EPOCH_MS, description="Earliest start of the window, epoch ms.")
    duration: str | None = Field(None, description="Length of the window, e.g. 30m, 2h (or duration_ms).")
    duration_ms: int | None = Field(None, gt=0, le=MAX_EPOCH_MS, description="Length of the window, ms.")
    price: float = Field(ge=0, le=1e9, allow_inf_nan=False, description="Maximum price per GPU-hour.")
    latest_start_at: int | None = Field(None, ge=0, le=MAX_EPOCH_MS,
                                        description="Latest start of the window, epoch ms (default: start_at).")
    gang: bool = Field(True, description="All the GPUs or none (default); false: fewer (at least 1) will do.")
    gpu_memory: str | None = Field(None, max_length=32,
                                   description="Memory per GPU, e.g. 40Gi or 40960 (MiB): GPUs with less "
                                               "do not count.")


class CancelRequest(BaseModel):
    """Why a task is cancelled (optional)."""

    model_config = ConfigDict(extra="forbid")
    reason: str = Field("", max_length=1000)


class NodeStatusRequest(BaseModel):
    """A node operation's options: the node's cell (needed only when its id is registered in
    several cells) and why (kept in the event)."""

    model_config = ConfigDict(extra="forbid")
    cell: str | None = Field(None, min_length=1, max_length=256)
    reason: str = Field("", max_length=1000)


class PolicyRequest(BaseModel):
    """A cell's new policy: a strategy (``suanli strategy list``) and its configuration as a JSON
    object in text (as the ``PolicyChanged`` event carries it), checked as the scheduler will."""

    model_config = ConfigDict(extra="forbid")
    strategy: str = Field("default", min_length=1, max_length=100)
    config_json: str = Field("{}", max_length=100_000)


# ----------------------------------------------------------------------- shared records
class LogPosition(_Out):
    """Avro ``LogPosition``: where a record is in Kafka."""

    topic: str
    partition: int
    offset: int


class PendingReason(_Out):
    """Avro ``PendingReason``."""

    reason: str
    nodes: int


class AcceleratorRequest(_Out):
    """Avro ``AcceleratorRequest`` (``kind`` is an ``AcceleratorKind`` symbol)."""

    kind: str
    model: str
    count: int
    memory_mib: int = 0


class TaskResources(_Out):
    """Avro ``TaskResources``: resources as the scheduler sees them."""

    cpu_milli: int
    memory_mib: int
    gpu_count: int = 0
    gpu_milli: int = 0
    gpu_models: list[str] = []
    gpu_memory_mib: int = 0
    accelerators: list[AcceleratorRequest] = []


class StrategyRef(_Out):
    """Avro ``StrategyRef``."""

    name: str
    version: str
    config_digest: str


class Candidate(_Out):
    """Avro ``Candidate``."""

    node_id: str
    score: float
    rank: int


class FilterOutcome(_Out):
    """Avro ``FilterOutcome``."""

    reason: str
    nodes: int
    sample: list[str] = []


def _profile_model() -> type[_Out]:
    """Avro ``TaskProfile`` as a model, field for field from its schema (70 documented
    dimensions: written out by hand they would drift)."""
    from suanli.schemas.catalog import AVRO_DIR

    types: dict[str, Any] = {"string": str, "double": float, "int": int, "long": int}
    fields: dict[str, Any] = {}
    for f in json.loads((AVRO_DIR / "io.suanli.events.TaskProfile.avsc").read_text())["fields"]:
        t = f["type"]
        tp = (types[t] if isinstance(t, str) else list[str] if t["type"] == "array" else dict[str, float])
        fields[f["name"]] = (tp, Field(f["default"], description=f.get("doc")))
    return create_model("TaskProfile", __base__=_Out, __doc__="Avro ``TaskProfile`` (C9).", **fields)


TaskProfile = _profile_model()


class Provenance(_Out):
    """Avro ``Provenance``: what the scheduler knew and did (DESIGN.md invariant 4)."""

    input: LogPosition
    strategy: StrategyRef
    candidates: list[Candidate] = []
    filtered: list[FilterOutcome] = []
    path: list[str] = []
    decided_at: int
    matched_rule: str | None = None
    profile: TaskProfile | None = None  # type: ignore[valid-type]
    notes: list[str] = []


# ----------------------------------------------------------------------- responses
class SubmitTaskResponse(_Out):
    """The TaskSubmitted event was stored on the raw tasks topic."""

    task_id: str
    tenant: str
    cell: str
    event_id: str
    submitted_at: int
    position: LogPosition


class CancelTaskResponse(_Out):
    """The TaskCancelled event was stored; the scheduler releases the task."""

    task_id: str
    event_id: str
    position: LogPosition


class SubmitBidResponse(_Out):
    """The ReservationBid event was stored."""

    bid_id: str
    tenant: str
    cell: str
    event_id: str
    position: LogPosition


class TaskStatus(_Out):
    """Where a task stands (``projections/lifecycle.TaskView``).

    ``status``: SUBMITTED (accepted, no decision yet), PENDING, PLACED, DISPATCHED,
    RUNNING, COMPLETED, FAILED, CANCELLED or UNSCHEDULABLE. ``placed`` tells whether it was
    ever placed.
    """

    task_id: str
    tenant: str
    cell: str
    status: str
    placed: bool
    node_id: str
    gpu_devices: list[int]
    gpu_milli: int
    cpu_milli: int
    memory_mib: int
    reasons: list[PendingReason]
    queue_position: int
    priority: int
    qos_tier: str
    submitted_at: int
    decision_id: str
    decided_at: int
    strategy: str
    path: list[str]
    message: str
    job_id: str | None = None        # the job it is a member of (its submission's ``job``)


class ListTasksResponse(_Out):
    tasks: list[TaskStatus]


class WhyPendingResponse(_Out):
    """Why a task waits: the reasons of its latest decision and its current queue position."""

    task_id: str
    status: str
    pending: bool
    reasons: list[PendingReason]
    queue_position: int
    queue_length: int
    decision_id: str
    decided_at: int
    strategy: str
    path: list[str]
    explanation: str


class BidView(_Out):
    """A tenant's ``ReservationBid`` and what became of it (``projections/reservations.py``).

    ``status``: SUBMITTED (no decision yet), GRANTED (``ReservationGranted``: the token
    ``reservation_id`` on ``node_id`` GPUs ``gpu_devices`` from ``granted_start_at`` to
    ``granted_end_at`` at ``clearing_price`` per GPU-hour; ``reservation_status`` is the
    token's) or LOST (``ReservationRejected``: ``reason``, and ``needed_price``, the lowest
    price that would have won, absent when no price would have: no capacity in the window).
    """

    bid_id: str
    tenant: str
    cell: str
    resources: TaskResources
    start_at: int
    duration_ms: int
    price: float
    at: int
    status: str
    reservation_id: str
    node_id: str
    latest_start_at: int | None = None
    gang: bool = True
    gpu_devices: list[int] = []
    granted_start_at: int = 0
    granted_end_at: int = 0
    clearing_price: float | None = None
    reservation_status: str = ""
    reason: str = ""
    needed_price: float | None = None
    decided_at: int = 0


class ListBidsResponse(_Out):
    bids: list[BidView]


class ReservationView(_Out):
    """A reservation token (``projections/reservations.TokenState``).

    ``status``: GRANTED (held for its owner), CLAIMED (a task of the owner's with the label
    ``reservation`` runs on it), EXPIRED (nobody claimed it in time), ENDED (claimed, and its
    window closed) or RELEASED (all its GPUs given back unclaimed). ``used_gpus`` of its GPUs
    were used by its claimants (``use`` = used / all), ``gpus_released`` given back at the
    claim. Tokens are shared information, like nodes: another tenant's token shows its
    capacity, window and price, with its ids, its tenant and its claimants hidden
    (``mine`` false).
    """

    reservation_id: str
    bid_id: str
    tenant: str
    cell: str
    node_id: str
    gpu_devices: list[int]
    start_at: int
    end_at: int
    clearing_price: float
    status: str
    claimed_by: list[str]
    claimed_at: int
    used_gpus: int
    gpus_released: int
    use: float
    mine: bool
    bid_price: float = 0.0
    wanted_gpus: int = 0
    cpu_milli: int = 0
    memory_mib: int = 0
    granted_at: int = 0
    ended_at: int = 0
    reason: str = ""
    purge_at: int | None = None
    hold_from: int | None = None


class ListReservationsResponse(_Out):
    reservations: list[ReservationView]


class NodeView(_Out):
    """A node's capacity and what is allocated on it (``projections/lifecycle.NodeView``)."""

    node_id: str
    cell: str
    cpu_milli: int
    memory_mib: int
    gpus: int
    gpu_model: str
    connector: str
    cpu_used: int
    memory_used: int
    gpu_used: list[int]
    status: str = "READY"            # READY, CORDONED, DRAINING, DOWN (NodeStatusChanged)
    health: str = "READY"            # READY, SUSPECT, DOWN (NodeHealthChanged)


class ListNodesResponse(_Out):
    nodes: list[NodeView]


class SetCellPolicyResponse(_Out):
    """The PolicyChanged an operator stored (the raw policy topic; intake forwards it to the
    cell's log, and the scheduler applies it in log order: ``GetCellPolicy`` shows it then)."""

    cell: str
    strategy: str
    config_json: str                 # canonical JSON
    config_digest: str
    event_id: str
    position: LogPosition


class CellPolicy(_Out):
    """A cell's policy in force (``projections/lifecycle.PolicyView``), folded from its cell log
    as the scheduler folds it: a policy the scheduler refused leaves the previous one in force.
    ``set`` false: no policy has reached the cell, which runs ``default`` with its defaults.
    ``config_digest`` is what its decisions cite (``provenance.strategy.config_digest``);
    ``aging_ms`` the waiting worth one point of priority in its queue."""

    cell: str
    set: bool
    strategy: str
    config_json: str
    config_digest: str
    aging_ms: int
    event_id: str = ""
    changed_by: str = ""
    at: int = 0


class NodeStatusResponse(_Out):
    """The NodeStatusChanged a node operation wrote and where it is stored (the raw nodes
    topic; intake forwards it to the node's cell log)."""

    node_id: str
    cell: str
    status: str
    previous: str
    event_id: str
    position: LogPosition


class AuditDecision(_Out):
    """One scheduling decision about a task, as recorded on the decisions topic.

    ``kind`` is TaskPlaced, TaskPending, TaskUnschedulable, TaskReleased, TaskPreempted,
    TaskMigrated, TaskLost or JobResized (an elastic job resized: filed under its task that
    carries the policy; the change and its reason are in ``provenance.path``); the fields a
    kind does not have are left empty. ``position`` is where the decision itself is stored.
    """

    kind: str
    event_id: str
    decision_id: str
    task_id: str
    tenant: str
    cell: str
    node_id: str = ""
    gpu_devices: list[int] = []
    gpu_milli: int = 0
    cpu_milli: int = 0
    memory_mib: int = 0
    reasons: list[PendingReason] = []
    queue_position: int = 0
    cause: str = ""
    provenance: Provenance
    position: LogPosition
    job_id: str | None = None


class AuditList(_Out):
    """Decisions matching ``ListAudit``'s filters (a job, a task), in log order."""

    decisions: list[AuditDecision]


class JobView(_Out):
    """A job of many tasks (issue 22): its member tasks, those submitted with ``job`` set to
    ``job_id`` by this tenant, in submission order, each with its status and node;
    ``counts`` holds the members per status."""

    job_id: str
    tenant: str
    tasks: list[TaskStatus]
    counts: dict[str, int]


class AuditTrail(_Out):
    """Every decision about one task, in log order: its decision path and provenance."""

    task_id: str
    tenant: str
    cell: str
    status: str
    decisions: list[AuditDecision]


class Health(_Out):
    """Whether the read model has caught up with the log (reads answer 503 until then)."""

    ready: bool
    namespace: str


class FieldError(_Out):
    field: str
    message: str


class ErrorResponse(_Out):
    """Every 4xx/5xx body: a one-line ``detail`` for people, and per-field errors for 422."""

    detail: str
    errors: list[FieldError] = []
