from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class TaskSpec(_message.Message):
    __slots__ = ("id", "tenant", "cell", "resources", "qos", "priority", "labels", "duration", "duration_ms", "deadline_ms", "command", "env", "scheduling", "reservation", "model", "parallelism")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    class EnvEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    ID_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    CELL_FIELD_NUMBER: _ClassVar[int]
    RESOURCES_FIELD_NUMBER: _ClassVar[int]
    QOS_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    DURATION_FIELD_NUMBER: _ClassVar[int]
    DURATION_MS_FIELD_NUMBER: _ClassVar[int]
    DEADLINE_MS_FIELD_NUMBER: _ClassVar[int]
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    ENV_FIELD_NUMBER: _ClassVar[int]
    SCHEDULING_FIELD_NUMBER: _ClassVar[int]
    RESERVATION_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    PARALLELISM_FIELD_NUMBER: _ClassVar[int]
    id: str
    tenant: str
    cell: str
    resources: ResourcesSpec
    qos: str
    priority: int
    labels: _containers.ScalarMap[str, str]
    duration: str
    duration_ms: int
    deadline_ms: int
    command: _containers.RepeatedScalarFieldContainer[str]
    env: _containers.ScalarMap[str, str]
    scheduling: str
    reservation: str
    model: ModelSpec
    parallelism: int
    def __init__(self, id: _Optional[str] = ..., tenant: _Optional[str] = ..., cell: _Optional[str] = ..., resources: _Optional[_Union[ResourcesSpec, _Mapping]] = ..., qos: _Optional[str] = ..., priority: _Optional[int] = ..., labels: _Optional[_Mapping[str, str]] = ..., duration: _Optional[str] = ..., duration_ms: _Optional[int] = ..., deadline_ms: _Optional[int] = ..., command: _Optional[_Iterable[str]] = ..., env: _Optional[_Mapping[str, str]] = ..., scheduling: _Optional[str] = ..., reservation: _Optional[str] = ..., model: _Optional[_Union[ModelSpec, _Mapping]] = ..., parallelism: _Optional[int] = ...) -> None: ...

class ModelSpec(_message.Message):
    __slots__ = ("arch", "uri", "size", "size_mib")
    ARCH_FIELD_NUMBER: _ClassVar[int]
    URI_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    SIZE_MIB_FIELD_NUMBER: _ClassVar[int]
    arch: str
    uri: str
    size: str
    size_mib: int
    def __init__(self, arch: _Optional[str] = ..., uri: _Optional[str] = ..., size: _Optional[str] = ..., size_mib: _Optional[int] = ...) -> None: ...

class ResourcesSpec(_message.Message):
    __slots__ = ("cpu", "cpu_milli", "memory", "memory_mib", "gpu", "gpu_models")
    CPU_FIELD_NUMBER: _ClassVar[int]
    CPU_MILLI_FIELD_NUMBER: _ClassVar[int]
    MEMORY_FIELD_NUMBER: _ClassVar[int]
    MEMORY_MIB_FIELD_NUMBER: _ClassVar[int]
    GPU_FIELD_NUMBER: _ClassVar[int]
    GPU_MODELS_FIELD_NUMBER: _ClassVar[int]
    cpu: float
    cpu_milli: int
    memory: str
    memory_mib: int
    gpu: float
    gpu_models: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, cpu: _Optional[float] = ..., cpu_milli: _Optional[int] = ..., memory: _Optional[str] = ..., memory_mib: _Optional[int] = ..., gpu: _Optional[float] = ..., gpu_models: _Optional[_Iterable[str]] = ...) -> None: ...

