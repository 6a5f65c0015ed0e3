"""The quantum connector without services: OpenQASM parsing and refusals, real qiskit-aer runs.

qiskit-aer and qiskit are test dependencies: these tests import them at module level and
fail (never skip) when they are missing.
"""
from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
import qiskit  # noqa: F401 - a missing install fails here, loudly
import qiskit_aer  # noqa: F401

from suanli.connectors.kit import TaskReporter
from suanli.connectors.quantum import (QpuDevice, QuantumAdapter, build_adapter, load_circuit, noise_model,
                                       qasm_version, run_circuit, summary)
from suanli.errors import ConnectorError, ValidationError

GHZ5 = """OPENQASM 2.0;
include "qelib1.inc";
qreg q[5];
creg c[5];
h q[0];
cx q[0],q[1];
cx q[1],q[2];
cx q[2],q[3];
cx q[3],q[4];
measure q -> c;
"""

BELL3 = """OPENQASM 3.0;
include "stdgates.inc";
qubit[2] q;
bit[2] c;
h q[0];
cx q[0], q[1];
c = measure q;
"""

ROTATION = """OPENQASM 3.0;
include "stdgates.inc";
input float[64] theta;
qubit[1] q;
bit[1] c;
rx(theta) q[0];
c[0] = measure q[0];
"""


def _devices() -> list[QpuDevice]:
    return [QpuDevice(name="big", qubits=7, p1=0.001, p2=0.01, readout=0.02),
            QpuDevice(name="small", qubits=3, p1=0, p2=0, readout=0)]


@pytest.fixture()
def adapter(tmp_path) -> QuantumAdapter:
    return QuantumAdapter(_devices(), cell="q", name="quantum", results_dir=tmp_path / "results")


def _command(node: str = "qpu-big", argv: list[str] | None = None, env: dict | None = None, i: str = "1") -> dict:
    return {"dispatch_id": f"d{i}", "task_id": f"t{i}", "cell": "q", "node_id": node, "connector": "quantum",
            "cpu_milli": 100, "memory_mib": 64, "gpu_devices": [], "gpu_milli": 0,
            "command": ["qasm"] if argv is None else argv, "env": env or {}, "duration_estimate_ms": None}


async def _execute(adapter: QuantumAdapter, command: dict) -> list[dict]:
    out: list[dict] = []

    async def emit(payload: dict) -> None:
        out.append(payload)

    assert adapter.admit(command) is None
    await adapter.execute(command, TaskReporter(command, adapter.now_ms, emit))
    return out


# ---- devices and registration ----------------------------------------------------------------
def test_each_device_registers_as_a_node_with_one_qpu_and_its_facts_in_labels(adapter):
    nodes = {n["node_id"]: n for n in adapter.discover()}
    assert set(nodes) == {"qpu-big", "qpu-small"}
    big = nodes["qpu-big"]
    [acc] = big["accelerators"]
    assert (acc["kind"], acc["model"], acc["count"], acc["memory_mib"]) == ("QPU", "aer-7q", 1, 0)
    assert acc["attributes"]["qubits"] == "7" and acc["attributes"]["readout"] == "0.02"
    assert acc["attributes"]["noise"] == "depolarizing p1=0.001 p2=0.01, readout 0.02"
    assert big["connector"] == "quantum" and big["cell"] == "q" and big["registered_at"] > 0
    assert big["labels"]["qpu-qubits"] == "7" and big["labels"]["qpu-model"] == "aer-7q"
    assert big["labels"]["qpu-noise"] == "depolarizing p1=0.001 p2=0.01, readout 0.02"
    assert big["labels"]["qpu-backend"] == f"qiskit-aer {qiskit_aer.__version__}"
    kinds = sorted({k for k, _ in adapter.monitor(1_700_000_000_000, 3)})
    assert kinds == ["NodeHeartbeat", "NodeMetrics"]


def _cli(*argv: str):
    """The options of ``python -m suanli.connectors quantum ARGV`` (the launcher's parser)."""
    from suanli.connectors.launch import _parser

    return _parser(load="quantum").parse_args(["quantum", *argv])


def test_attributes_can_be_left_out_for_an_older_registry(tmp_path):
    labels_only = QuantumAdapter(_devices(), cell="q", with_attributes=False, results_dir=tmp_path)
    [acc] = labels_only.registration(labels_only.nodes["qpu-big"])["accelerators"]
    assert "attributes" not in acc
    assert build_adapter(_cli("--no-attributes")).with_attributes is False


