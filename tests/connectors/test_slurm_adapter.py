"""The slurm connector without services: parsing of real Slurm 22.05 output, the mapping of
node states to heartbeats and statuses, admission, the batch script (run by a real sh), and
the order of a NODE_FAIL report behind its node's DOWN.

The fixtures in ``tests/connectors/slurm/`` were captured from the cluster of
``deploy/slurm.py`` (Debian's Slurm 22.05.8, four slurmd on one host, n4 with GRES
``fpga:u250:1``): ``sinfo --json`` idle; busy with n1 ALLOCATED, n2 MIXED, n3's slurmd killed
(DOWN+NOT_RESPONDING) and n4 drained; and ``squeue -h -t all -O`` listings with COMPLETED,
FAILED (exit 3), a scancelled job (JobLaunchFailure, SIGTERM), RUNNING and NODE_FAIL jobs.
"""
from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import pytest

from suanli.connectors.kit import TaskReporter
from suanli.connectors.slurm import (JobState, SlurmCluster, _Job, add_arguments, batch_script, build_adapter,
                                     exit_code_of, node_view, parse_gres, parse_sbatch, parse_sinfo, parse_squeue,
                                     sbatch_argv)
from suanli.errors import ConnectorError

DATA = Path(__file__).parent / "slurm"


def _nodes(name: str):
    return {n.name: n for n in parse_sinfo((DATA / f"{name}.json").read_text())}


def _adapter(tmp_path: Path, fixture: str = "sinfo-idle", **options) -> SlurmCluster:
    adapter = SlurmCluster(cell="c", name="slurm", slurm_conf=tmp_path / "slurm.conf", run_dir=tmp_path,
                           pollers=False, **options)
    adapter.adopt(list(_nodes(fixture).values()))
    return adapter


def _command(node_id: str = "slurm-n1", **over) -> dict:
    return {"dispatch_id": "cell/0/12/0:place", "task_id": "t-1", "cell": "c", "node_id": node_id,
            "connector": "slurm", "cpu_milli": 1000, "memory_mib": 256, "gpu_devices": [], "gpu_milli": 0,
            "command": ["echo", "hi"], "env": {}, **over}


# ---- discovery -----------------------------------------------------------------------------
def test_sinfo_json_of_slurm_22_05_becomes_node_registrations(tmp_path):
    nodes = _nodes("sinfo-idle")
    assert sorted(nodes) == ["n1", "n2", "n3", "n4"]
    n1 = nodes["n1"]
    assert (n1.state, n1.flags, n1.cpus, n1.memory_mib, n1.partitions, n1.address) == \
        ("IDLE", frozenset(), 2, 2048, ("main",), "127.0.0.1")
    adapter = SlurmCluster(cell="c", name="slurm", run_dir=tmp_path, pollers=False)
    adapter.cluster = "suanli"
    payloads = {p["node_id"]: p for p in adapter.adopt(list(nodes.values()))}
    assert sorted(payloads) == ["slurm-n1", "slurm-n2", "slurm-n3", "slurm-n4"]
    p = payloads["slurm-n4"]
    assert (p["cpu_milli"], p["memory_mib"], p["arch"], p["connector"], p["cell"], p["tier"]) == \
        (2000, 2048, "x86_64", "slurm", "c", "onprem")
    assert p["accelerators"] == [{"kind": "FPGA", "model": "u250", "count": 1, "memory_mib": 0,
                                  "attributes": {"gres": "fpga:u250:1"}}]
    assert p["labels"]["slurm-node"] == "n4" and p["labels"]["slurm-partition"] == "main"
    assert p["labels"]["slurm-cluster"] == "suanli"
    assert payloads["slurm-n1"]["accelerators"] == []
    assert p["event_id"] == "slurm/slurm-n4/registered"


