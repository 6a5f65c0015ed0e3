"""``suanli profile``: rendering a profile the core made (no services)."""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "processors"))

from core_helpers import Feed  # noqa: E402

from suanli.cli_profile import latest_profile, render_profile  # noqa: E402


def test_render_groups_every_dimension_with_its_meaning() -> None:
    f = Feed(config={"seed": 1, "profiles": {"enabled": True}})
    f.node("n1")
    f.task("a", cpu=2000, at=1)
    decisions = [(k, d) for k, d in f.outputs]
    prof = latest_profile(decisions)
    assert prof is not None and prof["req_cpu_cores"] == 2.0
    text = render_profile("a", prof)
    assert text.startswith("task a: signature ")
    for group in ("declared:", "learnt:", "live:", "cell:", "derived:"):
        assert f"  {group}" in text
    line = next(x for x in text.splitlines() if x.strip().startswith("req_cpu_cores"))
    assert "2" in line and "CPU cores requested" in line
    assert "  other:" not in text, text       # every field's doc names its group


def test_no_profile_when_profiles_are_off() -> None:
    f = Feed()
    f.node("n1")
    f.task("a", at=1)
    assert latest_profile([(k, d) for k, d in f.outputs]) is None


def test_explain_and_audit_why_show_the_notes_and_a_profile_line() -> None:
    from suanli.processors.explain import render_text
    from suanli.projections.audit import entry, render_why
    f = Feed(config={"seed": 1, "profiles": {"enabled": True}})
    f.node("n1")
    f.task("a", at=1)
    decisions = [(k, d) for k, d in f.outputs]
    kind, payload = decisions[-1]
    payload["provenance"]["notes"] = ["model m@1 cached on n1: saves ~3 s of load from origin"]
    text = render_text("a", decisions)
    assert "note:     model m@1 cached on n1" in text and "profile:  predicted" in text
    row = entry(kind, payload, ("t.decisions", 0, 7))
    why = render_why({"task_id": "a", "tenant": "t", "cell": "test", "outcome": "placed", "node_id": "n1",
                      "decisions": [row]})
    assert "   note: model m@1 cached on n1" in why and "   profile: predicted" in why
