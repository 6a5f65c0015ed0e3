"""Plugin kit: entry-point discovery of third-party strategies, and the sandbox that
contains a crashing or looping one (the decision falls back and says why)."""
import sys
import textwrap

import pytest

from kit import Cell
from suanli.processors import strategies as S

GOOD = '''
"""acme-good: prefers the node with the most free CPU (a third-party test strategy)."""
import numpy as np
from suanli.processors.framework import Plugin, Profile, REGISTRY
from suanli.processors.plugins.basic import FILTERS
NAME, VERSION = "acme-good", "0.1"
class MostCpu(Plugin):
    name = "AcmeMostCpu"
    def score(self, ctx, rows):
        return ctx.state.cpu_free[rows].astype(float)
def build(config):
    return Profile([REGISTRY.create(f) for f in FILTERS], [(MostCpu(), 1.0)], tie_break="first")
'''
CRASH = GOOD.replace("acme-good", "acme-crash").replace(
    "return ctx.state.cpu_free[rows].astype(float)", "import os; os.abort()")
LOOP = GOOD.replace("acme-good", "acme-loop").replace(
    "return ctx.state.cpu_free[rows].astype(float)", "while True: pass")
SLEEP = GOOD.replace("acme-good", "acme-sleep").replace(
    "return ctx.state.cpu_free[rows].astype(float)", "import time; time.sleep(60)")
BUSY = GOOD.replace("acme-good", "acme-busy").replace(
    "return ctx.state.cpu_free[rows].astype(float)",
    "import time; t = time.process_time()\n        while time.process_time() - t < 0.6: pass\n"
    "        return ctx.state.cpu_free[rows].astype(float)")
HOG = GOOD.replace("acme-good", "acme-hog").replace(
    "return ctx.state.cpu_free[rows].astype(float)", "x = bytearray(4 << 30); return x")


@pytest.fixture(scope="module")
def fake_dist(tmp_path_factory):
    d = tmp_path_factory.mktemp("site")
    for mod, src in (("acme_good", GOOD), ("acme_crash", CRASH), ("acme_loop", LOOP), ("acme_sleep", SLEEP),
                     ("acme_hog", HOG), ("acme_busy", BUSY)):
        (d / f"{mod}.py").write_text(textwrap.dedent(src))
    info = d / "acme_strategies-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: acme-strategies\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(
        "[suanli.strategies]\nacme-good = acme_good\nacme-crash = acme_crash\nacme-loop = acme_loop\n"
        "acme-sleep = acme_sleep\nacme-hog = acme_hog\nacme-busy = acme_busy\n")
    sys.path.insert(0, str(d))
    added = S.discover()
    yield added
    sys.path.remove(str(d))
    for n in ("acme-good", "acme-crash", "acme-loop", "acme-sleep", "acme-hog", "acme-busy"):
        S.MODULES.pop(n, None)
        S.EXTERNAL.pop(n, None)
        sys.modules.pop(n.replace("-", "_"), None)


def test_entry_point_strategies_are_discovered_and_listed(fake_dist):
    assert {"acme-good", "acme-crash", "acme-loop"} <= set(fake_dist)
    assert "acme-good" in S.names()
    d = S.describe("acme-good")
    assert d["origin"] == "acme_good" and d["sandboxed"] == "true"
    assert S.discover() == []                  # idempotent


def test_builtin_names_cannot_be_overridden():
    class Fake:
        NAME, VERSION = "default", "9"

        @staticmethod
        def build(config):
            raise AssertionError
    with pytest.raises(ValueError):
        S.register(Fake)


def _cell(strategy, limits):
    c = Cell(strategy, {"sandbox": limits})
    c.node("small", cpu=8000)
    c.node("big", cpu=64000)
    return c


def test_sandboxed_strategy_scores_in_a_subprocess(fake_dist):
    c = _cell("acme-good", {"cpu_seconds": 5, "wall_seconds": 20})
    c.task("t", cpu=1000)
    p = c.placed("t")
    assert p["node_id"] == "big" and p["provenance"]["strategy"]["name"] == "acme-good"
    assert p["provenance"]["matched_rule"] is None


# The wall clock is generous except where it is the limit under test: on a loaded machine
# the child's start-up alone can take seconds of wall time (its CPU budget starts after it).
@pytest.mark.parametrize("name,wall,why", [
    ("acme-crash", 60, "strategy crashed: killed by signal 6"),
    ("acme-loop", 60, "(CPU limit)"),
    ("acme-sleep", 3, "wall-clock limit 3s exceeded"),
    ("acme-hog", 60, "strategy crashed: exit 1"),
])
def test_crashing_or_looping_strategy_is_contained(fake_dist, name, wall, why):
    c = _cell(name, {"cpu_seconds": 1, "wall_seconds": wall, "memory_mb": 512})
    c.task("t1", cpu=1000)
    p = c.placed("t1")
    assert p is not None, "scheduling must go on"
    prov = p["provenance"]
    assert prov["strategy"]["name"] == "default"                    # the cell's fallback strategy
    assert prov["matched_rule"].startswith(f"fallback: {name} failed in the sandbox (")
    assert why in prov["matched_rule"]
    assert any(line.startswith(f"fallback: {name} failed") for line in prov["path"])


def test_the_cpu_budget_is_the_strategys_not_the_start_up(fake_dist):
    """A strategy that spends 0.6 CPU s of its 1 CPU-second budget scores, although the
    child's own imports cost most of a CPU second before the strategy runs."""
    c = _cell("acme-busy", {"cpu_seconds": 1, "wall_seconds": 60})
    c.task("t", cpu=1000)
    p = c.placed("t")
    assert p["provenance"]["strategy"]["name"] == "acme-busy", p["provenance"]["matched_rule"]
