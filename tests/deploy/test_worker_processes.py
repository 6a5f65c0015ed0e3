"""The plane's worker processes: several scheduler workers, each with its own pid file, log
and --instance (deploy/plane.py ``worker_processes``)."""
from __future__ import annotations

import pytest

from suanli.config import load_settings
from suanli.deploy.plane import worker_processes
from suanli.errors import StackError
from suanli.streams.app import worker_dir


def test_three_scheduler_workers_are_three_instances_of_one_role(tmp_path):
    settings = load_settings(namespace="tw", home=tmp_path)
    procs = worker_processes(settings, schedulers=3)
    assert list(procs) == ["intake", "scheduler", "scheduler-2", "scheduler-3", "telemetry"]
    argvs = {name: argv for name, (_svc, argv) in procs.items()}
    assert argvs["scheduler"][-1] == "scheduler"                       # instance 1: as before
    assert argvs["scheduler-3"][-3:] == ["scheduler", "--instance", "3"]
    assert len({svc.pid_file for svc, _ in procs.values()}) == 5
    assert len({svc.log_file for svc, _ in procs.values()}) == 5


def test_one_scheduler_is_the_default_and_none_is_refused(tmp_path):
    settings = load_settings(namespace="tw", home=tmp_path)
    assert [n for n in worker_processes(settings) if n.startswith("scheduler")] == ["scheduler"]
    with pytest.raises(StackError, match="at least one scheduler"):
        worker_processes(settings, schedulers=0)


def test_instances_of_a_role_never_share_a_state_directory(tmp_path):
    settings = load_settings(namespace="tw", home=tmp_path)
    dirs = [worker_dir(settings, "scheduler", i) for i in (1, 2, 3)]
    assert len(set(dirs)) == 3 and dirs[0].name == "scheduler" and dirs[2].name == "scheduler-3"
