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
      gpu_memory: 16Gi           # memory each GPU must have (or gpu_memory_mib)
      accelerators: [{kind: FPGA, model: xilinx-u250, count: 1}]   # NPU | FPGA | ASIC | QPU | OTHER; memory: 32Gi per device
    qos: gold                    # gold | silver | bronze
    scheduling: normal           # urgent | normal | batch (the label "scheduling"; C5)
    reservation: rsv-b-1         # run on a reservation token won at auction (the label "reservation"; #15)
    priority: 10
    labels: {workload: training}
    duration: 2h                 # estimate: ms, s, m, h (or duration_ms)
    command: [python, train.py]  # argv, run without a shell (or one string, split like a shell: "python train.py")
    env: {EPOCHS: "3"}           # added to the command's environment (names and values are strings)
    model:                       # weights loaded before the command starts (C11): the profile's model
      arch: llama-3-8b@2         # name and version: the key of a node's model cache
      uri: file:///models/llama-3-8b.bin   # where the weights are (file:// for the local connector)
      size: 15Gi                 # Ki/Mi/Gi/Ti (or size_mib)
    parallelism: 4               # cooperating workers (the profile's parallelism)
    job: fl-round-7              # optional: the job this task is a member of (issue 22); every member
                                 # names the same id; shown by `suanli job show fl-round-7`

