"""The cell's vocabulary: typed, immutable values for everything the core reads or writes.

Every Avro record of the contract (``schemas/avro``) has a frozen, slotted dataclass here
with the same fields in the same order and the same defaults, so the core works on
attributes, never on raw dicts. Conversion happens at the edge:

* :func:`from_avro` builds a value from a decoded Avro dict (``Codec.decode``) or from a
  hand-written dict (tests, the FGD harness); fields with an Avro default may be left out,
  required ones may not (:class:`~suanli.errors.ModelError` names the field).
* :func:`to_avro` turns a value back into the dict ``Codec.encode`` writes. The pair is
  lossless: Avro bytes -> value -> Avro bytes is byte-identical
  (``tests/processors/test_model.py``).

Sequences are tuples and maps are dicts that the core never mutates; times are int epoch
milliseconds (``timestamp-millis``). Each event class has ``KIND``, its Avro record name,
which is also the event's kind on the wire. The sets of kinds (cell inputs, decisions,
...) are defined here once.

Besides the wire records, three core types: :class:`Request` (a task's resource ask,
normalised), :class:`Task` (what a submission asks for, kept in the cell state) and
:class:`Policy` (the cell's strategy and its configuration).
"""
from __future__ import annotations

import dataclasses
import json
import typing
from dataclasses import dataclass, field
from types import NoneType, UnionType
from typing import Any, Callable, ClassVar, Mapping, Optional, Union

from suanli.errors import ModelError

GPU_MILLI = 1000

_FROZEN = dict(frozen=True, slots=True, kw_only=True)
RECORDS: dict[str, type] = {}        # Avro record name -> class (every record, nested ones too)


def _record(cls: type) -> type:
    """Register a record class under its Avro name (the class name)."""
    RECORDS[cls.__name__] = cls
    return cls


def _empty_map() -> dict:
    return {}


# =========================================================================== nested records
@_record
@dataclass(**_FROZEN)
class Accelerator:
    kind: str                    # GPU | NPU | FPGA | ASIC | QPU | OTHER
    model: str
    count: int
    memory_mib: int = 0
    # Per-device facts as strings (qubits, noise, bitstream, firmware): informational, the
    # filters do not read them; an adapter checks what it needs when it admits a task.
    attributes: dict[str, str] = field(default_factory=_empty_map)


@_record
@dataclass(**_FROZEN)
class AcceleratorRequest:
    kind: str
    model: str
    count: int
    memory_mib: int = 0          # per device, at least (0 = any)


@_record
@dataclass(**_FROZEN)
class TaskResources:
    cpu_milli: int
    memory_mib: int
    gpu_count: int = 0           # 0 = CPU only; 1 with gpu_milli < 1000 = shared; n > 1 = n whole GPUs
    gpu_milli: int = 0           # per GPU
    gpu_models: tuple[str, ...] = ()
    gpu_memory_mib: int = 0
    accelerators: tuple[AcceleratorRequest, ...] = ()


@_record
@dataclass(**_FROZEN)
class TaskProfile:
    """Declared and learnt characteristics of a task (C9); ``model`` is its weights, if any."""
    duration_class: str = ""
    io_intensity: float = 0.0
    parallelism: int = 1
    sla_level: str = ""
    model_arch: str = ""
    model_uri: str = ""
    model_size_mib: int = 0
    data_locations: tuple[str, ...] = ()
    extra: Mapping[str, float] = field(default_factory=_empty_map)
    # processors/profiler.py fills the rest; each is documented in TaskProfile.avsc
    signature: str = ''
    history_level: str = ''
    dims_filled: int = 0
    req_cpu_cores: float = 0.0
    req_memory_gib: float = 0.0
    req_gpu_count: float = 0.0
    req_gpu_share: float = 0.0
    req_gpu_total: float = 0.0
    req_gpu_models: float = 0.0
    req_accelerators: float = 0.0
    mem_per_core_gib: float = 0.0
    declared_duration_s: float = 0.0
    deadline_slack_s: float = 0.0
    qos_rank: float = 0.0
    priority_value: float = 0.0
    scheduling_rank: float = 1.0
    model_size_gib: float = 0.0
    command_args: float = 0.0
    env_vars: float = 0.0
    label_count: float = 0.0
    gang_size: float = 1.0
    reserved: float = 0.0
    submitted_hour: float = 0.0
    submitted_weekday: float = 0.0
    history_runs: float = 0.0
    duration_mean_s: float = 0.0
    duration_p50_s: float = 0.0
    duration_p90_s: float = 0.0
    duration_p99_s: float = 0.0
    duration_cv: float = 0.0
    duration_last_s: float = 0.0
    predicted_duration_s: float = 0.0
    predicted_duration_lo_s: float = 0.0
    predicted_duration_hi_s: float = 0.0
    success_rate: float = 1.0
    exit_zero_share: float = 1.0
    exit_oom_share: float = 0.0
    exit_other_share: float = 0.0
    retries_per_run: float = 0.0
    queue_wait_mean_s: float = 0.0
    queue_wait_last_s: float = 0.0
    arrivals: float = 0.0
    interarrival_mean_s: float = 0.0
    interarrival_cv: float = 0.0
    cpu_used_ratio_mean: float = 0.0
    cpu_used_ratio_max: float = 0.0
    mem_peak_ratio_mean: float = 0.0
    mem_peak_ratio_max: float = 0.0
    gpu_util_mean: float = 0.0
    gpu_mem_peak_ratio: float = 0.0
    io_read_mib_s: float = 0.0
    io_write_mib_s: float = 0.0
    net_mib_s: float = 0.0
    tenant_active: float = 0.0
    tenant_arrivals: float = 0.0
    cell_queue_length: float = 0.0
    cell_gpu_alloc: float = 0.0
    duration_rank: float = 0.0
    compute_bound: float = 0.0
    memory_bound: float = 0.0
    burstiness: float = 0.0
    over_request: float = 0.0
    oom_risk: float = 0.0
    backfill_fit: float = 0.0
    deadline_pressure: float = 0.0

    @property
    def model(self) -> Optional["ModelRef"]:
        """The weights the task loads, or None."""
        # ModelRef is keyword-only, as every record here
        return ModelRef(model_arch=self.model_arch, artifact_uri=self.model_uri,
                        size_mib=self.model_size_mib) if self.model_arch else None


