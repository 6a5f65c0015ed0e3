"""A task followed from `suanli submit` to a real process and back, on the real stack.

The plane here is the real one, in a namespace of its own: the intake and scheduler workers
(as `suanli up` starts them) and the local-process connector (`python -m suanli.connectors
local`), which registers this machine as one node. A YAML task goes in through the CLI; its
command (this interpreter, `-c ...`) must run with the task's `env`, its exit status must come
back (`suanli status`: COMPLETED, or FAILED with the exit code) and its resources must be
released (`suanli nodes`: nothing allocated on the node). No mocks; every wait polls a
condition with a deadline.
"""
from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml

from suanli.config import Settings, load_settings, to_env
from suanli.deploy.plane import worker_processes
from suanli.streams.kafka_io import EventConsumer, ensure_topics
from suanli.streams.topics import TopicNames, core_topics
from suanli.deploy.waiting import wait_for

pytestmark = [pytest.mark.stack, pytest.mark.timeout(420)]

PY = sys.executable


class LocalPlane:
    """Workers + local connector in a fresh namespace; the CLI pointed at it."""

    def __init__(self, settings: Settings, cell: str, node_id: str):
        self.s, self.cell, self.node_id = settings, cell, node_id
        self.env = {**os.environ, **to_env(settings)}

    def cli(self, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
        """The real `suanli` command line, as a subprocess."""
        return subprocess.run([PY, "-m", "suanli", *args], capture_output=True, text=True, env=self.env,
                              input=stdin, timeout=120)

    def cli_json(self, *args: str) -> Any:
        out = self.cli(*args, "--json")
        assert out.returncode == 0, f"suanli {' '.join(args)} --json exited {out.returncode}: {out.stderr}"
        return json.loads(out.stdout)

    def node(self) -> dict[str, Any] | None:
        rows = self.cli_json("nodes", "--cell", self.cell)
        return next((n for n in rows if n["node_id"] == self.node_id), None)

    def task(self, task_id: str) -> dict[str, Any] | None:
        out = self.cli("status", task_id, "--json")
        return json.loads(out.stdout) if out.returncode == 0 else None

    def events(self, topic: str) -> list:
        """Every record of ``topic`` up to its end offsets now (decoded, with kind and payload)."""
        from suanli.schemas.codec import Codec
        from suanli.schemas.registry import RegistryClient

        async def read() -> list:
            with RegistryClient(self.s.registry_url) as registry:
                async with EventConsumer(self.s.bootstrap_servers, Codec(registry), [topic]) as consumer:
                    return await consumer.read_until_end()
        return asyncio.run(read())


def start_local_connector(lp: LocalPlane, name: str, *options: str) -> subprocess.Popen:
    """`python -m suanli.connectors local --name NAME ...` for ``lp``'s cell; returns once its
    runner consumes its dispatch topic (it prints its first line then)."""
    proc = subprocess.Popen([PY, "-m", "suanli.connectors", "local", "--name", name, "--cell", lp.cell, *options,
                             "--partitions", "1", "--log-level", "WARNING"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=lp.env)
    line = proc.stdout.readline()
    assert line.startswith(f"suanli connector {name}: 1 node(s)"), \
        (line, proc.stderr.read() if proc.poll() is not None else "")
    return proc


def stop_connector(proc: subprocess.Popen) -> None:
    """SIGTERM, then SIGKILL after 30 s."""
    proc.terminate()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@pytest.fixture(scope="module")
def plane(stack) -> LocalPlane:
    settings = load_settings(namespace=f"t{uuid.uuid4().hex[:10]}", partitions=1)
    run = uuid.uuid4().hex[:8]
    lp = LocalPlane(settings, cell=f"local-{run}", node_id=f"e2e-host-{run}")
    asyncio.run(ensure_topics(settings.bootstrap_servers, core_topics(settings.partitions, settings.namespace)))
    services = list(worker_processes(settings).values())
    for service, argv in services:
        service.start(argv, env=to_env(settings))
    connector = None
    try:
        connector = start_local_connector(lp, "local", "--node-id", lp.node_id, "--interval", "5")
        # The node is known to the read model once intake forwarded its registration.
        wait_for("the local node in `suanli nodes`", lp.node, timeout=180)
        yield lp
    finally:
        if connector is not None:
            stop_connector(connector)
        for service, _argv in reversed(services):
            service.stop()


def _submit(plane: LocalPlane, tmp_path: Path, name: str, code: str, env: dict[str, str]) -> str:
    task_id = f"{name}-{uuid.uuid4().hex[:8]}"
    spec = {"id": task_id, "tenant": "e2e", "cell": plane.cell, "resources": {"cpu": 0.5, "memory": "64Mi"},
            "command": [PY, "-c", code, str(tmp_path / f"{name}.out")], "env": env}
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(spec, allow_unicode=True))
    out = plane.cli("submit", str(path))
    assert out.returncode == 0 and f"submitted {task_id}" in out.stdout, out.stderr
    return task_id


def _final_status_event(plane: LocalPlane, task_id: str) -> dict[str, Any]:
    """The connector's terminal TaskStatusChanged for ``task_id``, read back from the cell log."""
    from suanli.schemas.codec import Codec
    from suanli.schemas.registry import RegistryClient

    async def read() -> list:
        with RegistryClient(plane.s.registry_url) as registry:
            async with EventConsumer(plane.s.bootstrap_servers, Codec(registry),
                                     [TopicNames(plane.s.namespace).cell_log]) as consumer:
                return await consumer.read_until_end()

    [event] = [r.payload for r in asyncio.run(read()) if r.kind == "TaskStatusChanged"
               and r.payload["task_id"] == task_id and r.payload["status"] in ("COMPLETED", "FAILED")]
    return event


def _released(plane: LocalPlane) -> dict[str, Any] | None:
    node = plane.node()
    return node if node and node["cpu_used"] == 0 and node["memory_used"] == 0 else None


def test_a_submitted_command_runs_with_its_env_and_completes(plane, tmp_path):
    # The command writes what it got, then holds its resources until the test lets it finish.
    go = tmp_path / "go"
    code = ("import os, sys, time\n"
            "open(sys.argv[1], 'w').write(os.environ['E2E_GREETING'] + '|' + os.environ['SUANLI_TASK_ID'])\n"
            "deadline = time.monotonic() + 120\n"
            f"while not os.path.exists({str(go)!r}):\n"
            "    if time.monotonic() > deadline: sys.exit(4)\n"
            "    time.sleep(0.05)\n")
    task_id = _submit(plane, tmp_path, "ok", code, {"E2E_GREETING": "ni hao from env 42"})

    running = wait_for(f"{task_id} to run", lambda: (t := plane.task(task_id)) and t["status"] == "RUNNING" and t,
                       timeout=120)
    assert running["node_id"] == plane.node_id and running["cpu_milli"] == 500 and running["memory_mib"] == 64
    # The process runs, with the task's environment (and the connector's SUANLI_* variables).
    wait_for("the command's output file", (tmp_path / "ok.out").exists, timeout=30, every=0.1)
    assert (tmp_path / "ok.out").read_text() == f"ni hao from env 42|{task_id}"
    held = plane.node()
    assert (held["cpu_used"], held["memory_used"]) == (500, 64), held

    go.touch()
    done = wait_for(f"{task_id} to end", lambda: (t := plane.task(task_id)) and t["status"] in ("COMPLETED", "FAILED")
                    and t, timeout=120)
    assert done["status"] == "COMPLETED", done

    status = plane.cli("status", task_id)
    assert status.returncode == 0, status.stderr
    assert f"{task_id}  COMPLETED" in status.stdout and "connector: exited with code 0" in status.stdout
    assert "  exit code 0\n" in status.stdout and done["exit_code"] == 0
    event = _final_status_event(plane, task_id)
    assert event["exit_code"] == 0 and event["usage"]["cpu_seconds"] > 0

    # Completed: the core released its CPU and memory (TaskReleased), so nothing is allocated.
    node = wait_for("the node's CPU and memory to be released", lambda: _released(plane), timeout=60)
    assert (node["cpu_used"], node["memory_used"]) == (0, 0)
    nodes = plane.cli("nodes", "--cell", plane.cell)
    assert nodes.returncode == 0 and plane.node_id in nodes.stdout
    [row] = [line for line in nodes.stdout.splitlines() if plane.node_id in line]
    assert f" 0/{node['cpu_milli']} " in row, row


def test_a_command_that_exits_3_fails_with_exit_code_3_and_is_released(plane, tmp_path):
    code = "import os, sys; open(sys.argv[1], 'w').write(os.environ['E2E_MODE']); print('giving up'); sys.exit(3)"
    task_id = _submit(plane, tmp_path, "bad", code, {"E2E_MODE": "fail"})

    done = wait_for(f"{task_id} to end", lambda: (t := plane.task(task_id)) and t["status"] in ("COMPLETED", "FAILED")
                    and t, timeout=120)
    assert done["status"] == "FAILED", done
    assert (tmp_path / "bad.out").read_text() == "fail"

    status = plane.cli("status", task_id)
    assert f"{task_id}  FAILED" in status.stdout, status.stdout
    assert "connector: exited with code 3; output: giving up" in status.stdout
    assert "  exit code 3\n" in status.stdout and done["exit_code"] == 3
    event = _final_status_event(plane, task_id)
    assert event["status"] == "FAILED" and event["exit_code"] == 3

    node = wait_for("the node's CPU and memory to be released", lambda: _released(plane), timeout=60)
    assert (node["cpu_used"], node["memory_used"]) == (0, 0)
