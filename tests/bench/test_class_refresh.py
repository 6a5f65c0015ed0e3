"""bench/class_refresh.py: the figures are produced and the CLI writes its JSON (nothing about speed)."""
import json

from suanli.bench.class_refresh import main, refresh_us


def test_refresh_figures_are_produced_for_a_small_cell():
    r = refresh_us(30, changes=20)
    assert r["nodes"] == 30 and r["changes"] == 20 and r["allocate_us"] > 0


def test_the_cli_prints_a_row_per_size_and_writes_the_json(tmp_path, capsys):
    out = tmp_path / "n.json"
    assert main(["--nodes", "10", "20", "--changes", "5", "--json", str(out)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2 and "10 nodes: refresh after one change" in lines[0]
    figures = json.loads(out.read_text())
    assert [row["nodes"] for row in figures["rows"]] == [10, 20]
    assert figures["command"].endswith(f"--json {out}")
