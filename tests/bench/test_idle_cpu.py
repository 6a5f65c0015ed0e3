"""``bench/idle_cpu.py`` on the real stack, small: an idle plane's every process is measured
(CPU figures are the benchmark's business, so nothing here asserts how low they are)."""
from __future__ import annotations

import csv

import pytest

from suanli.bench.idle_cpu import first_nodes, measure, report
from suanli.config import load_settings


def test_first_nodes_keeps_the_header_and_the_first_rows(tmp_path):
    src = tmp_path / "all.csv"
    src.write_text("sn,cpu_milli\na,1\nb,2\nc,3\n")
    out = first_nodes(src, 2, tmp_path / "two.csv")
    assert list(csv.reader(open(out))) == [["sn", "cpu_milli"], ["a", "1"], ["b", "2"]]


@pytest.mark.stack
@pytest.mark.timeout(300)
def test_an_idle_plane_is_measured_process_by_process(stack, tmp_path):
    nodes = first_nodes(load_settings().openb_dir / "openb_node_list_gpu_node.csv", 2, tmp_path / "nodes.csv")
    f = measure(nodes, settle_s=1.0, window_s=3.0)
    print(report(f))
    assert f["nodes"] == 2
    assert set(f["process_pct_of_one_core"]) == {"intake", "scheduler", "telemetry", "sim"}
    assert all(v >= 0 for v in f["process_pct_of_one_core"].values())
    assert 0 <= f["machine_busy_pct"] <= 100
