"""The job runner's pure part (suanli/jobs.py): job files, planning, env wiring, QPU sizing,
verdicts; and `suanli job plan`, which needs no services."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from suanli.cli import main
from suanli.errors import JobError, ValidationError
from suanli.jobs import (JobSpec, choose_qpu_model, load_job, merge, plan, qpu_devices, read_job_file, sized,
                         verdict)


def _doc(**over) -> dict:
    doc = {"name": "ghz", "tenant": "lab", "cell": "mixed",
           "defaults": {"resources": {"cpu": 0.5, "memory": "64Mi"}, "env": {"A": "1", "B": "1"},
                        "labels": {"team": "q"}},
           "steps": [{"name": "prepare", "command": ["python3", "prep.py", "{output}"], "env": {"B": "2"}},
                     {"name": "ghz", "command": ["qasm", "ghz5.qasm"],
                      "resources": {"cpu": 0, "memory": 0, "accelerators": [{"kind": "QPU", "count": 1}]},
                      "env": {"SUANLI_SHOTS": "2048", "SUANLI_STEP_INPUT": "/not/this"}},
                     {"name": "analyse", "command": "python3 analyse.py {input} {job_dir}", "timeout": "90s"}]}
    doc.update(over)
    return doc


def _plan(job: JobSpec, tmp: Path):
    return plan(job, run_id="r1", job_dir=tmp / "run", base_dir=tmp / "src")


# ---- validation --------------------------------------------------------------------------------
def test_a_valid_job_loads():
    job = load_job(_doc())
    assert [s.name for s in job.steps] == ["prepare", "ghz", "analyse"]
    assert job.steps[2].timeout_s() == 90.0 and job.steps[0].task["env"] == {"B": "2"}


@pytest.mark.parametrize("change, message", [
    ({"steps": []}, "steps: List should have at least 1 item"),
    ({"steps": [{"name": "a", "command": ["x"]}, {"name": "a", "command": ["y"]}]}, "a appear more than once"),
    ({"steps": [{"name": "a", "tenant": "other", "command": ["x"]}]}, "may not set tenant"),
    ({"steps": [{"name": "a", "id": "mine", "command": ["x"]}]}, "may not set id"),
    ({"steps": [{"name": "a", "task": {"command": ["x"]}}]}, "not under 'task'"),
    ({"steps": ["python3 x.py"]}, "a step must be a mapping"),
    ({"steps": [{"name": "bad name", "command": ["x"]}]}, "steps.0.name"),
    ({"steps": [{"name": "a", "command": ["x"], "timeout": "soon"}]}, "timeout"),
    ({"steps": [{"name": "a", "command": ["x"], "resources": {"cpu": 1}}]}, "step 'a': resources"),
    ({"steps": [{"name": "a", "command": ["x"], "qos": "platinum"}]}, "qos must be gold, silver or bronze"),
    ({"steps": [{"name": "a", "command": ["x"], "resources": {"cpu": 0, "memory": 0,
                                                              "accelerators": [{"kind": "GPU"}]}}]}, "ask GPUs"),
    ({"defaults": {"cell": "other"}}, "defaults may not set cell"),
    ({"step_timeout": "-5s"}, "step_timeout"),
    ({"colour": "blue"}, "colour: Extra inputs are not permitted"),
    ({"steps": [{"name": "a", "command": ["x"], "output": "job.json"}]}, "not job.json"),
])
def test_a_bad_job_is_refused_naming_what_is_wrong(change, message):
    with pytest.raises(ValidationError, match="invalid job") as info:
        load_job(_doc(**change))
    assert message in str(info.value) and "(event)" not in str(info.value), str(info.value)


def test_a_job_document_must_be_a_mapping():
    with pytest.raises(ValidationError, match="must be a mapping"):
        load_job(["steps"])


def test_defaults_merge_under_each_step_env_and_labels_key_by_key():
    assert merge({"env": {"A": "1", "B": "1"}, "qos": "gold", "resources": {"cpu": 1}},
                 {"env": {"B": "2"}, "resources": {"cpu": 2, "memory": "1Gi"}}) == \
        {"env": {"A": "1", "B": "2"}, "qos": "gold", "resources": {"cpu": 2, "memory": "1Gi"}}
    assert merge({"labels": {"a": "1"}}, {}) == {"labels": {"a": "1"}}


# ---- planning ------------------------------------------------------------------------------------
def test_the_plan_chains_each_steps_output_into_the_next_steps_input(tmp_path):
    steps = _plan(load_job(_doc()), tmp_path)
    run = tmp_path / "run"
    assert [s.task_id for s in steps] == ["ghz-r1-1-prepare", "ghz-r1-2-ghz", "ghz-r1-3-analyse"]
    assert [s.output for s in steps] == [run / "01-prepare.out", run / "02-ghz.out", run / "03-analyse.out"]
    assert [s.input for s in steps] == [None, run / "01-prepare.out", run / "02-ghz.out"]
    assert [s.qpu for s in steps] == [False, True, False]
    first, ghz, last = steps
    assert first.spec.id == first.task_id and first.spec.tenant == "lab" and first.spec.cell == "mixed"
    assert first.spec.env == {"A": "1", "B": "2", "SUANLI_JOB_ID": "ghz-r1", "SUANLI_JOB_DIR": str(run),
                              "SUANLI_STEP_NAME": "prepare", "SUANLI_STEP_INDEX": "1",
                              "SUANLI_STEP_OUTPUT": str(run / "01-prepare.out")}
    assert first.spec.labels == {"team": "q"}
    # the job's wiring wins over a step's own SUANLI_STEP_INPUT
    assert ghz.spec.env["SUANLI_STEP_INPUT"] == str(run / "01-prepare.out")
    assert ghz.spec.env["SUANLI_SHOTS"] == "2048"
    # placeholders; a relative circuit is the job file's
    assert first.spec.command == ["python3", "prep.py", str(run / "01-prepare.out")]
    assert ghz.spec.command == ["qasm", str(tmp_path / "src" / "ghz5.qasm")]
    assert last.spec.command == ["python3", "analyse.py", str(run / "02-ghz.out"), str(run)]
    assert (first.timeout_s, last.timeout_s) == (None, 90.0)


def test_the_jobs_input_output_names_and_default_timeout(tmp_path):
    job = load_job(_doc(input="/data/params.json", step_timeout="10m",
                        steps=[{"name": "only", "command": ["x", "{input}"], "output": "result.json"}]))
    [step] = _plan(job, tmp_path)
    assert step.input == Path("/data/params.json") and step.spec.env["SUANLI_STEP_INPUT"] == "/data/params.json"
    assert step.output == tmp_path / "run" / "result.json" and step.timeout_s == 600.0
    assert step.spec.command == ["x", "/data/params.json"]


def test_a_bad_run_id_is_refused(tmp_path):
    with pytest.raises(ValidationError, match="run id"):
        plan(load_job(_doc()), run_id="no spaces", job_dir=tmp_path, base_dir=tmp_path)


# ---- QPU sizing ----------------------------------------------------------------------------------
def _reg(node: str, model: str, qubits: str | None, *, label: str | None = None, kind: str = "QPU") -> dict:
    acc = {"kind": kind, "model": model, "count": 1, "memory_mib": 0}
    if qubits is not None:
        acc["attributes"] = {"qubits": qubits}
    return {"node_id": node, "accelerators": [acc], "labels": {"qpu-qubits": label} if label else {}}


def test_qpu_widths_come_from_attributes_or_labels():
    regs = [_reg("a", "aer-7q", "7"), _reg("b", "aer-3q", None, label="3"), _reg("c", "mystery", None),
            _reg("d", "fpga", "9", kind="FPGA"), _reg("e", "aer-7q", None, label="5")]
    assert qpu_devices(regs) == {"aer-7q": 7, "aer-3q": 3}


def test_the_smallest_qpu_that_holds_the_circuit_is_chosen():
    devices = {"aer-7q": 7, "aer-3q": 3, "falcon": 5, "eagle": 5}
    assert choose_qpu_model(devices, 2) == "aer-3q"
    assert choose_qpu_model(devices, 4) == "eagle"          # equal widths: by name
    assert choose_qpu_model(devices, 7) == "aer-7q"
    assert choose_qpu_model(devices, 8) is None


def test_sizing_fills_an_any_model_ask_keeps_a_named_one_and_refuses_a_too_wide_circuit(tmp_path):
    steps = _plan(load_job(_doc()), tmp_path)
    ghz = steps[1]
    devices = {"aer-7q": 7, "aer-3q": 3}
    [ask] = sized(ghz, 5, devices, "mixed").spec.resources.accelerators
    assert (ask.kind, ask.model, ask.count) == ("QPU", "aer-7q", 1)
    assert sized(ghz, 2, devices, "mixed").spec.resources.accelerators[0].model == "aer-3q"
    with pytest.raises(JobError, match="needs a QPU of 9 qubits; the widest registered in cell 'mixed' is aer-7q"):
        sized(ghz, 9, devices, "mixed")
    assert sized(ghz, None, devices, "mixed") is ghz            # width unknown: the core and connector decide
    assert sized(ghz, 5, {}, "mixed") is ghz                    # no sized QPU registered
    assert sized(steps[0], 5, devices, "mixed") is steps[0]     # a classical step
    named = _plan(load_job(_doc(steps=[{"name": "q", "command": ["qasm"], "resources": {
        "cpu": 0, "memory": 0, "accelerators": [{"kind": "QPU", "model": "aer-3q"}]}}])), tmp_path)[0]
    assert sized(named, 5, devices, "mixed") is named           # a named model is kept (and refused by its QPU)


# ---- verdicts ------------------------------------------------------------------------------------
@pytest.mark.parametrize("status, dead, done, ok", [
    (None, None, False, False), ("SUBMITTED", None, False, False), ("PENDING", None, False, False),
    ("PLACED", None, False, False), ("RUNNING", None, False, False), ("COMPLETED", None, True, True),
    ("FAILED", None, True, False), ("CANCELLED", None, True, False), ("UNSCHEDULABLE", None, True, False),
    ("SUBMITTED", "no QPU", True, False), (None, "no QPU", True, False), ("RUNNING", "old letter", False, False),
])
def test_verdicts(status, dead, done, ok):
    v = verdict(status, "msg", 3 if status == "FAILED" else None, dead)
    assert (v.done, v.ok) == (done, ok)
    if status == "FAILED":
        assert v.why == "FAILED (exit code 3): msg"
    if dead and done:
        assert v.why == f"dead-lettered: {dead}"


# ---- files and the command line ----------------------------------------------------------------
def test_a_job_file_is_read_with_overrides(tmp_path):
    path = tmp_path / "job.yaml"
    path.write_text(json.dumps(_doc()))
    assert read_job_file(path, {"cell": "elsewhere"}).cell == "elsewhere"
    path.write_text("steps: [unclosed")
    with pytest.raises(ValidationError, match="not valid YAML"):
        read_job_file(path)


def test_suanli_job_plan_prints_the_steps_without_services(tmp_path, capsys):
    path = tmp_path / "job.yaml"
    path.write_text(json.dumps(_doc()))
    assert main(["job", "plan", str(path), "--run-id", "r7", "--dir", str(tmp_path / "d")]) == 0
    out = capsys.readouterr().out
    assert "job ghz-r7: 3 steps in cell mixed (tenant lab)" in out
    assert "2. ghz (quantum) task ghz-r7-2-ghz" in out and f"-> output {tmp_path / 'd' / '02-ghz.out'}" in out
    assert main(["job", "plan", str(path), "--run-id", "r7", "--json", "--cell", "c2"]) == 0
    planned = json.loads(capsys.readouterr().out)
    assert [p["task_id"] for p in planned] == ["ghz-r7-1-prepare", "ghz-r7-2-ghz", "ghz-r7-3-analyse"]
    assert planned[1]["qpu"] and planned[1]["task"]["cell"] == "c2"
    path.write_text(json.dumps(_doc(steps=[])))
    assert main(["job", "plan", str(path)]) == 2
    assert "invalid job: steps" in capsys.readouterr().err
