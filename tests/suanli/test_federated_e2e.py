"""A federated training job end to end on the real stack (issue 22; CI's small version).

The plane is the real one in a namespace of its own: the intake and scheduler workers and
three local-process connectors, each this machine registered as one node of its own site
("cloud-a", "cloud-b", "cloud-c"). ``suanli job fed run`` (the real command line) runs 3
clients with secure aggregation (Flower SecAgg+) for 3 rounds on scikit-learn's digits:
one client's data is at cloud-a, two clients' at cloud-b. The cell's policy is the
``federated`` strategy: the scheduler pins each client to its data's site and puts the aggregator where the clients' traffic costs least: cloud-b,
not the home cloud cloud-a. Every round comes back through intake as a ``JobRound`` on the
cell log, with the accuracy, the contributing clients and their bytes per site pair; the
aggregator's TaskPlaced carries the placement's reason. The Flower processes are real
(``flower-superlink``, ``flower-supernode``, the ServerApp), started by the connectors as
the tasks' commands. No mocks; every wait polls a condition.
"""
from __future__ import annotations

import asyncio
import json
import subprocess
import uuid

import pytest
import yaml

from suanli.config import load_settings, to_env
from suanli.deploy.plane import worker_processes
from suanli.streams.kafka_io import EventConsumer, ensure_topics
from suanli.streams.topics import TopicNames, core_topics

from test_dispatch_e2e import PY, LocalPlane, start_local_connector, stop_connector, wait_for

pytestmark = [pytest.mark.stack, pytest.mark.timeout(900)]

SITES = ("cloud-a", "cloud-b", "cloud-c")


@pytest.fixture(scope="module")
def clouds(stack, tmp_path_factory):
    from suanli.deploy.flower import ensure_venv

    python = str(ensure_venv())
    settings = load_settings(namespace=f"t{uuid.uuid4().hex[:10]}", partitions=1)
    run = uuid.uuid4().hex[:6]
    lp = LocalPlane(settings, cell=f"fed-{run}", node_id="")
    names = {site: f"fed{site[-1]}" for site in SITES}
    asyncio.run(ensure_topics(settings.bootstrap_servers, core_topics(settings.partitions, settings.namespace,
                                                                      connectors=tuple(names.values()))))
    services = list(worker_processes(settings).values())
    for service, argv in services:
        service.start(argv, env=to_env(settings))
    connectors, nodes = [], {}
    try:
        for site, name in names.items():
            nodes[site] = f"{site}-{run}"
            connectors.append(start_local_connector(lp, name, "--node-id", nodes[site], "--site", site,
                                                    "--tier", "cloud", "--max-procs", "8", "--interval", "5"))
        for node in nodes.values():
            wait_for(f"{node} in `suanli nodes`",
                     lambda n=node: any(r["node_id"] == n for r in lp.cli_json("nodes", "--cell", lp.cell)),
                     timeout=180)
        # the cell places its federated tasks with the `federated` strategy (data sites, traffic)
        policy = lp.cli("policy", "set", "--cell", lp.cell, "--strategy", "federated")
        assert policy.returncode == 0, policy.stderr
        yield lp, nodes, python, tmp_path_factory.mktemp("fed")
    finally:
        for proc in connectors:
            stop_connector(proc)
        for service, _argv in reversed(services):
            service.stop()


def _topic(lp: LocalPlane, name: str) -> list:
    """Every record of the namespace's topic ``name`` (a TopicNames attribute) up to its end offsets now."""
    from suanli.schemas.codec import Codec
    from suanli.schemas.registry import RegistryClient

    async def read() -> list:
        with RegistryClient(lp.s.registry_url) as registry:
            async with EventConsumer(lp.s.bootstrap_servers, Codec(registry),
                                     [getattr(TopicNames(lp.s.namespace), name)]) as consumer:
                return await consumer.read_until_end()

    return asyncio.run(read())


def test_three_clients_with_secagg_train_for_three_rounds_placed_by_data_site_and_traffic(clouds):
    lp, nodes, python, tmp = clouds
    job = {"name": "digits", "tenant": "e2e", "cell": lp.cell, "rounds": 3, "secagg": True, "timeout": "10m",
           "clouds": [{"site": "cloud-a", "clients": 1}, {"site": "cloud-b", "clients": 2}]}
    path, out = tmp / "fed.yaml", tmp / "result.json"
    path.write_text(yaml.safe_dump(job))
    run = subprocess.run([PY, "-m", "suanli", "job", "fed", "run", str(path), "--run-id", "ci", "--json", str(out),
                          "--python", python], capture_output=True, text=True, env=lp.env, timeout=800)
    assert run.returncode == 0, f"exit {run.returncode}\n{run.stdout[-4000:]}\n{run.stderr[-4000:]}"
    result = json.loads(out.read_text())
    job_id = "digits-ci"
    assert result["ok"] and len(result["rounds"]) == 3, result

    # placement: each client at its data's site; the aggregator with the two cloud-b clients
    placed = result["placement"]
    assert placed[f"{job_id}-c0"]["node"] == nodes["cloud-a"]
    assert placed[f"{job_id}-c1"]["node"] == placed[f"{job_id}-c2"]["node"] == nodes["cloud-b"]
    assert placed[f"{job_id}-agg"]["node"] == nodes["cloud-b"], placed

    # every round is on the cell log as a JobRound, with who contributed and what they sent
    records = _topic(lp, "cell_log")
    rounds = sorted((r.payload for r in records if r.kind == "JobRound" and r.payload["job_id"] == job_id),
                    key=lambda e: e["round"])
    assert [e["round"] for e in rounds] == [1, 2, 3]
    for e in rounds:
        assert e["secagg"] and e["aggregated"] and len(e["clients"]) == 3, e
        assert all(e["bytes_up"][t] > 0 and e["bytes_down"][t] > 0 for t in e["clients"]), e
        pairs = {(ln["src_site"], ln["dst_site"]) for ln in e["links"]}
        assert pairs == {("cloud-a", "cloud-b"), ("cloud-b", "cloud-a"), ("cloud-b", "cloud-b")}, e["links"]
    accuracy = [e["accuracy"] for e in rounds]
    assert accuracy[-1] > accuracy[0] and accuracy[-1] > 0.5, accuracy

    # the aggregator's placement says why it went where it went
    placed_agg = next(d.payload for d in _topic(lp, "decisions") if d.kind == "TaskPlaced"
                      and d.payload["task_id"] == f"{job_id}-agg")
    assert "cloud-b" in json.dumps(placed_agg["provenance"]), placed_agg["provenance"]

    # the clients were cancelled when the aggregator finished: nothing of the job is left running
    for tid in placed:
        status = lp.task(tid)
        assert status is not None and status["status"] in ("COMPLETED", "CANCELLED"), (tid, status)

