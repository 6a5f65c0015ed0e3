"""Mixed classical-quantum jobs (issue 19, part 4): dependent steps run one after the other.

The core schedules tasks; it has no notion of a job. A job is a client-side plan: an ordered
list of steps, each a normal Suanli task, each submitted only once the one before it has
COMPLETED, its output passed on. A job file (``suanli job run job.yaml``)::

    name: ghz-demo                 # [A-Za-z0-9][A-Za-z0-9._-]*, part of every step's task id
    tenant: lab                    # the job's tenant and cell (every step's)
    cell: mixed
    dir: /shared/jobs/ghz          # SUANLI_JOB_DIR (default <home>/jobs/<name>-<run id>)
    input: /data/params.json       # optional: the first step's SUANLI_STEP_INPUT
    step_timeout: 10m              # optional: the longest a step may take (default: no limit)
    defaults:                      # merged under every step (env and labels key by key)
      qos: silver
      resources: {cpu: 0.5, memory: 256Mi}
    steps:
      - name: prepare              # classical: any command, run by a CPU connector (e.g. local)
        command: [python3, prepare.py]
      - name: ghz                  # quantum: asks a QPU, runs an OpenQASM circuit (connectors/quantum.py)
        resources: {cpu: 0.1, memory: 64Mi, accelerators: [{kind: QPU, count: 1}]}
        command: [qasm, ghz5.qasm] # relative to the job file's directory
        env: {SUANLI_SHOTS: "2048", SUANLI_SEED: "7"}
        qubits: 5                  # optional: the width to size the QPU for (else read from the circuit)
      - name: analyse
        command: [python3, analyse.py]
        timeout: 2m                # this step's own limit

A step is a task spec (``schemas/task_spec.py``) plus ``name``, ``timeout``, ``qubits`` and
``output`` (the output file's name in the job directory; default ``NN-<name>.out``); it may
not set ``id``, ``tenant`` or ``cell`` (the job does).

**What each step's process gets** (set over the step's own ``env``):
``SUANLI_JOB_ID`` (``<name>-<run id>``), ``SUANLI_JOB_DIR``, ``SUANLI_STEP_NAME``,
``SUANLI_STEP_INDEX`` (1-based), ``SUANLI_STEP_OUTPUT`` (the file it writes its result to) and,
from the second step on (or with the job's ``input``), ``SUANLI_STEP_INPUT`` (the previous
step's output file). ``{job_dir}``, ``{input}`` and ``{output}`` in a command's arguments are
replaced by the same paths. A QPU step's connector writes its counts JSON to its
``SUANLI_STEP_OUTPUT`` (connectors/quantum.py). The job directory must be reachable under the
same path by the runner and by every connector that runs a step (one machine, or a shared
file system).

**Sizing a QPU step.** The core matches a QPU ask by kind, model and count, not by qubits. A
step asking ``{kind: QPU}`` with no model gets the model of the smallest registered QPU that
holds its circuit (``qubits``, or the width of its ``[qasm, file]`` circuit), read from the
registered accelerators' ``qubits`` attribute or the nodes' ``qpu-qubits`` label
(:func:`choose_qpu_model`); when no registered QPU is wide
enough, the job stops before submitting it, saying so. A step naming its model keeps it.

**The run** (:class:`JobRunner`, the I/O edge): the runner follows the namespace's log with
the API's own read model (``api/readmodel.LogFollower``) and submits through the API's
service (``api/service.ApiService``: the checks of ``POST /v1/tasks``), then waits on the
read model (woken by every record about the step's task, never by a timer) until the step
ends: COMPLETED moves on (a step before the last must have written its output file);
FAILED, CANCELLED, UNSCHEDULABLE, a dead letter naming the task (e.g. a QPU no node has) or
the step's timeout (the task is then cancelled) stop the job with that reason. It prints
each step's progress; the summary is also written to ``<job dir>/job.json``.

Everything above the runner is pure (validation, planning, env wiring, verdicts) and is
tested without services.
"""
from __future__ import annotations

import asyncio
import json
import re
import sys
import time
import uuid
from contextlib import asynccontextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, AsyncIterator, Callable, Mapping, Sequence

from pydantic import BaseModel, ConfigDict, Field, ValidationError as PydanticValidationError, model_validator

from suanli.errors import JobError, SuanliError, ValidationError
from suanli.schemas.models import format_errors
from suanli.schemas.task_spec import TaskSpec, _duration_ms

