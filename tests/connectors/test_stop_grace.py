"""StopCommand.grace_ms through the kit, the local connector (real processes) and the simulator.

No services. The local tests tell the grace apart by what the process does, never by how
long things took: a process that ignores SIGTERM can only end by SIGKILL; a process that
handles SIGTERM and then waits for a file the test writes can only exit by itself if it was
given a grace long enough for the test to see its handler run.
"""
from __future__ import annotations

import asyncio
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import fastavro
import pytest

from suanli.connectors.kit import Adapter, ConnectorRunner, TaskReporter, accepts_grace
from suanli.connectors.launch import _adapter_from_args, _parser
from suanli.connectors.local_process import LocalProcesses
from suanli.connectors.simulated import (DEFAULT_NODES, IDLE_PRICE_SHARE, PRICING, SimulatedCluster, describe_node,
                                          gold_pool)
from suanli.errors import ConnectorError
from suanli.replay.openb import read_nodes
from suanli.schemas.catalog import catalog
from suanli.schemas.codec import parse_plain

PY = sys.executable


async def _wait_for(what: str, probe, timeout: float = 30.0) -> Any:
    """Poll ``probe`` until truthy (a condition, not a duration); fail with ``what``."""
    deadline = time.monotonic() + timeout
    while not (value := probe()):
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)
    return value


# ------------------------------------------------------------------ local processes
def _local_command(argv: list[str], i: str) -> dict:
    return {"dispatch_id": f"d{i}", "task_id": f"t{i}", "cell": "local", "node_id": "grace-node",
            "connector": "local", "cpu_milli": 100, "memory_mib": 64, "gpu_devices": [], "gpu_milli": 0,
            "command": argv, "duration_estimate_ms": None}


def _trap(tmp: Path, *, on_term: str) -> list[str]:
    """A process that installs its SIGTERM behaviour, says so in ``ready``, then sleeps.

    ``on_term``: ``ignore`` (SIG_IGN), ``default`` (dies of SIGTERM), or ``wait`` (writes
    ``got-term``, then waits for ``release`` and exits 7).
    """
    code = f"""
import os, signal, sys, time
tmp = {str(tmp)!r}
def handler(signum, frame):
    open(os.path.join(tmp, "got-term"), "w").close()
    while not os.path.exists(os.path.join(tmp, "release")):
        time.sleep(0.01)
    sys.exit(7)
mode = {on_term!r}
if mode == "ignore":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
elif mode == "wait":
    signal.signal(signal.SIGTERM, handler)
open(os.path.join(tmp, "ready"), "w").close()
time.sleep(600)
"""
    return [PY, "-c", code]


async def _run_and_stop(local: LocalProcesses, argv: list[str], tmp: Path, grace_ms: int | None,
                        after_stop=None) -> dict:
    """Start ``argv``, wait until it is ready, stop it with ``grace_ms``; the final status."""
    command = _local_command(argv, tmp.name)
    out: list[dict] = []

    async def emit(payload: dict) -> None:
        out.append(payload)

    assert local.admit(command) is None
    run = asyncio.create_task(local.execute(command, TaskReporter(command, local.now_ms, emit)))
    await _wait_for("the process to install its SIGTERM behaviour", (tmp / "ready").exists)
    assert await local.stop(command["task_id"], "grace-node", "preempted by gold-1", grace_ms=grace_ms)
    if after_stop is not None:
        await after_stop()
    await asyncio.wait_for(run, 60)
    await local.aclose()
    assert [e["status"] for e in out] == ["RUNNING", out[-1]["status"]] and len(out) == 2
    assert not local.pids and not local._commands and not local._grace_s and not local._escalated
    return out[-1]


def test_a_sigterm_ignoring_process_is_killed_by_sigkill_when_its_grace_is_over(tmp_path):
    local = LocalProcesses(cell="local", node_id="grace-node", kill_grace_s=600.0)   # the default would wait
    final = asyncio.run(_run_and_stop(local, _trap(tmp_path, on_term="ignore"), tmp_path, grace_ms=200))
    assert final["status"] == "FAILED" and final["exit_code"] == -9
    assert final["message"] == ("stopped by the scheduler: preempted by gold-1; killed by SIGKILL "
                                "(SIGTERM not obeyed within the 0.2 s grace)")