class BidSpec(_message.Message):
    __slots__ = ("bid_id", "tenant", "cell", "resources", "start_at", "duration", "duration_ms", "price", "latest_start_at", "gang", "gpu_memory")
    BID_ID_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    CELL_FIELD_NUMBER: _ClassVar[int]
    RESOURCES_FIELD_NUMBER: _ClassVar[int]
    START_AT_FIELD_NUMBER: _ClassVar[int]
    DURATION_FIELD_NUMBER: _ClassVar[int]
    DURATION_MS_FIELD_NUMBER: _ClassVar[int]
    PRICE_FIELD_NUMBER: _ClassVar[int]
    LATEST_START_AT_FIELD_NUMBER: _ClassVar[int]
    GANG_FIELD_NUMBER: _ClassVar[int]
    GPU_MEMORY_FIELD_NUMBER: _ClassVar[int]
    bid_id: str
    tenant: str
    cell: str
    resources: ResourcesSpec
    start_at: int
    duration: str
    duration_ms: int
    price: float
    latest_start_at: int
    gang: bool
    gpu_memory: str
    def __init__(self, bid_id: _Optional[str] = ..., tenant: _Optional[str] = ..., cell: _Optional[str] = ..., resources: _Optional[_Union[ResourcesSpec, _Mapping]] = ..., start_at: _Optional[int] = ..., duration: _Optional[str] = ..., duration_ms: _Optional[int] = ..., price: _Optional[float] = ..., latest_start_at: _Optional[int] = ..., gang: _Optional[bool] = ..., gpu_memory: _Optional[str] = ...) -> None: ...

class CancelRequest(_message.Message):
    __slots__ = ("reason",)
    REASON_FIELD_NUMBER: _ClassVar[int]
    reason: str
    def __init__(self, reason: _Optional[str] = ...) -> None: ...

class HealthRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class SubmitTaskRequest(_message.Message):
    __slots__ = ("task",)
    TASK_FIELD_NUMBER: _ClassVar[int]
    task: TaskSpec
    def __init__(self, task: _Optional[_Union[TaskSpec, _Mapping]] = ...) -> None: ...

class ListTasksRequest(_message.Message):
    __slots__ = ("cell", "status", "limit")
    CELL_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    cell: str
    status: str
    limit: int
    def __init__(self, cell: _Optional[str] = ..., status: _Optional[str] = ..., limit: _Optional[int] = ...) -> None: ...

class GetTaskRequest(_message.Message):
    __slots__ = ("task_id",)
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    def __init__(self, task_id: _Optional[str] = ...) -> None: ...