_NAME = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$"
STEP_KEYS = ("name", "timeout", "qubits", "output")      # the step's own keys; the rest is its task
JOB_OWNED = ("id", "tenant", "cell")                      # set by the job, never by a step
ENDED_BAD = ("FAILED", "CANCELLED", "UNSCHEDULABLE")
QUBITS_LABEL = "qpu-qubits"


def _seconds(value: Any, what: str) -> float | None:
    if value is None:
        return None
    try:
        ms = _duration_ms(value)
    except ValueError as exc:
        raise ValueError(f"{what}: {exc}") from None
    if ms <= 0:
        raise ValueError(f"{what} must be positive")
    return ms / 1000.0


class JobStep(BaseModel):
    """One step: its own keys (:data:`STEP_KEYS`) and its task (every other key)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    name: str = Field(..., pattern=_NAME)
    timeout: str | int | None = Field(None, description="the longest the step may take, e.g. 90s, 10m")
    qubits: int | None = Field(None, ge=1, le=1000, description="the QPU width the step needs")
    output: str | None = Field(None, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$",
                               description="the output file's name in the job directory")
    task: dict[str, Any] = Field(..., description="the step's task spec (defaults not merged yet)")

    @model_validator(mode="before")
    @classmethod
    def _split(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            raise ValueError("a step must be a mapping (name, command, resources, ...)")
        if "task" in data:
            raise ValueError("write the step's task fields on the step itself, not under 'task'")
        owned = [k for k in JOB_OWNED if k in data]
        if owned:
            raise ValueError(f"a step may not set {', '.join(owned)}: the job sets them")
        own = {k: data[k] for k in STEP_KEYS if k in data}
        return {**own, "task": {k: v for k, v in data.items() if k not in STEP_KEYS}}

    def timeout_s(self) -> float | None:
        return _seconds(self.timeout, f"step {self.name!r}: timeout")


class JobSpec(BaseModel):
    """A job file (see the module docstring)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    name: str = Field(..., pattern=_NAME)
    tenant: str = Field("default", min_length=1)
    cell: str = Field(..., min_length=1)
    dir: str | None = Field(None, description="the job directory (default <home>/jobs/<name>-<run id>)")
    input: str | None = Field(None, description="the first step's SUANLI_STEP_INPUT")
    step_timeout: str | int | None = None
    defaults: dict[str, Any] = {}
    steps: list[JobStep] = Field(..., min_length=1, max_length=1000)

    @model_validator(mode="after")
    def _check(self) -> JobSpec:
        names = [s.name for s in self.steps]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"step names must be unique: {', '.join(twice)} appear more than once")
        outputs = [s.output for s in self.steps if s.output]
        if len(set(outputs)) != len(outputs) or "job.json" in outputs:
            raise ValueError("step outputs must be distinct (and not job.json, the job's summary)")
        owned = [k for k in JOB_OWNED if k in self.defaults]
        if owned:
            raise ValueError(f"defaults may not set {', '.join(owned)}: the job sets them")
        _seconds(self.step_timeout, "step_timeout")
        for step in self.steps:
            step.timeout_s()
            task_spec(self, step)                 # every step is a valid task once merged
        return self


def merge(defaults: Mapping[str, Any], task: Mapping[str, Any]) -> dict[str, Any]:
    """The step's task over the job's defaults: keys of the step win; ``env`` and ``labels``
    are merged key by key (the step's values win), every other key is replaced whole."""
    out = {**defaults, **task}
    for key in ("env", "labels"):
        if isinstance(defaults.get(key), dict) and isinstance(task.get(key), dict):
            out[key] = {**defaults[key], **task[key]}
    return out


def task_spec(job: JobSpec, step: JobStep) -> TaskSpec:
    """The step's task spec as written (defaults merged; no ids, paths or env wiring yet)."""
    doc = {**merge(job.defaults, step.task), "tenant": job.tenant, "cell": job.cell}
    try:
        return TaskSpec.model_validate(doc)
    except PydanticValidationError as exc:
        raise ValueError(f"step {step.name!r}: {format_errors(exc)}") from None


def load_job(doc: Any) -> JobSpec:
    """A parsed job document, validated; :class:`~suanli.errors.ValidationError` naming every bad field."""
    if not isinstance(doc, dict):
        raise ValidationError("a job document must be a mapping (name, cell, steps, ...)")
    try:
        return JobSpec.model_validate(doc)
    except PydanticValidationError as exc:
        # a whole-job check has no field of its own: its message names the step and field
        raise ValidationError(f"invalid job: {format_errors(exc).replace('(event): ', '')}") from None


