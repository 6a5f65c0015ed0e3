"""The YAML form of a task: friendly units in, a valid TaskSubmitted out, clear errors."""
from __future__ import annotations

import pytest
import yaml

from suanli.errors import ValidationError
from suanli.schemas.models import validate_event
from suanli.schemas.task_spec import task_from_document

DOC = """
id: train-1
tenant: vision
cell: openb
resources: {cpu: 6, memory: 12Gi, gpu: 0.46, gpu_models: [V100M16]}
qos: gold
labels: {workload: training}
duration: 2h
command: [python, train.py]
env: {EPOCHS: "3", DATA_DIR: /mnt/data}
"""


def test_friendly_units_become_the_event_fields():
    event = task_from_document(yaml.safe_load(DOC), now_ms=1000)
    assert event["resources"] == {"cpu_milli": 6000, "memory_mib": 12288, "gpu_count": 1, "gpu_milli": 460,
                                  "gpu_models": ["V100M16"], "gpu_memory_mib": 0, "accelerators": []}
    assert event["qos_tier"] == "GOLD" and event["duration_estimate_ms"] == 7_200_000
    assert event["command"] == ["python", "train.py"]
    assert event["env"] == {"EPOCHS": "3", "DATA_DIR": "/mnt/data"}
    assert validate_event("TaskSubmitted", event) is None


def test_command_as_one_string_is_split_like_a_shell_and_env_defaults_to_empty():
    doc = yaml.safe_load("""
resources: {cpu: 1, memory: 1Gi}
command: python -c 'import os; print(os.environ["A B"])' --flag="two words"
""")
    event = task_from_document(doc, now_ms=1)
    assert event["command"] == ["python", "-c", 'import os; print(os.environ["A B"])', "--flag=two words"]
    assert event["env"] == {}
    assert task_from_document({"resources": {"cpu": 1, "memory": 5}}, now_ms=1)["command"] is None


def test_whole_gpus_and_generated_ids():
    event = task_from_document({"resources": {"cpu_milli": 1000, "memory_mib": 10, "gpu": 4}}, now_ms=1)
    assert (event["resources"]["gpu_count"], event["resources"]["gpu_milli"]) == (4, 1000)
    assert event["task_id"].startswith("task-")


@pytest.mark.parametrize("doc, message", [
    ({"resources": {"cpu": 1, "memory": "1Gi", "gpu": -1}}, "resources.gpu"),
    ({"resources": {"cpu": 1, "memory": "1Gi", "gpu": 1.5}}, "whole GPUs must be an integer"),
    ({"resources": {"memory": "1Gi"}}, "give cpu"),
    ({"resources": {"cpu": 1, "memory": "lots"}}, "memory 'lots'"),
    ({"resources": {"cpu": 1, "memory": 5}, "qos": "platinum"}, "qos must be gold, silver or bronze"),
    ({"resources": {"cpu": 1, "memory": 5}, "gpus": 2}, "gpus: Extra inputs are not permitted"),
    (["not", "a", "mapping"], "must be a mapping"),
    ({"resources": {"cpu": 1, "memory": 5}, "env": {"PORT": 8080}},
     r'env: PORT: value 8080 must be a string: quote it in YAML \(PORT: "8080"\)'),
    ({"resources": {"cpu": 1, "memory": 5}, "env": {"A=B": "x"}}, "env: variable name 'A=B' may not contain '='"),
    ({"resources": {"cpu": 1, "memory": 5}, "env": {"": "x"}}, "env: variable name '' must be a non-empty string"),
    ({"resources": {"cpu": 1, "memory": 5}, "env": {1: "x"}}, "env: variable name 1 must be a non-empty string"),
    ({"resources": {"cpu": 1, "memory": 5}, "env": {"A": "x\0y"}}, "env: A: the value may not contain NUL"),
    ({"resources": {"cpu": 1, "memory": 5}, "env": ["A=1"]}, "env: must be a mapping of NAME: value"),
    ({"resources": {"cpu": 1, "memory": 5}, "command": []}, "command: give the program to run"),
    ({"resources": {"cpu": 1, "memory": 5}, "command": "  "}, "command: give the program to run"),
    ({"resources": {"cpu": 1, "memory": 5}, "command": "echo 'unclosed"}, "command: cannot split"),
    ({"resources": {"cpu": 1, "memory": 5}, "command": ["sleep", 5]}, r"command: argument 1 \(5\) must be a string"),
])
def test_bad_documents_say_which_field_to_fix(doc, message):
    with pytest.raises(ValidationError, match=message):
        task_from_document(doc, now_ms=1)