@_record
@dataclass(**_FROZEN)
class ModelRef:
    """Model weights a task loads before it starts; ``model_arch`` keys a node's model cache."""
    model_arch: str
    artifact_uri: str = ""
    size_mib: int = 0


@_record
@dataclass(**_FROZEN)
class ResourceUsage:
    cpu_seconds: float
    max_rss_mib: int
    wall_ms: int
    gpu_util: Optional[float] = None
    gpu_memory_peak_mib: Optional[float] = None
    io_read_mib: Optional[float] = None
    io_write_mib: Optional[float] = None
    net_mib: Optional[float] = None


@_record
@dataclass(**_FROZEN)
class LogPosition:
    topic: str
    partition: int
    offset: int


@_record
@dataclass(**_FROZEN)
class StrategyRef:
    name: str
    version: str
    config_digest: str


@_record
@dataclass(**_FROZEN)
class Candidate:
    node_id: str
    score: float
    rank: int


@_record
@dataclass(**_FROZEN)
class FilterOutcome:
    reason: str
    nodes: int
    sample: tuple[str, ...] = ()


@_record
@dataclass(**_FROZEN)
class Provenance:
    input: LogPosition
    strategy: StrategyRef
    candidates: tuple[Candidate, ...]
    filtered: tuple[FilterOutcome, ...]
    path: tuple[str, ...]
    decided_at: int
    matched_rule: Optional[str] = None
    profile: Optional[TaskProfile] = None
    notes: tuple[str, ...] = ()


@_record
@dataclass(**_FROZEN)
class PendingReason:
    reason: str
    nodes: int


# =========================================================================== cell inputs
@_record
@dataclass(**_FROZEN)
class NodeRegistered:
    KIND: ClassVar[str] = "NodeRegistered"
    event_id: str
    node_id: str
    cell: str
    site: str
    region: str
    zone: str
    tier: str                    # cloud | edge | onprem
    arch: str                    # x86_64 | arm64 | riscv64 | other
    cpu_milli: int
    memory_mib: int
    accelerators: tuple[Accelerator, ...] = ()
    pricing: str = "ON_DEMAND"   # ON_DEMAND | RESERVED | SPOT
    price_per_hour: float = 0.0
    idle_price_per_hour: float = 0.0
    pue: float = 1.0
    carbon_g_per_kwh: float = 0.0
    connector: str = "sim"
    labels: Mapping[str, str] = field(default_factory=_empty_map)
    registered_at: int
    model_cache_mib: int = 0     # disk for cached model weights (model_cache.py); 0 = no cache

    @property
    def gpus(self) -> tuple[int, Optional[str]]:
        """``(count, model)`` of the node's GPUs: all GPU entries counted, the model of the
        largest entry (a node carries one GPU model)."""
        gpus = [a for a in self.accelerators if a.kind == "GPU"]
        count = sum(a.count for a in gpus)
        model = max(gpus, key=lambda a: a.count).model if gpus else None
        return count, model


@_record
@dataclass(**_FROZEN)
class NodeStatusChanged:
    KIND: ClassVar[str] = "NodeStatusChanged"
    event_id: str
    node_id: str
    cell: str
    status: str                  # READY | CORDONED | DOWN | DRAINING
    reason: str = ""
    at: int


@_record
@dataclass(**_FROZEN)
class TaskSubmitted:
    KIND: ClassVar[str] = "TaskSubmitted"
    event_id: str
    task_id: str
    tenant: str
    cell: str
    submitted_at: int
    resources: TaskResources
    qos_tier: str = "SILVER"     # GOLD | SILVER | BRONZE
    priority: int = 0
    labels: Mapping[str, str] = field(default_factory=_empty_map)
    deadline: Optional[int] = None
    duration_estimate_ms: Optional[int] = None
    command: Optional[tuple[str, ...]] = None
    profile: Optional[TaskProfile] = None
    env: Mapping[str, str] = field(default_factory=_empty_map)
    job_id: Optional[str] = None  # the job the task is a member of (issue 22), None for none


@_record
@dataclass(**_FROZEN)
class TaskCancelled:
    KIND: ClassVar[str] = "TaskCancelled"
    event_id: str
    task_id: str
    tenant: str
    cell: str
    reason: str = ""
    at: int


@_record
@dataclass(**_FROZEN)
class TaskStatusChanged:
    KIND: ClassVar[str] = "TaskStatusChanged"
    event_id: str
    task_id: str
    cell: str
    node_id: str
    status: str                  # SUBMITTED | PENDING | PLACED | DISPATCHED | RUNNING | COMPLETED | FAILED | CANCELLED
    at: int
    exit_code: Optional[int] = None
    message: str = ""
    usage: Optional[ResourceUsage] = None


@_record
@dataclass(**_FROZEN)
class PolicyChanged:
    """On the wire the configuration travels as canonical JSON (``config_json``)."""
    KIND: ClassVar[str] = "PolicyChanged"
    event_id: str
    cell: str
    strategy: str
    config_json: str
    changed_by: str = ""
    at: int

    @classmethod
    def of(cls, cell: str, strategy: str, config: Mapping[str, Any] | None = None, *, at: int = 0,
           event_id: str = "", changed_by: str = "") -> "PolicyChanged":
        """A PolicyChanged carrying ``config`` as its canonical JSON."""
        return cls(event_id=event_id, cell=cell, strategy=strategy, config_json=canonical_json(config or {}),
                   changed_by=changed_by, at=at)

    def config(self) -> dict[str, Any]:
        """The configuration, parsed; :class:`ModelError` when it is not a JSON object."""
        try:
            value = json.loads(self.config_json or "{}")
        except json.JSONDecodeError as exc:
            raise ModelError(f"PolicyChanged.config_json is not JSON: {exc}") from None
        if not isinstance(value, dict):
            raise ModelError(f"PolicyChanged.config_json must be a JSON object, got {type(value).__name__}")
        return value