def is_qpu(spec: TaskSpec) -> bool:
    """Whether the step asks a QPU."""
    return any(a.kind == "QPU" for a in spec.resources.accelerators)


@dataclass(frozen=True)
class PlannedStep:
    """A step ready to submit: its task id, files, the env wiring and its final spec."""

    index: int                     # 1-based
    name: str
    task_id: str
    output: Path
    input: Path | None
    spec: TaskSpec                 # id, env and command filled in
    timeout_s: float | None
    qubits: int | None

    @property
    def qpu(self) -> bool:
        return is_qpu(self.spec)


def _substitute(arg: str, paths: Mapping[str, str]) -> str:
    for key, value in paths.items():
        arg = arg.replace("{" + key + "}", value)
    return arg


def plan(job: JobSpec, *, run_id: str, job_dir: Path, base_dir: Path) -> list[PlannedStep]:
    """The job's steps in order, each with its task id ``<name>-<run id>-<n>-<step>``, its
    output file, its input (the previous step's output; the job's ``input`` for the first)
    and its env wiring (module docstring). ``base_dir`` resolves a relative ``[qasm, file]``
    circuit (the job file's directory). Pure: nothing is read or written."""
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,40}", run_id):
        raise ValidationError(f"run id {run_id!r}: letters, digits, '.', '_' or '-', at most 41")
    job_id = f"{job.name}-{run_id}"
    default_timeout = _seconds(job.step_timeout, "step_timeout")
    previous: Path | None = Path(job.input) if job.input else None
    out: list[PlannedStep] = []
    for n, step in enumerate(job.steps, start=1):
        spec = task_spec(job, step)
        output = job_dir / (step.output or f"{n:02d}-{step.name}.out")
        paths = {"job_dir": str(job_dir), "output": str(output), "input": str(previous) if previous else ""}
        command = spec.command
        if isinstance(command, list):
            command = [_substitute(a, paths) for a in command]
            if command[0] == "qasm" and len(command) == 2 and not Path(command[1]).is_absolute():
                command[1] = str(base_dir / command[1])
        wiring = {"SUANLI_JOB_ID": job_id, "SUANLI_JOB_DIR": str(job_dir), "SUANLI_STEP_NAME": step.name,
                  "SUANLI_STEP_INDEX": str(n), "SUANLI_STEP_OUTPUT": str(output)}
        if previous is not None:
            wiring["SUANLI_STEP_INPUT"] = str(previous)
        env = {k: v for k, v in spec.env.items() if k != "SUANLI_STEP_INPUT"}   # the job's wiring wins
        final = spec.model_copy(update={"id": f"{job_id}-{n}-{step.name}", "command": command,
                                        "env": {**env, **wiring}})
        out.append(PlannedStep(n, step.name, final.id, output, previous, final,
                               step.timeout_s() or default_timeout, step.qubits))
        previous = output
    return out


