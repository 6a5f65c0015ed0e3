"""Model weights followed from `suanli submit` to a real process, and a prewarm from the
scheduler's planner to a real copy, on the real stack (#20, C11).

Two local-process connectors register this machine as two edge nodes at two sites, each
with a model cache of its own (a directory). A task with a model at site 1 goes in through
the CLI: the scheduler places it by its site, the dispatch carries the model, the connector
copies the weights file into node 1's cache before the process starts, and the process reads
them through ``SUANLI_MODEL_PATH``. The prewarm planner (on in the cell's policy) then sees
demand for the model at a site that does not hold it and sends a PrewarmCommand to node 2,
whose connector copies the file; a task with the model at site 2 then starts as a cache hit,
and its decision says where the model was. No mocks; every wait polls a condition.
"""
from __future__ import annotations

import asyncio
import hashlib
import json
import os
import uuid
from pathlib import Path

import pytest
import yaml

from suanli.config import load_settings, to_env
from suanli.deploy.plane import worker_processes
from suanli.streams.kafka_io import ensure_topics
from suanli.streams.topics import TopicNames, core_topics

from test_dispatch_e2e import PY, LocalPlane, start_local_connector, stop_connector, wait_for

pytestmark = [pytest.mark.stack, pytest.mark.timeout(420)]

WEIGHTS_MIB = 48