@_record
@dataclass(**_FROZEN)
class CellTick:
    """Time entering the cell log: the scheduler's clock is the largest event time seen."""
    KIND: ClassVar[str] = "CellTick"
    event_id: str
    cell: str
    at: int
    period_ms: int = 1000


@_record
@dataclass(**_FROZEN)
class NodeConditionChanged:
    KIND: ClassVar[str] = "NodeConditionChanged"
    event_id: str
    node_id: str
    cell: str
    condition: str               # NORMAL | HOT | CONGESTED | DEGRADED
    previous: str = "NORMAL"
    metrics: Mapping[str, float] = field(default_factory=_empty_map)
    reason: str = ""
    at: int


# =========================================================================== decisions
@_record
@dataclass(**_FROZEN)
class TaskPlaced:
    KIND: ClassVar[str] = "TaskPlaced"
    event_id: str
    decision_id: str
    task_id: str
    tenant: str
    cell: str
    node_id: str
    gpu_devices: tuple[int, ...] = ()
    gpu_milli: int = 0           # per device
    cpu_milli: int
    memory_mib: int
    provenance: Provenance
    job_id: Optional[str] = None  # the job the task is a member of (TaskSubmitted.job_id)


@_record
@dataclass(**_FROZEN)
class TaskPending:
    KIND: ClassVar[str] = "TaskPending"
    event_id: str
    decision_id: str
    task_id: str
    tenant: str
    cell: str
    reasons: tuple[PendingReason, ...]
    queue_position: int          # 0 = head of the queue
    provenance: Provenance
    job_id: Optional[str] = None  # the job the task is a member of (TaskSubmitted.job_id)


@_record
@dataclass(**_FROZEN)
class TaskUnschedulable:
    KIND: ClassVar[str] = "TaskUnschedulable"
    event_id: str
    decision_id: str
    task_id: str
    tenant: str
    cell: str
    reasons: tuple[PendingReason, ...]
    provenance: Provenance
    job_id: Optional[str] = None  # the job the task is a member of (TaskSubmitted.job_id)


@_record
@dataclass(**_FROZEN)
class TaskReleased:
    KIND: ClassVar[str] = "TaskReleased"
    event_id: str
    decision_id: str
    task_id: str
    tenant: str
    cell: str
    node_id: str                 # "" when the task held nothing (cancelled while pending)
    cause: str                   # COMPLETED | FAILED | CANCELLED | PREEMPTED
    gpu_devices: tuple[int, ...] = ()
    provenance: Provenance
    job_id: Optional[str] = None  # the job the task is a member of (TaskSubmitted.job_id)


@_record
@dataclass(**_FROZEN)
class TaskPreempted:
    KIND: ClassVar[str] = "TaskPreempted"
    event_id: str
    decision_id: str
    task_id: str
    tenant: str
    cell: str
    node_id: str
    preempted_by: Optional[str] = None
    reason: str
    provenance: Provenance
    grace_ms: int = 0
    work_lost_ms: int = 0
    victims: tuple[str, ...] = ()
    job_id: Optional[str] = None  # the job the task is a member of (TaskSubmitted.job_id)


@_record
@dataclass(**_FROZEN)
class TaskMigrated:
    KIND: ClassVar[str] = "TaskMigrated"
    event_id: str
    decision_id: str
    task_id: str
    tenant: str
    cell: str
    from_node: str
    to_node: str
    gpu_devices: tuple[int, ...] = ()
    reason: str
    provenance: Provenance
    cause: str = ""              # NODE_DOWN | NODE_DEGRADED | DRAIN
    since: int = 0
    elapsed_ms: int = 0
    reserve_first: bool = False
    preempted: tuple[str, ...] = ()
    job_id: Optional[str] = None  # the job the task is a member of (TaskSubmitted.job_id)


@_record
@dataclass(**_FROZEN)
class TaskLost:
    """The task's node went DOWN: resources freed, queued again at the front of its priority."""
    KIND: ClassVar[str] = "TaskLost"
    event_id: str
    decision_id: str
    task_id: str
    tenant: str
    cell: str
    node_id: str
    gpu_devices: tuple[int, ...] = ()
    reason: str
    provenance: Provenance
    job_id: Optional[str] = None  # the job the task is a member of (TaskSubmitted.job_id)


@_record
@dataclass(**_FROZEN)
class NodeHealthChanged:
    KIND: ClassVar[str] = "NodeHealthChanged"
    event_id: str
    decision_id: str
    node_id: str
    cell: str
    status: str                  # READY | SUSPECT | DOWN
    previous: str
    reason: str
    last_heartbeat_at: int
    lost_tasks: tuple[str, ...] = ()
    provenance: Provenance


@_record
@dataclass(**_FROZEN)
class ReservationGranted:
    KIND: ClassVar[str] = "ReservationGranted"
    event_id: str
    reservation_id: str
    bid_id: str
    tenant: str
    cell: str
    node_id: str
    gpu_devices: tuple[int, ...] = ()
    start_at: int
    end_at: int
    clearing_price: float
    provenance: Provenance
    bid_price: float = 0.0
    wanted_gpus: int = 0
    cpu_milli: int = 0
    memory_mib: int = 0
    purge_at: Optional[int] = None
    hold_from: Optional[int] = None


@_record
@dataclass(**_FROZEN)
class ReservationRejected:
    KIND: ClassVar[str] = "ReservationRejected"
    event_id: str
    bid_id: str
    tenant: str
    cell: str
    reason: str
    needed_price: Optional[float] = None
    at: int
    provenance: Provenance


