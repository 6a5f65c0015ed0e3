"""A task decided by the ``ppo`` strategy, followed from `suanli submit` to a real process on
the real stack (issue 21, C7): the cell's policy is set to ppo through the CLI, a local
connector registers this machine, the task's command runs, its decision names the policy's
version and weights, and the exported cell log replays IDENTICAL. No mocks; every wait
polls a condition."""
from __future__ import annotations

import asyncio
import uuid

import pytest
import yaml

from suanli.config import load_settings, to_env
from suanli.deploy.plane import worker_processes
from suanli.processors.strategies import ppo
from suanli.streams.kafka_io import ensure_topics
from suanli.streams.topics import TopicNames, core_topics

from test_dispatch_e2e import PY, LocalPlane, start_local_connector, stop_connector, wait_for

pytestmark = [pytest.mark.stack, pytest.mark.timeout(420)]


def test_a_task_placed_by_ppo_runs_and_its_cell_log_replays_identical(stack, tmp_path):
    settings = load_settings(namespace=f"t{uuid.uuid4().hex[:10]}", partitions=1)
    run = uuid.uuid4().hex[:8]
    lp = LocalPlane(settings, cell=f"ppo-{run}", node_id=f"ppo-n-{run}")
    asyncio.run(ensure_topics(settings.bootstrap_servers, core_topics(settings.partitions, settings.namespace)))
    policy = lp.cli("policy", "set", "--no-wait", "--cell", lp.cell, "--strategy", "ppo")   # before the workers
    assert policy.returncode == 0 and "stored" in policy.stdout, policy.stdout + policy.stderr
    services = list(worker_processes(settings).values())
    for service, argv in services:
        service.start(argv, env=to_env(settings))
    connector = None
    try:
        connector = start_local_connector(lp, "local-ppo", "--node-id", lp.node_id, "--interval", "0")
        wait_for(f"{lp.node_id} in `suanli nodes`", lambda: lp.node() is not None, timeout=180)
        task_id = f"ppo-task-{run}"
        out = tmp_path / "out.txt"
        spec = {"id": task_id, "tenant": "e2e", "cell": lp.cell, "resources": {"cpu": 0.2, "memory": "64Mi"},
                "command": [PY, "-c", "import sys; open(sys.argv[1], 'w').write('ran')", str(out)]}
        (tmp_path / "task.yaml").write_text(yaml.safe_dump(spec))
        submitted = lp.cli("submit", str(tmp_path / "task.yaml"))
        assert submitted.returncode == 0, submitted.stderr
        done = wait_for(f"{task_id} to end", lambda: (t := lp.task(task_id)) and t["status"] in ("COMPLETED", "FAILED")
                        and t, timeout=120)
        assert done["status"] == "COMPLETED" and done["node_id"] == lp.node_id, done
        assert out.read_text() == "ran"                                   # the real process ran
        placed = [r.payload for r in lp.events(TopicNames(settings.namespace).decisions)
                  if r.kind == "TaskPlaced" and r.payload["task_id"] == task_id]
        prov = placed[0]["provenance"]
        assert prov["strategy"]["name"] == "ppo" and prov["strategy"]["version"] == ppo.VERSION, prov
        assert any(line.startswith("score: PPO[") and "sha256:" in line for line in prov["path"]), prov["path"]
        log = tmp_path / "log"
        exported = lp.cli("export", "--cell", lp.cell, "--out", str(log))
        assert exported.returncode == 0, exported.stderr
        replayed = lp.cli("replay", str(log), "--verify")
        assert replayed.returncode == 0 and "IDENTICAL" in replayed.stdout, replayed.stdout + replayed.stderr
    finally:
        if connector is not None:
            stop_connector(connector)
        for service, _argv in reversed(services):
            service.stop()
