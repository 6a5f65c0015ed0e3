"""The real registry holds the contract and enforces BACKWARD_TRANSITIVE."""
from __future__ import annotations

import copy

import pytest

from suanli.errors import IncompatibleSchemaError
from suanli.schemas.catalog import catalog

pytestmark = pytest.mark.stack


def test_registry_lists_every_suanli_subject(registry):
    subjects = set(registry.subjects())
    missing = {e.subject for e in catalog().values()} - subjects
    assert not missing, f"subjects not registered: {sorted(missing)}"


def test_every_subject_is_backward_transitive(registry):
    for event in catalog().values():
        assert registry.get_compatibility(event.subject) == "BACKWARD_TRANSITIVE", event.subject


def test_current_schemas_are_the_latest_versions(registry):
    for event in catalog().values():
        latest = registry.latest(event.subject)
        assert latest is not None and latest["schema"]["name"] == event.name
        assert registry.lookup(event.subject, event.schema) == latest["id"]


def test_incompatible_change_to_the_task_schema_is_refused_with_409(registry):
    event = catalog()["TaskSubmitted"]
    broken = copy.deepcopy(event.schema)
    broken["fields"].append({"name": "gpu_vendor", "type": "string", "doc": "required, no default"})
    assert registry.is_compatible(event.subject, broken) is False
    with pytest.raises(IncompatibleSchemaError) as info:
        registry.register(event.subject, broken)
    assert info.value.status == 409
    assert registry.latest(event.subject)["schema"] == event.schema or \
        registry.lookup(event.subject, event.schema) == registry.latest(event.subject)["id"]


def test_compatible_change_is_accepted_by_the_checker(registry):
    event = catalog()["TaskSubmitted"]
    extended = copy.deepcopy(event.schema)
    extended["fields"].append({"name": "team", "type": "string", "default": "", "doc": "has a default"})
    assert registry.is_compatible(event.subject, extended) is True
