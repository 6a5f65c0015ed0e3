"""``bench/produce_linger.py`` runs its three ways on the real broker and reports every record
of each (the figures themselves are the bench's output, not checked here)."""
from __future__ import annotations

import pytest

from suanli.bench import produce_linger

pytestmark = pytest.mark.stack


def test_each_way_reads_back_every_record_it_sent(stack):
    figures = produce_linger.run(stack.bootstrap_servers, records=20, rate=200.0, runs=1)
    assert list(figures["ms"]) == list(produce_linger.WAYS)
    for way, ms in figures["ms"].items():
        assert ms["count"] == 20, way
        assert 0 <= ms["p50"] <= ms["p90"] <= ms["p99"] <= ms["max"], (way, ms)
