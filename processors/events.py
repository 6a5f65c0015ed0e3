"""Event payloads of the scheduling core, as TypedDicts.

Events in and out of the core are plain dicts; their kind travels separately (the Avro
record name). Field names match ``schemas/avro/io.suanli.events.*.avsc``. Times are int
epoch milliseconds. The core tolerates the optional fields being absent (``event_id``,
``profile``, ``usage`` ...); it never needs them to decide.
"""
from __future__ import annotations

from typing import Any, Literal, Optional, TypedDict

# ---- kinds -------------------------------------------------------------------------
NODE_REGISTERED = "NodeRegistered"
NODE_STATUS_CHANGED = "NodeStatusChanged"
TASK_SUBMITTED = "TaskSubmitted"
TASK_CANCELLED = "TaskCancelled"
TASK_STATUS_CHANGED = "TaskStatusChanged"
POLICY_CHANGED = "PolicyChanged"
TASK_PLACED = "TaskPlaced"
TASK_PENDING = "TaskPending"
TASK_UNSCHEDULABLE = "TaskUnschedulable"
TASK_RELEASED = "TaskReleased"

INPUT_KINDS = frozenset({NODE_REGISTERED, NODE_STATUS_CHANGED, TASK_SUBMITTED, TASK_CANCELLED,
                         TASK_STATUS_CHANGED, POLICY_CHANGED})
OUTPUT_KINDS = frozenset({TASK_PLACED, TASK_PENDING, TASK_UNSCHEDULABLE, TASK_RELEASED})

QosTier = Literal["GOLD", "SILVER", "BRONZE"]


class Accelerator(TypedDict):
    kind: str            # GPU | NPU | FPGA | ASIC | QPU | OTHER
    model: str
    count: int
    memory_mib: int


class NodeRegistered(TypedDict, total=False):
    event_id: str
    node_id: str
    cell: str
    site: str
    region: str
    zone: str
    arch: str            # x86_64 | arm64 | ...
    cpu_milli: int
    memory_mib: int
    accelerators: list[Accelerator]
    tier: str            # cloud | edge | onprem
    pricing: str
    price_per_hour: float
    pue: float
    carbon_g_per_kwh: float
    connector: str
    labels: dict[str, str]
    registered_at: int


class NodeStatusChanged(TypedDict, total=False):
    event_id: str
    node_id: str
    cell: str
    status: str          # READY | CORDONED | DOWN
    reason: str
    at: int


class TaskResources(TypedDict, total=False):
    cpu_milli: int
    memory_mib: int
    gpu_count: int       # 0 = CPU only; 1 with gpu_milli < 1000 = shared GPU; n>1 = n whole GPUs
    gpu_milli: int       # per-GPU milli
    gpu_models: list[str]  # accepted GPU models, empty = any
    gpu_memory_mib: int
    accelerators: list[dict[str, Any]]


class TaskSubmitted(TypedDict, total=False):
    event_id: str
    task_id: str
    tenant: str
    cell: str
    submitted_at: int
    resources: TaskResources
    qos_tier: QosTier
    priority: int
    labels: dict[str, str]
    deadline: Optional[int]
    duration_estimate_ms: Optional[int]
    command: Optional[list[str]]


class TaskCancelled(TypedDict, total=False):
    event_id: str
    task_id: str
    cell: str
    tenant: str
    reason: str
    at: int


class TaskStatusChanged(TypedDict, total=False):
    event_id: str
    task_id: str
    cell: str
    node_id: str
    status: str          # DISPATCHED | RUNNING | COMPLETED | FAILED (| CANCELLED ...)
    at: int
    exit_code: Optional[int]
    message: str


class PolicyChanged(TypedDict, total=False):
    """``config`` (a dict) or ``config_json`` (its canonical JSON, as on the wire)."""
    event_id: str
    cell: str
    strategy: str
    config: dict[str, Any]
    config_json: str
    changed_by: str
    at: int


# ---- outputs -----------------------------------------------------------------------
class LogPosition(TypedDict):
    topic: str
    partition: int
    offset: int


class StrategyRef(TypedDict):
    name: str
    version: str
    config_digest: str


class Candidate(TypedDict):
    node_id: str
    score: float
    rank: int


class FilterOutcome(TypedDict):
    reason: str
    nodes: int
    sample: list[str]


class Provenance(TypedDict):
    input: LogPosition
    strategy: StrategyRef
    candidates: list[Candidate]
    filtered: list[FilterOutcome]
    path: list[str]
    decided_at: int
    matched_rule: Optional[str]


class PendingReason(TypedDict):
    reason: str
    nodes: int


class TaskPlaced(TypedDict):
    event_id: str
    decision_id: str
    task_id: str
    tenant: str
    cell: str
    node_id: str
    gpu_devices: list[int]
    gpu_milli: int       # per device
    cpu_milli: int
    memory_mib: int
    provenance: Provenance


class TaskPending(TypedDict):
    event_id: str
    decision_id: str
    task_id: str
    tenant: str
    cell: str
    reasons: list[PendingReason]
    queue_position: int  # 0 = head of the queue
    provenance: Provenance


class TaskUnschedulable(TypedDict):
    event_id: str
    decision_id: str
    task_id: str
    tenant: str
    cell: str
    reasons: list[PendingReason]
    provenance: Provenance


class TaskReleased(TypedDict):
    event_id: str
    decision_id: str
    task_id: str
    tenant: str
    cell: str
    node_id: str         # "" when the task held nothing (cancelled while pending)
    cause: str           # COMPLETED | FAILED | CANCELLED | PREEMPTED
    gpu_devices: list[int]
    provenance: Provenance