def test_node_registered_payloads_pass_intake_validation(tmp_path):
    from suanli.schemas.models import validate_event

    adapter = _adapter(tmp_path)
    for payload in adapter.adopt(list(_nodes("sinfo-idle").values())):
        assert validate_event("NodeRegistered", payload) is None
    for kind, payload in adapter.heartbeats(1, 1) + adapter.metrics(1, 1):
        assert validate_event(kind, payload) is None, kind


def test_gres_strings_become_accelerators_of_every_kind():
    assert parse_gres("gpu:a100:2(S:0-1),fpga:1,npu:ascend910:8,qpu:sim:1,shard:4") == [
        {"kind": "GPU", "model": "a100", "count": 2, "memory_mib": 0, "attributes": {"gres": "gpu:a100:2"}},
        {"kind": "FPGA", "model": "fpga", "count": 1, "memory_mib": 0, "attributes": {"gres": "fpga:1"}},
        {"kind": "NPU", "model": "ascend910", "count": 8, "memory_mib": 0, "attributes": {"gres": "npu:ascend910:8"}},
        {"kind": "QPU", "model": "sim", "count": 1, "memory_mib": 0, "attributes": {"gres": "qpu:sim:1"}},
        {"kind": "OTHER", "model": "shard", "count": 4, "memory_mib": 0, "attributes": {"gres": "shard:4"}},
    ]
    assert parse_gres("") == [] and parse_gres("(null)") == [] and parse_gres("gpu:0") == []


def test_bad_sinfo_output_is_refused_with_the_reason():
    with pytest.raises(ConnectorError, match="not answer JSON"):
        parse_sinfo("sinfo: error: ...")
    with pytest.raises(ConnectorError, match="no 'nodes'"):
        parse_sinfo('{"meta": {}}')
    with pytest.raises(ConnectorError, match="reported errors"):
        parse_sinfo('{"nodes": [], "errors": [{"error": "Unable to contact slurm controller"}]}')


# ---- monitoring ----------------------------------------------------------------------------
def test_node_states_map_to_statuses_and_heartbeats():
    busy = _nodes("sinfo-busy-down-drain")
    assert (busy["n1"].state, busy["n2"].state) == ("ALLOCATED", "MIXED")
    assert node_view(busy["n1"]) == ("READY", True)
    assert node_view(busy["n2"]) == ("READY", True)
    assert node_view(busy["n3"]) == ("DOWN", False)          # slurmd killed: DOWN + NOT_RESPONDING
    assert node_view(busy["n4"]) == ("CORDONED", True)       # drained: no new work, still reached
    flaky = busy["n1"].__class__(**{**busy["n1"].__dict__, "flags": frozenset({"NOT_RESPONDING"})})
    assert node_view(flaky) == (None, False)                 # not reached yet not DOWN: silence only


def test_heartbeats_only_for_nodes_up_and_status_changes_once(tmp_path):
    adapter = _adapter(tmp_path)
    beat = adapter.heartbeats(1000, 1)
    assert [k for k, _ in beat] == ["NodeHeartbeat"] * 4
    adapter.observe(list(_nodes("sinfo-busy-down-drain").values()))
    events = adapter.heartbeats(6000, 2)
    changes = [(p["node_id"], p["status"]) for k, p in events if k == "NodeStatusChanged"]
    assert changes == [("slurm-n3", "DOWN"), ("slurm-n4", "CORDONED")]
    assert "Not responding" in next(p["reason"] for k, p in events if k == "NodeStatusChanged")
    assert sorted(p["node_id"] for k, p in events if k == "NodeHeartbeat") == ["slurm-n1", "slurm-n2", "slurm-n4"]
    adapter.observe(list(_nodes("sinfo-busy-down-drain").values()))
    assert [k for k, _ in adapter.heartbeats(11000, 3)] == ["NodeHeartbeat"] * 3     # no repeat
    adapter.observe(list(_nodes("sinfo-idle").values()))
    back = [(p["node_id"], p["status"]) for k, p in adapter.heartbeats(16000, 4) if k == "NodeStatusChanged"]
    assert back == [("slurm-n3", "READY"), ("slurm-n4", "READY")]
    metrics = adapter.metrics(16000, 4)
    assert [p["node_id"] for _, p in metrics] == ["slurm-n1", "slurm-n2", "slurm-n3", "slurm-n4"]