@pytest.mark.parametrize("env, message", [
    ({"A=B": "1"}, "env: environment variable name 'A=B' must be non-empty, without '=' or NUL"),
    ({"": "1"}, "env: environment variable name '' must be non-empty, without '=' or NUL"),
    ({"A": "x\0y"}, "env: environment variable A: the value may not contain NUL"),
])
def test_intake_refuses_an_environment_no_process_can_have(env, message):
    """A producer that bypasses the task form (any language, straight to the raw topic) is held
    to the same rule by intake's value check."""
    event = task_from_document({"resources": {"cpu": 1, "memory": 5}}, now_ms=1)
    assert validate_event("TaskSubmitted", {**event, "env": {"OK": "1"}}) is None
    assert validate_event("TaskSubmitted", {**event, "env": env}) == f"invalid TaskSubmitted: {message}"


def test_accelerators_and_gpu_memory_reach_the_event():
    doc = {"resources": {"cpu": 2, "memory": "4Gi", "gpu": 2, "gpu_memory": "40Gi",
                         "accelerators": [{"kind": "fpga", "model": "xilinx-u250", "count": 2}, {"kind": "NPU"},
                                          {"kind": "npu", "memory": "32Gi"}, {"kind": "ASIC", "memory_mib": 512}]}}
    r = task_from_document(doc, 0)["resources"]
    assert r["gpu_memory_mib"] == 40 * 1024
    assert r["accelerators"] == [{"kind": "FPGA", "model": "xilinx-u250", "count": 2, "memory_mib": 0},
                                 {"kind": "NPU", "model": "", "count": 1, "memory_mib": 0},
                                 {"kind": "NPU", "model": "", "count": 1, "memory_mib": 32768},
                                 {"kind": "ASIC", "model": "", "count": 1, "memory_mib": 512}]


@pytest.mark.parametrize("resources, named", [
    ({"accelerators": [{"kind": "GPU"}]}, "ask GPUs with resources.gpu"),
    ({"accelerators": [{"kind": "TPU"}]}, "use one of NPU, FPGA, ASIC, QPU, OTHER"),
    ({"accelerators": [{"kind": "NPU", "count": 0}]}, "count"),
    ({"gpu_memory": "16Gi"}, "gpu_memory is per GPU"),
    ({"gpu": 1, "gpu_memory": "16Gi", "gpu_memory_mib": 5}, "not both"),
    ({"accelerators": [{"kind": "NPU", "memory": "32Gi", "memory_mib": 5}]}, "give memory or memory_mib, not both"),
    ({"accelerators": [{"kind": "NPU", "memory": "lots"}]}, "accelerators.0: memory 'lots'"),
])
def test_bad_device_asks_are_refused_naming_the_field(resources, named):
    with pytest.raises(ValidationError, match=named):
        task_from_document({"resources": {"cpu": 1, "memory": "1Gi", **resources}}, 0)


def test_an_id_ending_in_the_standby_suffix_is_refused_naming_the_field():
    doc = {"tenant": "vision", "cell": "c", "resources": {"cpu": 1, "memory": "1Gi"}}
    with pytest.raises(ValidationError) as err:
        task_from_document({**doc, "id": "serve~standby"}, 0)
    assert str(err.value).startswith("invalid task: id:") and "reserved for gold standby copies" in str(err.value)
    assert task_from_document({**doc, "id": "serve-standby"}, 0)["task_id"] == "serve-standby"
