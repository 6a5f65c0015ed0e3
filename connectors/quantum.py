"""The 'quantum' connector (issue 19, C13): QPU nodes backed by qiskit-aer's ``AerSimulator``.

``python -m suanli.connectors.quantum --cell C --device name=aer7,qubits=7,p1=0.001,p2=0.01,readout=0.02 ...``

**Nodes.** Each ``--device`` is one QPU node (``<node_prefix>-<name>``) registered with one
accelerator ``{kind: QPU, model: <model>, count: 1}``, no CPU and no memory by default (the
circuit's classical work runs in this connector, not in the task's process; and a node that
offers no CPU never receives a classical task: the core has no taints, so a QPU node with CPU
to lend would be given CPU-only tasks, which this connector can only refuse; a QPU task
therefore asks ``cpu: 0, memory: 0``, or at most ``--host-cpu-milli``/``--host-memory-mib``
when those are set) and the device's facts twice: in the accelerator's ``attributes``
(``qubits``, ``noise``, ``p1``, ``p2``, ``readout``, ``coupling``, ``basis_gates``, ``simulator``)
and in the node's ``labels`` (``qpu-model``, ``qpu-qubits``, ``qpu-noise``, ``qpu-coupling``,
``qpu-backend``: what readers that keep labels but not attributes, such as the job runner's
sizing, see). The core matches a QPU ask by kind, model and count, not by qubits, so the model
name carries the width too (default ``aer-<qubits>q``) and a task that needs 5 qubits asks a
model that has them (``suanli job`` picks it, see ``suanli/jobs.py``). A device is
simulated with its own noise model (:func:`noise_model`): depolarizing errors on every
one-qubit (``p1``) and two-qubit (``p2``) gate of the basis (``rz sx x id cx``) and a symmetric
readout error (``readout``: the probability that a measured bit flips). Circuits are transpiled
to that basis (and to a linear coupling map with ``coupling=line``) before they run, so the noise
applies to what really runs.

**The task contract** (what a QPU task's ``command`` and ``env`` mean here):

- ``command: [qasm, /abs/path/circuit.qasm]``: the circuit is that file, OpenQASM 2.0 or 3.0
  (the ``OPENQASM`` header says which; 2.0 when there is none). ``command: [qasm]`` alone: the
  program text is in the task's env ``SUANLI_QASM``. Anything else is refused.
- ``SUANLI_SHOTS``: shots, 1..1,000,000 (default 1024). ``SUANLI_SEED``: an integer that seeds
  the transpiler and the simulator, so the same circuit gives the same counts (default: unseeded).
- A circuit with free parameters (OpenQASM 3 ``input float[64] theta;``) is bound from a JSON
  object: the file named by ``SUANLI_QASM_PARAMS``, else the ``parameters`` object of the JSON
  file named by ``SUANLI_STEP_INPUT`` (a job's previous step, see ``suanli/jobs.py``).
- The result (``counts`` and what produced them, see :func:`run_circuit`) is written as JSON to
  ``SUANLI_STEP_OUTPUT`` when the task names it, else to ``<home>/connectors/<name>/results/<task
  id>.json``; the COMPLETED message is a one-line summary (shots, the most frequent outcomes, the
  file).

**Admission** refuses, with the reason in the DispatchAck (the task then FAILS with it): a
command that is not the above, a file that cannot be read, a program that does not parse, a
circuit wider than the device (``the circuit uses 5 qubits; QPU aer-3q on node q-aer3 has 3``),
one that measures nothing, bad shots or seed, parameters that cannot be bound.

**Execution.** A device runs one circuit at a time (the core gives its one QPU to one task; a
lock per node keeps it so here too). The simulation runs in a thread of the connector's pool,
so heartbeats and other dispatches go on. A StopCommand (or the connector's shutdown) ends the
task at once, FAILED "stopped by the scheduler: ..."; the simulation itself cannot be
interrupted inside qiskit-aer, so its thread finishes in the background, its result is dropped,
and the device takes its next circuit only then.
"""
from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import json
import logging
import os
import platform
import re
import socket
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from pydantic import BaseModel, ConfigDict, Field, ValidationError as PydanticValidationError, field_validator

from suanli.connectors.kit import Adapter, TaskReporter, stopped_message
from suanli.errors import ConnectorError, ValidationError

