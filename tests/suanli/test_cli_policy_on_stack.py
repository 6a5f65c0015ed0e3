"""``suanli policy set`` and ``show`` on the real stack: ``set`` returns once intake has put the
policy in the cell log, so every task submitted afterwards comes after it there; with no
intake running it says so and exits 2, the policy stored and forwarded once intake starts.
``show`` reads the policy in force from the cell log."""
from __future__ import annotations

import asyncio
import re
import uuid

import pytest
import yaml

from suanli.config import load_settings, to_env
from suanli.deploy.plane import worker_processes
from suanli.deploy.waiting import wait_for
from suanli.streams.kafka_io import ensure_topics
from suanli.streams.topics import TopicNames, core_topics

from test_dispatch_e2e import LocalPlane

pytestmark = [pytest.mark.stack, pytest.mark.timeout(300)]


def test_policy_set_waits_until_the_policy_is_in_the_cell_log_ahead_of_later_tasks(stack, tmp_path):
    settings = load_settings(namespace=f"t{uuid.uuid4().hex[:10]}", partitions=2)
    names = TopicNames(settings.namespace)
    lp = LocalPlane(settings, cell=f"pol-{uuid.uuid4().hex[:8]}", node_id="none")
    asyncio.run(ensure_topics(settings.bootstrap_servers, core_topics(settings.partitions, settings.namespace)))

    def policies(topic: str) -> list[dict]:
        return [r.payload for r in lp.events(topic) if r.kind == "PolicyChanged"]

    refused = lp.cli("policy", "set", "--cell", lp.cell, "--wait-s", "0")
    assert refused.returncode == 2 and "--wait-s must be > 0" in refused.stderr, refused.stderr
    assert policies(names.raw_policy) == []                        # refused before anything was stored

    # no intake: the wait ends, naming the cause and the way out; the policy stays stored
    early = lp.cli("policy", "set", "--cell", lp.cell, "--wait-s", "2", "--config", '{"retry_every_ms": 3000}')
    assert early.returncode == 2, early.stdout + early.stderr
    assert "not in the cell log" in early.stderr and "is intake running" in early.stderr, early.stderr
    assert "Traceback" not in early.stderr
    assert [p["config_json"] for p in policies(names.raw_policy)] == ['{"retry_every_ms":3000}']
    none = lp.cli("policy", "show", "--cell", lp.cell)             # stored, but not in force yet
    assert none.returncode == 0 and "no policy set" in none.stdout, none.stdout + none.stderr

    intake, argv = worker_processes(settings)["intake"]
    intake.start(argv, env=to_env(settings))
    try:
        # intake starts meanwhile: the command waits for it (30 s by default)
        policy = lp.cli("policy", "set", "--cell", lp.cell, "--strategy", "bestfit")
        assert policy.returncode == 0, policy.stderr
        where = re.search(r"in force: cell log \[(\d+)\]@(\d+)", policy.stdout)
        assert where, policy.stdout
        partition, offset = int(where[1]), int(where[2])
        spec = {"id": f"after-{uuid.uuid4().hex[:6]}", "tenant": "e2e", "cell": lp.cell,
                "resources": {"cpu": 0.1, "memory": "16Mi"}, "command": ["true"]}
        (tmp_path / "task.yaml").write_text(yaml.safe_dump(spec))
        submitted = lp.cli("submit", str(tmp_path / "task.yaml"))
        assert submitted.returncode == 0, submitted.stderr
        cell_log = wait_for("the task in the cell log",
                            lambda: (log := lp.events(names.cell_log)) and
                            any(r.kind == "TaskSubmitted" for r in log) and log, timeout=60)
        at = {(r.partition, r.offset): r for r in cell_log}
        assert at[(partition, offset)].kind == "PolicyChanged"
        assert at[(partition, offset)].payload["strategy"] == "bestfit"
        [task] = [r for r in cell_log if r.kind == "TaskSubmitted"]
        assert (task.partition, task.payload["task_id"]) == (partition, spec["id"]) and task.offset > offset
        # the early policy, stored while no intake ran, was forwarded too, before the later one
        early_at = [r.offset for r in cell_log if r.kind == "PolicyChanged" and r.payload["strategy"] == "default"]
        assert early_at and early_at[0] < offset
        shown = lp.cli_json("policy", "show", "--cell", lp.cell)
        assert (shown["set"], shown["strategy"], shown["config"], shown["event_id"]) == \
            (True, "bestfit", {}, at[(partition, offset)].payload["event_id"])
        text = lp.cli("policy", "show", "--cell", lp.cell).stdout
        assert f"cell {lp.cell}: bestfit {{}}" in text and "one priority point per 60 s" in text, text
    finally:
        intake.stop()
