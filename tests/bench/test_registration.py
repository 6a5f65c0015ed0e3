"""bench/registration.py: the figures are produced, the restore is checked, the CLI writes
its JSON (nothing about speed)."""
import json

from suanli.bench.registration import main, registration_seconds


def test_registration_figures_are_produced_for_a_small_cell():
    r = registration_seconds(40, tasks=30)
    assert r["nodes"] == 40 and r["tasks"] == 30
    assert r["register_seconds"] > 0 and r["restore_seconds"] > 0
    assert r["register_us_per_node"] > 0 and r["restore_us_per_node"] > 0


def test_the_cli_prints_a_row_per_size_and_writes_the_json(tmp_path, capsys):
    out = tmp_path / "r.json"
    assert main(["--nodes", "10", "20", "--tasks", "5", "--json", str(out)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2 and "10 nodes: register" in lines[0]
    figures = json.loads(out.read_text())
    assert [row["nodes"] for row in figures["rows"]] == [10, 20]
    assert figures["command"].endswith(f"--json {out}")
