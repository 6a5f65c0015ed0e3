"""The human form of a task (``suanli submit task.yaml``) and its TaskSubmitted event.

Example::

    id: train-resnet-42          # optional: a unique id is generated
    tenant: vision
    cell: openb
    resources:
      cpu: 6                     # cores (or cpu_milli: 6000)
      memory: 12Gi               # Ki/Mi/Gi/Ti (or memory_mib: 12288)
      gpu: 0.46                  # < 1: a share of one GPU; >= 1: whole GPUs (integer)
      gpu_models: [V100M16, V100M32]
    qos: gold                    # gold | silver | bronze
    scheduling: normal           # urgent | normal | batch (the label "scheduling"; C5)
    priority: 10
    labels: {workload: training}
    duration: 2h                 # estimate: ms, s, m, h (or duration_ms)
    command: [python, train.py]  # argv, run without a shell (or one string, split like a shell: "python train.py")
    env: {EPOCHS: "3"}           # added to the command's environment (names and values are strings)
"""
from __future__ import annotations

import re
import shlex
import uuid
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from suanli.errors import ValidationError as SuanliValidationError
from suanli.schemas.models import format_errors

_MEM = {"": 1 / (1024 * 1024), "k": 1 / 1024, "ki": 1 / 1024, "m": 1, "mi": 1, "g": 1024, "gi": 1024,
        "t": 1024 * 1024, "ti": 1024 * 1024}
_DUR = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


def _memory_mib(value: Any) -> int:
    if isinstance(value, (int, float)):
        return int(value)
    m = re.fullmatch(r"\s*([0-9.]+)\s*([KkMmGgTt]i?)?[Bb]?\s*", str(value))
    if not m:
        raise ValueError(f"memory {value!r}: use a number of MiB or a size like 512Mi, 12Gi")
    return int(float(m.group(1)) * _MEM[(m.group(2) or "mi").lower()])


def _duration_ms(value: Any) -> int:
    if isinstance(value, (int, float)):
        return int(value)
    m = re.fullmatch(r"\s*([0-9.]+)\s*(ms|s|m|h|d)\s*", str(value))
    if not m:
        raise ValueError(f"duration {value!r}: use e.g. 500ms, 30s, 15m, 2h, 1d")
    return int(float(m.group(1)) * _DUR[m.group(2)])


class ResourcesSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")
    cpu: float | None = Field(None, ge=0, description="CPU cores")
    cpu_milli: int | None = Field(None, ge=0)
    memory: str | int | None = None
    memory_mib: int | None = Field(None, ge=0)
    gpu: float = Field(0, ge=0, le=64, description="GPU share (<1) or whole GPUs (>=1, integer)")
    gpu_models: list[str] = []

    @model_validator(mode="after")
    def _check(self) -> ResourcesSpec:
        if self.cpu is None and self.cpu_milli is None:
            raise ValueError("give cpu (cores) or cpu_milli")
        if self.memory is None and self.memory_mib is None:
            raise ValueError("give memory (e.g. 12Gi) or memory_mib")
        if self.gpu >= 1 and self.gpu != int(self.gpu):
            raise ValueError(f"gpu {self.gpu}: whole GPUs must be an integer (a share must be below 1)")
        return self


class TaskSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")
    id: str | None = Field(None, min_length=1, max_length=200)
    tenant: str = Field("default", min_length=1)
    cell: str = Field("openb", min_length=1)
    resources: ResourcesSpec
    qos: str = "silver"
    scheduling: str | None = Field(None, description="urgent | normal | batch: the scheduling tier "
                                   "(written as the label 'scheduling')")
    priority: int = 0
    labels: dict[str, str] = {}
    duration: str | int | None = None
    duration_ms: int | None = Field(None, ge=0)
    deadline_ms: int | None = Field(None, ge=0)
    command: list[str] | str | None = Field(
        None, description="Command line: an argv list (run without a shell), or one string split like a shell "
                          "(shlex) into one")
    env: dict[str, str] = Field({}, description="Environment variables added to the command's environment")

    @field_validator("command", mode="before")
    @classmethod
    def _command(cls, v: Any) -> Any:
        if isinstance(v, str):
            try:
                v = shlex.split(v)
            except ValueError as exc:
                raise ValueError(f"cannot split {v!r} into arguments: {exc}") from None
        if isinstance(v, list):
            if not v:
                raise ValueError("give the program to run (an empty command runs nothing)")
            bad = [i for i, a in enumerate(v) if not isinstance(a, str)]
            if bad:
                raise ValueError(f"argument {bad[0]} ({v[bad[0]]!r}) must be a string: quote it in YAML")
            if not v[0]:
                raise ValueError("the program (argument 0) is empty")
        return v

    @field_validator("env", mode="before")
    @classmethod
    def _env(cls, v: Any) -> Any:
        if v is None:
            return {}
        if not isinstance(v, dict):
            raise ValueError("must be a mapping of NAME: value")
        for name, value in v.items():
            if not isinstance(name, str) or not name:
                raise ValueError(f"variable name {name!r} must be a non-empty string")
            if "=" in name or "\0" in name:
                raise ValueError(f"variable name {name!r} may not contain '=' or NUL")
            if not isinstance(value, str):
                raise ValueError(f"{name}: value {value!r} must be a string: quote it in YAML ({name}: \"{value}\")")
            if "\0" in value:
                raise ValueError(f"{name}: the value may not contain NUL")
        return v

    @field_validator("qos")
    @classmethod
    def _qos(cls, v: str) -> str:
        if v.lower() not in ("gold", "silver", "bronze"):
            raise ValueError("qos must be gold, silver or bronze")
        return v.lower()

    @field_validator("scheduling")
    @classmethod
    def _scheduling(cls, v: str | None) -> str | None:
        if v is not None and v.lower() not in ("urgent", "normal", "batch"):
            raise ValueError("scheduling must be urgent, normal or batch")
        return v.lower() if v is not None else None

    @model_validator(mode="after")
    def _one_scheduling(self) -> "TaskSpec":
        lab = self.labels.get("scheduling")
        if self.scheduling is not None and lab is not None and lab != self.scheduling:
            raise ValueError(f"scheduling: {self.scheduling!r} contradicts labels.scheduling: {lab!r}; give one")
        return self

    def to_event(self, now_ms: int) -> dict[str, Any]:
        """The TaskSubmitted payload (Avro field names) for this spec."""
        r = self.resources
        gpu_count, gpu_milli = (0, 0) if r.gpu == 0 else (1, round(r.gpu * 1000)) if r.gpu < 1 else (int(r.gpu), 1000)
        duration = self.duration_ms if self.duration_ms is not None else (
            _duration_ms(self.duration) if self.duration is not None else None)
        task_id = self.id or f"task-{uuid.uuid4().hex[:12]}"
        return {
            "event_id": f"submit/{task_id}/{uuid.uuid4().hex[:8]}", "task_id": task_id, "tenant": self.tenant,
            "cell": self.cell, "submitted_at": now_ms,
            "resources": {"cpu_milli": r.cpu_milli if r.cpu_milli is not None else round((r.cpu or 0) * 1000),
                          "memory_mib": r.memory_mib if r.memory_mib is not None else _memory_mib(r.memory),
                          "gpu_count": gpu_count, "gpu_milli": gpu_milli, "gpu_models": list(r.gpu_models),
                          "gpu_memory_mib": 0, "accelerators": []},
            "qos_tier": self.qos.upper(), "priority": self.priority,
            "labels": {**self.labels, **({"scheduling": self.scheduling} if self.scheduling else {})},
            "deadline": self.deadline_ms, "duration_estimate_ms": duration, "command": self.command,
            "profile": None, "env": dict(self.env),
        }


def task_from_document(doc: Any, now_ms: int) -> dict[str, Any]:
    """Validate a parsed YAML/JSON document and return its TaskSubmitted payload.

    Raises :class:`suanli.errors.ValidationError` naming every bad field.
    """
    if not isinstance(doc, dict):
        raise SuanliValidationError("a task document must be a mapping (see `suanli submit --help`)")
    try:
        spec = TaskSpec.model_validate(doc)
        return spec.to_event(now_ms)
    except ValidationError as exc:
        raise SuanliValidationError(f"invalid task: {format_errors(exc)}") from None
    except ValueError as exc:
        raise SuanliValidationError(f"invalid task: {exc}") from None