@_record
@dataclass(**_FROZEN)
class ReservationExpired:
    KIND: ClassVar[str] = "ReservationExpired"
    event_id: str
    reservation_id: str
    cell: str
    at: int
    reason: str = ""
    gpu_devices: tuple[int, ...] = ()
    node_id: str = ""
    provenance: Optional[Provenance] = None


@_record
@dataclass(**_FROZEN)
class ReservationReleased:
    KIND: ClassVar[str] = "ReservationReleased"
    event_id: str
    reservation_id: str
    cell: str
    reason: str = ""
    at: int
    gpu_devices: tuple[int, ...] = ()
    node_id: str = ""
    claimed_by: str = ""
    provenance: Optional[Provenance] = None


# =========================================================================== other events
@_record
@dataclass(**_FROZEN)
class DispatchCommand:
    KIND: ClassVar[str] = "DispatchCommand"
    event_id: str
    dispatch_id: str
    task_id: str
    tenant: str
    cell: str
    node_id: str
    connector: str
    gpu_devices: tuple[int, ...] = ()
    gpu_milli: int = 0
    accelerators: tuple[Accelerator, ...] = ()
    cpu_milli: int
    memory_mib: int
    command: Optional[tuple[str, ...]] = None
    duration_estimate_ms: Optional[int] = None
    issued_at: int
    env: Mapping[str, str] = field(default_factory=_empty_map)
    model: Optional[ModelRef] = None
    job_id: Optional[str] = None  # the task's job (TaskSubmitted.job_id): SUANLI_JOB_ID


@_record
@dataclass(**_FROZEN)
class StopCommand:
    KIND: ClassVar[str] = "StopCommand"
    event_id: str
    task_id: str
    cell: str
    node_id: str
    connector: str
    reason: str
    issued_at: int
    grace_ms: Optional[int] = None


@_record
@dataclass(**_FROZEN)
class DispatchAck:
    KIND: ClassVar[str] = "DispatchAck"
    event_id: str
    dispatch_id: str
    task_id: str
    node_id: str
    connector: str
    cell: str = ""
    accepted: bool
    message: str = ""
    at: int


@_record
@dataclass(**_FROZEN)
class DeadLetter:
    KIND: ClassVar[str] = "DeadLetter"
    event_id: str
    source_topic: str
    source_partition: int
    source_offset: int
    key: Optional[bytes] = None
    value: Optional[bytes] = None
    error_kind: str              # UNDECODABLE | UNKNOWN_SCHEMA | INVALID | UNKNOWN_NODE | UNKNOWN_TASK | OTHER
    reason: str
    schema_id: Optional[int] = None
    at: int


@_record
@dataclass(**_FROZEN)
class NodeHeartbeat:
    KIND: ClassVar[str] = "NodeHeartbeat"
    event_id: str
    node_id: str
    cell: str
    seq: int
    at: int
    nodes: tuple[str, ...] = ()          # further nodes alive at the same time (a batch)

    @property
    def alive(self) -> tuple[str, ...]:
        """Every node this heartbeat reports alive: ``node_id``, then ``nodes``."""
        return (self.node_id, *self.nodes) if self.nodes else (self.node_id,)


@_record
@dataclass(**_FROZEN)
class NodeMetrics:
    KIND: ClassVar[str] = "NodeMetrics"
    event_id: str
    node_id: str
    cell: str
    at: int
    cpu_util: float
    memory_used_mib: int
    gpu_util: tuple[float, ...] = ()
    gpu_memory_used_mib: tuple[int, ...] = ()
    load1: float = 0.0
    disk_iops: float = 0.0
    net_rx_mbps: float = 0.0
    net_tx_mbps: float = 0.0
    power_w: float = 0.0
    extended: Mapping[str, float] = field(default_factory=_empty_map)


@_record
@dataclass(**_FROZEN)
class LinkMetrics:
    KIND: ClassVar[str] = "LinkMetrics"
    event_id: str
    src: str
    dst: str
    scope: str                   # NODE | SITE
    latency_ms: float
    bandwidth_mbps: float
    loss_pct: float = 0.0
    at: int
    cell: str = ""


@_record
@dataclass(**_FROZEN)
class JobLinkBytes:
    src_site: str
    dst_site: str
    bytes: int


@_record
@dataclass(**_FROZEN)
class JobRound:
    """One round of a job of many tasks (a federated training round), as reported: in the
    cell log so that the job's history is replayable; the core keeps nothing of it yet."""
    KIND: ClassVar[str] = "JobRound"
    event_id: str
    job_id: str
    tenant: str
    cell: str
    round: int
    loss: Optional[float] = None
    accuracy: Optional[float] = None
    aggregated: bool = True
    clients: tuple[str, ...] = ()
    bytes_up: Mapping[str, int] = field(default_factory=_empty_map)
    bytes_down: Mapping[str, int] = field(default_factory=_empty_map)
    links: tuple[JobLinkBytes, ...] = ()
    secagg: bool = False
    quantise: str = "none"
    aggregator_node: str = ""
    wall_ms: int = 0
    at: int


@_record
@dataclass(**_FROZEN)
class JobResized:
    """The elastic policy changed a job's size or batch size after a round (processors/elastic.py);
    ``task_id`` is the job's task carrying the policy (its aggregator)."""
    KIND: ClassVar[str] = "JobResized"
    event_id: str
    decision_id: str
    task_id: str
    job_id: str
    tenant: str
    cell: str
    action: str                  # grow | shrink | hold
    clients_from: int
    clients_to: int
    batch_size_from: int
    batch_size_to: int
    round: int
    reason: str
    at: int
    provenance: Provenance


@_record
@dataclass(**_FROZEN)
class ReservationBid:
    KIND: ClassVar[str] = "ReservationBid"
    event_id: str
    bid_id: str
    tenant: str
    cell: str
    resources: TaskResources
    start_at: int
    duration_ms: int
    price: float
    at: int
    latest_start_at: Optional[int] = None
    gang: bool = True


