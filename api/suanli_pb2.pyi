from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class TaskSpec(_message.Message):
    __slots__ = ("id", "tenant", "cell", "resources", "qos", "priority", "labels", "duration", "duration_ms", "deadline_ms", "command", "env", "scheduling", "reservation", "model", "parallelism", "job")
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
    JOB_FIELD_NUMBER: _ClassVar[int]
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
    job: str
    def __init__(self, id: _Optional[str] = ..., tenant: _Optional[str] = ..., cell: _Optional[str] = ..., resources: _Optional[_Union[ResourcesSpec, _Mapping]] = ..., qos: _Optional[str] = ..., priority: _Optional[int] = ..., labels: _Optional[_Mapping[str, str]] = ..., duration: _Optional[str] = ..., duration_ms: _Optional[int] = ..., deadline_ms: _Optional[int] = ..., command: _Optional[_Iterable[str]] = ..., env: _Optional[_Mapping[str, str]] = ..., scheduling: _Optional[str] = ..., reservation: _Optional[str] = ..., model: _Optional[_Union[ModelSpec, _Mapping]] = ..., parallelism: _Optional[int] = ..., job: _Optional[str] = ...) -> None: ...

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
    __slots__ = ("cpu", "cpu_milli", "memory", "memory_mib", "gpu", "gpu_models", "gpu_memory", "gpu_memory_mib", "accelerators")
    CPU_FIELD_NUMBER: _ClassVar[int]
    CPU_MILLI_FIELD_NUMBER: _ClassVar[int]
    MEMORY_FIELD_NUMBER: _ClassVar[int]
    MEMORY_MIB_FIELD_NUMBER: _ClassVar[int]
    GPU_FIELD_NUMBER: _ClassVar[int]
    GPU_MODELS_FIELD_NUMBER: _ClassVar[int]
    GPU_MEMORY_FIELD_NUMBER: _ClassVar[int]
    GPU_MEMORY_MIB_FIELD_NUMBER: _ClassVar[int]
    ACCELERATORS_FIELD_NUMBER: _ClassVar[int]
    cpu: float
    cpu_milli: int
    memory: str
    memory_mib: int
    gpu: float
    gpu_models: _containers.RepeatedScalarFieldContainer[str]
    gpu_memory: str
    gpu_memory_mib: int
    accelerators: _containers.RepeatedCompositeFieldContainer[AcceleratorSpec]
    def __init__(self, cpu: _Optional[float] = ..., cpu_milli: _Optional[int] = ..., memory: _Optional[str] = ..., memory_mib: _Optional[int] = ..., gpu: _Optional[float] = ..., gpu_models: _Optional[_Iterable[str]] = ..., gpu_memory: _Optional[str] = ..., gpu_memory_mib: _Optional[int] = ..., accelerators: _Optional[_Iterable[_Union[AcceleratorSpec, _Mapping]]] = ...) -> None: ...

class AcceleratorSpec(_message.Message):
    __slots__ = ("kind", "model", "count", "memory", "memory_mib")
    KIND_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    MEMORY_FIELD_NUMBER: _ClassVar[int]
    MEMORY_MIB_FIELD_NUMBER: _ClassVar[int]
    kind: str
    model: str
    count: int
    memory: str
    memory_mib: int
    def __init__(self, kind: _Optional[str] = ..., model: _Optional[str] = ..., count: _Optional[int] = ..., memory: _Optional[str] = ..., memory_mib: _Optional[int] = ...) -> None: ...

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

class ListAuditRequest(_message.Message):
    __slots__ = ("job", "task_id", "limit")
    JOB_FIELD_NUMBER: _ClassVar[int]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    job: str
    task_id: str
    limit: int
    def __init__(self, job: _Optional[str] = ..., task_id: _Optional[str] = ..., limit: _Optional[int] = ...) -> None: ...

class GetJobRequest(_message.Message):
    __slots__ = ("job_id",)
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    def __init__(self, job_id: _Optional[str] = ...) -> None: ...

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

class GetCellPolicyRequest(_message.Message):
    __slots__ = ("cell",)
    CELL_FIELD_NUMBER: _ClassVar[int]
    cell: str
    def __init__(self, cell: _Optional[str] = ...) -> None: ...

class PolicyRequest(_message.Message):
    __slots__ = ("strategy", "config_json")
    STRATEGY_FIELD_NUMBER: _ClassVar[int]
    CONFIG_JSON_FIELD_NUMBER: _ClassVar[int]
    strategy: str
    config_json: str
    def __init__(self, strategy: _Optional[str] = ..., config_json: _Optional[str] = ...) -> None: ...

