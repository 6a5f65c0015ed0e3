"""A short API flood on the real stack (bench/api_abuse.py with the Go generator of
bench/flood): garbage and oversized bodies get 4xx answers, never a 5xx; every valid
request is answered 2xx; the API still answers afterwards. The figures (rate, latency,
memory) are the benchmark's business: this test checks only what must always hold."""
from __future__ import annotations

import pytest

from suanli.bench.api_abuse import run_once

pytestmark = pytest.mark.stack


def test_a_flood_of_garbage_gets_only_4xx_and_valid_requests_still_succeed(stack, tmp_path):
    figures = run_once(rate=1500, duration=6, workers=16, valid_rate=10, log_dir=tmp_path)
    garbage, valid = figures["garbage"], figures["valid"]
    assert garbage["sent"] > 0 and garbage["5xx"] == 0, figures
    codes = {int(c) for c in garbage["by_status"]}
    assert codes and all(400 <= c < 500 for c in codes), figures
    assert {401, 413} <= codes, figures           # made-up tokens, and bodies over the cap
    assert valid["sent"] > 0 and valid["5xx"] == 0 and not valid["transport_errors"], figures
    assert {int(c) for c in valid["by_status"]} <= {200, 202}, figures
    assert figures["api"]["alive_after"] is True, figures
    log = (tmp_path / figures["api"]["log"].rsplit("/", 1)[-1]).read_text()
    assert "Traceback" not in log, log[-3000:]
