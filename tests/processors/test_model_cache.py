"""The model cache (processors/model_cache.py): LRU within capacity, vetoes, waste, JSON."""
from __future__ import annotations

import json

import pytest

from suanli.errors import ModelError
from suanli.processors.model_cache import PREWARM, TASK, ModelCache


def test_insert_evicts_least_recently_used_until_it_fits():
    c = ModelCache(100)
    assert c.insert("a", 40, now=1, ready_at=1) == []
    assert c.insert("b", 40, now=2, ready_at=2) == []
    c.touch("a", 3)                                       # b is now the least recent
    out = c.insert("c", 50, now=4, ready_at=4)
    assert [e.model_arch for e in out] == ["b"]
    assert sorted(c.entries) == ["a", "c"] and c.used_mib == 90 <= c.capacity_mib


def test_capacity_is_never_exceeded_and_too_large_is_refused():
    c = ModelCache(100)
    for i in range(20):
        c.insert(f"m{i}", 10 + (i * 7) % 50, now=i, ready_at=i)
        assert c.used_mib <= 100
    assert c.insert("huge", 101, now=99, ready_at=99) is None
    assert "huge" not in c.entries


def test_keep_vetoes_eviction_and_refuses_when_nothing_else_can_go():
    c = ModelCache(100)
    c.insert("a", 60, now=1, ready_at=1)
    c.insert("b", 30, now=2, ready_at=2)
    assert c.insert("c", 50, now=3, ready_at=3, keep=lambda arch, e: arch == "a") is None
    assert sorted(c.entries) == ["a", "b"]                 # unchanged
    out = c.insert("c", 40, now=3, ready_at=3, keep=lambda arch, e: arch == "a")
    assert [e.model_arch for e in out] == ["b"]


def test_unused_prewarm_evicted_counts_as_waste_and_a_use_clears_it():
    c = ModelCache(100)
    c.insert("p", 50, now=1, ready_at=5, via=PREWARM)
    c.insert("q", 40, now=2, ready_at=5, via=PREWARM)
    assert c.prewarmed_unused_mib() == 90
    assert c.touch("q", 3) and c.entries["q"].used and c.entries["q"].hits == 1
    c.insert("t", 60, now=4, ready_at=4, via=TASK)        # evicts p (LRU), never used
    assert c.wasted_mib == 50 and "q" in c.entries


def test_clear_empties_and_counts_waste():
    c = ModelCache(100)
    c.insert("p", 30, now=1, ready_at=1, via=PREWARM)
    c.insert("t", 30, now=1, ready_at=1)
    assert [e.model_arch for e in c.clear()] == ["p", "t"]
    assert c.entries == {} and c.wasted_mib == 30


def test_json_round_trip_is_exact():
    c = ModelCache(1000)
    c.insert("b", 300, now=7, ready_at=90, via=PREWARM)
    c.insert("a", 200, now=8, ready_at=8)
    c.touch("a", 9)
    doc = json.loads(json.dumps(c.to_json()))
    back = ModelCache.from_json(doc)
    assert back == c and back.to_json() == c.to_json()


def test_negative_size_is_an_error():
    with pytest.raises(ModelError):
        ModelCache(10).insert("x", -1, now=0, ready_at=0)


def test_an_order_picks_the_victims_and_keep_still_vetoes():
    c = ModelCache(100)
    c.insert("a@1", 40, 1, 1)
    c.insert("b@1", 40, 2, 2)
    newest = {"b@1"}
    order = lambda a, e: (a in newest, e.last_used, a)          # noqa: E731
    c.touch("a@1", 3)
    assert c.victims(50) == ["b@1"]                               # LRU
    assert c.victims(50, None, order) == ["a@1"]                  # the order first, recency after
    assert c.victims(50, lambda a, e: a == "a@1", order) == ["b@1"]


def test_task_loads_evict_superseded_versions_first_and_unused_prewarms_last():
    from suanli.processors import CellState
    from suanli.processors.model_cache import task_order

    s = CellState("t")
    assert task_order(s) is None                                  # no planner book: plain LRU
    s.prewarm = {"latest": {"a": "a@2", "b": "b@1", "c": "c@1"}}
    c = ModelCache(100)
    c.insert("c@1", 30, 1, 1, PREWARM)                            # prefetched, unused, oldest
    c.insert("a@1", 30, 5, 5)                                     # superseded by a@2
    c.insert("b@1", 30, 3, 3)
    assert c.victims(40) == ["c@1"]                               # LRU would waste the prefetch
    assert c.victims(40, None, task_order(s)) == ["a@1"]
    assert c.victims(70, None, task_order(s)) == ["a@1", "b@1"]
