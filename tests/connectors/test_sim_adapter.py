"""The simulated cluster without services: node description, topology, durations, failures."""
from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path

import fastavro
import pytest

from suanli.connectors.kit import TaskReporter
from suanli.connectors.simulated import (DEFAULT_NODES, SimulatedCluster, _bucket, describe_node, fails, simulated_usage,
                                          scaled_duration_s, topology)
from suanli.errors import ConnectorError
from suanli.replay.openb import read_nodes
from suanli.schemas.catalog import catalog
from suanli.schemas.codec import parse_plain



def fits(kind: str, payload: dict) -> bool:
    schema = parse_plain(catalog()[kind].schema)
    return fastavro.validation.validate(payload, schema, raise_errors=True)


@pytest.fixture(scope="module")
def sim() -> SimulatedCluster:
    return SimulatedCluster(DEFAULT_NODES, cell="openb")


def test_describes_every_openb_node_with_its_gpus(sim):
    nodes = sim.discover()
    trace = {n["node_id"]: n for n in read_nodes(DEFAULT_NODES)}
    assert len(nodes) == 1523 == len(trace)
    for node in nodes:
        original = trace[node["node_id"]]
        assert [(a["model"], a["count"]) for a in node["accelerators"]] == \
            [(a["model"], a["count"]) for a in original["accelerators"]]
        assert (node["cpu_milli"], node["memory_mib"]) == (original["cpu_milli"], original["memory_mib"])
        assert node["connector"] == "sim" and node["cell"] == "openb" and node["registered_at"] > 0
    assert sum(a["count"] for n in nodes for a in n["accelerators"]) == 6212
    assert fits("NodeRegistered", nodes[0]) and fits("NodeRegistered", max(nodes, key=lambda n: len(n["accelerators"])))
    v100 = next(n for n in nodes if n["accelerators"] and n["accelerators"][0]["model"] == "V100M32")
    assert v100["accelerators"][0]["memory_mib"] == 32768


def test_topology_is_deterministic_nested_and_spread(sim):
    again = SimulatedCluster(DEFAULT_NODES, cell="openb")
    first, second = sim.discover(), again.discover()
    assert [(n["region"], n["zone"], n["site"], n["event_id"], n["price_per_hour"]) for n in first] == \
        [(n["region"], n["zone"], n["site"], n["event_id"], n["price_per_hour"]) for n in second]
    assert topology("openb-node-0000") == topology("openb-node-0000")
    for n in first:
        assert n["zone"].startswith(n["region"] + "-") and n["site"].startswith(n["zone"] + "-dc")
    zones = Counter(n["zone"] for n in first)
    assert len({n["region"] for n in first}) == 3 and len(zones) == 9 and len({n["site"] for n in first}) == 18
    assert min(zones.values()) > 1523 / 9 * 0.6  # a hash spreads nodes, it does not clump them


def test_registration_ids_are_content_addressed():
    node = read_nodes(DEFAULT_NODES)[0]
    assert describe_node(node, "sim")["event_id"] == describe_node(node, "sim")["event_id"]
    bigger = {**node, "cpu_milli": node["cpu_milli"] * 2}
    assert describe_node(bigger, "sim")["event_id"] != describe_node(node, "sim")["event_id"]
    assert describe_node(node, "sim2")["event_id"] != describe_node(node, "sim")["event_id"]


def test_duration_scaling():
    assert scaled_duration_s(60_000, 0.001, 1000) == pytest.approx(0.06)
    assert scaled_duration_s(None, 0.001, 5000) == pytest.approx(0.005)
    assert scaled_duration_s(3_600_000, 0.0, 1000) == 0.0
    assert scaled_duration_s(2000, 1.0, 1) == pytest.approx(2.0)


def test_failure_selection_is_seeded_and_proportional():
    ids = [f"task-{i}" for i in range(4000)]
    picked = [t for t in ids if fails(t, 0.25, seed=7)]
    assert picked == [t for t in ids if fails(t, 0.25, seed=7)]
    assert 0.22 < len(picked) / len(ids) < 0.28
    assert picked != [t for t in ids if fails(t, 0.25, seed=8)]
    assert not any(fails(t, 0.0) for t in ids) and all(fails(t, 1.0) for t in ids)
    # a larger fraction fails a superset: raising the knob never rescues a task
    assert set(picked) <= {t for t in ids if fails(t, 0.5, seed=7)}


