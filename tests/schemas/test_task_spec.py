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
"""


def test_friendly_units_become_the_event_fields():
    event = task_from_document(yaml.safe_load(DOC), now_ms=1000)
    assert event["resources"] == {"cpu_milli": 6000, "memory_mib": 12288, "gpu_count": 1, "gpu_milli": 460,
                                  "gpu_models": ["V100M16"], "gpu_memory_mib": 0, "accelerators": []}
    assert event["qos_tier"] == "GOLD" and event["duration_estimate_ms"] == 7_200_000
    assert validate_event("TaskSubmitted", event) is None


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
])
def test_bad_documents_say_which_field_to_fix(doc, message):
    with pytest.raises(ValidationError, match=message):
        task_from_document(doc, now_ms=1)
