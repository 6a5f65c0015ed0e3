"""Benchmarks: `suanli bench` measures and prints; it asserts nothing about speed."""
from __future__ import annotations

import json
from typing import Any, Optional


def save(path: Optional[str], figures: Any) -> None:
    """Write ``figures`` as indented JSON to ``path`` (a bench's ``--json``); nothing when None."""
    if path:
        with open(path, "w") as f:
            json.dump(figures, f, indent=1)