@pytest.fixture(scope="module")
def two_sites(stack, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("prewarm")
    settings = load_settings(namespace=f"t{uuid.uuid4().hex[:10]}", partitions=1)
    run = uuid.uuid4().hex[:8]
    lp = LocalPlane(settings, cell=f"edge-{run}", node_id=f"pw-a-{run}")
    nodes = {"edge-1": f"pw-a-{run}", "edge-2": f"pw-b-{run}"}
    weights = tmp / "origin" / "model.bin"
    weights.parent.mkdir()
    weights.write_bytes(os.urandom(WEIGHTS_MIB << 20))
    asyncio.run(ensure_topics(settings.bootstrap_servers, core_topics(settings.partitions, settings.namespace)))
    policy = lp.cli("policy", "set", "--no-wait", "--cell", lp.cell, "--config",   # before the workers
                    json.dumps({"profiles": {"enabled": True},
                                "prewarm": {"enabled": True, "period_ms": 1000, "min_use": 0.05}}))
    assert policy.returncode == 0 and "stored" in policy.stdout, policy.stderr
    services = list(worker_processes(settings).values())
    for service, argv in services:
        service.start(argv, env=to_env(settings))
    connectors = []
    try:
        for site, node in nodes.items():
            connectors.append(start_local_connector(
                lp, f"local-{site}", "--node-id", node, "--site", site, "--tier", "edge",
                "--model-cache", str(tmp / site), "--model-cache-mib", "1024", "--interval", "0"))
        for node in nodes.values():
            wait_for(f"{node} in `suanli nodes`",
                     lambda n=node: any(r["node_id"] == n for r in lp.cli_json("nodes", "--cell", lp.cell)),
                     timeout=180)
        yield lp, nodes, weights, tmp
    finally:
        for proc in connectors:
            stop_connector(proc)
        for service, _argv in reversed(services):
            service.stop()


def _submit(lp: LocalPlane, tmp: Path, weights: Path, site: str) -> str:
    task_id = f"infer-{site}-{uuid.uuid4().hex[:6]}"
    out = tmp / f"{task_id}.out"
    code = ("import hashlib, os, sys\n"
            "p = os.environ['SUANLI_MODEL_PATH']\n"
            "open(sys.argv[1], 'w').write(os.environ['SUANLI_MODEL_ARCH'] + '|' + "
            "hashlib.sha256(open(p, 'rb').read()).hexdigest())\n")
    spec = {"id": task_id, "tenant": "e2e", "cell": lp.cell, "resources": {"cpu": 0.2, "memory": "64Mi"},
            "labels": {"user-site": site}, "command": [PY, "-c", code, str(out)],
            "model": {"arch": "e2e-llm@1", "uri": weights.as_uri(), "size_mib": WEIGHTS_MIB}}
    path = tmp / f"{task_id}.yaml"
    path.write_text(yaml.safe_dump(spec))
    done = lp.cli("submit", str(path))
    assert done.returncode == 0 and f"submitted {task_id}" in done.stdout, done.stderr
    return task_id


def test_weights_are_copied_before_the_task_and_prewarmed_where_demand_is_coming(two_sites):
    lp, nodes, weights, tmp = two_sites
    digest = hashlib.sha256(weights.read_bytes()).hexdigest()
    names = TopicNames(lp.s.namespace)

    first = _submit(lp, tmp, weights, "edge-1")
    done = wait_for(f"{first} to end", lambda: (t := lp.task(first)) and t["status"] in ("COMPLETED", "FAILED") and t,
                    timeout=120)
    assert done["status"] == "COMPLETED" and done["node_id"] == nodes["edge-1"], done
    assert (tmp / f"{first}.out").read_text() == f"e2e-llm@1|{digest}"       # the process read the copied weights
    statuses = [r.payload for r in lp.events(names.cell_log)
                if r.kind == "TaskStatusChanged" and r.payload["task_id"] == first]
    assert any(s["status"] == "RUNNING" and "copied" in s["message"] for s in statuses), statuses

    # demand for the model at a site that lacks it: the planner prewarms node 2, its connector copies
    cached = tmp / "edge-2"
    wait_for("the prewarm's copy in node 2's cache",
             lambda: any(p.is_file() and p.stat().st_size == weights.stat().st_size and not p.name.startswith(".")
                         for p in cached.rglob("*")), timeout=120)
    prewarms = [r.payload for r in lp.events(names.dispatch("local-edge-2")) if r.kind == "PrewarmCommand"]
    assert prewarms and prewarms[0]["node_id"] == nodes["edge-2"] and prewarms[0]["model_arch"] == "e2e-llm@1"
    assert prewarms[0]["reason"], prewarms[0]

    second = _submit(lp, tmp, weights, "edge-2")
    done = wait_for(f"{second} to end", lambda: (t := lp.task(second)) and t["status"] in ("COMPLETED", "FAILED")
                    and t, timeout=120)
    assert done["status"] == "COMPLETED" and done["node_id"] == nodes["edge-2"], done
    assert (tmp / f"{second}.out").read_text() == f"e2e-llm@1|{digest}"
    statuses = [r.payload for r in lp.events(names.cell_log)
                if r.kind == "TaskStatusChanged" and r.payload["task_id"] == second]
    assert any(s["status"] == "RUNNING" and "cache hit" in s["message"] for s in statuses), statuses
    placed = [r.payload for r in lp.events(names.decisions)
              if r.kind == "TaskPlaced" and r.payload["task_id"] == second]
    assert placed and any("e2e-llm@1" in n for n in placed[0]["provenance"]["notes"]), placed
    assert placed[0]["provenance"]["profile"]["model_size_gib"] == pytest.approx(WEIGHTS_MIB / 1024)


def test_the_cell_log_replays_identical_with_profiles_and_prewarming_on(two_sites, tmp_path):
    lp, _nodes, weights, tmp = two_sites
    task = _submit(lp, tmp, weights, "edge-1")
    wait_for(f"{task} to end", lambda: (t := lp.task(task)) and t["status"] in ("COMPLETED", "FAILED"), timeout=120)
    out = tmp_path / "log"
    exported = lp.cli("export", "--cell", lp.cell, "--out", str(out))
    assert exported.returncode == 0, exported.stderr
    replayed = lp.cli("replay", str(out), "--verify")
    # the regenerated decisions carry the profiles and the model-cache notes, byte for byte
    assert replayed.returncode == 0 and "IDENTICAL" in replayed.stdout, replayed.stdout + replayed.stderr