def test_metrics_carry_slurm_allocation(tmp_path):
    adapter = _adapter(tmp_path, "sinfo-busy-down-drain")
    by_node = {p["node_id"]: p for _, p in adapter.metrics(1, 1)}
    assert by_node["slurm-n1"]["cpu_util"] == 1.0 and by_node["slurm-n2"]["cpu_util"] == 0.5
    assert by_node["slurm-n1"]["memory_used_mib"] == 200
    assert "slurm-n3" not in by_node                          # DOWN: nothing sampled


# ---- jobs ----------------------------------------------------------------------------------
def test_squeue_listing_gives_states_and_real_exit_codes():
    jobs = parse_squeue((DATA / "squeue-all.txt").read_text())
    assert jobs[2] == JobState(2, "COMPLETED", "n1", "None", 0)
    assert jobs[1].state == "FAILED" and exit_code_of(jobs[1].exit_status) == 3
    assert jobs[4].reason == "JobLaunchFailure" and exit_code_of(jobs[4].exit_status) == -15
    assert jobs[5].state == "RUNNING"
    fail = parse_squeue((DATA / "squeue-node-fail.txt").read_text())[8]
    assert (fail.state, fail.nodes, fail.reason) == ("NODE_FAIL", "n3", "NodeDown")


def test_sbatch_parsable_answers():
    assert parse_sbatch("42\n") == 42 and parse_sbatch("42;suanli\n") == 42
    with pytest.raises(ConnectorError):
        parse_sbatch("sbatch: error: Batch job submission failed")


def test_sbatch_argv_binds_the_node_and_the_resources(tmp_path):
    node = _nodes("sinfo-idle")["n2"]
    argv = sbatch_argv(_command("slurm-n2", cpu_milli=1500, memory_mib=300, gpu_devices=[0, 1]), node,
                       tmp_path / "x.sh", tmp_path / "x.out", tmp_path)
    assert argv[:3] == ["sbatch", "--parsable", "--no-requeue"]
    for flag in ("--nodelist=n2", "--nodes=1", "--ntasks=1", "--cpus-per-task=2", "--mem=300", "--job-name=t-1",
                 "--partition=main", "--gres=gpu:2", f"--output={tmp_path / 'x.out'}",
                 "--comment=suanli:cell/0/12/0:place"):
        assert flag in argv
    assert argv[-1] == str(tmp_path / "x.sh")
    assert "--mem=1" in sbatch_argv(_command(memory_mib=0), node, tmp_path / "x.sh", tmp_path / "o", tmp_path)


def test_batch_script_runs_argv_with_the_task_env_and_records_the_exit_code(tmp_path):
    exit_file = tmp_path / "d.exit"
    code = ("import os, sys; print(os.environ['ODD'], os.environ['SUANLI_TASK_ID'], os.environ['SUANLI_SLURM_NODE'],"
            " sys.argv[1]); sys.exit(7)")
    command = _command(command=[sys.executable, "-c", code, "two words; $HOME `x`"],
                       env={"ODD": "it's a \"value\" $PATH", "with-dash": "ok"})
    script = tmp_path / "d.sh"
    script.write_text(batch_script(command, "n1", exit_file))
    out = subprocess.run(["sh", str(script)], capture_output=True, text=True, timeout=30)
    assert out.returncode == 7
    assert out.stdout.strip() == "it's a \"value\" $PATH t-1 n1 two words; $HOME `x`"
    assert exit_file.read_text().strip() == "7"
    assert not exit_file.with_name("d.exit.tmp").exists()