The bid form (``suanli reserve -f bid.yaml``; :class:`BidForm`) asks for advance capacity
(a ``ReservationBid``, cleared by the cell's auction)::

    id: b-train-1                # optional: a unique id is generated; the token is rsv-<id>
    tenant: vision
    cell: openb
    gpus: 4                      # whole GPUs, on one node
    gpu_model: A100              # or a list [A100, H800]; or gpu_memory: 40Gi (per device)
    cpu: 16                      # cores (or cpu_milli)
    memory: 64Gi                 # or memory_mib
    start: +10m                  # earliest start: ISO time (UTC if no zone), epoch ms, now, +10m
    latest_start: +2h            # optional: the latest start (default: start)
    duration: 4h                 # length of the window
    price: 2.5                   # the most you pay per GPU-hour
    gang: true                   # all GPUs or nothing (default); false: fewer (>= 1) will do
"""
from __future__ import annotations

import re
import shlex
import uuid
from datetime import datetime, timezone
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from suanli.errors import ValidationError as SuanliValidationError
from suanli.schemas.models import format_errors

_MEM = {"": 1 / (1024 * 1024), "k": 1 / 1024, "ki": 1 / 1024, "m": 1, "mi": 1, "g": 1024, "gi": 1024,
        "t": 1024 * 1024, "ti": 1024 * 1024}
_DUR = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:@+-]{0,203}")
MAX_EPOCH_MS = 253_402_300_799_999      # 9999-12-31T23:59:59.999Z


def _memory_mib(value: Any) -> int:
    if isinstance(value, (int, float)):
        return int(value)
    m = re.fullmatch(r"\s*([0-9.]+)\s*([KkMmGgTt]i?)?[Bb]?\s*", str(value))
    if not m:
        raise ValueError(f"memory {value!r}: use a number of MiB or a size like 512Mi, 12Gi")
    return int(float(m.group(1)) * _MEM[(m.group(2) or "mi").lower()])


memory_mib = _memory_mib       # the public name: "12Gi" -> 12288


def _duration_ms(value: Any) -> int:
    if isinstance(value, (int, float)):
        return int(value)
    m = re.fullmatch(r"\s*([0-9.]+)\s*(ms|s|m|h|d)\s*", str(value))
    if not m:
        raise ValueError(f"duration {value!r}: use e.g. 500ms, 30s, 15m, 2h, 1d")
    return int(float(m.group(1)) * _DUR[m.group(2)])


class AcceleratorSpec(BaseModel):
    """Devices of one non-GPU kind a task needs (C1): NPU, FPGA, ASIC, QPU or OTHER."""
    model_config = ConfigDict(extra="forbid")
    kind: str = Field(..., description="NPU | FPGA | ASIC | QPU | OTHER (GPUs: the gpu field)")
    model: str = Field("", description="the device model; '' = any (all of one model)")
    count: int = Field(1, ge=1, le=1024)
    memory: str | None = Field(None, description="memory each device must have, e.g. 32Gi (or memory_mib)")
    memory_mib: int | None = Field(None, ge=0)

    def memory_needed(self) -> int:
        """MiB each device must have (0 = any)."""
        if self.memory is not None and self.memory_mib is not None:
            raise ValueError("give memory or memory_mib, not both")
        return self.memory_mib if self.memory_mib is not None else (
            _memory_mib(self.memory) if self.memory is not None else 0)

    @model_validator(mode="after")
    def _check_memory(self) -> "AcceleratorSpec":
        self.memory_needed()            # both given, or a memory that does not parse: refused here
        return self

    @field_validator("kind")
    @classmethod
    def _kind(cls, v: str) -> str:
        kinds = ("NPU", "FPGA", "ASIC", "QPU", "OTHER")
        if v.upper() == "GPU":
            raise ValueError("ask GPUs with resources.gpu (and gpu_models, gpu_memory), not in accelerators")
        if v.upper() not in kinds:
            raise ValueError(f"kind {v!r}: use one of {', '.join(kinds)}")
        return v.upper()


class ResourcesSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")
    cpu: float | None = Field(None, ge=0, description="CPU cores")
    cpu_milli: int | None = Field(None, ge=0)
    memory: str | int | None = None
    memory_mib: int | None = Field(None, ge=0)
    gpu: float = Field(0, ge=0, le=64, description="GPU share (<1) or whole GPUs (>=1, integer)")
    gpu_models: list[str] = []
    gpu_memory: str | None = Field(None, description="memory each GPU must have, e.g. 40Gi (or gpu_memory_mib)")
    gpu_memory_mib: int | None = Field(None, ge=0)
    accelerators: list[AcceleratorSpec] = Field([], description="non-GPU devices: [{kind, model, count, memory}]")

    def gpu_memory_needed(self) -> int:
        """MiB each GPU must have (0 = any)."""
        if self.gpu_memory is not None and self.gpu_memory_mib is not None:
            raise ValueError("give gpu_memory or gpu_memory_mib, not both")
        return self.gpu_memory_mib if self.gpu_memory_mib is not None else (
            _memory_mib(self.gpu_memory) if self.gpu_memory is not None else 0)

    @model_validator(mode="after")
    def _check(self) -> ResourcesSpec:
        if self.cpu is None and self.cpu_milli is None:
            raise ValueError("give cpu (cores) or cpu_milli")
        if self.memory is None and self.memory_mib is None:
            raise ValueError("give memory (e.g. 12Gi) or memory_mib")
        if self.gpu >= 1 and self.gpu != int(self.gpu):
            raise ValueError(f"gpu {self.gpu}: whole GPUs must be an integer (a share must be below 1)")
        if self.gpu_memory_needed() and not self.gpu:
            raise ValueError("gpu_memory is per GPU: ask a gpu too")
        return self


class ModelSpec(BaseModel):
    """The model weights a task loads (``TaskProfile.model_arch`` / ``model_uri`` / ``model_size_mib``)."""
    model_config = ConfigDict(extra="forbid")
    arch: str = Field(..., min_length=1, max_length=200, description="name and version, e.g. llama-3-8b@2")
    uri: str = Field("", max_length=2000, description="where the weights are (file:// for the local connector)")
    size: str | None = Field(None, description="size with a Ki/Mi/Gi/Ti suffix (or size_mib)")
    size_mib: int | None = Field(None, ge=0)

    def mib(self) -> int:
        if self.size_mib is not None and self.size is not None:
            raise ValueError("give size or size_mib, not both")
        return self.size_mib if self.size_mib is not None else (_memory_mib(self.size) if self.size else 0)


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
    reservation: str | None = Field(None, min_length=1, max_length=204,
                                    description="A reservation token to run on (its id rsv-<bid>, or the bid's "
                                                "id): written as the label 'reservation'")
    model: ModelSpec | None = Field(None, description="model weights loaded before the command starts (C11)")
    parallelism: int = Field(1, ge=1, le=100_000, description="cooperating workers")
    job: str | None = Field(None, description="The job this task is a member of (an id like a task id: letters, "
                                              "digits and . _ : @ + -); its member tasks share it")

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
        lab = self.labels.get("reservation")
        if self.reservation is not None and lab is not None and lab != self.reservation:
            raise ValueError(f"reservation: {self.reservation!r} contradicts labels.reservation: {lab!r}; give one")
        return self

    @field_validator("labels")
    @classmethod
    def _elastic_label(cls, v: dict[str, str]) -> dict[str, str]:
        # the elastic policy of a federated job (processors/elastic.py): refused here, by
        # name, rather than ignored by the scheduler
        text = v.get("elastic")
        if text is not None:
            from suanli.errors import StrategyConfigError
            from suanli.processors.elastic import parse_label
            try:
                parse_label(text)
            except StrategyConfigError as exc:
                raise ValueError(f"labels: {exc}") from None
        return v

    @field_validator("id")
    @classmethod
    def _id(cls, v: str | None) -> str | None:
        from suanli.processors.qos import STANDBY_SUFFIX, is_standby
        if v is not None and is_standby(v):
            raise ValueError(f"{v!r}: task ids ending in {STANDBY_SUFFIX!r} are reserved for gold standby copies; "
                             "choose another id")
        return v

    @field_validator("job")
    @classmethod
    def _job(cls, v: str | None) -> str | None:
        if v is not None and not _ID.fullmatch(v):
            raise ValueError(f"{v!r} is not a valid job id: use 1-204 letters, digits and . _ : @ + - (starting with "
                             "a letter or digit)")
        return v

    @field_validator("reservation")
    @classmethod
    def _reservation(cls, v: str | None) -> str | None:
        if v is not None and not _ID.fullmatch(v):
            raise ValueError(f"{v!r} is not a reservation id: use the token's id (rsv-<bid id>) or the bid's id")
        return v

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
                          "gpu_memory_mib": r.gpu_memory_needed(),
                          "accelerators": [{"kind": a.kind, "model": a.model, "count": a.count,
                                            "memory_mib": a.memory_needed()} for a in r.accelerators]},
            "qos_tier": self.qos.upper(), "priority": self.priority,
            "labels": {**self.labels, **({"scheduling": self.scheduling} if self.scheduling else {}),
                       **({"reservation": self.reservation} if self.reservation else {})},
            "deadline": self.deadline_ms, "duration_estimate_ms": duration, "command": self.command,
            "profile": self._profile(), "env": dict(self.env), "job_id": self.job,
        }

    def _profile(self) -> dict[str, Any] | None:
        """The declared part of the task's profile (model, parallelism); None when nothing is declared."""
        if self.model is None and self.parallelism == 1:
            return None
        from suanli.processors.model import TaskProfile, to_avro
        m = self.model
        return to_avro(TaskProfile(parallelism=self.parallelism, model_arch=m.arch if m else "",
                                   model_uri=m.uri if m else "", model_size_mib=m.mib() if m else 0))


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


# ----------------------------------------------------------------------- the bid form
_REL = re.compile(r"\s*\+\s*((?:[0-9.]+\s*(?:ms|s|m|h|d)\s*)+)")
_REL_PART = re.compile(r"([0-9.]+)\s*(ms|s|m|h|d)")


def time_ms(value: Any, now_ms: int) -> int:
    """An instant as epoch ms: an int (epoch ms), ``now``, ``+10m`` / ``+1h30m`` (from now), or an
    ISO 8601 time (``2030-06-01T08:00:00Z``; without a zone it is UTC). YAML's own timestamps
    (an unquoted ISO time) are accepted too."""
    if isinstance(value, bool):
        raise ValueError(f"{value!r} is not a time")
    if isinstance(value, (int, float)):
        if value < 0 or value > MAX_EPOCH_MS:
            raise ValueError(f"{value!r} is not an epoch time in ms")
        return int(value)
    if isinstance(value, datetime):
        when = value if value.tzinfo else value.replace(tzinfo=timezone.utc)
        return int(when.timestamp() * 1000)
    if hasattr(value, "isoformat") and hasattr(value, "year"):       # a date
        return time_ms(datetime(value.year, value.month, value.day, tzinfo=timezone.utc), now_ms)
    text = str(value).strip()
    if text.lower() == "now":
        return now_ms
    m = _REL.fullmatch(text)
    if m:
        return now_ms + int(sum(float(n) * _DUR[u] for n, u in _REL_PART.findall(m.group(1))))
    if re.fullmatch(r"[0-9]+", text):
        return time_ms(int(text), now_ms)
    try:
        when = datetime.fromisoformat(text.replace("z", "Z"))
    except ValueError:
        raise ValueError(f"{text!r}: use an ISO time (2030-06-01T08:00:00Z), epoch ms, now, or +10m / +2h "
                         "(from now)") from None
    return time_ms(when, now_ms)


def utc_iso(ms: int) -> str:
    """Epoch ms as an ISO time in UTC (``2030-06-01T08:00:00Z``)."""
    try:
        text = datetime.fromtimestamp(ms / 1000, tz=timezone.utc).isoformat(timespec="seconds")
    except (OverflowError, OSError, ValueError):
        return str(ms)
    return text.replace("+00:00", "Z")


def bid_problems(*, start_at: int, latest_start_at: int | None, duration_ms: int | None, price: float,
                 gpu_count: int, gpu_milli: int, gpus_field: str = "gpus",
                 latest_field: str = "latest_start") -> list[str]:
    """What is wrong with a bid's window, price and GPUs, one ``field: message`` each (empty:
    nothing). Shared by the bid form and the API's ``POST /v1/bids``."""
    out = []
    if gpu_count < 1:
        out.append(f"{gpus_field}: a reservation holds whole GPUs: give at least 1")
    elif gpu_milli != 1000:
        out.append(f"{gpus_field}: a reservation holds whole GPUs, not a share of one: give an integer >= 1")
    if duration_ms is None or duration_ms <= 0:
        out.append("duration: the window must be longer than 0 (e.g. 30m, 4h)")
    if price < 0:
        out.append(f"price: {price} is negative: give the most you pay per GPU-hour (>= 0)")
    if latest_start_at is not None and latest_start_at < start_at:
        out.append(f"{latest_field}: {utc_iso(latest_start_at)} is before the earliest start {utc_iso(start_at)}: "
                   "the latest start must be at or after the earliest")
    if duration_ms and duration_ms > 0 and max(start_at, latest_start_at or 0) + duration_ms > MAX_EPOCH_MS:
        out.append("duration: the window ends after year 9999")
    return out


class BidForm(BaseModel):
    """The YAML of ``suanli reserve`` (see the module docstring): one ``ReservationBid``."""

    model_config = ConfigDict(extra="forbid")
    id: str | None = Field(None, min_length=1, max_length=200, description="Bid id; generated when absent.")
    tenant: str = Field("default", min_length=1)
    cell: str = Field("openb", min_length=1)
    gpus: float = Field(0, description="Whole GPUs, on one node")
    gpu_model: str | list[str] | None = Field(None, description="A GPU model, or a list of acceptable ones")
    gpu_models: list[str] | None = None
    gpu_memory: str | int | None = Field(None, description="Memory per GPU, e.g. 40Gi (or MiB)")
    cpu: float | None = Field(None, ge=0, description="CPU cores")
    cpu_milli: int | None = Field(None, ge=0)
    memory: str | int | None = None
    memory_mib: int | None = Field(None, ge=0)
    start: Any = Field(None, description="Earliest start: ISO time, epoch ms, now, or +10m")
    latest_start: Any = Field(None, description="Latest start (default: start)")
    duration: str | int | None = None
    duration_ms: int | None = Field(None, ge=0)
    price: float = Field(allow_inf_nan=False, description="The most you pay per GPU-hour")
    gang: bool = True

    @field_validator("id")
    @classmethod
    def _id(cls, v: str | None) -> str | None:
        if v is not None and not _ID.fullmatch(v):
            raise ValueError(f"{v!r} is not a valid id: use letters, digits and . _ : @ + - (starting with a "
                             "letter or digit)")
        return v

    def models(self) -> list[str]:
        one = [self.gpu_model] if isinstance(self.gpu_model, str) else list(self.gpu_model or [])
        return list(dict.fromkeys([*one, *(self.gpu_models or [])]))

    def to_event(self, now_ms: int) -> dict[str, Any]:
        """The ReservationBid payload (Avro field names); ValueError naming the field otherwise."""
        problems = []
        try:
            resources = ResourcesSpec(cpu=self.cpu, cpu_milli=self.cpu_milli, memory=self.memory,
                                      memory_mib=self.memory_mib, gpu=0, gpu_models=[])
        except ValidationError as exc:
            problems.append(format_errors(exc).removeprefix("(event): "))
            resources = None
        gpu_count = int(self.gpus) if self.gpus >= 1 and self.gpus == int(self.gpus) else 0
        if self.gpus > 64:
            problems.append(f"gpus: {self.gpus:g} is more than 64 (a token lives on one node)")
        gpu_milli = 1000 if gpu_count or self.gpus <= 0 else max(1, round((self.gpus % 1) * 1000))
        times = {}
        for name, value in (("start", self.start), ("latest_start", self.latest_start)):
            if value is None:
                continue
            try:
                times[name] = time_ms(value, now_ms)
            except ValueError as exc:
                problems.append(f"{name}: {exc}")
        if self.start is None:
            problems.append("start: give the earliest start (an ISO time, epoch ms, now, or +10m)")
        if self.duration is None and self.duration_ms is None:
            problems.append("duration: give the window's length (e.g. 4h) or duration_ms")
        duration = None
        try:
            duration = self.duration_ms if self.duration_ms is not None else (
                _duration_ms(self.duration) if self.duration is not None else None)
        except ValueError as exc:
            problems.append(f"duration: {exc}")
        gpu_memory = 0
        if self.gpu_memory is not None:
            try:
                gpu_memory = _memory_mib(self.gpu_memory)
            except ValueError as exc:
                problems.append(f"gpu_memory: {exc}")
        if "start" in times and not any(p.startswith("duration") for p in problems):
            problems += bid_problems(start_at=times["start"], latest_start_at=times.get("latest_start"),
                                     duration_ms=duration, price=self.price,
                                     gpu_count=max(int(self.gpus), 1 if self.gpus > 0 else 0),
                                     gpu_milli=gpu_milli)
        if problems or resources is None:
            raise ValueError("; ".join(dict.fromkeys(problems)))
        bid_id = self.id or f"bid-{uuid.uuid4().hex[:12]}"
        r = resources
        return {
            "event_id": f"bid/{bid_id}/{uuid.uuid4().hex[:8]}", "bid_id": bid_id, "tenant": self.tenant,
            "cell": self.cell,
            "resources": {"cpu_milli": r.cpu_milli if r.cpu_milli is not None else round((r.cpu or 0) * 1000),
                          "memory_mib": r.memory_mib if r.memory_mib is not None else _memory_mib(r.memory),
                          "gpu_count": gpu_count, "gpu_milli": 1000, "gpu_models": self.models(),
                          "gpu_memory_mib": gpu_memory, "accelerators": []},
            "start_at": times["start"], "duration_ms": duration, "price": float(self.price), "at": now_ms,
            "latest_start_at": times.get("latest_start"), "gang": self.gang,
        }


def bid_from_document(doc: Any, now_ms: int) -> dict[str, Any]:
    """Validate a parsed YAML/JSON bid document and return its ReservationBid payload.

    Raises :class:`suanli.errors.ValidationError` naming every bad field.
    """
    if not isinstance(doc, dict):
        raise SuanliValidationError("a bid document must be a mapping (see `suanli reserve --help`)")
    try:
        return BidForm.model_validate(doc).to_event(now_ms)
    except ValidationError as exc:
        raise SuanliValidationError(f"invalid bid: {format_errors(exc)}") from None
    except ValueError as exc:
        raise SuanliValidationError(f"invalid bid: {exc}") from None