def test_the_stop_commands_grace_replaces_the_connectors_default(tmp_path):
    # kill_grace_s=0 would SIGKILL at once; the stop's grace lets the handler finish its work.
    local = LocalProcesses(cell="local", node_id="grace-node", kill_grace_s=0.0)

    async def release() -> None:
        await _wait_for("the SIGTERM handler to run", (tmp_path / "got-term").exists)
        (tmp_path / "release").touch()

    final = asyncio.run(_run_and_stop(local, _trap(tmp_path, on_term="wait"), tmp_path, grace_ms=600_000,
                                      after_stop=release))
    assert final["status"] == "FAILED" and final["exit_code"] == 7
    assert final["message"] == "stopped by the scheduler: preempted by gold-1; exited with code 7"


def test_without_a_grace_the_connectors_kill_grace_applies(tmp_path):
    # grace_ms None: kill_grace_s (0 here) -> SIGKILL right after SIGTERM; the handler never
    # gets its release, so exit 7 is impossible.
    local = LocalProcesses(cell="local", node_id="grace-node", kill_grace_s=0.0)
    final = asyncio.run(_run_and_stop(local, _trap(tmp_path, on_term="wait"), tmp_path, grace_ms=None))
    assert final["status"] == "FAILED" and final["exit_code"] == -9
    assert "killed by SIGKILL (SIGTERM not obeyed within the 0 s grace)" in final["message"]


def test_a_process_that_obeys_sigterm_exits_on_it_within_a_long_grace(tmp_path):
    local = LocalProcesses(cell="local", node_id="grace-node", kill_grace_s=0.0)
    final = asyncio.run(_run_and_stop(local, _trap(tmp_path, on_term="default"), tmp_path, grace_ms=600_000))
    assert final["status"] == "FAILED" and final["exit_code"] == -15
    assert final["message"] == "stopped by the scheduler: preempted by gold-1; killed by SIGTERM"


# ------------------------------------------------------------------ the kit passes it through
class _Recorder(Adapter):
    name, cell = "rec", "c"

    def __init__(self) -> None:
        self.stops: list[tuple] = []

    def discover(self):
        return []

    def monitor(self, at, seq):
        return []

    def admit(self, command):
        return None

    async def execute(self, command, report):
        await report.running()
        while True:
            await asyncio.sleep(3600)


class _WithGrace(_Recorder):
    async def stop(self, task_id, node_id, reason, grace_ms=None):
        self.stops.append((task_id, node_id, reason, grace_ms))
        return False                   # the runner then cancels the run


class _Legacy(_Recorder):
    async def stop(self, task_id, node_id, reason):   # written before StopCommand had a grace
        self.stops.append((task_id, node_id, reason))
        return False


class _Kwargs(_Recorder):
    async def stop(self, task_id, node_id, reason, **extra):
        self.stops.append((task_id, node_id, reason, extra))
        return False


def _stop_through_runner(adapter: _Recorder, grace_ms: int | None) -> list[dict]:
    runner = ConnectorRunner(adapter, codec=None, bootstrap="127.0.0.1:1", partitions=1, namespace="ns1")
    sent: list[dict] = []

    async def emit(payload: dict) -> None:
        sent.append(payload)

    runner._emit_status = emit
    command = {"dispatch_id": "c/1", "task_id": "v", "cell": "c", "node_id": "n1", "connector": "rec"}
    stop = {"event_id": "s", "task_id": "v", "cell": "c", "node_id": "n1", "connector": "rec",
            "reason": "preempted by g", "issued_at": 1, "grace_ms": grace_ms}

    async def scenario():
        run = asyncio.create_task(runner._run(command))
        await _wait_for("the run to report RUNNING", lambda: sent)
        await runner._stop_command(stop)
        await asyncio.wait_for(run, 10)

    asyncio.run(scenario())
    return sent


def test_the_runner_passes_the_grace_to_an_adapter_that_takes_it():
    adapter = _WithGrace()
    sent = _stop_through_runner(adapter, 30_000)
    assert adapter.stops == [("v", "n1", "preempted by g", 30_000)]
    assert [(p["status"], p["message"]) for p in sent] == [("RUNNING", ""),
                                                          ("FAILED", "stopped by the scheduler: preempted by g")]
    _stop_through_runner(adapter, None)
    assert adapter.stops[-1] == ("v", "n1", "preempted by g", None)       # null: the adapter's own default
    _stop_through_runner(adapter, -5)
    assert adapter.stops[-1] == ("v", "n1", "preempted by g", 0)          # never negative: at once


