"""The simulator's model loading: a dispatch with a model starts after the modelled load,
from the node's cache, a site peer or the origin; a PrewarmCommand fills the cache."""
from __future__ import annotations

import asyncio

import pytest

from suanli.connectors.kit import TaskReporter
from suanli.processors.model_loading import load_ms
from suanli.connectors.simulated import DEFAULT_NODES, SimulatedCluster

GIB = 1024


class Clock:
    """A hand-moved wall clock for the simulator (no sleeps)."""

    def __init__(self) -> None:
        self.ms = 1_000_000

    def __call__(self) -> int:
        return self.ms


@pytest.fixture(scope="module")
def base() -> SimulatedCluster:
    return SimulatedCluster(DEFAULT_NODES, cell="openb", model_cache_mib=100 * GIB, time_scale=0.0)


def _sim(base, time_scale=1.0):
    sim = SimulatedCluster.__new__(SimulatedCluster)
    sim.__dict__.update(base.__dict__)
    sim.time_scale = time_scale
    sim.caches = {n: type(c)(c.capacity_mib) for n, c in base.caches.items()}
    clock = Clock()
    sim.now_ms = clock
    return sim, clock


def _site_pair(sim):
    by_site: dict[str, list[str]] = {}
    for nid, n in sorted(sim.nodes.items()):
        by_site.setdefault(n["site"], []).append(nid)
    a, b = next(v for v in by_site.values() if len(v) >= 2)[:2]
    other = next(v for s, v in by_site.items() if s != sim.nodes[a]["site"])[0]
    return a, b, other


MODEL = {"model_arch": "llama@2", "artifact_uri": "s3://m", "size_mib": 14 * GIB}


def test_load_time_follows_where_the_model_is(base):
    sim, clock = _sim(base)
    a, b, other = _site_pair(sim)
    assert sim.nodes[a]["model_cache_mib"] == 100 * GIB
    src, s = sim.load_model(a, MODEL)
    assert src == "origin" and s == pytest.approx(load_ms(14 * GIB, "origin") / 1000)
    clock.ms += 10 ** 7                                   # long after: the load has ended
    assert sim.load_model(a, MODEL) == ("local", pytest.approx(load_ms(14 * GIB, "local") / 1000))
    assert sim.load_model(b, MODEL) == ("peer", pytest.approx(load_ms(14 * GIB, "peer") / 1000))
    assert sim.load_model(other, MODEL)[0] == "origin"


def test_a_load_in_flight_counts_what_is_left_of_it(base):
    sim, clock = _sim(base)
    a, b, _ = _site_pair(sim)
    sim.load_model(a, MODEL)
    clock.ms += 20_000
    src, s = sim.load_model(b, MODEL)
    left = load_ms(14 * GIB, "origin") - 20_000
    assert src == "peer" and s == pytest.approx((left + load_ms(14 * GIB, "peer")) / 1000)


def test_prewarm_fills_the_cache_then_a_dispatch_starts_from_it(base):
    sim, clock = _sim(base, time_scale=0.0)               # no wall time at all: instant loads
    a, _, _ = _site_pair(sim)
    asyncio.run(sim.prewarm({"node_id": a, "model_arch": "llama@2", "artifact_uri": "s3://m",
                             "size_mib": 14 * GIB}))
    e = sim.caches[a].entries["llama@2"]
    assert e.via == "prewarm" and not e.used
    command = {"dispatch_id": "d1", "task_id": "t1", "cell": "openb", "node_id": a, "connector": "sim",
               "cpu_milli": 1000, "memory_mib": 1024, "gpu_devices": [], "gpu_milli": 0,
               "duration_estimate_ms": 1000, "command": None, "model": MODEL}
    out: list[dict] = []

    async def emit(payload: dict) -> None:
        out.append(payload)

    asyncio.run(sim.execute(command, TaskReporter(command, sim.now_ms, emit)))
    running = next(p for p in out if p["status"] == "RUNNING")
    assert "model llama@2 from local" in running["message"]
    assert out[-1]["status"] == "COMPLETED" and sim.caches[a].entries["llama@2"].used