def test_bad_options_are_refused(tmp_path: Path):
    with pytest.raises(ConnectorError):
        SimulatedCluster(tmp_path / "missing.csv")
    empty = tmp_path / "empty.csv"
    empty.write_text("sn,cpu_milli,memory_mib,gpu,model\n")
    with pytest.raises(ConnectorError, match="no nodes"):
        SimulatedCluster(empty)
    with pytest.raises(ConnectorError):
        SimulatedCluster(DEFAULT_NODES, fail_fraction=1.5)


def _command(task_id: str, node_id: str, duration_ms: int | None = 40_000, **extra) -> dict:
    return {"dispatch_id": f"d-{task_id}", "task_id": task_id, "cell": "openb", "node_id": node_id,
            "connector": "sim", "cpu_milli": 4000, "memory_mib": 2048, "gpu_devices": [], "gpu_milli": 0,
            "duration_estimate_ms": duration_ms, "command": None, **extra}


async def _execute(sim: SimulatedCluster, command: dict) -> list[dict]:
    out: list[dict] = []

    async def emit(payload: dict) -> None:
        out.append(payload)

    await sim.execute(command, TaskReporter(command, sim.now_ms, emit))
    return out


def test_a_task_runs_for_its_scaled_duration_then_completes(sim):
    gpu_node = next(n for n in sim.nodes.values() if sum(a["count"] for a in n["accelerators"]) >= 2)["node_id"]
    command = _command("ok-1", gpu_node, gpu_devices=[1], gpu_milli=500)
    assert sim.admit(command) is None

    async def scenario():
        run = asyncio.create_task(_execute(sim, command))
        await asyncio.sleep(0.01)
        # only the node's own metrics part: sampling all 1,523 nodes blocks the loop for ~1 s
        part = _bucket(gpu_node) % sim.metric_parts
        busy = next(p for kind, p in sim.metrics(1_000, 1, part, sim.metric_parts) if p["node_id"] == gpu_node)
        return await run, busy

    events, busy = asyncio.run(scenario())
    assert [e["status"] for e in events] == ["RUNNING", "COMPLETED"]
    assert [e["event_id"] for e in events] == ["d-ok-1:running", "d-ok-1:completed"]
    assert events[1]["exit_code"] == 0
    usage = events[1]["usage"]
    assert usage == simulated_usage(command, 40_000, sim.seed, sim._device_mib(gpu_node)) and usage["wall_ms"] == 40_000
    assert 0 < usage["cpu_seconds"] <= 160.0 and 0 < usage["max_rss_mib"] <= 2048 * 1.1
    assert 0 <= usage["gpu_util"] <= 1 and usage["gpu_memory_peak_mib"] > 0
    assert 0.03 <= (events[1]["at"] - events[0]["at"]) / 1000 < 10.0  # 40 s simulated at 0.001, not 40 s
    assert events[1]["message"] == "ran 40000 ms of simulated time (the estimate) in 0.040 s (time scale 0.001)"
    assert busy["node_id"] == gpu_node and busy["gpu_util"][1] == 0.5 and busy["gpu_util"][0] == 0.0
    assert busy["cpu_util"] > 4000 / sim.nodes[gpu_node]["cpu_milli"]
    assert not sim.running[gpu_node]


def test_selected_tasks_fail_and_unknown_nodes_are_refused():
    sim = SimulatedCluster(DEFAULT_NODES, fail_fraction=0.5, seed=3)
    node = next(iter(sim.nodes))
    failing = next(f"t{i}" for i in range(100) if fails(f"t{i}", 0.5, 3))
    events = asyncio.run(_execute(sim, _command(failing, node, duration_ms=None)))
    assert [e["status"] for e in events] == ["RUNNING", "FAILED"] and events[1]["exit_code"] == 1
    assert "simulated failure" in events[1]["message"] and "(default)" in events[1]["message"]
    assert "not in the simulated cluster" in sim.admit(_command("x", "no-such-node"))