@_record
@dataclass(**_FROZEN)
class PrewarmCommand:
    KIND: ClassVar[str] = "PrewarmCommand"
    event_id: str
    node_id: str
    cell: str = ""
    model_arch: str
    artifact_uri: str
    size_mib: int = 0
    at: int
    reason: str = ""


# =========================================================================== kinds, once
CellInput = Union[NodeRegistered, NodeStatusChanged, TaskSubmitted, TaskCancelled, TaskStatusChanged,
                  PolicyChanged, CellTick, NodeHeartbeat, NodeConditionChanged, LinkMetrics, ReservationBid,
                  JobRound]
Decision = Union[TaskPlaced, TaskPending, TaskUnschedulable, TaskReleased, TaskPreempted, TaskMigrated,
                 TaskLost, NodeHealthChanged, ReservationGranted, ReservationRejected, ReservationExpired,
                 ReservationReleased, JobResized]

CELL_INPUT_KINDS: frozenset[str] = frozenset(c.KIND for c in typing.get_args(CellInput))
"""What intake forwards to the cell log and the scheduler consumes."""
DECISION_KINDS: frozenset[str] = frozenset(c.KIND for c in typing.get_args(Decision))
"""What the scheduler writes to the decisions topic (with provenance)."""
TASK_DECISION_KINDS: frozenset[str] = frozenset(
    {TaskPlaced.KIND, TaskPending.KIND, TaskUnschedulable.KIND, TaskReleased.KIND, TaskPreempted.KIND,
     TaskMigrated.KIND, TaskLost.KIND, JobResized.KIND})
"""Decisions about one task (they carry ``task_id``; a ``JobResized`` names the job's task
that carries its elastic policy)."""
NODE_EVENT_KINDS: frozenset[str] = frozenset({NodeStatusChanged.KIND, TaskStatusChanged.KIND, NodeHeartbeat.KIND,
                                              NodeConditionChanged.KIND})
"""Cell inputs that name a node which must already be registered in the cell."""
EVENT_KINDS: frozenset[str] = frozenset(name for name, cls in RECORDS.items() if hasattr(cls, "KIND"))
"""Every event of the contract (records whose first field is ``event_id``)."""


# ------------------------------------------------------------- an input's time, once
TIME_FIELDS: dict[str, str] = {TaskSubmitted.KIND: "submitted_at", NodeRegistered.KIND: "registered_at"}
"""The field that carries a cell input's time, for the kinds whose field is not ``at``."""
OFF_CLOCK_KINDS: frozenset[str] = frozenset({JobRound.KIND})
"""Cell inputs whose time does not move the cell clock: a ``JobRound``'s ``at`` is its
reporter's clock, not cell time."""


def time_field(kind: str) -> str:
    """The field that carries the time of a cell input of ``kind`` (``at`` for most)."""
    return TIME_FIELDS.get(kind, "at")


def input_time(kind: str, payload: Mapping[str, Any]) -> int:
    """The time a cell input's decoded ``payload`` carries (0 when it has none): what the
    core reads from the typed record (``core.event_time``), for readers of raw records."""
    return payload.get(time_field(kind)) or 0


# =========================================================================== core types
ACCELERATOR_KINDS: tuple[str, ...] = ("NPU", "FPGA", "ASIC", "QPU", "OTHER")
"""The accelerator kinds besides GPUs (``AcceleratorKind``); GPUs have their own fields."""

AccelAsk = tuple[str, str, int, int]
"""``(kind, model, count, memory_mib)``: devices of one kind asked (model '' = any one
model), each with at least ``memory_mib`` MiB (0 = any)."""

AccelHeld = tuple[str, str, int]
"""``(kind, model, count)``: devices of one kind and model a task holds on its node."""


@dataclass(frozen=True, slots=True)
class Request:
    """The resource ask of one task, normalised.

    kind: ``"cpu"`` (no GPU), ``"shared"`` (one GPU, < 1000 milli, packed inside one
    device) or ``"whole"`` (gpu_count whole devices of gpu_milli each, normally 1000).
    ``models`` is sorted and deduplicated (empty = any model). Positional, because
    plugins build requests in hot loops.

    ``gpu_mem``: memory each of its GPUs must have, MiB (0 = any; 0 too when it asks no
    GPU). ``accels``: its non-GPU accelerators as ``(kind, model, count, memory_mib)``,
    entries of the same kind and model summed (their memory: the largest asked), sorted;
    model '' = any model, but all ``count`` devices of one model, each with at least
    ``memory_mib`` (0 = any). A task with neither (every task before C1) is decided exactly
    as before: see :attr:`has_device_needs`.
    """
    cpu: int
    mem: int
    gpu_count: int
    gpu_milli: int
    models: tuple[str, ...] = ()
    gpu_mem: int = 0
    accels: tuple[AccelAsk, ...] = ()
    # derived once (a decision reads them a dozen times), outside init, repr and equality
    kind: str = field(init=False, repr=False, compare=False)
    gpu_total: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.gpu_count <= 0 or self.gpu_milli <= 0:
            kind = "cpu"
        elif self.gpu_count == 1 and self.gpu_milli < GPU_MILLI:
            kind = "shared"
        else:
            kind = "whole"
        object.__setattr__(self, "kind", kind)
        object.__setattr__(self, "gpu_total", self.gpu_count * self.gpu_milli if kind != "cpu" else 0)

    @property
    def has_device_needs(self) -> bool:
        """Whether it asks non-GPU accelerators or a GPU memory: the only requests the
        accelerator filters, allocations and refusals ever act on."""
        return bool(self.accels) or self.gpu_mem > 0

    @classmethod
    def of(cls, res: TaskResources) -> "Request":
        """Normalise the wire form: GPUs without milli mean whole GPUs; no GPUs, no milli."""
        cnt = res.gpu_count if res.gpu_count > 0 else 0
        milli = res.gpu_milli if cnt else 0
        if cnt and milli <= 0:
            milli = GPU_MILLI
        models = tuple(sorted(set(res.gpu_models)))
        gpu_mem = res.gpu_memory_mib if cnt and res.gpu_memory_mib > 0 else 0
        if not res.accelerators:
            if gpu_mem:
                return cls(res.cpu_milli, res.memory_mib, cnt, milli, models, gpu_mem)
            return cls(res.cpu_milli, res.memory_mib, cnt, milli, models)
        return cls(res.cpu_milli, res.memory_mib, cnt, milli, models, gpu_mem, accel_asks(res.accelerators))