def test_device_specs_parse_and_bad_ones_are_refused_by_name():
    d = QpuDevice.parse("name=falcon,qubits=5,p1=0.002,p2=0.03,readout=0.05,model=falcon-r5,coupling=line")
    assert (d.name, d.qubits, d.model_name, d.coupling, d.p2) == ("falcon", 5, "falcon-r5", "line", 0.03)
    assert QpuDevice.parse("name=x,qubits=4").model_name == "aer-4q"
    with pytest.raises(ConnectorError, match="qubits"):
        QpuDevice.parse("name=x,qubits=99")
    with pytest.raises(ConnectorError, match="readout"):
        QpuDevice.parse("name=x,qubits=2,readout=0.9")
    with pytest.raises(ConnectorError, match="not key=value"):
        QpuDevice.parse("name=x,qubits")
    with pytest.raises(ConnectorError, match="two devices"):
        QuantumAdapter([QpuDevice(name="a", qubits=2), QpuDevice(name="a", qubits=3)])


def test_the_command_line_builds_the_devices_it_names(tmp_path):
    args = _cli("--cell", "lab", "--device", "name=a,qubits=2", "--device", "name=b,qubits=6",
                "--node-prefix", "lab", "--results-dir", str(tmp_path))
    adapter = build_adapter(args)
    assert sorted(adapter.nodes) == ["lab-a", "lab-b"] and adapter.cell == "lab"
    defaults = build_adapter(_cli())
    assert sorted(n.device.qubits for n in defaults.nodes.values()) == [3, 7]


def test_the_noise_model_holds_the_devices_errors():
    model = noise_model(QpuDevice(name="n", qubits=2, p1=0.01, p2=0.02, readout=0.05))
    assert {"cx", "sx", "x"} <= set(model.noise_instructions) and "measure" in model.noise_instructions
    assert noise_model(QpuDevice(name="n", qubits=2, p1=0, p2=0, readout=0)).is_ideal()


# ---- parsing and refusals --------------------------------------------------------------------
def test_openqasm_2_and_3_parse():
    assert qasm_version(GHZ5) == "2" and qasm_version(BELL3) == "3"
    assert qasm_version("// a comment\nOPENQASM 3;\nqubit q;") == "3"
    assert load_circuit(GHZ5).num_qubits == 5
    assert load_circuit(BELL3).num_qubits == 2
    with pytest.raises(ValidationError, match="OpenQASM 4"):
        qasm_version("OPENQASM 4.0; qubit q;")


def test_admit_refuses_what_it_cannot_run_with_clear_reasons(adapter, tmp_path):
    assert "must be [qasm, /path/to/circuit.qasm]" in adapter.admit(_command(argv=["python", "x.py"]))
    assert "SUANLI_QASM" in adapter.admit(_command(argv=["qasm"]))
    assert "relative" in adapter.admit(_command(argv=["qasm", "ghz.qasm"]))
    assert "cannot read the circuit" in adapter.admit(_command(argv=["qasm", str(tmp_path / "missing.qasm")]))
    bad = adapter.admit(_command(env={"SUANLI_QASM": "OPENQASM 2.0; qreg q[2]; frobnicate q[0];"}))
    assert bad.startswith("cannot parse the circuit (OpenQASM 2)") and "frobnicate" in bad
    assert adapter.admit(_command(env={"SUANLI_QASM": "OPENQASM 3.0; qubit[2] q; garbage garbage;"})
                         ).startswith("cannot parse the circuit (OpenQASM 3)")
    wide = adapter.admit(_command(node="qpu-small", env={"SUANLI_QASM": GHZ5}))
    assert wide == ("the circuit uses 5 qubits; QPU aer-3q on node qpu-small has 3 "
                    "(ask a QPU model with at least 5 qubits)")
    unmeasured = "OPENQASM 2.0; include \"qelib1.inc\"; qreg q[2]; creg c[2]; h q[0];"
    assert "measures nothing" in adapter.admit(_command(env={"SUANLI_QASM": unmeasured}))
    assert "SUANLI_SHOTS" in adapter.admit(_command(env={"SUANLI_QASM": GHZ5, "SUANLI_SHOTS": "0"}))
    assert "SUANLI_SHOTS" in adapter.admit(_command(env={"SUANLI_QASM": GHZ5, "SUANLI_SHOTS": "many"}))
    assert "SUANLI_SEED" in adapter.admit(_command(env={"SUANLI_QASM": GHZ5, "SUANLI_SEED": "-1"}))
    assert "not a QPU of this connector" in adapter.admit(_command(node="elsewhere", env={"SUANLI_QASM": GHZ5}))
    assert "free parameters ['theta']" in adapter.admit(_command(env={"SUANLI_QASM": ROTATION}))
    assert adapter.admit(_command(node="qpu-small", env={"SUANLI_QASM": BELL3})) is None