def test_admission_refuses_what_cannot_run(tmp_path):
    adapter = _adapter(tmp_path, "sinfo-busy-down-drain")
    assert adapter.admit(_command()) is None
    assert "no command" in adapter.admit(_command(command=None))
    assert "not a node of the slurm connector" in adapter.admit(_command("elsewhere-n1"))
    # a node that is DOWN or drained is no refusal (a refusal would end the task for good):
    # execute waits for it, or reports the dispatch lost with its node once the DOWN went out
    assert adapter.admit(_command("slurm-n3")) is None
    assert adapter.admit(_command("slurm-n4")) is None
    assert "has 2 CPU(s); the task asks 3" in adapter.admit(_command(cpu_milli=2500))
    assert "has 2048 MiB" in adapter.admit(_command(memory_mib=4096))
    assert "0 GPU(s)" in adapter.admit(_command(gpu_devices=[0]))
    assert "'=' " in adapter.admit(_command(command=["A=1", "x"]))
    assert "must be non-empty" in adapter.admit(_command(env={"": "x"}))


async def _settle(rounds: int = 50) -> None:
    """Let the adapter's follow-tasks run until they wait again (they wait only on events the
    test sets): yields to the loop, no wall time, so "nothing reported yet" is decided."""
    for _ in range(rounds):
        await asyncio.sleep(0)


async def _until(condition, what: str, timeout: float = 5.0) -> None:
    """Wait until ``condition()`` holds; fail naming ``what`` after ``timeout`` seconds."""
    deadline = asyncio.get_running_loop().time() + timeout
    while not condition():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")
        await asyncio.sleep(0.001)


def _follow(adapter: SlurmCluster, job: _Job, tmp_path: Path, out: list):
    async def emit(payload):
        out.append(payload)

    reporter = TaskReporter(job.command, lambda: 1, emit)
    return asyncio.ensure_future(adapter._follow(job, reporter, tmp_path / "d.exit", tmp_path / "d.out"))


def test_job_states_become_task_statuses_with_the_job_id(tmp_path):
    async def run():
        adapter = _adapter(tmp_path)
        out: list = []
        job = adapter._jobs["d"] = _Job(_command(), "n1", job_id=42)
        follow = _follow(adapter, job, tmp_path, out)
        adapter.update_jobs({42: JobState(42, "PENDING", "", "Priority", 0)})
        await _settle()
        assert out == []                                       # pending in Slurm: still DISPATCHED
        (tmp_path / "d.out").write_text("boom\n")
        adapter.update_jobs({42: JobState(42, "FAILED", "n1", "NonZeroExitCode", 3 << 8)})
        await follow
        return out

    out = asyncio.run(run())
    assert [(p["status"], p["exit_code"]) for p in out] == [("RUNNING", None), ("FAILED", 3)]
    assert out[0]["message"] == "slurm job 42 on n1"
    assert out[1]["message"] == "slurm job 42 on n1: exited with code 3; output: boom"


def test_a_forgotten_job_is_judged_by_its_exit_record(tmp_path):
    async def run(record: str | None):
        adapter = _adapter(tmp_path)
        out: list = []
        if record is not None:
            (tmp_path / "d.exit").write_text(record)
        job = adapter._jobs["d"] = _Job(_command(), "n1", job_id=7)
        follow = _follow(adapter, job, tmp_path, out)
        adapter.update_jobs({})
        adapter.update_jobs({})                               # listed nowhere twice: purged
        await follow
        return [(p["status"], p["exit_code"]) for p in out]

    assert asyncio.run(run("0\n")) == [("RUNNING", None), ("COMPLETED", 0)]
    assert asyncio.run(run("5\n")) == [("RUNNING", None), ("FAILED", 5)]
    (tmp_path / "d.exit").unlink()
    assert asyncio.run(run(None)) == [("RUNNING", None), ("FAILED", None)]


