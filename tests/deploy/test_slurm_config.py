"""deploy/slurm.py's generated configuration, without services."""
from __future__ import annotations

from pathlib import Path

from suanli.deploy.slurm import ClusterSpec, SlurmPaths, config_text, gres_text, node_up


def test_slurm_conf_names_this_host_loopback_and_a_port_per_slurmd(tmp_path):
    paths = SlurmPaths(tmp_path / "slurm")
    text = config_text(paths, ClusterSpec(nodes=4, cpus=2, memory_mib=2048, port=16817, gres={}), hostname="box-7")
    lines = text.splitlines()
    assert "SlurmctldHost=box-7(127.0.0.1)" in lines and "SlurmctldPort=16817" in lines
    nodes = [line for line in lines if line.startswith("NodeName=")]
    assert [n.split()[0] for n in nodes] == ["NodeName=n1", "NodeName=n2", "NodeName=n3", "NodeName=n4"]
    assert all("NodeHostname=box-7 NodeAddr=127.0.0.1" in n and "CPUs=2 RealMemory=2048" in n for n in nodes)
    assert [n.split("Port=")[1].split()[0] for n in nodes] == ["16818", "16819", "16820", "16821"]
    for setting in ("JobRequeue=0", "ReturnToService=2", "SelectType=select/cons_tres", "TaskPlugin=task/none",
                    "ProctrackType=proctrack/linuxproc", "AccountingStorageType=accounting_storage/none",
                    f"AuthInfo=socket={paths.socket}", "SlurmdTimeout=5"):
        assert setting in lines, setting
    assert not any(line.startswith("GresTypes") for line in lines)


def test_gres_are_count_only_devices(tmp_path):
    spec = ClusterSpec(nodes=2, gres={"n2": "fpga:u250:1,gpu:2"})
    text = config_text(SlurmPaths(Path(tmp_path)), spec, hostname="h")
    assert "GresTypes=fpga,gpu" in text.splitlines()
    assert "Gres=fpga:u250:1,gpu:2" in [line for line in text.splitlines() if line.startswith("NodeName=n2")][0]
    assert gres_text(spec).splitlines()[1:] == ["NodeName=n2 Name=fpga Type=u250 Count=1", "NodeName=n2 Name=gpu Count=2"]


def test_a_node_is_up_only_when_responding_and_not_drained():
    assert node_up({"state": "idle", "state_flags": []})
    assert node_up({"state": "mixed", "state_flags": []})
    assert not node_up({"state": "down", "state_flags": ["NOT_RESPONDING"]})
    assert not node_up({"state": "allocated", "state_flags": ["NOT_RESPONDING"]})
    assert not node_up({"state": "idle", "state_flags": ["DRAIN"]})
