"""bench/profile_cost.py: what it measures (figures are not asserted: benchmarks print them)."""
from __future__ import annotations

import json

from suanli.bench import profile_cost


def test_every_arm_is_measured_against_1_3_0_in_the_same_run(tmp_path, capsys):
    out = tmp_path / "cost.json"
    assert profile_cost.main(["--nodes", "40", "--tasks", "30", "--rounds", "1", "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc["command"].endswith(f"--json {out}")
    assert set(doc["arms"]) == set(profile_cost.ARMS)
    assert doc["arms"]["default 1.3.0"]["ratio_to_1.3.0"] == 1.0
    assert all(a["decisions_per_s"] > 0 and len(a["per_round"]) == 1 for a in doc["arms"].values())
    assert "1.5.0 + profiles" in capsys.readouterr().out


def test_the_profiles_arm_really_profiles():
    from suanli.processors import CellState, decide
    from suanli.processors.model import PolicyChanged
    state = CellState("bench")
    decide(state, PolicyChanged.of("bench", "default", profile_cost.ARMS["1.5.0 + profiles"], event_id="p"),
           (profile_cost.LOG, 0, 0))
    from suanli.processors.core import profiler_of
    assert profiler_of(state) is not None