# ---- real runs ---------------------------------------------------------------------------------
def test_ghz_on_a_noisy_device_concentrates_on_all_zeros_and_all_ones(adapter, tmp_path):
    circuit = tmp_path / "ghz5.qasm"
    circuit.write_text(GHZ5)
    out = tmp_path / "step" / "counts.json"
    events = asyncio.run(_execute(adapter, _command(argv=["qasm", str(circuit)], env={
        "SUANLI_SHOTS": "2000", "SUANLI_SEED": "11", "SUANLI_STEP_OUTPUT": str(out)})))
    assert [e["status"] for e in events] == ["RUNNING", "COMPLETED"]
    assert "5-qubit circuit" in events[0]["message"] and "aer-7q" in events[0]["message"]
    doc = json.loads(out.read_text())
    counts = doc["counts"]
    assert sum(counts.values()) == 2000 and doc["shots"] == 2000
    assert all(len(k) == 5 for k in counts)
    ghz = counts.get("00000", 0) + counts.get("11111", 0)
    assert ghz > 0.8 * 2000 and min(counts["00000"], counts["11111"]) > 0.35 * 2000
    assert len(counts) > 2          # the noise: other outcomes too (an ideal GHZ gives exactly two)
    assert doc["backend"] == "qiskit-aer" and doc["backend_version"] == qiskit_aer.__version__
    assert doc["model"] == "aer-7q" and doc["noise"]["p2"] == 0.01 and doc["num_qubits"] == 5
    done = events[1]
    assert done["exit_code"] == 0 and done["message"].startswith("2000 shots of a 5-qubit circuit on aer-7q: ")
    assert f"counts in {out}" in done["message"] and done["usage"]["wall_ms"] >= 0


def test_a_seed_makes_the_counts_repeat_and_an_ideal_device_gives_exactly_bell_pairs(adapter, tmp_path):
    env = {"SUANLI_QASM": BELL3, "SUANLI_SEED": "5", "SUANLI_SHOTS": "512"}
    asyncio.run(_execute(adapter, _command(env=env, i="1")))
    asyncio.run(_execute(adapter, _command(env=env, i="2")))
    first = json.loads((tmp_path / "results" / "t1.json").read_text())["counts"]
    assert first == json.loads((tmp_path / "results" / "t2.json").read_text())["counts"]
    asyncio.run(_execute(adapter, _command(node="qpu-small", env=env, i="3")))
    ideal = json.loads((tmp_path / "results" / "t3.json").read_text())["counts"]
    assert set(ideal) == {"00", "11"} and sum(ideal.values()) == 512


def test_parameters_are_bound_from_the_previous_steps_output(adapter, tmp_path):
    step_input = tmp_path / "params.json"
    step_input.write_text(json.dumps({"parameters": {"theta": 3.141592653589793}}))
    out = tmp_path / "out.json"
    events = asyncio.run(_execute(adapter, _command(node="qpu-small", env={
        "SUANLI_QASM": ROTATION, "SUANLI_STEP_INPUT": str(step_input), "SUANLI_STEP_OUTPUT": str(out),
        "SUANLI_SEED": "1"})))
    assert events[-1]["status"] == "COMPLETED" and "theta" in events[0]["message"]
    assert json.loads(out.read_text())["counts"] == {"1": 1024}     # rx(pi)|0> = |1>, no noise on 'small'


def test_run_circuit_directly():
    result = run_circuit(load_circuit(GHZ5), QpuDevice(name="d", qubits=5, coupling="line"), 300, 3)
    assert sum(result["counts"].values()) == 300 and result["depth"] > 0 and "cx" in result["ops"]


def test_summary_ranks_outcomes():
    assert summary({"00": 5, "11": 7, "01": 1, "10": 1}) == "11=7 00=5 01=1 (+1 other outcome)"
    assert summary({"0": 3}) == "0=3"


def test_a_stop_ends_the_task_at_once_and_the_device_is_free_again_after(adapter):
    slow = "OPENQASM 2.0; include \"qelib1.inc\"; qreg q[7]; creg c[7];\n" + \
           "".join("h q[%d]; cx q[%d],q[%d];\n" % (i % 7, i % 7, (i + 1) % 7) for i in range(400)) + "measure q -> c;"
    command = _command(env={"SUANLI_QASM": slow, "SUANLI_SHOTS": "100000"})
    out: list[dict] = []

    async def scenario() -> None:
        async def emit(payload: dict) -> None:
            out.append(payload)

        assert adapter.admit(command) is None
        run = asyncio.create_task(adapter.execute(command, TaskReporter(command, adapter.now_ms, emit)))
        deadline = asyncio.get_running_loop().time() + 30
        while not out:                                       # RUNNING reported: the simulation is on
            assert asyncio.get_running_loop().time() < deadline, "no RUNNING report in 30 s"
            await asyncio.sleep(0.01)
        assert await adapter.stop("t1", "qpu-big", "preempted") is True
        await run
        assert await adapter.stop("t1", "qpu-big", "again") is False     # nothing left here
        # the device takes the next circuit once the dropped simulation's thread has ended
        events = await _execute(adapter, _command(env={"SUANLI_QASM": GHZ5, "SUANLI_SHOTS": "64"}, i="2"))
        assert events[-1]["status"] == "COMPLETED"

    asyncio.run(scenario())
    assert [e["status"] for e in out] == ["RUNNING", "FAILED"]
    assert out[1]["message"].startswith("stopped by the scheduler: preempted")