def test_monitor_covers_every_node_and_fits_the_contract(sim):
    events = sim.monitor(1_700_000_000_000, 42)
    assert len(events) == 2 * 1523
    assert Counter(kind for kind, _ in events) == {"NodeHeartbeat": 1523, "NodeMetrics": 1523}
    hb, metrics = events[0][1], events[1][1]
    assert hb["seq"] == 42 and hb["event_id"] == f"sim/{hb['node_id']}/hb/42"
    assert fits("NodeHeartbeat", hb) and fits("NodeMetrics", metrics)
    assert all(0.0 <= p["cpu_util"] <= 1.0 for _, p in events if "cpu_util" in p)
    assert sim.monitor(1_700_000_000_000, 42) == events  # seeded, not random


def test_heartbeats_and_metrics_are_separate_and_silenced_nodes_send_neither():
    sim = SimulatedCluster(DEFAULT_NODES, cell="openb")
    beats = sim.heartbeats(1_700_000_000_000, 7)
    assert len(beats) == 1523 and {k for k, _ in beats} == {"NodeHeartbeat"}
    assert beats[0][1] == {"event_id": f"sim/{beats[0][1]['node_id']}/hb/7", "node_id": beats[0][1]["node_id"],
                           "cell": "openb", "seq": 7, "at": 1_700_000_000_000} and fits("NodeHeartbeat", beats[0][1])
    quiet = sorted(sim.nodes)[:3]
    assert sim.control({"action": "silence", "nodes": quiet}) == {
        "action": "silence", "nodes": quiet, "silenced": quiet, "running": {n: [] for n in quiet}}
    assert {p["node_id"] for _, p in sim.heartbeats(1, 8)} == set(sim.nodes) - set(quiet)
    metrics = sim.metrics(1, 8)
    assert len(metrics) == 1520 and {k for k, _ in metrics} == {"NodeMetrics"}
    assert not set(quiet) & {p["node_id"] for _, p in sim.monitor(1, 8)}
    assert sim.control({"action": "restore", "nodes": quiet[:1]})["silenced"] == quiet[1:]
    assert sim.control({"action": "restore"})["nodes"] == quiet[1:] and sim.silenced == set()
    assert sim.control({"action": "status"})["silenced"] == []
    with pytest.raises(ConnectorError, match="no such node"):
        sim.control({"action": "silence", "nodes": ["nowhere"]})
    with pytest.raises(ConnectorError, match="unknown control action"):
        sim.control({"action": "explode"})


def test_silencing_a_count_draws_busy_nodes_with_long_work_first_seeded():
    sim = SimulatedCluster(DEFAULT_NODES, cell="openb", time_scale=0.001)
    ids = sorted(sim.nodes)
    long_work, short_work = ids[10:16], ids[20:30]          # 60 s vs 1 s of wall time left

    async def scenario():
        runs = [asyncio.create_task(_execute(sim, _command(f"long-{n}", n, duration_ms=60_000_000))) for n in long_work]
        runs += [asyncio.create_task(_execute(sim, _command(f"short-{n}", n, duration_ms=1_000_000)))
                 for n in short_work]
        await asyncio.sleep(0.05)
        first = sim.silence(count=4, seed=5, busy_for_s=30)
        sim.restore()
        again = sim.silence(count=4, seed=5, busy_for_s=30)
        sim.restore()
        spill = sim.silence(count=12, seed=5, busy_for_s=30)     # 6 long, then 6 of the short ones
        sim.restore()
        everyone_busy = sim.silence(count=20, seed=1)            # 16 busy nodes, then 4 idle ones
        for node in ids[10:30]:
            for command in list(sim.running.get(node, {}).values()):
                assert await sim.stop(command["task_id"], node, "end of the test")
        await asyncio.gather(*runs)
        return first, again, spill, everyone_busy

    first, again, spill, everyone_busy = asyncio.run(scenario())
    assert first == again and set(first) <= set(long_work) and len(first) == 4
    assert set(long_work) <= set(spill) and len(set(spill) & set(short_work)) == 6
    assert len(everyone_busy) == 20 and set(long_work + short_work) <= set(everyone_busy)


