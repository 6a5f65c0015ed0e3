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
        assert policy.returncode == 0 and "in force: cell log" in policy.stdout, policy.stdout + policy.stderr
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



def _submit_waiting_task(lp: LocalPlane, tmp, task_id: str, *, site: str, cpu_milli: int, qos: str,
                         until: str) -> None:
    """A task pinned to ``site`` (``data-site``) holding ``cpu_milli`` until the file ``until`` exists."""
    code = "import os, sys, time\nwhile not os.path.exists(sys.argv[1]):\n    time.sleep(0.2)\n"
    spec = {"id": task_id, "tenant": "e2e", "cell": lp.cell, "qos": qos, "labels": {"data-site": site},
            "resources": {"cpu": cpu_milli / 1000, "memory": "64Mi"}, "command": [PY, "-c", code, until]}
    path = tmp / f"{task_id}.yaml"
    path.write_text(yaml.safe_dump(spec))
    out = lp.cli("submit", str(path))
    assert out.returncode == 0, out.stderr


def test_an_elastic_job_grows_when_capacity_frees_and_shrinks_when_gold_work_waits(clouds):
    """Fillers hold cloud-a and cloud-b but one client's room each; the job starts with 2 of
    its 4 partitions. Once round 1 is in, the fillers end: the core grows the job onto the
    freed capacity (JobResized grow) and the runner adds the clients. Then a gold task that
    needs more of cloud-a than is free waits: the core shrinks the job (JobResized shrink, its
    reason the waiting gold task) until the gold task is placed. Each resize is in the audit
    with its reason, and the cell log replays IDENTICAL."""
    lp, nodes, python, tmp = clouds
    cap = {n["node_id"]: n["cpu_milli"] for n in lp.cli_json("nodes", "--cell", lp.cell)}
    client_cpu, run = 200, uuid.uuid4().hex[:4]
    freed, gold_done = tmp / f"freed-{run}", tmp / f"gold-{run}"
    fillers = {site: f"filler-{site}-{run}" for site in ("cloud-a", "cloud-b")}
    for site, tid in fillers.items():        # leaves 100m beside one client: no second client fits
        _submit_waiting_task(lp, tmp, tid, site=site, cpu_milli=cap[nodes[site]] - client_cpu - 100, qos="silver",
                             until=str(freed))
    for tid in fillers.values():
        wait_for(f"{tid} running", lambda t=tid: (s := lp.task(t)) and s["status"] == "RUNNING", timeout=120)

    job = {"name": "grow", "tenant": "e2e", "cell": lp.cell, "rounds": 12, "secagg": False, "timeout": "12m",
           "clouds": [{"site": "cloud-a", "clients": 2}, {"site": "cloud-b", "clients": 2}],
           "client_resources": {"cpu": client_cpu / 1000, "memory": "64Mi"},
           "elastic": {"min_clients": 2, "max_clients": 4, "window": 1, "plateau": 0.0001, "batch_size": 32,
                       "start_clients": 2}}
    path, out = tmp / f"elastic-{run}.yaml", tmp / f"elastic-{run}.json"
    path.write_text(yaml.safe_dump(job))
    job_id = f"grow-{run}"
    runner = subprocess.Popen([PY, "-m", "suanli", "job", "fed", "run", str(path), "--run-id", run, "--json", str(out),
                               "--python", python], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              env=lp.env)
    try:
        def rounds() -> list:
            return sorted((r.payload for r in _topic(lp, "cell_log")
                           if r.kind == "JobRound" and r.payload["job_id"] == job_id), key=lambda e: e["round"])

        def resizes() -> list:
            return [r.payload for r in _topic(lp, "decisions")
                    if r.kind == "JobResized" and r.payload["job_id"] == job_id]

        wait_for("round 1", lambda: rounds(), timeout=300)
        assert not resizes(), "no slot was free: the job must not have grown yet"
        freed.write_text("go")                                     # the fillers end: capacity frees up
        grown = wait_for("a grow decision", lambda: [r for r in resizes() if r["action"] == "grow"], timeout=300)
        assert (grown[0]["clients_from"], grown[0]["clients_to"]) == (2, 4), grown
        wait_for("a round with 4 clients", lambda: any(len(e["clients"]) == 4 for e in rounds()), timeout=300)

        # gold work that needs cloud-a's room beyond what is free now (4 clients: 2 at cloud-a) waits
        gold = f"gold-{run}"
        _submit_waiting_task(lp, tmp, gold, site="cloud-a", cpu_milli=cap[nodes["cloud-a"]] - client_cpu - 50,
                             qos="gold", until=str(gold_done))
        wait_for(f"{gold} placed", lambda: (s := lp.task(gold)) and s["status"] in ("PLACED", "DISPATCHED", "RUNNING"),
                 timeout=400)
        gold_done.write_text("done")
        shrinks = [r for r in resizes() if r["action"] == "shrink"]
        assert shrinks and shrinks[-1]["clients_to"] == 2, resizes()
        assert all("gold tasks wait" in r["reason"] for r in shrinks), shrinks
        runner_out, _ = runner.communicate(timeout=600)
    finally:
        if runner.poll() is None:
            runner.kill()
            runner.communicate()
        freed.write_text("go")
        gold_done.write_text("done")
    assert runner.returncode == 0, runner_out[-4000:]
    result = json.loads(out.read_text())
    assert result["ok"], result
    assert [(r["action"], r["clients_to"]) for r in result["resizes"]][:1] == [("grow", 4)], result["resizes"]
    assert "grow 2 -> 4 clients" in runner_out and "shrink" in runner_out

    # a client cancelled by a shrink really stopped (its connector got a StopCommand and
    # reported the process's end) while the job still ran, not when everything ended
    log = _topic(lp, "cell_log")
    ended = {}
    for r in log:
        if r.kind == "TaskStatusChanged" and r.payload["status"] in ("COMPLETED", "FAILED"):
            ended.setdefault(r.payload["task_id"], r.offset)
    shrunk = [t for r in result["resizes"] if r["action"] == "shrink" for t in r["cancelled"]]
    assert len(shrunk) == 2 and all(t in ended for t in shrunk), (shrunk, ended)
    assert all(ended[t] < ended[f"{job_id}-agg"] for t in shrunk), (shrunk, ended)

    # the audit has each resize with its reason, under the job
    rows = lp.cli_json("audit", "list", "--job", job_id, "--kind", "resize")["decisions"]
    assert len(rows) == len(resizes()) >= 2, rows
    assert any("slots free" in " ".join(r["path"]) for r in rows) and any("gold" in " ".join(r["path"]) for r in rows)

    # and the cell log, rounds and all, replays to the same decisions
    exported_log = tmp / f"log-{run}"
    exported = lp.cli("export", "--cell", lp.cell, "--out", str(exported_log))
    assert exported.returncode == 0, exported.stderr
    replayed = lp.cli("replay", str(exported_log), "--verify")
    assert replayed.returncode == 0 and "IDENTICAL" in replayed.stdout, replayed.stdout + replayed.stderr
