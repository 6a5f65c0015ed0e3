"""The load-time model (processors/model_loading.py)."""
from __future__ import annotations

import pytest

from suanli.processors.model_loading import LINKS, load_ms, saved_ms, source_for


def test_load_time_is_latency_plus_size_over_bandwidth():
    for source, link in LINKS.items():
        assert load_ms(0, source) == round(link.latency_ms)
        assert load_ms(1100, source) == round(link.latency_ms + 1100 / link.mib_per_s * 1000)


def test_local_beats_peer_beats_origin_for_every_size():
    for size in (1024, 7 * 1024, 70 * 1024):
        assert load_ms(size, "local") < load_ms(size, "peer") < load_ms(size, "origin")
        assert saved_ms(size, "origin") == 0 < saved_ms(size, "peer") < saved_ms(size, "local")


def test_source_for_prefers_the_nearest_copy():
    assert source_for(True, ["n2"]) == "local"
    assert source_for(False, ["n2"]) == "peer"
    assert source_for(False, []) == "origin"


def test_unknown_source_is_refused():
    with pytest.raises(KeyError):
        load_ms(10, "tape")
