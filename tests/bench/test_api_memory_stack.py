"""The API memory bench (bench/api_memory_stack.py): its pure helpers, and a short run on
the real stack, where a plane runs openb tasks to completion and two real API processes
follow it, one forgetting and one keeping all. The RSS figures are the benchmark's
business; this checks what must hold: both folded every task, the one that forgets keeps
about its setting's worth of finished tasks and has tombstones of the rest, the other keeps
all, and the figures are read where the folds passed each level."""
from __future__ import annotations

import pytest

from suanli.bench.api_memory_stack import at_levels, per_task, run


def _sample(finished: int, forgotten: int, rss: int, kept: int | None = None) -> dict[str, float]:
    return {"kept": kept if kept is not None else finished + 5, "finished": finished, "forgotten": forgotten,
            "rss_bytes": rss}


def test_levels_are_read_where_the_fold_first_had_read_so_many_finished_tasks():
    samples = [_sample(0, 0, 100), _sample(40, 0, 150), _sample(60, 50, 300), _sample(20, 200, 320)]
    rows = at_levels(samples, [50, 100, 200, 500])
    assert [(r["level"], r["finished_read"], r["rss_bytes"]) for r in rows] == [(50, 110, 300), (100, 110, 300),
                                                                                 (200, 220, 320)]
    # from the first level's sample (110 read, 300 bytes) to the last (220 read, 320 bytes)
    assert per_task(rows[0], samples[-1]) == round(20 / 110)
    assert per_task(None, samples[-1]) is None and per_task(rows[-1], samples[-1]) is None


@pytest.mark.stack
def test_a_short_run_follows_a_real_plane_with_two_real_apis(stack):
    doc = run(tasks=800, keep=100, levels=[200, 600], every=0.5, rate=200)
    assert doc["plane"]["completed"] == 800, doc["plane"]
    forgets, keeps_all = doc["arms"]["keeps 100"], doc["arms"]["keeps all"]
    assert forgets["end"]["finished"] <= 100 + 100 // 8 + 1 and forgets["end"]["forgotten"] >= 800 - 113, forgets
    assert forgets["end"]["kept"] + forgets["end"]["forgotten"] == 800
    assert keeps_all["end"] == {**keeps_all["end"], "kept": 800, "finished": 800, "forgotten": 0}, keeps_all
    for arm in (forgets, keeps_all):
        assert [r["level"] for r in arm["levels"]] == [200, 600] and arm["samples"] >= 2, arm
        assert all(r["finished_read"] >= r["level"] and r["rss_mib"] > 50 for r in arm["levels"]), arm