def test_node_fail_is_reported_only_after_the_node_down_went_out(tmp_path):
    async def run():
        adapter = _adapter(tmp_path)
        out: list = []
        job = adapter._jobs["d"] = _Job(_command("slurm-n3"), "n3", job_id=8)
        follow = _follow(adapter, job, tmp_path, out)
        adapter.update_jobs({8: JobState(8, "RUNNING", "n3", "None", 0)})
        await _until(lambda: out, "the RUNNING report")
        adapter.update_jobs(parse_squeue((DATA / "squeue-node-fail.txt").read_text()))
        await _settle()
        assert [p["status"] for p in out] == ["RUNNING"]      # NODE_FAIL seen, node not yet DOWN here
        adapter.observe(list(_nodes("sinfo-node-fail").values()))
        events = adapter.heartbeats(1, 1)                      # the DOWN is handed out with this beat
        assert ("NodeStatusChanged", "DOWN") in [(k, p.get("status")) for k, p in events]
        await _settle()
        assert [p["status"] for p in out] == ["RUNNING"]      # ... and reported one beat later
        adapter.heartbeats(2, 2)
        await asyncio.wait_for(follow, 5)
        return out

    out = asyncio.run(run())
    assert [(p["status"], p["exit_code"]) for p in out] == [("RUNNING", None), ("FAILED", None)]
    assert "NODE_FAIL: node n3 DOWN+NOT_RESPONDING: Not responding" in out[1]["message"]


def test_pending_jobs_of_a_node_that_goes_down_end_as_node_fail(tmp_path):
    async def run():
        adapter = _adapter(tmp_path, node_fail_report_s=0.2)
        calls = []

        async def call(*argv):
            calls.append(argv)
            return 0, "", ""

        adapter._call = call                     # no Slurm here: record the scancel
        out: list = []
        job = adapter._jobs["d"] = _Job(_command("slurm-n3"), "n3", job_id=9)
        follow = _follow(adapter, job, tmp_path, out)
        adapter.update_jobs({9: JobState(9, "PENDING", "", "Resources", 0)})
        adapter.observe(list(_nodes("sinfo-node-fail").values()))
        adapter.heartbeats(1, 1)
        adapter.heartbeats(2, 2)
        await asyncio.wait_for(follow, 5)
        await _until(lambda: ("scancel", "9") in calls, "the scancel of job 9")
        return out, calls

    out, calls = asyncio.run(run())
    assert ("scancel", "9") in calls
    assert [p["status"] for p in out] == ["RUNNING", "FAILED"]


def test_command_line_options_build_the_adapter(tmp_path):
    import argparse

    parser = argparse.ArgumentParser()
    parser.add_argument("--name")
    add_arguments(parser)
    args = parser.parse_args(["--cell", "hpc", "--slurm-conf", str(tmp_path / "s.conf"), "--node-prefix", "hpc-",
                              "--run-dir", str(tmp_path), "--poll", "0.5"])
    adapter = build_adapter(args)
    assert (adapter.name, adapter.cell, adapter.node_prefix, adapter.poll_interval_s) == ("slurm", "hpc", "hpc-", 0.5)
    assert adapter.env["SLURM_CONF"] == str(tmp_path / "s.conf")


def test_a_dispatch_to_a_node_that_is_down_is_lost_with_it_not_submitted(tmp_path):
    async def run():
        adapter = _adapter(tmp_path, node_poll_s=0.01)
        calls = []

        async def call(*argv):
            calls.append(argv)
            return 0, "1", ""

        adapter._call = call
        adapter.observe(list(_nodes("sinfo-node-fail").values()))        # n3 DOWN
        out: list = []

        async def emit(payload):
            out.append(payload)

        command = _command("slurm-n3")
        run = asyncio.ensure_future(adapter.execute(command, TaskReporter(command, lambda: 1, emit)))
        adapter.heartbeats(1, 1)
        adapter.heartbeats(2, 2)
        await asyncio.wait_for(run, 5)
        return out, calls

    out, calls = asyncio.run(run())
    assert calls == []                                             # never submitted
    assert [p["status"] for p in out] == ["FAILED"]
    assert "went DOWN before its job was submitted" in out[0]["message"]