class CancelTaskRequest(_message.Message):
    __slots__ = ("task_id", "reason")
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    reason: str
    def __init__(self, task_id: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class WhyPendingRequest(_message.Message):
    __slots__ = ("task_id",)
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    def __init__(self, task_id: _Optional[str] = ...) -> None: ...

class GetAuditRequest(_message.Message):
    __slots__ = ("task_id",)
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    def __init__(self, task_id: _Optional[str] = ...) -> None: ...

class SubmitBidRequest(_message.Message):
    __slots__ = ("bid",)
    BID_FIELD_NUMBER: _ClassVar[int]
    bid: BidSpec
    def __init__(self, bid: _Optional[_Union[BidSpec, _Mapping]] = ...) -> None: ...

class ListBidsRequest(_message.Message):
    __slots__ = ("cell", "limit")
    CELL_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    cell: str
    limit: int
    def __init__(self, cell: _Optional[str] = ..., limit: _Optional[int] = ...) -> None: ...

class GetBidRequest(_message.Message):
    __slots__ = ("bid_id",)
    BID_ID_FIELD_NUMBER: _ClassVar[int]
    bid_id: str
    def __init__(self, bid_id: _Optional[str] = ...) -> None: ...

class ListReservationsRequest(_message.Message):
    __slots__ = ("cell", "status", "mine", "limit")
    CELL_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    MINE_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    cell: str
    status: str
    mine: bool
    limit: int
    def __init__(self, cell: _Optional[str] = ..., status: _Optional[str] = ..., mine: _Optional[bool] = ..., limit: _Optional[int] = ...) -> None: ...

class ListNodesRequest(_message.Message):
    __slots__ = ("cell", "limit")
    CELL_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    cell: str
    limit: int
    def __init__(self, cell: _Optional[str] = ..., limit: _Optional[int] = ...) -> None: ...

class NodeStatusRequest(_message.Message):
    __slots__ = ("cell", "reason")
    CELL_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    cell: str
    reason: str
    def __init__(self, cell: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class DrainNodeRequest(_message.Message):
    __slots__ = ("node_id", "cell", "reason")
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    CELL_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    node_id: str
    cell: str
    reason: str
    def __init__(self, node_id: _Optional[str] = ..., cell: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class UncordonNodeRequest(_message.Message):
    __slots__ = ("node_id", "cell", "reason")
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    CELL_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    node_id: str
    cell: str
    reason: str
    def __init__(self, node_id: _Optional[str] = ..., cell: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class LogPosition(_message.Message):
    __slots__ = ("topic", "partition", "offset")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    offset: int
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., offset: _Optional[int] = ...) -> None: ...

class PendingReason(_message.Message):
    __slots__ = ("reason", "nodes")
    REASON_FIELD_NUMBER: _ClassVar[int]
    NODES_FIELD_NUMBER: _ClassVar[int]
    reason: str
    nodes: int
    def __init__(self, reason: _Optional[str] = ..., nodes: _Optional[int] = ...) -> None: ...

class AcceleratorRequest(_message.Message):
    __slots__ = ("kind", "model", "count")
    KIND_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    kind: str
    model: str
    count: int
    def __init__(self, kind: _Optional[str] = ..., model: _Optional[str] = ..., count: _Optional[int] = ...) -> None: ...

class TaskResources(_message.Message):
    __slots__ = ("cpu_milli", "memory_mib", "gpu_count", "gpu_milli", "gpu_models", "gpu_memory_mib", "accelerators")
    CPU_MILLI_FIELD_NUMBER: _ClassVar[int]
    MEMORY_MIB_FIELD_NUMBER: _ClassVar[int]
    GPU_COUNT_FIELD_NUMBER: _ClassVar[int]
    GPU_MILLI_FIELD_NUMBER: _ClassVar[int]
    GPU_MODELS_FIELD_NUMBER: _ClassVar[int]
    GPU_MEMORY_MIB_FIELD_NUMBER: _ClassVar[int]
    ACCELERATORS_FIELD_NUMBER: _ClassVar[int]
    cpu_milli: int
    memory_mib: int
    gpu_count: int
    gpu_milli: int
    gpu_models: _containers.RepeatedScalarFieldContainer[str]
    gpu_memory_mib: int
    accelerators: _containers.RepeatedCompositeFieldContainer[AcceleratorRequest]
    def __init__(self, cpu_milli: _Optional[int] = ..., memory_mib: _Optional[int] = ..., gpu_count: _Optional[int] = ..., gpu_milli: _Optional[int] = ..., gpu_models: _Optional[_Iterable[str]] = ..., gpu_memory_mib: _Optional[int] = ..., accelerators: _Optional[_Iterable[_Union[AcceleratorRequest, _Mapping]]] = ...) -> None: ...

class StrategyRef(_message.Message):
    __slots__ = ("name", "version", "config_digest")
    NAME_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    CONFIG_DIGEST_FIELD_NUMBER: _ClassVar[int]
    name: str
    version: str
    config_digest: str
    def __init__(self, name: _Optional[str] = ..., version: _Optional[str] = ..., config_digest: _Optional[str] = ...) -> None: ...

class Candidate(_message.Message):
    __slots__ = ("node_id", "score", "rank")
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    SCORE_FIELD_NUMBER: _ClassVar[int]
    RANK_FIELD_NUMBER: _ClassVar[int]
    node_id: str
    score: float
    rank: int
    def __init__(self, node_id: _Optional[str] = ..., score: _Optional[float] = ..., rank: _Optional[int] = ...) -> None: ...

class FilterOutcome(_message.Message):
    __slots__ = ("reason", "nodes", "sample")
    REASON_FIELD_NUMBER: _ClassVar[int]
    NODES_FIELD_NUMBER: _ClassVar[int]
    SAMPLE_FIELD_NUMBER: _ClassVar[int]
    reason: str
    nodes: int
    sample: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, reason: _Optional[str] = ..., nodes: _Optional[int] = ..., sample: _Optional[_Iterable[str]] = ...) -> None: ...

class Provenance(_message.Message):
    __slots__ = ("input", "strategy", "candidates", "filtered", "path", "decided_at", "matched_rule")
    INPUT_FIELD_NUMBER: _ClassVar[int]
    STRATEGY_FIELD_NUMBER: _ClassVar[int]
    CANDIDATES_FIELD_NUMBER: _ClassVar[int]
    FILTERED_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    DECIDED_AT_FIELD_NUMBER: _ClassVar[int]
    MATCHED_RULE_FIELD_NUMBER: _ClassVar[int]
    input: LogPosition
    strategy: StrategyRef
    candidates: _containers.RepeatedCompositeFieldContainer[Candidate]
    filtered: _containers.RepeatedCompositeFieldContainer[FilterOutcome]
    path: _containers.RepeatedScalarFieldContainer[str]
    decided_at: int
    matched_rule: str
    def __init__(self, input: _Optional[_Union[LogPosition, _Mapping]] = ..., strategy: _Optional[_Union[StrategyRef, _Mapping]] = ..., candidates: _Optional[_Iterable[_Union[Candidate, _Mapping]]] = ..., filtered: _Optional[_Iterable[_Union[FilterOutcome, _Mapping]]] = ..., path: _Optional[_Iterable[str]] = ..., decided_at: _Optional[int] = ..., matched_rule: _Optional[str] = ...) -> None: ...

class Health(_message.Message):
    __slots__ = ("ready", "namespace")
    READY_FIELD_NUMBER: _ClassVar[int]
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    ready: bool
    namespace: str
    def __init__(self, ready: _Optional[bool] = ..., namespace: _Optional[str] = ...) -> None: ...

class SubmitTaskResponse(_message.Message):
    __slots__ = ("task_id", "tenant", "cell", "event_id", "submitted_at", "position")
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    CELL_FIELD_NUMBER: _ClassVar[int]
    EVENT_ID_FIELD_NUMBER: _ClassVar[int]
    SUBMITTED_AT_FIELD_NUMBER: _ClassVar[int]
    POSITION_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    tenant: str
    cell: str
    event_id: str
    submitted_at: int
    position: LogPosition
    def __init__(self, task_id: _Optional[str] = ..., tenant: _Optional[str] = ..., cell: _Optional[str] = ..., event_id: _Optional[str] = ..., submitted_at: _Optional[int] = ..., position: _Optional[_Union[LogPosition, _Mapping]] = ...) -> None: ...

class CancelTaskResponse(_message.Message):
    __slots__ = ("task_id", "event_id", "position")
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    EVENT_ID_FIELD_NUMBER: _ClassVar[int]
    POSITION_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    event_id: str
    position: LogPosition
    def __init__(self, task_id: _Optional[str] = ..., event_id: _Optional[str] = ..., position: _Optional[_Union[LogPosition, _Mapping]] = ...) -> None: ...

class SubmitBidResponse(_message.Message):
    __slots__ = ("bid_id", "tenant", "cell", "event_id", "position")
    BID_ID_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    CELL_FIELD_NUMBER: _ClassVar[int]
    EVENT_ID_FIELD_NUMBER: _ClassVar[int]
    POSITION_FIELD_NUMBER: _ClassVar[int]
    bid_id: str
    tenant: str
    cell: str
    event_id: str
    position: LogPosition
    def __init__(self, bid_id: _Optional[str] = ..., tenant: _Optional[str] = ..., cell: _Optional[str] = ..., event_id: _Optional[str] = ..., position: _Optional[_Union[LogPosition, _Mapping]] = ...) -> None: ...

class TaskStatus(_message.Message):
    __slots__ = ("task_id", "tenant", "cell", "status", "placed", "node_id", "gpu_devices", "gpu_milli", "cpu_milli", "memory_mib", "reasons", "queue_position", "priority", "qos_tier", "submitted_at", "decision_id", "decided_at", "strategy", "path", "message")
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    CELL_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    PLACED_FIELD_NUMBER: _ClassVar[int]
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    GPU_DEVICES_FIELD_NUMBER: _ClassVar[int]
    GPU_MILLI_FIELD_NUMBER: _ClassVar[int]
    CPU_MILLI_FIELD_NUMBER: _ClassVar[int]
    MEMORY_MIB_FIELD_NUMBER: _ClassVar[int]
    REASONS_FIELD_NUMBER: _ClassVar[int]
    QUEUE_POSITION_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    QOS_TIER_FIELD_NUMBER: _ClassVar[int]
    SUBMITTED_AT_FIELD_NUMBER: _ClassVar[int]
    DECISION_ID_FIELD_NUMBER: _ClassVar[int]
    DECIDED_AT_FIELD_NUMBER: _ClassVar[int]
    STRATEGY_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    tenant: str
    cell: str
    status: str
    placed: bool
    node_id: str
    gpu_devices: _containers.RepeatedScalarFieldContainer[int]
    gpu_milli: int
    cpu_milli: int
    memory_mib: int
    reasons: _containers.RepeatedCompositeFieldContainer[PendingReason]
    queue_position: int
    priority: int
    qos_tier: str
    submitted_at: int
    decision_id: str
    decided_at: int
    strategy: str
    path: _containers.RepeatedScalarFieldContainer[str]
    message: str
    def __init__(self, task_id: _Optional[str] = ..., tenant: _Optional[str] = ..., cell: _Optional[str] = ..., status: _Optional[str] = ..., placed: _Optional[bool] = ..., node_id: _Optional[str] = ..., gpu_devices: _Optional[_Iterable[int]] = ..., gpu_milli: _Optional[int] = ..., cpu_milli: _Optional[int] = ..., memory_mib: _Optional[int] = ..., reasons: _Optional[_Iterable[_Union[PendingReason, _Mapping]]] = ..., queue_position: _Optional[int] = ..., priority: _Optional[int] = ..., qos_tier: _Optional[str] = ..., submitted_at: _Optional[int] = ..., decision_id: _Optional[str] = ..., decided_at: _Optional[int] = ..., strategy: _Optional[str] = ..., path: _Optional[_Iterable[str]] = ..., message: _Optional[str] = ...) -> None: ...

class ListTasksResponse(_message.Message):
    __slots__ = ("tasks",)
    TASKS_FIELD_NUMBER: _ClassVar[int]
    tasks: _containers.RepeatedCompositeFieldContainer[TaskStatus]
    def __init__(self, tasks: _Optional[_Iterable[_Union[TaskStatus, _Mapping]]] = ...) -> None: ...

class WhyPendingResponse(_message.Message):
    __slots__ = ("task_id", "status", "pending", "reasons", "queue_position", "queue_length", "decision_id", "decided_at", "strategy", "path", "explanation")
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    PENDING_FIELD_NUMBER: _ClassVar[int]
    REASONS_FIELD_NUMBER: _ClassVar[int]
    QUEUE_POSITION_FIELD_NUMBER: _ClassVar[int]
    QUEUE_LENGTH_FIELD_NUMBER: _ClassVar[int]
    DECISION_ID_FIELD_NUMBER: _ClassVar[int]
    DECIDED_AT_FIELD_NUMBER: _ClassVar[int]
    STRATEGY_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    EXPLANATION_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    status: str
    pending: bool
    reasons: _containers.RepeatedCompositeFieldContainer[PendingReason]
    queue_position: int
    queue_length: int
    decision_id: str
    decided_at: int
    strategy: str
    path: _containers.RepeatedScalarFieldContainer[str]
    explanation: str
    def __init__(self, task_id: _Optional[str] = ..., status: _Optional[str] = ..., pending: _Optional[bool] = ..., reasons: _Optional[_Iterable[_Union[PendingReason, _Mapping]]] = ..., queue_position: _Optional[int] = ..., queue_length: _Optional[int] = ..., decision_id: _Optional[str] = ..., decided_at: _Optional[int] = ..., strategy: _Optional[str] = ..., path: _Optional[_Iterable[str]] = ..., explanation: _Optional[str] = ...) -> None: ...

class BidView(_message.Message):
    __slots__ = ("bid_id", "tenant", "cell", "resources", "start_at", "duration_ms", "price", "at", "status", "reservation_id", "node_id", "latest_start_at", "gang", "gpu_devices", "granted_start_at", "granted_end_at", "clearing_price", "reservation_status", "reason", "needed_price", "decided_at")
    BID_ID_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    CELL_FIELD_NUMBER: _ClassVar[int]
    RESOURCES_FIELD_NUMBER: _ClassVar[int]
    START_AT_FIELD_NUMBER: _ClassVar[int]
    DURATION_MS_FIELD_NUMBER: _ClassVar[int]
    PRICE_FIELD_NUMBER: _ClassVar[int]
    AT_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    RESERVATION_ID_FIELD_NUMBER: _ClassVar[int]
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    LATEST_START_AT_FIELD_NUMBER: _ClassVar[int]
    GANG_FIELD_NUMBER: _ClassVar[int]
    GPU_DEVICES_FIELD_NUMBER: _ClassVar[int]
    GRANTED_START_AT_FIELD_NUMBER: _ClassVar[int]
    GRANTED_END_AT_FIELD_NUMBER: _ClassVar[int]
    CLEARING_PRICE_FIELD_NUMBER: _ClassVar[int]
    RESERVATION_STATUS_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    NEEDED_PRICE_FIELD_NUMBER: _ClassVar[int]
    DECIDED_AT_FIELD_NUMBER: _ClassVar[int]
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
    latest_start_at: int
    gang: bool
    gpu_devices: _containers.RepeatedScalarFieldContainer[int]
    granted_start_at: int
    granted_end_at: int
    clearing_price: float
    reservation_status: str
    reason: str
    needed_price: float
    decided_at: int
    def __init__(self, bid_id: _Optional[str] = ..., tenant: _Optional[str] = ..., cell: _Optional[str] = ..., resources: _Optional[_Union[TaskResources, _Mapping]] = ..., start_at: _Optional[int] = ..., duration_ms: _Optional[int] = ..., price: _Optional[float] = ..., at: _Optional[int] = ..., status: _Optional[str] = ..., reservation_id: _Optional[str] = ..., node_id: _Optional[str] = ..., latest_start_at: _Optional[int] = ..., gang: _Optional[bool] = ..., gpu_devices: _Optional[_Iterable[int]] = ..., granted_start_at: _Optional[int] = ..., granted_end_at: _Optional[int] = ..., clearing_price: _Optional[float] = ..., reservation_status: _Optional[str] = ..., reason: _Optional[str] = ..., needed_price: _Optional[float] = ..., decided_at: _Optional[int] = ...) -> None: ...

class ListBidsResponse(_message.Message):
    __slots__ = ("bids",)
    BIDS_FIELD_NUMBER: _ClassVar[int]
    bids: _containers.RepeatedCompositeFieldContainer[BidView]
    def __init__(self, bids: _Optional[_Iterable[_Union[BidView, _Mapping]]] = ...) -> None: ...

class ReservationView(_message.Message):
    __slots__ = ("reservation_id", "bid_id", "tenant", "cell", "node_id", "gpu_devices", "start_at", "end_at", "clearing_price", "status", "claimed_by", "claimed_at", "used_gpus", "gpus_released", "use", "mine", "bid_price", "wanted_gpus", "cpu_milli", "memory_mib", "granted_at", "ended_at", "reason", "purge_at", "hold_from")
    RESERVATION_ID_FIELD_NUMBER: _ClassVar[int]
    BID_ID_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    CELL_FIELD_NUMBER: _ClassVar[int]
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    GPU_DEVICES_FIELD_NUMBER: _ClassVar[int]
    START_AT_FIELD_NUMBER: _ClassVar[int]
    END_AT_FIELD_NUMBER: _ClassVar[int]
    CLEARING_PRICE_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    CLAIMED_BY_FIELD_NUMBER: _ClassVar[int]
    CLAIMED_AT_FIELD_NUMBER: _ClassVar[int]
    USED_GPUS_FIELD_NUMBER: _ClassVar[int]
    GPUS_RELEASED_FIELD_NUMBER: _ClassVar[int]
    USE_FIELD_NUMBER: _ClassVar[int]
    MINE_FIELD_NUMBER: _ClassVar[int]
    BID_PRICE_FIELD_NUMBER: _ClassVar[int]
    WANTED_GPUS_FIELD_NUMBER: _ClassVar[int]
    CPU_MILLI_FIELD_NUMBER: _ClassVar[int]
    MEMORY_MIB_FIELD_NUMBER: _ClassVar[int]
    GRANTED_AT_FIELD_NUMBER: _ClassVar[int]
    ENDED_AT_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    PURGE_AT_FIELD_NUMBER: _ClassVar[int]
    HOLD_FROM_FIELD_NUMBER: _ClassVar[int]
    reservation_id: str
    bid_id: str
    tenant: str
    cell: str
    node_id: str
    gpu_devices: _containers.RepeatedScalarFieldContainer[int]
    start_at: int
    end_at: int
    clearing_price: float
    status: str
    claimed_by: _containers.RepeatedScalarFieldContainer[str]
    claimed_at: int
    used_gpus: int
    gpus_released: int
    use: float
    mine: bool
    bid_price: float
    wanted_gpus: int
    cpu_milli: int
    memory_mib: int
    granted_at: int
    ended_at: int
    reason: str
    purge_at: int
    hold_from: int
    def __init__(self, reservation_id: _Optional[str] = ..., bid_id: _Optional[str] = ..., tenant: _Optional[str] = ..., cell: _Optional[str] = ..., node_id: _Optional[str] = ..., gpu_devices: _Optional[_Iterable[int]] = ..., start_at: _Optional[int] = ..., end_at: _Optional[int] = ..., clearing_price: _Optional[float] = ..., status: _Optional[str] = ..., claimed_by: _Optional[_Iterable[str]] = ..., claimed_at: _Optional[int] = ..., used_gpus: _Optional[int] = ..., gpus_released: _Optional[int] = ..., use: _Optional[float] = ..., mine: _Optional[bool] = ..., bid_price: _Optional[float] = ..., wanted_gpus: _Optional[int] = ..., cpu_milli: _Optional[int] = ..., memory_mib: _Optional[int] = ..., granted_at: _Optional[int] = ..., ended_at: _Optional[int] = ..., reason: _Optional[str] = ..., purge_at: _Optional[int] = ..., hold_from: _Optional[int] = ...) -> None: ...

class ListReservationsResponse(_message.Message):
    __slots__ = ("reservations",)
    RESERVATIONS_FIELD_NUMBER: _ClassVar[int]
    reservations: _containers.RepeatedCompositeFieldContainer[ReservationView]
    def __init__(self, reservations: _Optional[_Iterable[_Union[ReservationView, _Mapping]]] = ...) -> None: ...

class NodeView(_message.Message):
    __slots__ = ("node_id", "cell", "cpu_milli", "memory_mib", "gpus", "gpu_model", "connector", "cpu_used", "memory_used", "gpu_used", "status", "health")
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    CELL_FIELD_NUMBER: _ClassVar[int]
    CPU_MILLI_FIELD_NUMBER: _ClassVar[int]
    MEMORY_MIB_FIELD_NUMBER: _ClassVar[int]
    GPUS_FIELD_NUMBER: _ClassVar[int]
    GPU_MODEL_FIELD_NUMBER: _ClassVar[int]
    CONNECTOR_FIELD_NUMBER: _ClassVar[int]
    CPU_USED_FIELD_NUMBER: _ClassVar[int]
    MEMORY_USED_FIELD_NUMBER: _ClassVar[int]
    GPU_USED_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    HEALTH_FIELD_NUMBER: _ClassVar[int]
    node_id: str
    cell: str
    cpu_milli: int
    memory_mib: int
    gpus: int
    gpu_model: str
    connector: str
    cpu_used: int
    memory_used: int
    gpu_used: _containers.RepeatedScalarFieldContainer[int]
    status: str
    health: str
    def __init__(self, node_id: _Optional[str] = ..., cell: _Optional[str] = ..., cpu_milli: _Optional[int] = ..., memory_mib: _Optional[int] = ..., gpus: _Optional[int] = ..., gpu_model: _Optional[str] = ..., connector: _Optional[str] = ..., cpu_used: _Optional[int] = ..., memory_used: _Optional[int] = ..., gpu_used: _Optional[_Iterable[int]] = ..., status: _Optional[str] = ..., health: _Optional[str] = ...) -> None: ...

class ListNodesResponse(_message.Message):
    __slots__ = ("nodes",)
    NODES_FIELD_NUMBER: _ClassVar[int]
    nodes: _containers.RepeatedCompositeFieldContainer[NodeView]
    def __init__(self, nodes: _Optional[_Iterable[_Union[NodeView, _Mapping]]] = ...) -> None: ...

class AuditDecision(_message.Message):
    __slots__ = ("kind", "event_id", "decision_id", "task_id", "tenant", "cell", "node_id", "gpu_devices", "gpu_milli", "cpu_milli", "memory_mib", "reasons", "queue_position", "cause", "provenance", "position")
    KIND_FIELD_NUMBER: _ClassVar[int]
    EVENT_ID_FIELD_NUMBER: _ClassVar[int]
    DECISION_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    CELL_FIELD_NUMBER: _ClassVar[int]
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    GPU_DEVICES_FIELD_NUMBER: _ClassVar[int]
    GPU_MILLI_FIELD_NUMBER: _ClassVar[int]
    CPU_MILLI_FIELD_NUMBER: _ClassVar[int]
    MEMORY_MIB_FIELD_NUMBER: _ClassVar[int]
    REASONS_FIELD_NUMBER: _ClassVar[int]
    QUEUE_POSITION_FIELD_NUMBER: _ClassVar[int]
    CAUSE_FIELD_NUMBER: _ClassVar[int]
    PROVENANCE_FIELD_NUMBER: _ClassVar[int]
    POSITION_FIELD_NUMBER: _ClassVar[int]
    kind: str
    event_id: str
    decision_id: str
    task_id: str
    tenant: str
    cell: str
    node_id: str
    gpu_devices: _containers.RepeatedScalarFieldContainer[int]
    gpu_milli: int
    cpu_milli: int
    memory_mib: int
    reasons: _containers.RepeatedCompositeFieldContainer[PendingReason]
    queue_position: int
    cause: str
    provenance: Provenance
    position: LogPosition
    def __init__(self, kind: _Optional[str] = ..., event_id: _Optional[str] = ..., decision_id: _Optional[str] = ..., task_id: _Optional[str] = ..., tenant: _Optional[str] = ..., cell: _Optional[str] = ..., node_id: _Optional[str] = ..., gpu_devices: _Optional[_Iterable[int]] = ..., gpu_milli: _Optional[int] = ..., cpu_milli: _Optional[int] = ..., memory_mib: _Optional[int] = ..., reasons: _Optional[_Iterable[_Union[PendingReason, _Mapping]]] = ..., queue_position: _Optional[int] = ..., cause: _Optional[str] = ..., provenance: _Optional[_Union[Provenance, _Mapping]] = ..., position: _Optional[_Union[LogPosition, _Mapping]] = ...) -> None: ...

class AuditTrail(_message.Message):
    __slots__ = ("task_id", "tenant", "cell", "status", "decisions")
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    CELL_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    DECISIONS_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    tenant: str
    cell: str
    status: str
    decisions: _containers.RepeatedCompositeFieldContainer[AuditDecision]
    def __init__(self, task_id: _Optional[str] = ..., tenant: _Optional[str] = ..., cell: _Optional[str] = ..., status: _Optional[str] = ..., decisions: _Optional[_Iterable[_Union[AuditDecision, _Mapping]]] = ...) -> None: ...

class FieldError(_message.Message):
    __slots__ = ("field", "message")
    FIELD_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    field: str
    message: str
    def __init__(self, field: _Optional[str] = ..., message: _Optional[str] = ...) -> None: ...

class ErrorResponse(_message.Message):
    __slots__ = ("detail", "errors")
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    ERRORS_FIELD_NUMBER: _ClassVar[int]
    detail: str
    errors: _containers.RepeatedCompositeFieldContainer[FieldError]
    def __init__(self, detail: _Optional[str] = ..., errors: _Optional[_Iterable[_Union[FieldError, _Mapping]]] = ...) -> None: ...

class NodeStatusResponse(_message.Message):
    __slots__ = ("node_id", "cell", "status", "previous", "event_id", "position")
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    CELL_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    PREVIOUS_FIELD_NUMBER: _ClassVar[int]
    EVENT_ID_FIELD_NUMBER: _ClassVar[int]
    POSITION_FIELD_NUMBER: _ClassVar[int]
    node_id: str
    cell: str
    status: str
    previous: str
    event_id: str
    position: LogPosition
    def __init__(self, node_id: _Optional[str] = ..., cell: _Optional[str] = ..., status: _Optional[str] = ..., previous: _Optional[str] = ..., event_id: _Optional[str] = ..., position: _Optional[_Union[LogPosition, _Mapping]] = ...) -> None: ...