def test_adapters_with_the_old_three_argument_stop_keep_working():
    legacy, kwargs = _Legacy(), _Kwargs()
    assert not accepts_grace(legacy.stop) and accepts_grace(kwargs.stop) and accepts_grace(_WithGrace().stop)
    assert accepts_grace(Adapter.stop)
    sent = _stop_through_runner(legacy, 30_000)
    assert legacy.stops == [("v", "n1", "preempted by g")] and sent[-1]["status"] == "FAILED"
    _stop_through_runner(kwargs, 0)
    assert kwargs.stops == [("v", "n1", "preempted by g", {"grace_ms": 0})]


# ------------------------------------------------------------------ the simulator
def _sim_command(task: str, dispatch: str, node_id: str, duration_ms: int) -> dict:
    return {"dispatch_id": dispatch, "task_id": task, "tenant": "t", "cell": "openb", "node_id": node_id,
            "connector": "sim", "gpu_devices": [], "gpu_milli": 0, "cpu_milli": 2000, "memory_mib": 1024,
            "command": None, "duration_estimate_ms": duration_ms}


@pytest.fixture(scope="module")
def sim() -> SimulatedCluster:
    return SimulatedCluster(DEFAULT_NODES, cell="openb", time_scale=0.001)


def test_the_simulated_grace_keeps_the_copy_running_until_it_ends_or_a_shorter_stop(sim):
    node = sorted(sim.nodes)[3]
    command = _sim_command("victim", "d-victim", node, 60_000_000)
    out: list[dict] = []

    async def emit(payload: dict) -> None:
        out.append(payload)

    async def scenario():
        run = asyncio.create_task(sim.execute(command, TaskReporter(command, sim.now_ms, emit)))
        await _wait_for("RUNNING", lambda: out)
        # One simulated hour of grace is 3.6 s of wall time at this scale: still running now.
        assert await sim.stop("victim", node, "preempted by gold-7", grace_ms=3_600_000)
        for _ in range(3):
            await asyncio.sleep(0)
        assert not run.done() and "d-victim" in sim.running[node]
        assert await sim.stop("victim", node, "node drained", grace_ms=0)    # brings the end forward
        await asyncio.wait_for(run, 10)

    asyncio.run(scenario())
    assert [e["status"] for e in out] == ["RUNNING", "FAILED"]
    assert out[1]["message"].startswith("stopped by the scheduler: preempted by gold-7 (after ")
    assert "grace" not in out[1]["message"]             # it ended on the second stop, with no grace
    assert not sim.running[node] and not sim._stop_at and not sim._grace and not sim._stops


def test_a_run_whose_end_comes_within_its_grace_completes(sim):
    node = sorted(sim.nodes)[4]
    command = _sim_command("short", "d-short", node, 40)          # 40 simulated ms: 0.04 ms of wall time
    out: list[dict] = []

    async def emit(payload: dict) -> None:
        out.append(payload)

    async def scenario():
        run = asyncio.create_task(sim.execute(command, TaskReporter(command, sim.now_ms, emit)))
        await _wait_for("RUNNING", lambda: out)
        await sim.stop("short", node, "preempted", grace_ms=3_600_000)   # ends long after the run would
        await asyncio.wait_for(run, 10)

    asyncio.run(scenario())
    assert [e["status"] for e in out] == ["RUNNING", "COMPLETED"]


def test_a_grace_of_zero_or_none_ends_the_run_at_once_by_default(sim):
    node = sorted(sim.nodes)[5]
    for grace in (0, None):
        command = _sim_command(f"now-{grace}", f"d-now-{grace}", node, 60_000_000)
        out: list[dict] = []

        async def emit(payload: dict) -> None:
            out.append(payload)

        async def scenario():
            run = asyncio.create_task(sim.execute(command, TaskReporter(command, sim.now_ms, emit)))
            await _wait_for("RUNNING", lambda: out)
            assert await sim.stop(command["task_id"], node, "stale copy", grace_ms=grace)
            await asyncio.wait_for(run, 10)

        asyncio.run(scenario())
        assert [e["status"] for e in out] == ["RUNNING", "FAILED"], grace


