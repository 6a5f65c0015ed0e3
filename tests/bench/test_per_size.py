"""bench/per_size.py: the command line of the benches measured per cell size prints a row
per size and writes the JSON with its command (nothing about speed)."""
import json

import pytest

from suanli.bench import class_refresh, registration


@pytest.mark.parametrize("main,option,line", [
    (registration.main, ["--tasks", "5"], "10 nodes: register"),
    (class_refresh.main, ["--changes", "5"], "10 nodes: refresh after one change"),
])
def test_the_cli_prints_a_row_per_size_and_writes_the_json(main, option, line, tmp_path, capsys):
    out = tmp_path / "r.json"
    assert main(["--nodes", "10", "20", *option, "--json", str(out)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2 and line in lines[0]
    figures = json.loads(out.read_text())
    assert [row["nodes"] for row in figures["rows"]] == [10, 20]
    assert figures["command"].endswith(f"--json {out}")