def test_every_dispatch_gets_files_of_its_own(tmp_path):
    """Dispatch ids hold dots ('<cell>/<ns>.cells/0/18/0:place'): each one's script, output and
    exit record must still be its own files."""
    async def run():
        adapter = _adapter(tmp_path)
        argvs = []

        async def call(*argv):
            argvs.append(argv)
            return 0, f"{len(argvs)}", ""

        adapter._call = call
        tasks = []
        for i in range(2):
            command = _command(dispatch_id=f"c/ns.cells/0/{i}/0:place", task_id=f"t{i}")

            async def emit(payload):
                pass

            tasks.append(asyncio.ensure_future(adapter.execute(command, TaskReporter(command, lambda: 1, emit))))
        await _until(lambda: sum(a[0] == "sbatch" for a in argvs) == 2, "both sbatch calls")
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        return argvs

    scripts = [a[-1] for a in asyncio.run(run()) if a[0] == "sbatch"]
    assert len(set(scripts)) == 2
    assert all(Path(s).read_text().count("SUANLI_TASK_ID") == 1 for s in scripts)
    assert sorted(p.name for p in tmp_path.glob("*.sh")) == ["c_ns.cells_0_0_0_place.sh", "c_ns.cells_0_1_0_place.sh"]


def test_a_failed_launch_requeued_for_a_down_node_is_cancelled_and_lost_with_it(tmp_path):
    """Seen on Slurm 22.05: a job launched on a killed slurmd goes RUNNING, COMPLETING, then
    PENDING for its node (requeued whatever JobRequeue says), and runs there once the slurmd
    is back. The connector cancels it once the node is DOWN and reports it lost."""
    async def run():
        adapter = _adapter(tmp_path, node_fail_report_s=5)
        calls = []

        async def call(*argv):
            calls.append(argv)
            return 0, "", ""

        adapter._call = call
        out: list = []
        job = adapter._jobs["d"] = _Job(_command("slurm-n3"), "n3", job_id=805)
        follow = _follow(adapter, job, tmp_path, out)
        for state, nodes in (("RUNNING", "n3"), ("COMPLETING", "n3")):
            adapter.update_jobs({805: JobState(805, state, nodes, "None", 0)})
            await _settle()
        adapter.observe(list(_nodes("sinfo-node-fail").values()))      # n3 DOWN, job not yet back
        adapter.heartbeats(1, 1)
        adapter.update_jobs({805: JobState(805, "PENDING", "n3", "None", 0)})
        await _settle()
        adapter.heartbeats(2, 2)
        await asyncio.wait_for(follow, 5)
        await _until(lambda: ("scancel", "805") in calls, "the scancel of job 805")
        return out, calls

    out, calls = asyncio.run(run())
    assert ("scancel", "805") in calls
    assert [p["status"] for p in out] == ["RUNNING", "FAILED"]
    assert "NODE_FAIL" in out[1]["message"]


def test_accelerators_the_core_assigned_become_gres_and_are_admitted_only_where_they_are(tmp_path):
    from suanli.connectors.slurm import command_gres

    fpga = {"kind": "FPGA", "model": "u250", "count": 1, "memory_mib": 0, "attributes": {"gres": "fpga:u250:1"}}
    command = _command("slurm-n4", accelerators=[fpga], gpu_devices=[0, 1])
    assert command_gres(command) == ["gpu:2", "fpga:u250:1"]
    assert command_gres(_command(accelerators=[{**fpga, "model": "fpga", "attributes": {}}])) == ["fpga:1"]
    argv = sbatch_argv(_command("slurm-n4", accelerators=[fpga]), _nodes("sinfo-idle")["n4"], tmp_path / "s",
                       tmp_path / "o", tmp_path)
    assert "--gres=fpga:u250:1" in argv
    adapter = _adapter(tmp_path)
    assert adapter.admit(_command("slurm-n4", accelerators=[fpga])) is None
    assert "has 0 FPGA 'u250'" in adapter.admit(_command("slurm-n1", accelerators=[fpga]))
    assert "the task asks 2" in adapter.admit(_command("slurm-n4", accelerators=[{**fpga, "count": 2}]))