class SetCellPolicyRequest(_message.Message):
    __slots__ = ("cell", "policy")
    CELL_FIELD_NUMBER: _ClassVar[int]
    POLICY_FIELD_NUMBER: _ClassVar[int]
    cell: str
    policy: PolicyRequest
    def __init__(self, cell: _Optional[str] = ..., policy: _Optional[_Union[PolicyRequest, _Mapping]] = ...) -> None: ...

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
    __slots__ = ("kind", "model", "count", "memory_mib")
    KIND_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    MEMORY_MIB_FIELD_NUMBER: _ClassVar[int]
    kind: str
    model: str
    count: int
    memory_mib: int
    def __init__(self, kind: _Optional[str] = ..., model: _Optional[str] = ..., count: _Optional[int] = ..., memory_mib: _Optional[int] = ...) -> None: ...

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
    __slots__ = ("input", "strategy", "candidates", "filtered", "path", "decided_at", "matched_rule", "profile", "notes")
    INPUT_FIELD_NUMBER: _ClassVar[int]
    STRATEGY_FIELD_NUMBER: _ClassVar[int]
    CANDIDATES_FIELD_NUMBER: _ClassVar[int]
    FILTERED_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    DECIDED_AT_FIELD_NUMBER: _ClassVar[int]
    MATCHED_RULE_FIELD_NUMBER: _ClassVar[int]
    PROFILE_FIELD_NUMBER: _ClassVar[int]
    NOTES_FIELD_NUMBER: _ClassVar[int]
    input: LogPosition
    strategy: StrategyRef
    candidates: _containers.RepeatedCompositeFieldContainer[Candidate]
    filtered: _containers.RepeatedCompositeFieldContainer[FilterOutcome]
    path: _containers.RepeatedScalarFieldContainer[str]
    decided_at: int
    matched_rule: str
    profile: TaskProfile
    notes: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, input: _Optional[_Union[LogPosition, _Mapping]] = ..., strategy: _Optional[_Union[StrategyRef, _Mapping]] = ..., candidates: _Optional[_Iterable[_Union[Candidate, _Mapping]]] = ..., filtered: _Optional[_Iterable[_Union[FilterOutcome, _Mapping]]] = ..., path: _Optional[_Iterable[str]] = ..., decided_at: _Optional[int] = ..., matched_rule: _Optional[str] = ..., profile: _Optional[_Union[TaskProfile, _Mapping]] = ..., notes: _Optional[_Iterable[str]] = ...) -> None: ...

