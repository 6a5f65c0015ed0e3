"""BACKWARD_TRANSITIVE evolution, checked with the avro reference checker."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

from suanli.schemas.catalog import AVRO_DIR, released_versions
from suanli.schemas.compatibility import check_backward_transitive


def test_current_contract_reads_every_released_version():
    assert released_versions(), "at least one released version must be kept in schemas/released"
    assert check_backward_transitive() == []


def _mutated_copy(tmp_path: Path, mutate) -> Path:
    work = tmp_path / "avro"
    shutil.copytree(AVRO_DIR, work)
    path = work / "io.suanli.events.TaskSubmitted.avsc"
    schema = json.loads(path.read_text())
    mutate(schema)
    path.write_text(json.dumps(schema))
    return work


def test_adding_a_required_field_to_the_task_schema_fails(tmp_path):
    work = _mutated_copy(tmp_path, lambda s: s["fields"].append(
        {"name": "gpu_vendor", "type": "string", "doc": "no default: old data cannot be read"}))
    problems = check_backward_transitive(work)
    assert any("TaskSubmitted" in p and "gpu_vendor" in p for p in problems), problems


def test_changing_a_field_type_fails(tmp_path):
    def retype(schema):
        for field in schema["fields"]:
            if field["name"] == "priority":
                field["type"] = "string"
    problems = check_backward_transitive(_mutated_copy(tmp_path, retype))
    assert any("TaskSubmitted" in p for p in problems), problems


def test_adding_an_optional_field_with_default_is_allowed(tmp_path):
    work = _mutated_copy(tmp_path, lambda s: s["fields"].append(
        {"name": "team", "type": "string", "default": "", "doc": "has a default"}))
    assert check_backward_transitive(work) == []


def test_removing_a_released_event_fails(tmp_path):
    work = tmp_path / "avro"
    shutil.copytree(AVRO_DIR, work)
    (work / "io.suanli.events.TaskCancelled.avsc").unlink()
    assert any("TaskCancelled" in p for p in check_backward_transitive(work))
