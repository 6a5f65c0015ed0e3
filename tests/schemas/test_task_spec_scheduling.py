"""The scheduling tier (C5) in the human task form."""
import pytest

from suanli.errors import ValidationError
from suanli.schemas.task_spec import task_from_document

BASE = {"resources": {"cpu": 1, "memory": "1Gi"}}


@pytest.mark.parametrize("tier", ["urgent", "normal", "batch", "URGENT"])
def test_scheduling_becomes_the_label(tier):
    assert task_from_document({**BASE, "scheduling": tier}, 0)["labels"] == {"scheduling": tier.lower()}


def test_unknown_or_contradicting_scheduling_is_refused_with_what_to_fix():
    with pytest.raises(ValidationError, match="urgent, normal or batch"):
        task_from_document({**BASE, "scheduling": "asap"}, 0)
    with pytest.raises(ValidationError, match="contradicts"):
        task_from_document({**BASE, "scheduling": "urgent", "labels": {"scheduling": "batch"}}, 0)