def accel_asks(asks: "typing.Iterable[AcceleratorRequest]") -> tuple[AccelAsk, ...]:
    """A task's non-GPU accelerator requests normalised: GPU entries (GPUs are asked with
    ``gpu_count``; the core refuses a submission that names them here) and counts <= 0 left
    out, entries of the same kind and model summed (each device then needs the largest
    memory any of them asked: they are all of one model), sorted."""
    total: dict[tuple[str, str], list[int]] = {}
    for a in asks:
        if a.kind != "GPU" and a.count > 0:
            t = total.setdefault((a.kind, a.model), [0, 0])
            t[0] += a.count
            t[1] = max(t[1], max(0, a.memory_mib))
    return tuple((k, mdl, c, mem) for (k, mdl), (c, mem) in sorted(total.items()))


@dataclass(**_FROZEN)
class Task:
    """What a submitted task asks for: fixed at submission, kept in the cell state."""
    task_id: str
    tenant: str
    request: Request
    qos_tier: str = "SILVER"
    priority: int = 0
    labels: Mapping[str, str] = field(default_factory=_empty_map)
    submitted_at: int = 0
    deadline: Optional[int] = None
    duration_estimate_ms: Optional[int] = None
    command: Optional[tuple[str, ...]] = None
    env: Mapping[str, str] = field(default_factory=_empty_map)
    profile: Optional[TaskProfile] = None
    job_id: Optional[str] = None  # the job it is a member of (TaskSubmitted.job_id)

    @classmethod
    def of(cls, e: TaskSubmitted) -> "Task":
        return cls(task_id=e.task_id, tenant=e.tenant, request=Request.of(e.resources), qos_tier=e.qos_tier,
                   priority=e.priority, labels=e.labels, submitted_at=e.submitted_at, deadline=e.deadline,
                   duration_estimate_ms=e.duration_estimate_ms, command=e.command or None, env=e.env,
                   profile=e.profile, job_id=e.job_id)

    def to_json(self) -> dict[str, Any]:
        """A JSON-able dict (snapshots); :meth:`from_json` inverts it."""
        r = self.request
        req: list[Any] = [r.cpu, r.mem, r.gpu_count, r.gpu_milli, list(r.models)]
        if r.has_device_needs:            # only then: other tasks snapshot as before C1
            req += [r.gpu_mem, [list(a) for a in r.accels]]
        return {"task_id": self.task_id, "tenant": self.tenant,
                "request": req,
                "qos_tier": self.qos_tier, "priority": self.priority, "labels": dict(self.labels),
                "submitted_at": self.submitted_at, "deadline": self.deadline,
                "duration_estimate_ms": self.duration_estimate_ms,
                "command": list(self.command) if self.command is not None else None, "env": dict(self.env),
                "profile": to_avro(self.profile) if self.profile is not None else None,
                # only when set: a task of no job snapshots byte for byte as before issue 22
                **({"job_id": self.job_id} if self.job_id is not None else {})}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "Task":
        cpu, mem, cnt, milli, models, *devices = d["request"]
        request = Request(cpu, mem, cnt, milli, tuple(models))
        if devices:
            gpu_mem, accels = devices      # asks of a snapshot written before their memory: 0
            request = Request(cpu, mem, cnt, milli, tuple(models), int(gpu_mem),
                              tuple((a[0], a[1], int(a[2]), int(a[3]) if len(a) > 3 else 0) for a in accels))
        return cls(task_id=d["task_id"], tenant=d["tenant"], request=request,
                   qos_tier=d["qos_tier"], priority=d["priority"], labels=dict(d["labels"]),
                   submitted_at=d["submitted_at"], deadline=d["deadline"],
                   duration_estimate_ms=d["duration_estimate_ms"],
                   command=tuple(d["command"]) if d["command"] is not None else None, env=dict(d["env"]),
                   profile=from_avro(TaskProfile, d["profile"]) if d["profile"] is not None else None,
                   job_id=d.get("job_id"))


@dataclass(**_FROZEN)
class GpuDevice:
    """One GPU of a node: devices are numbered 0..n-1 on their node."""
    node_id: str
    index: int
    model: str
    memory_mib: int = 0