class TaskProfile(_message.Message):
    __slots__ = ("duration_class", "io_intensity", "parallelism", "sla_level", "model_arch", "model_uri", "model_size_mib", "data_locations", "extra", "signature", "history_level", "dims_filled", "req_cpu_cores", "req_memory_gib", "req_gpu_count", "req_gpu_share", "req_gpu_total", "req_gpu_models", "req_accelerators", "mem_per_core_gib", "declared_duration_s", "deadline_slack_s", "qos_rank", "priority_value", "scheduling_rank", "model_size_gib", "command_args", "env_vars", "label_count", "gang_size", "reserved", "submitted_hour", "submitted_weekday", "history_runs", "duration_mean_s", "duration_p50_s", "duration_p90_s", "duration_p99_s", "duration_cv", "duration_last_s", "predicted_duration_s", "predicted_duration_lo_s", "predicted_duration_hi_s", "success_rate", "exit_zero_share", "exit_oom_share", "exit_other_share", "retries_per_run", "queue_wait_mean_s", "queue_wait_last_s", "arrivals", "interarrival_mean_s", "interarrival_cv", "cpu_used_ratio_mean", "cpu_used_ratio_max", "mem_peak_ratio_mean", "mem_peak_ratio_max", "gpu_util_mean", "gpu_mem_peak_ratio", "io_read_mib_s", "io_write_mib_s", "net_mib_s", "tenant_active", "tenant_arrivals", "cell_queue_length", "cell_gpu_alloc", "duration_rank", "compute_bound", "memory_bound", "burstiness", "over_request", "oom_risk", "backfill_fit", "deadline_pressure")
    class ExtraEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    DURATION_CLASS_FIELD_NUMBER: _ClassVar[int]
    IO_INTENSITY_FIELD_NUMBER: _ClassVar[int]
    PARALLELISM_FIELD_NUMBER: _ClassVar[int]
    SLA_LEVEL_FIELD_NUMBER: _ClassVar[int]
    MODEL_ARCH_FIELD_NUMBER: _ClassVar[int]
    MODEL_URI_FIELD_NUMBER: _ClassVar[int]
    MODEL_SIZE_MIB_FIELD_NUMBER: _ClassVar[int]
    DATA_LOCATIONS_FIELD_NUMBER: _ClassVar[int]
    EXTRA_FIELD_NUMBER: _ClassVar[int]
    SIGNATURE_FIELD_NUMBER: _ClassVar[int]
    HISTORY_LEVEL_FIELD_NUMBER: _ClassVar[int]
    DIMS_FILLED_FIELD_NUMBER: _ClassVar[int]
    REQ_CPU_CORES_FIELD_NUMBER: _ClassVar[int]
    REQ_MEMORY_GIB_FIELD_NUMBER: _ClassVar[int]
    REQ_GPU_COUNT_FIELD_NUMBER: _ClassVar[int]
    REQ_GPU_SHARE_FIELD_NUMBER: _ClassVar[int]
    REQ_GPU_TOTAL_FIELD_NUMBER: _ClassVar[int]
    REQ_GPU_MODELS_FIELD_NUMBER: _ClassVar[int]
    REQ_ACCELERATORS_FIELD_NUMBER: _ClassVar[int]
    MEM_PER_CORE_GIB_FIELD_NUMBER: _ClassVar[int]
    DECLARED_DURATION_S_FIELD_NUMBER: _ClassVar[int]
    DEADLINE_SLACK_S_FIELD_NUMBER: _ClassVar[int]
    QOS_RANK_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_VALUE_FIELD_NUMBER: _ClassVar[int]
    SCHEDULING_RANK_FIELD_NUMBER: _ClassVar[int]
    MODEL_SIZE_GIB_FIELD_NUMBER: _ClassVar[int]
    COMMAND_ARGS_FIELD_NUMBER: _ClassVar[int]
    ENV_VARS_FIELD_NUMBER: _ClassVar[int]
    LABEL_COUNT_FIELD_NUMBER: _ClassVar[int]
    GANG_SIZE_FIELD_NUMBER: _ClassVar[int]
    RESERVED_FIELD_NUMBER: _ClassVar[int]
    SUBMITTED_HOUR_FIELD_NUMBER: _ClassVar[int]
    SUBMITTED_WEEKDAY_FIELD_NUMBER: _ClassVar[int]
    HISTORY_RUNS_FIELD_NUMBER: _ClassVar[int]
    DURATION_MEAN_S_FIELD_NUMBER: _ClassVar[int]
    DURATION_P50_S_FIELD_NUMBER: _ClassVar[int]
    DURATION_P90_S_FIELD_NUMBER: _ClassVar[int]
    DURATION_P99_S_FIELD_NUMBER: _ClassVar[int]
    DURATION_CV_FIELD_NUMBER: _ClassVar[int]
    DURATION_LAST_S_FIELD_NUMBER: _ClassVar[int]
    PREDICTED_DURATION_S_FIELD_NUMBER: _ClassVar[int]
    PREDICTED_DURATION_LO_S_FIELD_NUMBER: _ClassVar[int]
    PREDICTED_DURATION_HI_S_FIELD_NUMBER: _ClassVar[int]
    SUCCESS_RATE_FIELD_NUMBER: _ClassVar[int]
    EXIT_ZERO_SHARE_FIELD_NUMBER: _ClassVar[int]
    EXIT_OOM_SHARE_FIELD_NUMBER: _ClassVar[int]
    EXIT_OTHER_SHARE_FIELD_NUMBER: _ClassVar[int]
    RETRIES_PER_RUN_FIELD_NUMBER: _ClassVar[int]
    QUEUE_WAIT_MEAN_S_FIELD_NUMBER: _ClassVar[int]
    QUEUE_WAIT_LAST_S_FIELD_NUMBER: _ClassVar[int]
    ARRIVALS_FIELD_NUMBER: _ClassVar[int]
    INTERARRIVAL_MEAN_S_FIELD_NUMBER: _ClassVar[int]
    INTERARRIVAL_CV_FIELD_NUMBER: _ClassVar[int]
    CPU_USED_RATIO_MEAN_FIELD_NUMBER: _ClassVar[int]
    CPU_USED_RATIO_MAX_FIELD_NUMBER: _ClassVar[int]
    MEM_PEAK_RATIO_MEAN_FIELD_NUMBER: _ClassVar[int]
    MEM_PEAK_RATIO_MAX_FIELD_NUMBER: _ClassVar[int]
    GPU_UTIL_MEAN_FIELD_NUMBER: _ClassVar[int]
    GPU_MEM_PEAK_RATIO_FIELD_NUMBER: _ClassVar[int]
    IO_READ_MIB_S_FIELD_NUMBER: _ClassVar[int]
    IO_WRITE_MIB_S_FIELD_NUMBER: _ClassVar[int]
    NET_MIB_S_FIELD_NUMBER: _ClassVar[int]
    TENANT_ACTIVE_FIELD_NUMBER: _ClassVar[int]
    TENANT_ARRIVALS_FIELD_NUMBER: _ClassVar[int]
    CELL_QUEUE_LENGTH_FIELD_NUMBER: _ClassVar[int]
    CELL_GPU_ALLOC_FIELD_NUMBER: _ClassVar[int]
    DURATION_RANK_FIELD_NUMBER: _ClassVar[int]
    COMPUTE_BOUND_FIELD_NUMBER: _ClassVar[int]
    MEMORY_BOUND_FIELD_NUMBER: _ClassVar[int]
    BURSTINESS_FIELD_NUMBER: _ClassVar[int]
    OVER_REQUEST_FIELD_NUMBER: _ClassVar[int]
    OOM_RISK_FIELD_NUMBER: _ClassVar[int]
    BACKFILL_FIT_FIELD_NUMBER: _ClassVar[int]
    DEADLINE_PRESSURE_FIELD_NUMBER: _ClassVar[int]
    duration_class: str
    io_intensity: float
    parallelism: int
    sla_level: str
    model_arch: str
    model_uri: str
    model_size_mib: int
    data_locations: _containers.RepeatedScalarFieldContainer[str]
    extra: _containers.ScalarMap[str, float]
    signature: str
    history_level: str
    dims_filled: int
    req_cpu_cores: float
    req_memory_gib: float
    req_gpu_count: float
    req_gpu_share: float
    req_gpu_total: float
    req_gpu_models: float
    req_accelerators: float
    mem_per_core_gib: float
    declared_duration_s: float
    deadline_slack_s: float
    qos_rank: float
    priority_value: float
    scheduling_rank: float
    model_size_gib: float
    command_args: float
    env_vars: float
    label_count: float
    gang_size: float
    reserved: float
    submitted_hour: float
    submitted_weekday: float
    history_runs: float
    duration_mean_s: float
    duration_p50_s: float
    duration_p90_s: float
    duration_p99_s: float
    duration_cv: float
    duration_last_s: float
    predicted_duration_s: float
    predicted_duration_lo_s: float
    predicted_duration_hi_s: float
    success_rate: float
    exit_zero_share: float
    exit_oom_share: float
    exit_other_share: float
    retries_per_run: float
    queue_wait_mean_s: float
    queue_wait_last_s: float
    arrivals: float
    interarrival_mean_s: float
    interarrival_cv: float
    cpu_used_ratio_mean: float
    cpu_used_ratio_max: float
    mem_peak_ratio_mean: float
    mem_peak_ratio_max: float
    gpu_util_mean: float
    gpu_mem_peak_ratio: float
    io_read_mib_s: float
    io_write_mib_s: float
    net_mib_s: float
    tenant_active: float
    tenant_arrivals: float
    cell_queue_length: float
    cell_gpu_alloc: float
    duration_rank: float
    compute_bound: float
    memory_bound: float
    burstiness: float
    over_request: float
    oom_risk: float
    backfill_fit: float
    deadline_pressure: float
    def __init__(self, duration_class: _Optional[str] = ..., io_intensity: _Optional[float] = ..., parallelism: _Optional[int] = ..., sla_level: _Optional[str] = ..., model_arch: _Optional[str] = ..., model_uri: _Optional[str] = ..., model_size_mib: _Optional[int] = ..., data_locations: _Optional[_Iterable[str]] = ..., extra: _Optional[_Mapping[str, float]] = ..., signature: _Optional[str] = ..., history_level: _Optional[str] = ..., dims_filled: _Optional[int] = ..., req_cpu_cores: _Optional[float] = ..., req_memory_gib: _Optional[float] = ..., req_gpu_count: _Optional[float] = ..., req_gpu_share: _Optional[float] = ..., req_gpu_total: _Optional[float] = ..., req_gpu_models: _Optional[float] = ..., req_accelerators: _Optional[float] = ..., mem_per_core_gib: _Optional[float] = ..., declared_duration_s: _Optional[float] = ..., deadline_slack_s: _Optional[float] = ..., qos_rank: _Optional[float] = ..., priority_value: _Optional[float] = ..., scheduling_rank: _Optional[float] = ..., model_size_gib: _Optional[float] = ..., command_args: _Optional[float] = ..., env_vars: _Optional[float] = ..., label_count: _Optional[float] = ..., gang_size: _Optional[float] = ..., reserved: _Optional[float] = ..., submitted_hour: _Optional[float] = ..., submitted_weekday: _Optional[float] = ..., history_runs: _Optional[float] = ..., duration_mean_s: _Optional[float] = ..., duration_p50_s: _Optional[float] = ..., duration_p90_s: _Optional[float] = ..., duration_p99_s: _Optional[float] = ..., duration_cv: _Optional[float] = ..., duration_last_s: _Optional[float] = ..., predicted_duration_s: _Optional[float] = ..., predicted_duration_lo_s: _Optional[float] = ..., predicted_duration_hi_s: _Optional[float] = ..., success_rate: _Optional[float] = ..., exit_zero_share: _Optional[float] = ..., exit_oom_share: _Optional[float] = ..., exit_other_share: _Optional[float] = ..., retries_per_run: _Optional[float] = ..., queue_wait_mean_s: _Optional[float] = ..., queue_wait_last_s: _Optional[float] = ..., arrivals: _Optional[float] = ..., interarrival_mean_s: _Optional[float] = ..., interarrival_cv: _Optional[float] = ..., cpu_used_ratio_mean: _Optional[float] = ..., cpu_used_ratio_max: _Optional[float] = ..., mem_peak_ratio_mean: _Optional[float] = ..., mem_peak_ratio_max: _Optional[float] = ..., gpu_util_mean: _Optional[float] = ..., gpu_mem_peak_ratio: _Optional[float] = ..., io_read_mib_s: _Optional[float] = ..., io_write_mib_s: _Optional[float] = ..., net_mib_s: _Optional[float] = ..., tenant_active: _Optional[float] = ..., tenant_arrivals: _Optional[float] = ..., cell_queue_length: _Optional[float] = ..., cell_gpu_alloc: _Optional[float] = ..., duration_rank: _Optional[float] = ..., compute_bound: _Optional[float] = ..., memory_bound: _Optional[float] = ..., burstiness: _Optional[float] = ..., over_request: _Optional[float] = ..., oom_risk: _Optional[float] = ..., backfill_fit: _Optional[float] = ..., deadline_pressure: _Optional[float] = ...) -> None: ...

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
    __slots__ = ("task_id", "tenant", "cell", "status", "placed", "node_id", "gpu_devices", "gpu_milli", "cpu_milli", "memory_mib", "reasons", "queue_position", "priority", "qos_tier", "submitted_at", "decision_id", "decided_at", "strategy", "path", "message", "job_id")
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
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
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
    job_id: str
    def __init__(self, task_id: _Optional[str] = ..., tenant: _Optional[str] = ..., cell: _Optional[str] = ..., status: _Optional[str] = ..., placed: _Optional[bool] = ..., node_id: _Optional[str] = ..., gpu_devices: _Optional[_Iterable[int]] = ..., gpu_milli: _Optional[int] = ..., cpu_milli: _Optional[int] = ..., memory_mib: _Optional[int] = ..., reasons: _Optional[_Iterable[_Union[PendingReason, _Mapping]]] = ..., queue_position: _Optional[int] = ..., priority: _Optional[int] = ..., qos_tier: _Optional[str] = ..., submitted_at: _Optional[int] = ..., decision_id: _Optional[str] = ..., decided_at: _Optional[int] = ..., strategy: _Optional[str] = ..., path: _Optional[_Iterable[str]] = ..., message: _Optional[str] = ..., job_id: _Optional[str] = ...) -> None: ...

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