log = logging.getLogger("suanli.connectors.quantum")

#: the gates every circuit is transpiled to (the noise model puts its errors on these)
BASIS_1Q = ("rz", "sx", "x", "id")
BASIS_2Q = ("cx",)
DEFAULT_SHOTS = 1024
MAX_SHOTS = 1_000_000
MAX_QUBITS = 30         # a statevector of 2**30 amplitudes is 16 GiB: the most a device may claim


class QpuDevice(BaseModel):
    """One simulated QPU: its name (the node id's suffix), model, width and noise.

    ``p1``/``p2``: depolarizing probability of each one-/two-qubit gate; ``readout``: the
    probability that a measured bit is read flipped; ``coupling``: ``full`` (any pair) or
    ``line`` (neighbours only; the transpiler adds SWAPs)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    name: str = Field(..., pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")
    qubits: int = Field(..., ge=1, le=MAX_QUBITS)
    model: str = Field("", max_length=100, description="the accelerator model; default aer-<qubits>q")
    p1: float = Field(0.001, ge=0, le=0.75)
    p2: float = Field(0.01, ge=0, le=0.9375)
    readout: float = Field(0.02, ge=0, le=0.5)
    coupling: str = Field("full", pattern=r"^(full|line)$")

    @property
    def model_name(self) -> str:
        return self.model or f"aer-{self.qubits}q"

    def noise_text(self) -> str:
        """The noise as one short line (a label value and a part of every message)."""
        return f"depolarizing p1={self.p1:g} p2={self.p2:g}, readout {self.readout:g}"

    @classmethod
    def parse(cls, text: str) -> QpuDevice:
        """``name=aer7,qubits=7,p1=0.001,p2=0.01,readout=0.02[,model=M][,coupling=line]``;
        ConnectorError naming what is wrong."""
        fields: dict[str, str] = {}
        for part in filter(None, (p.strip() for p in text.split(","))):
            key, sep, value = part.partition("=")
            if not sep or not key.strip():
                raise ConnectorError(f"quantum: device {text!r}: {part!r} is not key=value")
            fields[key.strip()] = value.strip()
        try:
            return cls.model_validate(fields)
        except PydanticValidationError as exc:
            problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'device'}: {e['msg']}" for e in exc.errors())
            raise ConnectorError(f"quantum: device {text!r}: {problems}") from None


def noise_model(device: QpuDevice) -> Any:
    """The device's ``qiskit_aer.noise.NoiseModel``: depolarizing errors on the basis gates,
    a symmetric readout error on every qubit (nothing for a zero probability)."""
    from qiskit_aer.noise import NoiseModel, ReadoutError, depolarizing_error

    model = NoiseModel(basis_gates=list(BASIS_1Q + BASIS_2Q))
    if device.p1:
        model.add_all_qubit_quantum_error(depolarizing_error(device.p1, 1), list(BASIS_1Q))
    if device.p2:
        model.add_all_qubit_quantum_error(depolarizing_error(device.p2, 2), list(BASIS_2Q))
    if device.readout:
        r = device.readout
        model.add_all_qubit_readout_error(ReadoutError([[1 - r, r], [r, 1 - r]]))
    return model


def aer_version() -> str:
    import qiskit_aer

    return qiskit_aer.__version__


# ---- the task's side of the contract ---------------------------------------------------------
class QpuRun(BaseModel):
    """What a QPU task asks, from its command and env (see the module docstring)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    source: str = Field(..., description="the OpenQASM program text")
    origin: str = Field(..., description="where it came from: a path or 'env SUANLI_QASM'")
    shots: int = Field(DEFAULT_SHOTS, ge=1, le=MAX_SHOTS)
    seed: int | None = Field(None, ge=0, le=2**63 - 1)
    params_file: str | None = None
    output: str | None = None

    @field_validator("shots", "seed", mode="before")
    @classmethod
    def _int(cls, v: Any) -> Any:
        if isinstance(v, str):
            if not re.fullmatch(r"\s*[0-9]+\s*", v):
                raise ValueError(f"{v!r} is not a non-negative integer")
            return int(v)
        return v