@dataclass(**_FROZEN)
class Node:
    """A node as it registered: its capacity and the attributes placement may read
    (``CellState.meta_array(field)`` reads any of these fields over all nodes)."""
    node_id: str
    cpu_milli: int
    memory_mib: int
    gpu_count: int = 0
    gpu_model: Optional[str] = None
    gpu_memory_mib: int = 0
    site: str = ""
    region: str = ""
    zone: str = ""
    tier: str = ""
    arch: str = ""
    pricing: str = "ON_DEMAND"
    price_per_hour: float = 0.0
    idle_price_per_hour: float = 0.0
    pue: float = 1.0
    carbon_g_per_kwh: float = 0.0
    connector: str = "sim"
    labels: Mapping[str, str] = field(default_factory=_empty_map)
    accelerators: tuple[Accelerator, ...] = ()
    registered_at: int = 0
    model_cache_mib: int = 0

    @classmethod
    def of(cls, e: NodeRegistered) -> "Node":
        count, model = e.gpus
        mem = max((a.memory_mib for a in e.accelerators if a.kind == "GPU" and a.model == model), default=0)
        return cls(node_id=e.node_id, cpu_milli=e.cpu_milli, memory_mib=e.memory_mib, gpu_count=count,
                   gpu_model=model, gpu_memory_mib=mem, site=e.site, region=e.region, zone=e.zone, tier=e.tier,
                   arch=e.arch, pricing=e.pricing, price_per_hour=e.price_per_hour,
                   idle_price_per_hour=e.idle_price_per_hour, pue=e.pue,
                   carbon_g_per_kwh=e.carbon_g_per_kwh, connector=e.connector, labels=e.labels,
                   accelerators=e.accelerators, registered_at=e.registered_at,
                   model_cache_mib=e.model_cache_mib)

    @classmethod
    def bare(cls, node_id: str, cpu_milli: int, memory_mib: int, gpu_count: int = 0,
             gpu_model: Optional[str] = None) -> "Node":
        """A node known only by its capacity (tests, the sandbox)."""
        return cls(node_id=node_id, cpu_milli=cpu_milli, memory_mib=memory_mib, gpu_count=gpu_count,
                   gpu_model=gpu_model if gpu_count else None)

    @property
    def accel_capacity(self) -> dict[tuple[str, str], int]:
        """Its non-GPU accelerators: ``(kind, model) -> count``, entries of the same kind and
        model summed, in registration order (empty counts left out)."""
        return accel_inventory(self.accelerators)

    @property
    def accel_memory(self) -> dict[tuple[str, str], int]:
        """Memory per device of its non-GPU accelerators: ``(kind, model) -> MiB`` (0 when it
        reports none; the least, should entries of one kind and model differ)."""
        mem: dict[tuple[str, str], int] = {}
        for a in self.accelerators:
            if a.kind != "GPU" and a.count > 0:
                key = (a.kind, a.model)
                mem[key] = min(mem.get(key, a.memory_mib), a.memory_mib)
        return mem

    @property
    def devices(self) -> tuple[GpuDevice, ...]:
        return tuple(GpuDevice(node_id=self.node_id, index=i, model=self.gpu_model or "",
                               memory_mib=self.gpu_memory_mib) for i in range(self.gpu_count))

    def to_json(self) -> dict[str, Any]:
        return to_avro(self)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "Node":
        return cls(**{**d, "labels": dict(d["labels"]),
                      "accelerators": tuple(from_avro(Accelerator, a) for a in d["accelerators"])})


def accel_inventory(accelerators: "typing.Iterable[Accelerator]") -> dict[tuple[str, str], int]:
    """``(kind, model) -> count`` of the non-GPU entries of a node's accelerators (see
    :attr:`Node.accel_capacity`)."""
    inv: dict[tuple[str, str], int] = {}
    for a in accelerators:
        if a.kind != "GPU" and a.count > 0:
            inv[(a.kind, a.model)] = inv.get((a.kind, a.model), 0) + a.count
    return inv


@dataclass(**_FROZEN)
class Policy:
    """The cell's strategy, its configuration as given, and that configuration's digest
    (sha256 of its canonical JSON, cited by every decision)."""
    strategy: str = "default"
    config: Mapping[str, Any] = field(default_factory=_empty_map)
    digest: Optional[str] = None

    def to_json(self) -> dict[str, Any]:
        return {"strategy": self.strategy, "config": json.loads(canonical_json(self.config)), "digest": self.digest}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "Policy":
        return cls(strategy=d["strategy"], config=dict(d.get("config") or {}), digest=d.get("digest"))


def canonical_json(obj: Any) -> str:
    """Sorted keys, no spaces, UTF-8 kept: the form config digests are computed over."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


# =========================================================================== conversion
_Converter = typing.Callable[[Any], Any]
_FROM: dict[type, tuple[tuple[str, _Converter | None, bool], ...]] = {}


def _is_record(tp: Any) -> bool:
    return isinstance(tp, type) and dataclasses.is_dataclass(tp) and tp.__name__ in RECORDS


def _from_converter(tp: Any) -> _Converter | None:
    """How to build a field of type ``tp`` from its Avro value (None = as it is)."""
    origin = typing.get_origin(tp)
    if origin in (Union, UnionType):
        args = [a for a in typing.get_args(tp) if a is not NoneType]
        inner = _from_converter(args[0]) if len(args) == 1 else None
        if inner is None:
            return None
        return lambda v: None if v is None else inner(v)
    if origin is tuple:
        item = typing.get_args(tp)[0]
        conv = _from_converter(item)
        if conv is None:
            return tuple
        return lambda v: tuple(conv(x) for x in v)
    if origin in (Mapping, dict) or tp in (Mapping, dict):
        return dict
    if _is_record(tp):
        return lambda v: v if isinstance(v, tp) else from_avro(tp, v)
    return None


def _spec(cls: type) -> tuple[tuple[str, _Converter | None, bool], ...]:
    spec = _FROM.get(cls)
    if spec is None:
        hints = typing.get_type_hints(cls)
        spec = _FROM[cls] = tuple(
            (f.name, _from_converter(hints[f.name]),
             f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING)
            for f in dataclasses.fields(cls))
    return spec


def from_avro(kind: str | type, payload: Mapping[str, Any]) -> Any:
    """The typed value of record ``kind`` (a name or a class) from its Avro dict.

    Keys the record does not have are ignored (an older or newer writer); fields with a
    default may be absent; a missing required field or a value of the wrong shape raises
    :class:`ModelError` naming the record and the field.
    """
    cls = RECORDS.get(kind) if isinstance(kind, str) else kind
    if cls is None:
        raise ModelError(f"unknown record {kind!r}; known: {', '.join(sorted(RECORDS))}")
    kwargs: dict[str, Any] = {}
    for name, conv, required in _spec(cls):
        if name in payload:
            value = payload[name]
            if conv is not None and value is not None:
                try:
                    value = conv(value)
                except ModelError:
                    raise
                except (TypeError, ValueError, AttributeError) as exc:
                    raise ModelError(f"{cls.__name__}.{name}: {type(exc).__name__}: {exc}") from None
            kwargs[name] = value
        elif required:
            raise ModelError(f"{cls.__name__}: required field {name!r} is missing")
    return cls(**kwargs)


# types whose values to_avro returns as they are (never dataclasses, tuples or maps)
_LEAF = frozenset({str, int, float, bool, bytes, type(None)})
_TO_AVRO: dict[type, Callable[[Any], Any]] = {}


def to_avro(value: Any) -> Any:
    """The Avro dict of a record value (recursively); lists for tuples, dicts for maps.

    Whether a value is a dataclass, a tuple or a Mapping (an ABC check, the slow part)
    depends on its type only, so it is asked once per type and kept as a converter: the
    encoder of every decision the scheduler emits runs through here."""
    convert = _TO_AVRO.get(type(value))
    if convert is None:
        convert = _TO_AVRO[type(value)] = _avro_converter(type(value))
    return convert(value)


def _avro_converter(cls: type) -> Callable[[Any], Any]:
    """``cls``'s converter, classified in this order: dataclass, tuple, Mapping, leaf."""
    if dataclasses.is_dataclass(cls):
        return _record_converter(tuple(f.name for f in dataclasses.fields(cls)))
    if issubclass(cls, tuple):
        return lambda value: [v if type(v) in _LEAF else to_avro(v) for v in value]
    if issubclass(cls, Mapping):
        return lambda value: {k: (v if type(v) in _LEAF else to_avro(v)) for k, v in value.items()}
    return lambda value: value