def test_a_stop_ends_the_simulated_run_as_failed_and_nothing_more():
    sim = SimulatedCluster(DEFAULT_NODES, cell="openb", time_scale=0.001)
    node = sorted(sim.nodes)[0]

    async def scenario():
        run = asyncio.create_task(_execute(sim, _command("stale", node, duration_ms=60_000_000)))
        await asyncio.sleep(0.05)
        assert not await sim.stop("stale", "another-node", "wrong node")
        assert not await sim.stop("other-task", node, "wrong task")
        assert await sim.stop("stale", node, "stale copy: the task is placed on n2")
        return await asyncio.wait_for(run, 2)

    events = asyncio.run(scenario())
    assert [e["status"] for e in events] == ["RUNNING", "FAILED"]
    failed = events[1]
    assert failed["exit_code"] is None and failed["event_id"] == "d-stale:failed"
    assert failed["message"].startswith("stopped by the scheduler: stale copy: the task is placed on n2 (after ")
    assert 0 < failed["usage"]["wall_ms"] < 60_000_000 and not sim.running[node] and not sim._stops


def test_metrics_come_in_fifteen_stable_parts_that_cover_every_node_once():
    sim = SimulatedCluster(DEFAULT_NODES, cell="openb")
    assert sim.metric_parts == 15
    parts = [[p["node_id"] for _, p in sim.metrics(1_000 + i, 3, i, 15)] for i in range(15)]
    ids = [n for part in parts for n in part]
    assert sorted(ids) == sorted(sim.nodes) and len(set(ids)) == 1523
    assert all(60 <= len(part) <= 150 for part in parts)                 # about 100 nodes a part
    assert [p["node_id"] for _, p in sim.metrics(9_999, 4, 2, 15)] == parts[2]   # the same split every time
    assert len(sim.metrics(1, 1)) == 1523                                 # parts=1: every node


def test_a_restored_node_restates_what_it_runs():
    sim = SimulatedCluster(DEFAULT_NODES, cell="openb", time_scale=0.001)
    node, other = sorted(sim.nodes)[:2]

    async def scenario():
        out: list[dict] = []

        async def emit(payload: dict) -> None:
            out.append(payload)

        commands = [_command("back", node, duration_ms=60_000_000), _command("there", other, duration_ms=60_000_000)]
        runs = [asyncio.create_task(sim.execute(c, TaskReporter(c, sim.now_ms, emit))) for c in commands]
        await asyncio.sleep(0.05)
        sim.silence([node, other])
        assert sim.control({"action": "restore", "nodes": [node]})["nodes"] == [node]
        await asyncio.sleep(0.05)
        for c in commands:
            await sim.stop(c["task_id"], c["node_id"], "end of the test")
        await asyncio.gather(*runs)
        await sim.aclose()
        return out

    out = asyncio.run(scenario())
    trail = [(e["task_id"], e["event_id"], e["status"]) for e in out]
    assert ("back", "d-back:running-resync1", "RUNNING") in trail
    assert not any("resync" in eid for t, eid, _ in trail if t == "there")     # still silenced: says nothing new
    resync = next(e for e in out if e["event_id"] == "d-back:running-resync1")
    assert fits("TaskStatusChanged", resync) and "reconnected" in resync["message"]


def test_simulated_usage_is_a_kind_of_its_own_varied_per_run():
    a = {"task_id": "a", "cpu_milli": 4000, "memory_mib": 8192, "gpu_devices": [0], "gpu_milli": 500}
    b = dict(a, task_id="b")
    other = dict(a, task_id="c", cpu_milli=2000)
    ua, ub, uc = (simulated_usage(c, 60_000, seed=1) for c in (a, b, other))
    assert ua == simulated_usage(a, 60_000, seed=1)                     # deterministic
    assert ua != ub                                                      # runs vary ...
    ratio = ua["cpu_seconds"] / ub["cpu_seconds"]
    assert 0.8 / 1.2 <= ratio <= 1.2 / 0.8                               # ... around their kind's load
    assert uc["cpu_seconds"] / 120 != ua["cpu_seconds"] / 240            # another kind, another load
    assert "gpu_util" not in simulated_usage(dict(a, gpu_devices=[]), 60_000)
