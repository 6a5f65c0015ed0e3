"""`suanli bench --quick` produces every figure (it asserts nothing about speed)."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from suanli.bench.suite import check_complete, markdown

pytestmark = pytest.mark.stack


def test_quick_bench_produces_every_figure(stack, tmp_path):
    out = tmp_path / "bench.json"
    run = subprocess.run([sys.executable, "-m", "suanli", "bench", "--quick", "--json", str(out)],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    result = json.loads(out.read_text())
    assert check_complete(result) == []
    table = markdown(result)
    for figure in ("E2E sustained placements/s", "latency p50 / p95 / p99", "core decisions/s",
                   "replay events/s", "one FGD-protocol experiment"):
        assert figure in table
    assert "| core decisions/s" in run.stdout