class SetCellPolicyResponse(_message.Message):
    __slots__ = ("cell", "strategy", "config_json", "config_digest", "event_id", "position")
    CELL_FIELD_NUMBER: _ClassVar[int]
    STRATEGY_FIELD_NUMBER: _ClassVar[int]
    CONFIG_JSON_FIELD_NUMBER: _ClassVar[int]
    CONFIG_DIGEST_FIELD_NUMBER: _ClassVar[int]
    EVENT_ID_FIELD_NUMBER: _ClassVar[int]
    POSITION_FIELD_NUMBER: _ClassVar[int]
    cell: str
    strategy: str
    config_json: str
    config_digest: str
    event_id: str
    position: LogPosition
    def __init__(self, cell: _Optional[str] = ..., strategy: _Optional[str] = ..., config_json: _Optional[str] = ..., config_digest: _Optional[str] = ..., event_id: _Optional[str] = ..., position: _Optional[_Union[LogPosition, _Mapping]] = ...) -> None: ...

class CellPolicy(_message.Message):
    __slots__ = ("cell", "set", "strategy", "config_json", "config_digest", "aging_ms", "event_id", "changed_by", "at")
    CELL_FIELD_NUMBER: _ClassVar[int]
    SET_FIELD_NUMBER: _ClassVar[int]
    STRATEGY_FIELD_NUMBER: _ClassVar[int]
    CONFIG_JSON_FIELD_NUMBER: _ClassVar[int]
    CONFIG_DIGEST_FIELD_NUMBER: _ClassVar[int]
    AGING_MS_FIELD_NUMBER: _ClassVar[int]
    EVENT_ID_FIELD_NUMBER: _ClassVar[int]
    CHANGED_BY_FIELD_NUMBER: _ClassVar[int]
    AT_FIELD_NUMBER: _ClassVar[int]
    cell: str
    set: bool
    strategy: str
    config_json: str
    config_digest: str
    aging_ms: int
    event_id: str
    changed_by: str
    at: int
    def __init__(self, cell: _Optional[str] = ..., set: _Optional[bool] = ..., strategy: _Optional[str] = ..., config_json: _Optional[str] = ..., config_digest: _Optional[str] = ..., aging_ms: _Optional[int] = ..., event_id: _Optional[str] = ..., changed_by: _Optional[str] = ..., at: _Optional[int] = ...) -> None: ...

