"""Every lifecycle fold in these tests checks its indexes against a walk of its tasks after
each input (``LifecycleView.check``): the scenarios here (placements, early statuses,
losses, preemptions, moves) are the cases the indexes must follow."""
from __future__ import annotations

import pytest

from suanli.projections.lifecycle import LifecycleView


@pytest.fixture(autouse=True)
def checked_lifecycle_indexes(monkeypatch):
    apply = LifecycleView.apply

    def apply_and_check(self, kind, payload):
        apply(self, kind, payload)
        self.check()

    monkeypatch.setattr(LifecycleView, "apply", apply_and_check)
