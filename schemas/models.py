"""Pydantic models that validate event *values* at the boundary (intake, API, CLI).

Avro already guarantees types; these models add the rules Avro cannot express
(non-negative resources, GPU-share consistency, non-empty ids, JSON policy configs).
``validate_event(kind, payload)`` returns None when the event is acceptable, or a
message that says which field is wrong and how to fix it.
"""
from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

GPU_MILLI = 1000
MAX_GPUS_PER_TASK = 64

NonEmpty = Field(min_length=1, max_length=256)


class _Model(BaseModel):
    model_config = ConfigDict(extra="ignore")


class AcceleratorModel(_Model):
    kind: str = "GPU"
    model: str = ""
    count: int = Field(ge=0, le=1024)
    memory_mib: int = Field(0, ge=0)


class TaskResourcesModel(_Model):
    cpu_milli: int = Field(ge=0, le=10_000_000, description="CPU in millicores")
    memory_mib: int = Field(ge=0, le=1 << 30, description="memory in MiB")
    gpu_count: int = Field(0, ge=0, le=MAX_GPUS_PER_TASK, description="number of GPUs")
    gpu_milli: int = Field(0, ge=0, le=GPU_MILLI, description="milli-GPU per device (1000 = whole)")
    gpu_models: list[str] = []
    gpu_memory_mib: int = Field(0, ge=0)

    @model_validator(mode="after")
    def _gpu_shape(self) -> TaskResourcesModel:
        if self.gpu_count == 0 and self.gpu_milli != 0:
            raise ValueError("gpu_milli must be 0 when gpu_count is 0")
        if self.gpu_count >= 1 and self.gpu_milli == 0:
            raise ValueError("gpu_milli must be 1..1000 when gpu_count > 0 (1000 = a whole GPU)")
        if self.gpu_count > 1 and self.gpu_milli != GPU_MILLI:
            raise ValueError("a multi-GPU task (gpu_count > 1) takes whole GPUs: gpu_milli must be 1000")
        return self


class TaskSubmittedModel(_Model):
    task_id: str = NonEmpty
    tenant: str = NonEmpty
    cell: str = NonEmpty
    submitted_at: int = Field(ge=0)
    resources: TaskResourcesModel
    qos_tier: str = "SILVER"
    priority: int = Field(0, ge=-1_000_000, le=1_000_000)
    deadline: int | None = None
    duration_estimate_ms: int | None = Field(None, ge=0)
    env: dict[str, str] = {}
    job_id: str | None = Field(None, min_length=1, max_length=256, description="the job the task is a member of")

    @field_validator("qos_tier")
    @classmethod
    def _tier(cls, v: str) -> str:
        if v not in ("GOLD", "SILVER", "BRONZE"):
            raise ValueError("qos_tier must be GOLD, SILVER or BRONZE")
        return v

    @field_validator("env")
    @classmethod
    def _env(cls, v: dict[str, str]) -> dict[str, str]:
        problem = env_problem(v)
        if problem:
            raise ValueError(problem)
        return v


def env_problem(env: dict[str, str]) -> str | None:
    """Why ``env`` cannot be a process environment (a name that is empty or holds '=' or NUL, a
    value with NUL), or None. Intake dead-letters such a TaskSubmitted; the local connector
    refuses such a DispatchCommand."""
    for name, value in env.items():
        if not name or "=" in name or "\0" in name:
            return f"environment variable name {name!r} must be non-empty, without '=' or NUL"
        if "\0" in value:
            return f"environment variable {name}: the value may not contain NUL"
    return None


class TaskCancelledModel(_Model):
    task_id: str = NonEmpty
    cell: str = NonEmpty


class TaskStatusChangedModel(_Model):
    task_id: str = NonEmpty
    cell: str = NonEmpty
    node_id: str = NonEmpty


class NodeRegisteredModel(_Model):
    node_id: str = NonEmpty
    cell: str = NonEmpty
    cpu_milli: int = Field(ge=0)
    memory_mib: int = Field(ge=0)
    accelerators: list[AcceleratorModel] = []
    price_per_hour: float = Field(0.0, ge=0)
    pue: float = Field(1.0, ge=1.0, le=10.0)
    carbon_g_per_kwh: float = Field(0.0, ge=0)

    @model_validator(mode="after")
    def _one_gpu_model(self) -> NodeRegisteredModel:
        models = {a.model for a in self.accelerators if a.kind == "GPU" and a.count > 0}
        if len(models) > 1:
            raise ValueError(f"a node carries one GPU model; got {sorted(models)}: register one node per model")
        return self


class NodeEventModel(_Model):
    node_id: str = NonEmpty
    cell: str = NonEmpty


class PolicyChangedModel(_Model):
    cell: str = NonEmpty
    strategy: str = NonEmpty
    config_json: str

    @field_validator("config_json")
    @classmethod
    def _json_object(cls, v: str) -> str:
        try:
            parsed = json.loads(v)
        except ValueError as exc:
            raise ValueError(f"config_json is not JSON: {exc}") from None
        if not isinstance(parsed, dict):
            raise ValueError("config_json must be a JSON object")
        return v


class DispatchAckModel(_Model):
    dispatch_id: str = NonEmpty
    task_id: str = NonEmpty
    node_id: str = NonEmpty


class JobRoundModel(_Model):
    job_id: str = NonEmpty
    tenant: str = NonEmpty
    cell: str = NonEmpty
    round: int = Field(ge=1, description="round number, from 1")
    accuracy: float | None = Field(None, ge=0, le=1)
    bytes_up: dict[str, int] = {}
    bytes_down: dict[str, int] = {}
    wall_ms: int = Field(0, ge=0)

    @field_validator("bytes_up", "bytes_down")
    @classmethod
    def _counts(cls, v: dict[str, int]) -> dict[str, int]:
        bad = sorted(k for k, n in v.items() if n < 0)
        if bad:
            raise ValueError(f"byte counts may not be negative (clients {', '.join(bad)})")
        return v


MODELS: dict[str, type[_Model]] = {
    "TaskSubmitted": TaskSubmittedModel,
    "TaskCancelled": TaskCancelledModel,
    "TaskStatusChanged": TaskStatusChangedModel,
    "NodeRegistered": NodeRegisteredModel,
    "NodeHeartbeat": NodeEventModel,
    "NodeMetrics": NodeEventModel,
    "NodeStatusChanged": NodeEventModel,
    "PolicyChanged": PolicyChangedModel,
    "DispatchAck": DispatchAckModel,
    "JobRound": JobRoundModel,
}


def format_errors(exc: ValidationError) -> str:
    """pydantic's messages, one per bad field, as ``field.path: message``."""
    parts = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"]) or "(event)"
        msg = err["msg"].removeprefix("Value error, ")
        parts.append(f"{loc}: {msg}")
    return "; ".join(parts)


def validate_event(kind: str, payload: dict[str, Any]) -> str | None:
    """None if ``payload`` is a valid ``kind`` event, else what is wrong with it."""
    model = MODELS.get(kind)
    if model is None:
        return None
    try:
        model.model_validate(payload)
    except ValidationError as exc:
        return f"invalid {kind}: {format_errors(exc)}"
    return None