class ListNodesResponse(_message.Message):
    __slots__ = ("nodes",)
    NODES_FIELD_NUMBER: _ClassVar[int]
    nodes: _containers.RepeatedCompositeFieldContainer[NodeView]
    def __init__(self, nodes: _Optional[_Iterable[_Union[NodeView, _Mapping]]] = ...) -> None: ...

class AuditDecision(_message.Message):
    __slots__ = ("kind", "event_id", "decision_id", "task_id", "tenant", "cell", "node_id", "gpu_devices", "gpu_milli", "cpu_milli", "memory_mib", "reasons", "queue_position", "cause", "provenance", "position", "job_id")
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
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
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
    job_id: str
    def __init__(self, kind: _Optional[str] = ..., event_id: _Optional[str] = ..., decision_id: _Optional[str] = ..., task_id: _Optional[str] = ..., tenant: _Optional[str] = ..., cell: _Optional[str] = ..., node_id: _Optional[str] = ..., gpu_devices: _Optional[_Iterable[int]] = ..., gpu_milli: _Optional[int] = ..., cpu_milli: _Optional[int] = ..., memory_mib: _Optional[int] = ..., reasons: _Optional[_Iterable[_Union[PendingReason, _Mapping]]] = ..., queue_position: _Optional[int] = ..., cause: _Optional[str] = ..., provenance: _Optional[_Union[Provenance, _Mapping]] = ..., position: _Optional[_Union[LogPosition, _Mapping]] = ..., job_id: _Optional[str] = ...) -> None: ...

class AuditList(_message.Message):
    __slots__ = ("decisions",)
    DECISIONS_FIELD_NUMBER: _ClassVar[int]
    decisions: _containers.RepeatedCompositeFieldContainer[AuditDecision]
    def __init__(self, decisions: _Optional[_Iterable[_Union[AuditDecision, _Mapping]]] = ...) -> None: ...

class JobView(_message.Message):
    __slots__ = ("job_id", "tenant", "tasks", "counts")
    class CountsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    TASKS_FIELD_NUMBER: _ClassVar[int]
    COUNTS_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    tenant: str
    tasks: _containers.RepeatedCompositeFieldContainer[TaskStatus]
    counts: _containers.ScalarMap[str, int]
    def __init__(self, job_id: _Optional[str] = ..., tenant: _Optional[str] = ..., tasks: _Optional[_Iterable[_Union[TaskStatus, _Mapping]]] = ..., counts: _Optional[_Mapping[str, int]] = ...) -> None: ...

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
