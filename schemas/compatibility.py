"""BACKWARD_TRANSITIVE checks of the contract against its released versions.

A released version is a frozen copy of ``schemas/avro`` under ``schemas/released/vN``.
The current schema of each event must *read* data written with every released version
of it (BACKWARD, against all of them: TRANSITIVE). The checker is the ``avro`` package's
``ReaderWriterCompatibilityChecker``, the reference implementation's logic.
"""
from __future__ import annotations

from pathlib import Path

import avro.schema
from avro.compatibility import ReaderWriterCompatibilityChecker, SchemaCompatibilityType

from suanli.schemas.catalog import AVRO_DIR, event_schemas, released_versions


def check_backward_transitive(current_dir: Path = AVRO_DIR,
                              released: list[Path] | None = None) -> list[str]:
    """Every incompatibility between the schemas in ``current_dir`` and the released versions.

    Returns human-readable problems (empty when compatible). A released event that has
    disappeared from the current contract is a problem too: old data would be unreadable.
    """
    released = released_versions() if released is None else released
    current = event_schemas(current_dir)
    checker = ReaderWriterCompatibilityChecker()
    problems: list[str] = []
    for version_dir in released:
        for name, old in event_schemas(version_dir).items():
            new = current.get(name)
            if new is None:
                problems.append(f"{name}: released in {version_dir.name} but missing now")
                continue
            result = checker.get_compatibility(avro.schema.parse(new.canonical_json()),
                                               avro.schema.parse(old.canonical_json()))
            if result.compatibility is not SchemaCompatibilityType.compatible:
                detail = "; ".join(sorted(str(m) for m in getattr(result, "messages", []) or [])) or "incompatible"
                problems.append(f"{name}: cannot read data written with {version_dir.name}: {detail}"
                                f" (at {', '.join(sorted(map(str, result.locations)))})")
    return problems