def qpu_devices(registrations: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    """QPU model -> its qubits (the widest seen), from NodeRegistered payloads: the
    accelerator's ``attributes.qubits``, else the node's ``qpu-qubits`` label (the quantum
    connector registers both); a QPU with neither is not sized."""
    out: dict[str, int] = {}
    for reg in registrations:
        label = (reg.get("labels") or {}).get(QUBITS_LABEL, "")
        for acc in reg.get("accelerators") or []:
            if acc.get("kind") != "QPU" or acc.get("count", 0) <= 0:
                continue
            qubits = (acc.get("attributes") or {}).get("qubits", "") or label
            if qubits.isdigit():
                out[acc["model"]] = max(out.get(acc["model"], 0), int(qubits))
    return out


def choose_qpu_model(devices: Mapping[str, int], qubits: int) -> str | None:
    """The QPU model with the fewest qubits that still holds ``qubits`` (ties: by name), or None."""
    fits = sorted((q, model) for model, q in devices.items() if q >= qubits)
    return fits[0][1] if fits else None


def sized(step: PlannedStep, qubits: int | None, devices: Mapping[str, int], cell: str) -> PlannedStep:
    """``step`` with its any-model QPU ask set to :func:`choose_qpu_model`'s model;
    unchanged when it names its model, asks no QPU, has no known width or no QPU is sized;
    JobError when sized QPUs are registered but none is wide enough."""
    asks = step.spec.resources.accelerators
    if not step.qpu or qubits is None or not devices or all(a.model for a in asks if a.kind == "QPU"):
        return step
    model = choose_qpu_model(devices, qubits)
    if model is None:
        widest = max(devices.items(), key=lambda kv: (kv[1], kv[0]))
        raise JobError(f"step {step.name!r} needs a QPU of {qubits} qubits; the widest registered in cell "
                       f"{cell!r} is {widest[0]} with {widest[1]}")
    accelerators = [a.model_copy(update={"model": model}) if a.kind == "QPU" and not a.model else a for a in asks]
    resources = step.spec.resources.model_copy(update={"accelerators": accelerators})
    return PlannedStep(step.index, step.name, step.task_id, step.output, step.input,
                       step.spec.model_copy(update={"resources": resources}), step.timeout_s, qubits)


@dataclass(frozen=True)
class Verdict:
    """Where a step stands: ``done`` (it will not change any more) and ``ok`` (COMPLETED)."""

    done: bool
    ok: bool
    why: str = ""


def verdict(status: str | None, message: str = "", exit_code: int | None = None,
            dead_letter: str | None = None) -> Verdict:
    """The step's verdict from its task's status in the read model (None: not seen yet) and
    a dead letter naming it (refused by intake or by the scheduler, e.g. a QPU no node has)."""
    if status == "COMPLETED":
        return Verdict(True, True, message)
    if status in ENDED_BAD:
        code = f" (exit code {exit_code})" if exit_code is not None else ""
        return Verdict(True, False, f"{status}{code}: {message or 'no message'}")
    if dead_letter is not None and status in (None, "SUBMITTED"):
        return Verdict(True, False, f"dead-lettered: {dead_letter}")
    return Verdict(False, False)


# ---- the I/O edge ------------------------------------------------------------------------------
@dataclass
class StepResult:
    name: str
    task_id: str
    status: str
    node_id: str = ""
    message: str = ""
    exit_code: int | None = None
    seconds: float = 0.0
    output: str = ""
    qpu_model: str = ""


@dataclass
class JobResult:
    job_id: str
    job_dir: str
    ok: bool
    steps: list[StepResult] = field(default_factory=list)
    reason: str = ""
    seconds: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@asynccontextmanager
async def api_session(settings: Any, listener: Callable[..., None],
                      ready_timeout_s: float) -> AsyncIterator[tuple[Any, Any, Any]]:
    """``(service, read model, sink)`` on the namespace of ``settings``: the API's own service
    (the checks of ``POST /v1/tasks``) writing through an idempotent producer, and its read
    model following the namespace's log, caught up with it (``ready_timeout_s``) and calling
    ``listener`` on every record. Stopped on exit. Job runners drive jobs through it."""
    from suanli.api.audit import FollowerAuditSource
    from suanli.api.readmodel import LogFollower
    from suanli.api.service import ApiService
    from suanli.api.sink import KafkaSink
    from suanli.schemas.codec import Codec
    from suanli.schemas.registry import RegistryClient
    from suanli.streams.kafka_io import EventProducer, ensure_topics
    from suanli.streams.topics import core_topics

    s = settings
    await ensure_topics(s.bootstrap_servers, core_topics(s.partitions, s.namespace))
    with RegistryClient(s.registry_url) as registry:
        codec = Codec(registry)
        follower = LogFollower(s, codec)
        follower.model.listeners.append(listener)
        await follower.start()
        try:
            await follower.wait_ready(ready_timeout_s)
            async with EventProducer(s.bootstrap_servers, codec, linger_ms=0, namespace=s.namespace) as producer:
                sink = KafkaSink(producer, s.namespace)
                yield (ApiService(follower.model, sink, FollowerAuditSource(follower.model), namespace=s.namespace,
                                  follower=follower), follower.model, sink)
        finally:
            await follower.stop()


class JobRunner:
    """Runs a planned job against the namespace of ``settings`` (module docstring).

    ``say`` prints one progress line (default: stdout, flushed). ``ready_timeout_s``: how long
    the read model may take to catch up with the log at start."""

    def __init__(self, job: JobSpec, steps: Sequence[PlannedStep], *, settings: Any, job_dir: Path,
                 job_id: str, say: Callable[[str], None] | None = None, ready_timeout_s: float = 120.0):
        self.job, self.steps, self.settings = job, list(steps), settings
        self.job_dir, self.job_id = job_dir, job_id
        self.say = say or (lambda line: print(line, flush=True))
        self.ready_timeout_s = ready_timeout_s
        self._registrations: dict[str, dict[str, Any]] = {}   # node id -> its NodeRegistered (this cell)
        self._dead: dict[str, str] = {}                        # task id -> dead letter reason
        self._said: dict[str, str] = {}                        # task id -> its connector's last message
        self._watching: set[str] = set()                       # task ids whose records wake the wait
        self._changed: asyncio.Event | None = None

    def _listen(self, role: str, kind: str, payload: dict[str, Any], *_coords: Any) -> None:
        """A ReadModel listener: keep this cell's registrations and the dead letters about our
        tasks, and wake the wait on any record about a watched task. Same loop, no awaits."""
        if kind == "NodeRegistered" and payload.get("cell") == self.job.cell:
            self._registrations[payload["node_id"]] = payload
            return
        about = None
        if kind == "DeadLetter":
            key = payload.get("key") or b""
            blob = (payload.get("value") or b"") + (key if isinstance(key, bytes) else str(key).encode())
            about = next((t for t in self._watching if t.encode() in blob), None)
            if about is not None:
                self._dead.setdefault(about, payload.get("reason") or payload.get("error_kind") or "no reason")
        elif isinstance(payload, dict):
            about = payload.get("task_id") if payload.get("task_id") in self._watching else None
            if about is not None and kind == "TaskStatusChanged" and payload.get("message"):
                # the connector's own words (a refusal's reason): the lifecycle view may not
                # show a refused dispatch's message (its ack status is not matched to the copy)
                self._said[about] = payload["message"]
        if about is not None and self._changed is not None:
            self._changed.set()

    async def run(self) -> JobResult:
        started = time.monotonic()
        self._changed = asyncio.Event()
        result = JobResult(self.job_id, str(self.job_dir), ok=False)
        self.job_dir.mkdir(parents=True, exist_ok=True)
        async with api_session(self.settings, self._listen, self.ready_timeout_s) as (service, model, _sink):
            self.say(f"job {self.job_id}: {len(self.steps)} steps in cell {self.job.cell}, "
                     f"directory {self.job_dir}")
            try:
                for step in self.steps:
                    step_result = await self._run_step(service, model, step)
                    result.steps.append(step_result)
                    if step_result.status != "COMPLETED":
                        result.reason = f"step {step.index} {step.name!r} {step_result.message}"
                        break
                else:
                    result.ok = True
            except JobError as exc:
                result.reason = str(exc)
        result.seconds = round(time.monotonic() - started, 3)
        (self.job_dir / "job.json").write_text(json.dumps(result.to_json(), indent=1))
        self.say(f"job {self.job_id}: " + (f"COMPLETED, {len(result.steps)} steps in {result.seconds:.1f} s"
                                           if result.ok else f"FAILED: {result.reason}"))
        return result

    def _width(self, step: PlannedStep) -> int | None:
        """The qubits a QPU step needs: its ``qubits``, else its ``[qasm, file]`` circuit's width."""
        if step.qubits is not None or not step.qpu:
            return step.qubits
        command = step.spec.command
        if not (isinstance(command, list) and command[0] == "qasm" and len(command) == 2):
            return None
        try:
            from suanli.connectors.quantum import load_circuit
            return load_circuit(Path(command[1]).read_text(encoding="utf-8")).num_qubits
        except (ImportError, OSError, SuanliError):
            return None               # the QPU connector refuses it with the reason

    async def _run_step(self, service: Any, model: Any, step: PlannedStep) -> StepResult:
        assert self._changed is not None
        where = f"[{step.index}/{len(self.steps)} {step.name}]"
        width = self._width(step)
        step = sized(step, width, qpu_devices(list(self._registrations.values())), self.job.cell)
        qpu = next((a.model or "any" for a in step.spec.resources.accelerators if a.kind == "QPU"), "")
        self._watching = {step.task_id}
        self._changed.clear()
        started = time.monotonic()
        try:
            await service.submit_task(self.job.tenant, step.spec)
        except SuanliError as exc:
            raise JobError(f"step {step.index} {step.name!r} cannot be submitted: {exc}") from None
        self.say(f"{where} submitted {step.task_id}" + (f" (QPU {qpu}" + (f", {width} qubits" if width else "")
                                                         + ")" if qpu else ""))
        deadline = None if step.timeout_s is None else started + step.timeout_s
        seen: tuple[Any, ...] = ()
        while True:
            view = model.lifecycle.tasks.get(step.task_id)
            status = view.status if view is not None else None
            # a new line when the status, the node or a pending task's reasons change (a message
            # alone can run ahead of its status: the connector's COMPLETED before the release)
            now = (status, view.node_id if view else "",
                   tuple(r["reason"] for r in view.reasons) if view and status == "PENDING" else ())
            if status is not None and now != seen:
                seen = now
                self.say(f"{where} {status}" + (f" on {view.node_id}" if view.node_id else "")
                         + (f": {view.message}" if view.message else "")
                         + (f" ({'; '.join(now[2])})" if now[2] else ""))
            message = (view.message if view else "") or self._said.get(step.task_id, "")
            v = verdict(status, message, view.exit_code if view else None, self._dead.get(step.task_id))
            if v.done:
                break
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                await self._cancel(service, step, f"step timeout {step.timeout_s:g} s")
                return StepResult(step.name, step.task_id, status or "SUBMITTED", view.node_id if view else "",
                                  f"timed out after {step.timeout_s:g} s ({status or 'not yet decided'}); "
                                  "the task was cancelled", None, round(time.monotonic() - started, 3),
                                  qpu_model=qpu)
            try:
                await asyncio.wait_for(self._changed.wait(), remaining)
            except TimeoutError:
                pass
            self._changed.clear()
        seconds = round(time.monotonic() - started, 3)
        node = view.node_id if view else ""
        if not v.ok:
            if step.task_id in self._dead and status in (None, "SUBMITTED"):
                self.say(f"{where} dead-lettered: {self._dead[step.task_id]}")
                status = "DEAD_LETTERED"
            return StepResult(step.name, step.task_id, status or "DEAD_LETTERED", node, v.why,
                              view.exit_code if view else None, seconds, qpu_model=qpu)
        output = str(step.output) if step.output.exists() else ""
        if not output and step.index < len(self.steps):
            return StepResult(step.name, step.task_id, "NO_OUTPUT", node,
                              f"completed but wrote no output at {step.output} (SUANLI_STEP_OUTPUT); the next step "
                              "needs it", view.exit_code, seconds, qpu_model=qpu)
        self.say(f"{where} output {step.output}" + (f" ({step.output.stat().st_size} bytes)" if output else
                                                    " (none written)") + f"; {seconds:.1f} s")
        return StepResult(step.name, step.task_id, "COMPLETED", node, message, view.exit_code, seconds,
                          output, qpu)

    async def _cancel(self, service: Any, step: PlannedStep, reason: str) -> None:
        try:
            await service.cancel_task(self.job.tenant, step.task_id, _cancel_request(reason))
        except SuanliError as exc:       # already ended, or never decided: nothing to cancel
            self.say(f"[{step.index}/{len(self.steps)} {step.name}] not cancelled: {exc}")


def _cancel_request(reason: str) -> Any:
    from suanli.api.models import CancelRequest
    return CancelRequest(reason=reason)


def new_run_id() -> str:
    return uuid.uuid4().hex[:8]


def run_job(job: JobSpec, *, settings: Any, base_dir: Path, job_dir: Path | None = None, run_id: str | None = None,
            say: Callable[[str], None] | None = None) -> JobResult:
    """Plan and run ``job`` (blocking); the summary is also in ``<job dir>/job.json``."""
    run_id = run_id or new_run_id()
    job_id = f"{job.name}-{run_id}"
    job_dir = (job_dir or (base_dir / job.dir if job.dir else settings.home / "jobs" / job_id)).resolve()
    steps = plan(job, run_id=run_id, job_dir=job_dir, base_dir=base_dir)
    runner = JobRunner(job, steps, settings=settings, job_dir=job_dir, job_id=job_id, say=say)
    return asyncio.run(runner.run())


def read_yaml_document(path: Path) -> Any:
    """The YAML document in the file at ``path`` (``-``: stdin), as parsed; SuanliError if it
    cannot be read, ValidationError naming the file if it is not YAML."""
    import yaml

    try:
        text = sys.stdin.read() if str(path) == "-" else path.read_text()
        return yaml.safe_load(text)
    except OSError as exc:
        raise SuanliError(f"cannot read {path}: {exc}") from exc
    except yaml.YAMLError as exc:
        raise ValidationError(f"{path} is not valid YAML: {exc}") from None


def read_job_file(path: Path, overrides: Mapping[str, Any] | None = None) -> JobSpec:
    """A job file (YAML; ``-`` for stdin), with ``overrides`` (e.g. another cell) over its
    top-level keys, validated."""
    doc = read_yaml_document(path)
    if overrides and isinstance(doc, dict):
        doc = {**doc, **overrides}
    return load_job(doc)