def _record_converter(names: tuple[str, ...]) -> Callable[[Any], Any]:
    """A record's converter written out field by field (as ``dataclasses`` writes ``__init__``):
    ``{"a": value.a if type(value.a) in _LEAF else to_avro(value.a), ...}`` in field order.
    A quarter faster than a comprehension over the fields, on every decision encoded."""
    if not all(n.isidentifier() for n in names):
        raise ModelError(f"field names must be identifiers: {names}")
    reads = "".join(f"    v{i} = value.{n}\n" for i, n in enumerate(names))
    items = ", ".join(f"{n!r}: v{i} if type(v{i}) in _LEAF else to_avro(v{i})" for i, n in enumerate(names))
    scope = {"_LEAF": _LEAF, "to_avro": to_avro}
    exec(f"def convert(value):\n{reads}    return {{{items}}}\n", scope)      # noqa: S102 - names checked above
    return scope["convert"]


def kind_of(value: Any) -> str:
    """The event kind (Avro record name) of an event value."""
    return type(value).KIND


# =========================================================================== constructors
_HAS_FACTORY = object()      # the default of a parameter whose field has a default_factory
_GENERATED_INITS: dict[type, Callable[..., None]] = {}     # what dataclass wrote, for the tests


def _slot_init(cls: type) -> Callable[..., None]:
    """An ``__init__`` for the frozen slotted dataclass ``cls`` that sets each field through
    its slot descriptor (``cls.<field>.__set__``), otherwise the one ``dataclass`` wrote:
    the same parameters (positional, then keyword-only), defaults, default factories,
    ``init=False`` fields with a default, ``__post_init__`` and TypeErrors.

    Why: a frozen dataclass's ``__init__`` writes ``object.__setattr__(self, name, value)``
    per field, which looks the name up on every write; the descriptor's ``__set__`` is the
    same write at half the cost. Records are made on every decision (about ten per
    placement: the placement, its provenance, candidates and filter outcomes) and on every
    decode. A class this does not cover (an ``InitVar``, a field that is not a slot) keeps
    its generated ``__init__``: :func:`_fast_inits` skips it."""
    scope: dict[str, Any] = {"_HAS_FACTORY": _HAS_FACTORY}
    positional, keyword, body = [], [], []
    for f in dataclasses.fields(cls):
        name = f.name
        if not name.isidentifier() or name == "self":
            raise ModelError(f"{cls.__name__}: field {name!r} cannot be a parameter")
        scope[f"_set_{name}"] = cls.__dict__[name].__set__
        has_default, has_factory = f.default is not dataclasses.MISSING, f.default_factory is not dataclasses.MISSING
        if has_default:
            scope[f"_dflt_{name}"] = f.default
        if has_factory:
            scope[f"_fac_{name}"] = f.default_factory
        if not f.init:
            if has_factory:
                body.append(f"_set_{name}(self, _fac_{name}())")
            elif has_default:
                body.append(f"_set_{name}(self, _dflt_{name})")
            continue
        param = name + ("=_dflt_" + name if has_default else "=_HAS_FACTORY" if has_factory else "")
        (keyword if f.kw_only else positional).append(param)
        if has_factory:
            body.append(f"if {name} is _HAS_FACTORY: {name} = _fac_{name}()")
        body.append(f"_set_{name}(self, {name})")
    if hasattr(cls, "__post_init__"):
        body.append("self.__post_init__()")
    params = ", ".join(["self", *positional, *(["*", *keyword] if keyword else [])])
    lines = "".join(f"    {line}\n" for line in body or ["pass"])
    exec(f"def __init__({params}):\n{lines}", scope)      # noqa: S102 - names checked above
    init = scope["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init.__doc__ = cls.__init__.__doc__
    return init


def _fast_inits(classes: typing.Iterable[type]) -> None:
    """Give each frozen slotted dataclass among ``classes`` its :func:`_slot_init`."""
    for cls in classes:
        params = getattr(cls, "__dataclass_params__", None)
        if params is None or not params.frozen or "__slots__" not in cls.__dict__:
            continue
        every = cls.__dataclass_fields__.values()
        if any(f._field_type is not dataclasses._FIELD and f._field_type is not dataclasses._FIELD_CLASSVAR
               for f in every):
            continue            # an InitVar: the generated __init__ passes it to __post_init__
        if not all(isinstance(cls.__dict__.get(f.name), type(Task.task_id)) for f in dataclasses.fields(cls)):
            continue
        _GENERATED_INITS[cls] = cls.__init__
        cls.__init__ = _slot_init(cls)


# the records and their parts: every class this module defines (imported ones keep theirs)
_fast_inits(v for v in list(globals().values()) if isinstance(v, type) and v.__module__ == __name__)