def qpu_run(command: dict[str, Any]) -> QpuRun:
    """The :class:`QpuRun` a DispatchCommand asks; ValidationError with the reason otherwise."""
    argv = list(command.get("command") or [])
    env = command.get("env") or {}
    if not argv or argv[0] != "qasm" or len(argv) > 2:
        raise ValidationError(
            f"the quantum connector runs OpenQASM circuits: the command must be [qasm, /path/to/circuit.qasm] "
            f"or [qasm] with the program in env SUANLI_QASM, not {argv!r}")
    if len(argv) == 2:
        path = Path(argv[1])
        if not path.is_absolute():
            raise ValidationError(f"circuit path {argv[1]!r} is relative: give an absolute path (the connector "
                                  "does not share the submitter's working directory)")
        try:
            source, origin = path.read_text(encoding="utf-8"), str(path)
        except (OSError, UnicodeDecodeError) as exc:
            raise ValidationError(f"cannot read the circuit {argv[1]!r}: {exc}") from None
    else:
        if not env.get("SUANLI_QASM"):
            raise ValidationError("command [qasm] with no file needs the program in env SUANLI_QASM (empty or unset)")
        source, origin = env["SUANLI_QASM"], "env SUANLI_QASM"
    params = env.get("SUANLI_QASM_PARAMS") or None
    try:
        return QpuRun(source=source, origin=origin, shots=env.get("SUANLI_SHOTS", DEFAULT_SHOTS),
                      seed=env.get("SUANLI_SEED") or None, params_file=params,
                      output=env.get("SUANLI_STEP_OUTPUT") or None)
    except PydanticValidationError as exc:
        names = {"shots": "SUANLI_SHOTS", "seed": "SUANLI_SEED"}
        problems = "; ".join(f"{names.get(str(e['loc'][0]), e['loc'][0])}: {e['msg']}" for e in exc.errors())
        raise ValidationError(f"bad quantum settings: {problems}") from None


_VERSION = re.compile(r"^\s*(?://[^\n]*\n\s*|/\*.*?\*/\s*)*OPENQASM\s+([0-9]+(?:\.[0-9]+)?)\s*;", re.S)


def qasm_version(source: str) -> str:
    """'2' or '3' from the program's ``OPENQASM`` header ('2' when it has none, as qiskit's
    OpenQASM 2 reader assumes); ValidationError for another version."""
    m = _VERSION.match(source)
    if m is None:
        return "2"
    major = m.group(1).split(".")[0]
    if major not in ("2", "3"):
        raise ValidationError(f"OpenQASM {m.group(1)} is not supported: use OpenQASM 2.0 or 3.0")
    return major


def load_circuit(source: str) -> Any:
    """Parse an OpenQASM 2 or 3 program into a ``QuantumCircuit``; ValidationError with the
    parser's message when it cannot be parsed."""
    from qiskit import qasm2, qasm3

    version = qasm_version(source)
    try:
        if version == "2":
            return qasm2.loads(source, custom_instructions=qasm2.LEGACY_CUSTOM_INSTRUCTIONS)
        return qasm3.loads(source)
    except Exception as exc:  # noqa: BLE001 - every parser failure is the program's, reported as such
        text = str(exc).strip() or type(exc).__name__
        raise ValidationError(f"cannot parse the circuit (OpenQASM {version}): {text}") from None