def test_a_migrated_task_runs_on_its_new_node_while_the_old_copy_is_stopped(sim):
    old, new = sorted(sim.nodes)[6], sorted(sim.nodes)[7]
    first = _sim_command("gold-1", "c/cells/0/10/0", old, 60_000_000)
    moved = _sim_command("gold-1", "c/cells/0/99/0", new, 60_000_000)     # the TaskMigrated's decision id
    out: list[dict] = []

    async def emit(payload: dict) -> None:
        out.append(payload)

    async def scenario():
        a = asyncio.create_task(sim.execute(first, TaskReporter(first, sim.now_ms, emit)))
        await _wait_for("the first copy to run", lambda: len(out) == 1)
        assert sim.admit(moved) is None
        b = asyncio.create_task(sim.execute(moved, TaskReporter(moved, sim.now_ms, emit)))
        await _wait_for("the moved copy to run", lambda: len(out) == 2)
        assert sorted(c["task_id"] for n in (old, new) for c in sim.running[n].values()) == ["gold-1", "gold-1"]
        assert await sim.stop("gold-1", old, "moved to " + new)           # reserve-first: the old copy goes
        await asyncio.wait_for(a, 10)
        assert not b.done() and list(sim.running[new]) == ["c/cells/0/99/0"]
        assert await sim.stop("gold-1", new, "test over")
        await asyncio.wait_for(b, 10)

    asyncio.run(scenario())
    assert [(e["event_id"], e["node_id"], e["status"]) for e in out[:3]] == [
        ("c/cells/0/10/0:running", old, "RUNNING"), ("c/cells/0/99/0:running", new, "RUNNING"),
        ("c/cells/0/10/0:failed", old, "FAILED")]


# ------------------------------------------------------------------ prices and the gold pool
def test_every_simulated_node_has_a_price_an_idle_price_and_fits_the_contract(sim):
    schema = parse_plain(catalog()["NodeRegistered"].schema)
    factor = dict(PRICING)
    by_pricing = Counter()
    for payload in sim.discover():
        assert fastavro.validation.validate(payload, schema, raise_errors=True)
        price, idle = payload["price_per_hour"], payload["idle_price_per_hour"]
        assert price > 0 and abs(idle - price * IDLE_PRICE_SHARE) < 1e-3
        assert 0 < idle < price
        by_pricing[payload["pricing"]] += 1
        on_demand = price / factor[payload["pricing"]]
        if payload["pricing"] == "SPOT":
            assert price < on_demand and idle < on_demand * IDLE_PRICE_SHARE
    assert set(by_pricing) == {"ON_DEMAND", "RESERVED", "SPOT"}
    assert "pool" not in {k for p in sim.discover() for k in p["labels"]}     # default: no gold pool


def test_the_gold_pool_is_a_share_of_every_gpu_model_and_deterministic():
    raw = read_nodes(DEFAULT_NODES, "openb")
    chosen = gold_pool(raw, 0.1)
    assert chosen == gold_pool(raw, 0.1) and not gold_pool(raw, 0.0) and len(gold_pool(raw, 1.0)) == len(raw)
    models = {n["node_id"]: next((a["model"] for a in n["accelerators"] if a["kind"] == "GPU"), "") for n in raw}
    per_model, gold = Counter(models.values()), Counter(models[i] for i in chosen)
    assert set(gold) <= set(per_model)
    for model, n in per_model.items():
        assert gold[model] == int(0.1 * n + 0.5), model
    sim = SimulatedCluster(DEFAULT_NODES, cell="openb", gold_pool_share=0.1)
    labelled = {i for i, n in sim.nodes.items() if n["labels"].get("pool") == "gold"}
    assert labelled == chosen
    plain = next(n for n in raw if n["node_id"] not in chosen)
    assert sim.nodes[plain["node_id"]] == describe_node(plain, "sim")        # other nodes: exactly as before
    with pytest.raises(ConnectorError, match="gold_pool_share"):
        SimulatedCluster(DEFAULT_NODES, cell="openb", gold_pool_share=1.5)


def test_the_sim_command_line_takes_the_gold_pool_share_and_the_stop_grace():
    adapter = _adapter_from_args(_parser().parse_args(["sim", "--gold-pool-share", "0.25", "--stop-grace-ms", "500"]))
    assert adapter.gold_pool_share == 0.25 and adapter.stop_grace_ms == 500
    assert sum(n["labels"].get("pool") == "gold" for n in adapter.nodes.values()) > 0
    default = _adapter_from_args(_parser().parse_args(["sim"]))
    assert default.gold_pool_share == 0.0 and default.stop_grace_ms == 0
