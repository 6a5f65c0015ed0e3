"""The prewarm copy bench (bench/prewarm_copy.py) on a small file: what it measures, not how fast."""
from __future__ import annotations

import json

from suanli.bench.prewarm_copy import main, run, write_weights


def test_the_weights_file_is_random_and_not_sparse(tmp_path):
    made = write_weights(tmp_path / "w.bin", 3)
    assert made["bytes"] == 3 * 2**20 and not made["sparse"] and made["allocated_bytes"] >= made["bytes"]
    data = (tmp_path / "w.bin").read_bytes()
    assert data.count(0) < len(data) // 100                    # random, not zeros


def test_a_run_copies_cold_then_hits_and_starts_warmed_as_a_hit_and_cleans_up(tmp_path):
    result = run(size_mib=2, repeats=2, work_dir=tmp_path)
    assert list(tmp_path.iterdir()) == []                       # origin and caches deleted
    assert result["weights"]["bytes"] == 2 * 2**20 and result["repeats"] == 2 and len(result["rows"]) == 2
    for row in result["rows"]:
        assert row["outcomes"] == ["COMPLETED"] * 3
        assert row["messages"]["cold"].startswith("model bench-model-2m@1: copied 2 MiB from ")
        assert row["messages"]["hit"].startswith("model bench-model-2m@1: cache hit (")
        assert row["messages"]["warmed"].startswith("model bench-model-2m@1: cache hit (")
    assert set(result["median"]) == {"baseline_ms", "cold_ms", "hit_ms", "prewarm_ms", "warmed_ms"}
    assert result["ratios"]["cold_over_hit"] == round(result["median"]["cold_ms"] / result["median"]["hit_ms"], 1)
    assert "page cache" in result["page_cache"]


def test_the_command_line_prints_and_writes_the_figures(tmp_path, capsys):
    out = tmp_path / "out.json"
    assert main(["--size-mib", "1", "--repeats", "1", "--dir", str(tmp_path), "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "cold/warmed" in printed and "page cache" in printed
    assert json.loads(out.read_text())["weights"]["size_mib"] == 1
    assert [p.name for p in tmp_path.iterdir()] == ["out.json"]