def circuit_parameters(circuit: Any, run: QpuRun, env: dict[str, str]) -> dict[str, float]:
    """Values for the circuit's free parameters (see the module docstring); {} when it has none."""
    names = sorted(p.name for p in circuit.parameters)
    if not names:
        return {}
    where = run.params_file or env.get("SUANLI_STEP_INPUT")
    if not where:
        raise ValidationError(f"the circuit has free parameters {names}: give their values as a JSON object in the "
                              "file named by SUANLI_QASM_PARAMS (or as 'parameters' in SUANLI_STEP_INPUT)")
    try:
        doc = json.loads(Path(where).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ValidationError(f"cannot read the circuit's parameters from {where}: {exc}") from None
    values = doc if run.params_file else (doc.get("parameters") if isinstance(doc, dict) else None)
    if not isinstance(values, dict):
        raise ValidationError(f"{where} holds no parameters object (for {names})")
    missing = [n for n in names if n not in values]
    if missing:
        raise ValidationError(f"{where} gives no value for the circuit's parameters {missing}")
    bad = [n for n in names if isinstance(values[n], bool) or not isinstance(values[n], (int, float))]
    if bad:
        raise ValidationError(f"{where}: parameters {bad} must be numbers")
    return {n: float(values[n]) for n in names}


@dataclass
class Prepared:
    """An admitted QPU task: its settings and its circuit, parameters bound."""

    run: QpuRun
    circuit: Any
    parameters: dict[str, float]


def prepare(command: dict[str, Any], device: QpuDevice) -> Prepared:
    """Everything ``admit`` checks, on one device; ValidationError with the reason."""
    run = qpu_run(command)
    circuit = load_circuit(run.source)
    if circuit.num_qubits > device.qubits:
        raise ValidationError(f"the circuit uses {circuit.num_qubits} qubits; QPU {device.model_name} on node "
                              f"{command['node_id']} has {device.qubits} (ask a QPU model with at least "
                              f"{circuit.num_qubits} qubits)")
    if circuit.num_clbits == 0 or not any(i.operation.name == "measure" for i in circuit.data):
        raise ValidationError("the circuit measures nothing: counts come from measurements "
                              "(add e.g. `measure q -> c;`)")
    params = circuit_parameters(circuit, run, command.get("env") or {})
    if params:
        circuit = circuit.assign_parameters({p: params[p.name] for p in circuit.parameters})
    return Prepared(run, circuit, params)


def run_circuit(circuit: Any, device: QpuDevice, shots: int, seed: int | None) -> dict[str, Any]:
    """Transpile ``circuit`` for ``device`` and run it on an ``AerSimulator`` with the
    device's noise model. Blocking (call it in a thread). Returns ``counts`` (outcome bit
    string -> how often, qiskit's order: the last classical bit first), the transpiled
    circuit's ``depth`` and ``ops``, ``wall_ms`` and ``cpu_seconds`` (this thread's)."""
    from qiskit import transpile
    from qiskit.transpiler import CouplingMap
    from qiskit_aer import AerSimulator

    started, cpu0 = time.monotonic(), time.thread_time()
    noise = noise_model(device)
    simulator = AerSimulator(noise_model=noise)
    coupling = CouplingMap.from_line(device.qubits) if device.coupling == "line" else None
    compiled = transpile(circuit, basis_gates=list(BASIS_1Q + BASIS_2Q), coupling_map=coupling,
                         optimization_level=1, seed_transpiler=seed)
    options: dict[str, Any] = {"shots": shots}
    if seed is not None:
        options["seed_simulator"] = seed
    result = simulator.run(compiled, **options).result()
    if not result.success:
        raise RuntimeError(f"qiskit-aer did not succeed: {result.status}")
    counts = {str(k): int(v) for k, v in sorted(result.get_counts(compiled).items())}
    return {"counts": counts, "depth": compiled.depth(), "ops": {str(k): int(v) for k, v in compiled.count_ops().items()},
            "wall_ms": int((time.monotonic() - started) * 1000), "cpu_seconds": round(time.thread_time() - cpu0, 6)}


def summary(counts: dict[str, int], top: int = 3) -> str:
    """``00000=498 11111=479 (+22 other outcomes)``: the most frequent outcomes first."""
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    head = " ".join(f"{k}={v}" for k, v in ranked[:top])
    rest = len(ranked) - top
    return head + (f" (+{rest} other outcome{'s' if rest > 1 else ''})" if rest > 0 else "")


def write_json(path: Path, doc: dict[str, Any]) -> None:
    """Write ``doc`` to ``path`` atomically (a reader never sees half a file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(doc, indent=1, sort_keys=True), encoding="utf-8")
    os.replace(tmp, path)


# ---- the adapter -----------------------------------------------------------------------------
@dataclass
class _Node:
    device: QpuDevice
    node_id: str
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    busy: bool = False
    circuits_run: int = 0


class QuantumAdapter(Adapter):
    """QPU nodes simulated by qiskit-aer (see the module docstring).

    ``devices``: one node per device, id ``<node_prefix>-<device.name>``. ``cpu_milli`` /
    ``memory_mib``: what each node registers besides its QPU (default 0: see the module
    docstring). ``results_dir``: where a result goes when the task
    names no ``SUANLI_STEP_OUTPUT`` (default ``<home>/connectors/<name>/results``).
    ``with_attributes``: register the device's facts as ``Accelerator.attributes`` too (False:
    labels only, for a registry that still holds the Accelerator schema without them)."""

    def __init__(self, devices: Sequence[QpuDevice], *, cell: str = "quantum", name: str = "quantum",
                 node_prefix: str = "qpu", cpu_milli: int = 0, memory_mib: int = 0,
                 results_dir: Path | str | None = None, site: str = "local", with_attributes: bool = True):
        if not devices:
            raise ConnectorError("quantum: give at least one device")
        self.name, self.cell, self.site = name, cell, site
        self.cpu_milli, self.memory_mib = cpu_milli, memory_mib
        self.with_attributes = with_attributes
        self.results_dir = Path(results_dir) if results_dir is not None else None
        self.nodes: dict[str, _Node] = {}
        for device in devices:
            node_id = f"{node_prefix}-{device.name}"
            if node_id in self.nodes:
                raise ConnectorError(f"quantum: two devices named {device.name!r}")
            self.nodes[node_id] = _Node(device, node_id)
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=len(self.nodes),
                                                           thread_name_prefix=f"{name}-aer")
        self._prepared: dict[str, Prepared] = {}           # dispatch id -> its admitted circuit
        self._stops: dict[str, asyncio.Event] = {}         # dispatch id -> set by a StopCommand
        self._stop_reasons: dict[str, str] = {}
        self._commands: dict[str, dict[str, Any]] = {}     # dispatch id -> command, while it executes
        self._background: set[concurrent.futures.Future] = set()
        self.version = aer_version()                      # fails here (ImportError) without qiskit-aer

    # -- discover / monitor ------------------------------------------------------------------
    def registration(self, node: _Node) -> dict[str, Any]:
        """The node's NodeRegistered payload (``registered_at`` set by :meth:`discover`)."""
        d = node.device
        accelerator: dict[str, Any] = {"kind": "QPU", "model": d.model_name, "count": 1, "memory_mib": 0}
        if self.with_attributes:
            accelerator["attributes"] = self.attributes(d)
        arch = {"x86_64": "x86_64", "amd64": "x86_64", "aarch64": "arm64"}.get(platform.machine().lower(), "other")
        return {"event_id": f"{self.name}/{node.node_id}/registered", "node_id": node.node_id, "cell": self.cell,
                "site": self.site, "region": self.site, "zone": self.site, "tier": "onprem", "arch": arch,
                "cpu_milli": self.cpu_milli, "memory_mib": self.memory_mib, "accelerators": [accelerator],
                "pricing": "ON_DEMAND", "price_per_hour": 0.0, "pue": 1.0, "carbon_g_per_kwh": 0.0,
                "connector": self.name, "model_cache_mib": 0,
                "labels": {"qpu-model": d.model_name, "qpu-qubits": str(d.qubits), "qpu-noise": d.noise_text(),
                           "qpu-coupling": d.coupling, "qpu-backend": f"qiskit-aer {self.version}",
                           "hostname": socket.gethostname()}}

    def attributes(self, d: QpuDevice) -> dict[str, str]:
        """What the device's ``Accelerator.attributes`` would hold."""
        return {"qubits": str(d.qubits), "noise": d.noise_text(), "p1": f"{d.p1:g}", "p2": f"{d.p2:g}",
                "readout": f"{d.readout:g}", "coupling": d.coupling,
                "basis_gates": " ".join(BASIS_1Q + BASIS_2Q), "simulator": f"qiskit-aer {self.version}"}

    def discover(self) -> list[dict[str, Any]]:
        at = self.now_ms()
        return [{**self.registration(node), "registered_at": at} for node in self.nodes.values()]

    def monitor(self, at: int, seq: int) -> list[tuple[str, dict[str, Any]]]:
        out: list[tuple[str, dict[str, Any]]] = []
        for node in self.nodes.values():
            prefix = f"{self.name}/{node.node_id}"
            out.append(("NodeHeartbeat", {"event_id": f"{prefix}/hb/{seq}", "node_id": node.node_id,
                                          "cell": self.cell, "seq": seq, "at": at}))
            out.append(("NodeMetrics", {"event_id": f"{prefix}/metrics/{seq}", "node_id": node.node_id,
                                        "cell": self.cell, "at": at, "cpu_util": 1.0 if node.busy else 0.0,
                                        "memory_used_mib": 0, "gpu_util": [], "gpu_memory_used_mib": [],
                                        "load1": 0.0, "disk_iops": 0.0, "net_rx_mbps": 0.0, "net_tx_mbps": 0.0,
                                        "power_w": 0.0,
                                        "extended": {"qpu_busy": 1.0 if node.busy else 0.0,
                                                     "qpu_circuits_run": float(node.circuits_run),
                                                     "qpu_qubits": float(node.device.qubits)}}))
        return out

    # -- dispatch ----------------------------------------------------------------------------
    def admit(self, command: dict[str, Any]) -> str | None:
        node = self.nodes.get(command["node_id"])
        if node is None:
            return f"node {command['node_id']!r} is not a QPU of this connector ({', '.join(self.nodes)})"
        try:
            self._prepared[command["dispatch_id"]] = prepare(command, node.device)
        except ValidationError as exc:
            return str(exc)
        return None

    def _output_path(self, command: dict[str, Any], run: QpuRun) -> Path:
        if run.output:
            return Path(run.output)
        if self.results_dir is not None:
            root = self.results_dir
        else:
            from suanli.config import settings
            root = settings().home / "connectors" / self.name / "results"
        return root / f"{re.sub(r'[^A-Za-z0-9._@+-]', '_', command['task_id'])}.json"

    async def execute(self, command: dict[str, Any], report: TaskReporter) -> None:
        dispatch_id = command["dispatch_id"]
        node = self.nodes[command["node_id"]]
        prepared = self._prepared.pop(dispatch_id, None)
        if prepared is None:              # admitted by an earlier run of this connector: check again
            prepared = prepare(command, node.device)
        stop = self._stops.setdefault(dispatch_id, asyncio.Event())
        self._commands[dispatch_id] = command
        try:
            await self._execute(command, report, node, prepared, stop)
        finally:
            self._commands.pop(dispatch_id, None)
            self._stops.pop(dispatch_id, None)
            self._stop_reasons.pop(dispatch_id, None)

    async def _execute(self, command: dict[str, Any], report: TaskReporter, node: _Node, prepared: Prepared,
                       stop: asyncio.Event) -> None:
        dispatch_id = command["dispatch_id"]
        run, device = prepared.run, node.device
        if not await self._first(node.lock.acquire(), stop):
            await report.failed(None, f"{stopped_message(self._stop_reasons[dispatch_id])} (before it started)")
            return
        # The lock is released when the simulation's thread really ends (not when this task
        # stops waiting for it): the device runs one circuit at a time.
        node.busy = True
        loop = asyncio.get_running_loop()

        def release(_f: concurrent.futures.Future) -> None:
            def free() -> None:
                node.busy = False
                node.circuits_run += 1
                node.lock.release()
            loop.call_soon_threadsafe(free)

        try:
            work = self._pool.submit(run_circuit, prepared.circuit, device, run.shots, run.seed)
        except BaseException:
            node.busy = False
            node.lock.release()
            raise
        work.add_done_callback(release)
        self._background.add(work)
        work.add_done_callback(self._background.discard)
        width = prepared.circuit.num_qubits
        bound = f", parameters {prepared.parameters}" if prepared.parameters else ""
        await report.running(f"{width}-qubit circuit from {run.origin} on {device.model_name} ({device.qubits} "
                             f"qubits, {device.noise_text()}), {run.shots} shots"
                             + (f", seed {run.seed}" if run.seed is not None else "") + bound
                             + f"; qiskit-aer {self.version}")
        if not await self._first(asyncio.wrap_future(work), stop):
            await report.failed(None, f"{stopped_message(self._stop_reasons[dispatch_id])}; the simulation's "
                                      "result is dropped")
            return
        try:
            result = work.result()
        except Exception as exc:  # noqa: BLE001 - the circuit's failure is the task's outcome
            await report.failed(1, f"qiskit-aer failed: {type(exc).__name__}: {exc}")
            return
        usage = {"cpu_seconds": result["cpu_seconds"], "max_rss_mib": 0, "wall_ms": result["wall_ms"]}
        path = self._output_path(command, run)
        doc = {"task_id": command["task_id"], "node_id": node.node_id, "backend": "qiskit-aer",
               "backend_version": self.version, "model": device.model_name, "device_qubits": device.qubits,
               "noise": {"p1": device.p1, "p2": device.p2, "readout": device.readout, "coupling": device.coupling},
               "num_qubits": width, "num_clbits": prepared.circuit.num_clbits, "shots": run.shots, "seed": run.seed,
               "parameters": prepared.parameters, "circuit": run.origin, "depth": result["depth"],
               "ops": result["ops"], "counts": result["counts"], "wall_ms": result["wall_ms"]}
        try:
            await asyncio.to_thread(write_json, path, doc)
        except OSError as exc:
            await report.failed(1, f"ran, but cannot write the counts to {path}: {exc}", usage)
            return
        await report.completed(usage, f"{run.shots} shots of a {width}-qubit circuit on {device.model_name}: "
                                      f"{summary(result['counts'])}; counts in {path}")

    async def _first(self, work: Any, stop: asyncio.Event) -> bool:
        """Await ``work`` unless ``stop`` is set first: True when ``work`` finished."""
        task = asyncio.ensure_future(work)
        stopped = asyncio.ensure_future(stop.wait())
        try:
            done, _ = await asyncio.wait({task, stopped}, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            task.cancel()
            stopped.cancel()
            raise
        stopped.cancel()
        if task in done:
            return True
        task.cancel()
        return False

    async def stop(self, task_id: str, node_id: str, reason: str, grace_ms: int | None = None) -> bool:
        """End the copy of ``task_id`` on ``node_id`` at once (a simulation has no grace to
        give: its thread cannot be interrupted, its result is dropped). False if it is not here."""
        found = False
        for dispatch_id, command in list(self._commands.items()):
            if command["task_id"] == task_id and command["node_id"] == node_id:
                found = True
                self._stop_reasons.setdefault(dispatch_id, reason)
                self._stops[dispatch_id].set()
        return found

    async def aclose(self) -> None:
        # Simulations still running finish in their threads; nobody waits for their results.
        self._pool.shutdown(wait=False, cancel_futures=True)


# ---- the command line ----------------------------------------------------------------------
DEFAULT_DEVICES = ("name=aer7,qubits=7,p1=0.001,p2=0.01,readout=0.02",
                   "name=aer3,qubits=3,p1=0.002,p2=0.02,readout=0.03")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The quantum connector's own options (the common ones too when run on its own)."""
    parser.add_argument("--cell", default="quantum")
    parser.add_argument("--device", action="append", dest="devices", metavar="SPEC",
                        help="a QPU node: name=N,qubits=Q[,p1=P][,p2=P][,readout=P][,model=M][,coupling=full|line] "
                             f"(repeat for more; default: {' and '.join(DEFAULT_DEVICES)})")
    parser.add_argument("--node-prefix", default="qpu", help="node ids are <prefix>-<device name> (default qpu)")
    parser.add_argument("--site", default="local", help="the nodes' site (also region and zone)")
    parser.add_argument("--host-cpu-milli", type=int, default=0,
                        help="CPU milli each QPU node registers for its tasks' own ask (default 0: QPU tasks ask "
                             "cpu 0, and no CPU-only task is ever placed on a QPU node)")
    parser.add_argument("--host-memory-mib", type=int, default=0, help="memory each QPU node registers (default 0)")
    parser.add_argument("--results-dir", type=Path, default=None,
                        help="where results go when a task names no SUANLI_STEP_OUTPUT "
                             "(default: <home>/connectors/<name>/results)")
    parser.add_argument("--no-attributes", action="store_true",
                        help="register the devices' facts in node labels only, not in Accelerator.attributes")


def build_adapter(args: argparse.Namespace) -> QuantumAdapter:
    """The adapter the parsed options describe (ConnectorError for a bad device)."""
    devices = [QpuDevice.parse(spec) for spec in (args.devices or DEFAULT_DEVICES)]
    return QuantumAdapter(devices, cell=args.cell, name=getattr(args, "name", None) or "quantum",
                          node_prefix=args.node_prefix, cpu_milli=args.host_cpu_milli,
                          memory_mib=args.host_memory_mib, results_dir=args.results_dir, site=args.site,
                          with_attributes=not args.no_attributes)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m suanli.connectors.quantum``: the same as ``python -m suanli.connectors quantum``
    (the common connector options and :func:`add_arguments`'; see ``connectors/launch.py``)."""
    from suanli.connectors.launch import main as launch

    return launch(["quantum", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    raise SystemExit(main())
