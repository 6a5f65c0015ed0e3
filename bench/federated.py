"""Federated training on the real stack (issue 22): the acceptance runs, measured.

``python -m suanli.bench.federated [--rounds 20] [--only main,plain,...] [--json FILE]``
(with the stack up: ``./bin/suanli stack up``).

A plane of its own in a fresh namespace: the intake and scheduler workers and three
local-process connectors, each this machine registered as a node of its own site
(``cloud-a``, ``cloud-b``, ``cloud-c``), the cell's policy the ``federated`` strategy. Then
``suanli/federated_jobs.py`` runs, one after the other (``--only`` picks some):

* ``main``: 3 clouds x 5 clients, SecAgg+, ``--rounds`` rounds, aggregator by traffic;
* ``plain``: the same with plaintext FedAvg (bytes per round against ``main``);
* ``comm-home`` / ``comm-suanli``: clouds of 3, 5 and 7 clients, plaintext, ``--comm-rounds``
  rounds: the aggregator pinned to the home cloud (cloud-a) without quantisation, against
  Suanli's placement (least weighted traffic) with int8 updates; their cross-cloud bytes;
* ``dropout``: 3 clouds of 2, 2 and 1 clients (5, SecAgg+ threshold 3), ``--dropout-rounds``
  rounds; once round 1 is reported, two client processes of round 2 are SIGKILLed after
  ``--kill-after`` of round 1's wall time: whether round 2 still aggregated, the losses the
  runner saw and the replacements the scheduler placed;
* ``centralised``: the same model trained in one process on the pooled data
  (``connectors/flower/centralised.py``), epoch by epoch: the baseline for the wall time
  to ``--target`` accuracy.

Every figure comes from the runs' results (``JobRound`` events as the runner produced them,
the lifecycle view's placements); nothing is asserted here (``tests/suanli/
test_federated_e2e.py`` runs CI's small version and asserts).
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

SITES = ("cloud-a", "cloud-b", "cloud-c")
SCENARIOS = ("main", "plain", "comm-home", "comm-suanli", "dropout", "centralised")


class Plane:
    """Workers and three site connectors in a fresh namespace on the running stack."""

    def __init__(self) -> None:
        from suanli.config import load_settings

        self.settings = load_settings(namespace=f"bf{uuid.uuid4().hex[:8]}", partitions=1)
        self.cell = f"fed-{uuid.uuid4().hex[:6]}"
        self.services: list[Any] = []
        self.connectors: list[subprocess.Popen] = []
        self.nodes = {site: f"{site}-{self.cell[-6:]}" for site in SITES}

    def env(self) -> dict[str, str]:
        from suanli.config import to_env
        return {**os.environ, **to_env(self.settings)}

    def start(self) -> None:
        from suanli.deploy.plane import worker_processes
        from suanli.config import to_env
        from suanli.streams.kafka_io import ensure_topics
        from suanli.streams.topics import core_topics

        s = self.settings
        names = {site: f"fed{site[-1]}" for site in SITES}
        asyncio.run(ensure_topics(s.bootstrap_servers, core_topics(s.partitions, s.namespace,
                                                                   connectors=tuple(names.values()))))
        for service, argv in worker_processes(s).values():
            service.start(argv, env=to_env(s))
            self.services.append(service)
        for site, name in names.items():
            proc = subprocess.Popen([sys.executable, "-m", "suanli.connectors", "local", "--name", name, "--cell",
                                     self.cell, "--node-id", self.nodes[site], "--site", site, "--tier", "cloud",
                                     "--max-procs", "16", "--interval", "5", "--partitions", "1",
                                     "--log-level", "WARNING"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                    text=True, env=self.env())
            if not proc.stdout.readline().startswith(f"suanli connector {name}: 1 node(s)"):
                raise RuntimeError(f"connector {name} did not start")
            self.connectors.append(proc)
        self._cli("policy", "set", "--cell", self.cell, "--strategy", "federated")
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            rows = json.loads(self._cli("nodes", "--cell", self.cell, "--json"))
            if {r["node_id"] for r in rows} >= set(self.nodes.values()):
                return
            time.sleep(1)
        raise RuntimeError("the three site nodes did not register within 180 s")

    def _cli(self, *args: str) -> str:
        out = subprocess.run([sys.executable, "-m", "suanli", *args], capture_output=True, text=True,
                             env=self.env(), timeout=120)
        if out.returncode != 0:
            raise RuntimeError(f"suanli {' '.join(args)}: {out.stderr}")
        return out.stdout

    def stop(self) -> None:
        for proc in self.connectors:
            proc.terminate()
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
        for service in reversed(self.services):
            service.stop()


def _job(plane: Plane, name: str, clouds: list[int], rounds: int, **extra: Any) -> Any:
    from suanli.federated_jobs import load_spec
    return load_spec({"name": name, "tenant": "bench", "cell": plane.cell, "rounds": rounds, "timeout": "90m",
                      "clouds": [{"site": s, "clients": n} for s, n in zip(SITES, clouds)], **extra})


def summarise(result: Any, target: float) -> dict[str, Any]:
    """The figures of one run's result: accuracy per round, bytes, time to ``target``."""
    from suanli.federated_jobs import cross_site_bytes

    rounds = result.rounds
    acc = [r["accuracy"] for r in rounds]
    up = [sum(r["bytes_up"].values()) for r in rounds]
    down = [sum(r["bytes_down"].values()) for r in rounds]
    cross = [cross_site_bytes(r["links"]) for r in rounds]
    clients = [len(r["clients"]) for r in rounds]
    elapsed, reached = 0, None
    for r in rounds:
        elapsed += r["wall_ms"]
        if reached is None and r["accuracy"] is not None and r["accuracy"] >= target:
            reached = {"round": r["round"], "rounds_wall_s": round(elapsed / 1000, 2)}
    n = max(1, len(rounds))
    return {"ok": result.ok, "reason": result.reason, "seconds": result.seconds, "rounds": len(rounds),
            "accuracy": [None if a is None else round(a, 4) for a in acc], "clients": clients,
            "bytes_per_round": round((sum(up) + sum(down)) / n), "bytes_up_per_client_round":
            round(sum(up) / max(1, sum(clients))), "bytes_down_per_client_round": round(sum(down) / max(1, sum(clients))),
            "cross_site_bytes_per_round": round(sum(cross) / n), "to_target": reached,
            "placement": result.placement, "lost": result.lost, "replacements": result.replacements}


def _killer(plane: Plane, job_dir: Path, report: Path, kill_after: float, victims: int, out: dict) -> None:
    """Once round 1 is reported, SIGKILL ``victims`` client processes of the job after
    ``kill_after`` x round 1's wall time (into round 2); what it killed goes to ``out``."""
    while not report.exists() or not report.read_text().strip():
        if out.get("stop"):
            return
        time.sleep(0.2)
    first = json.loads(report.read_text().splitlines()[0])
    time.sleep(kill_after * first["wall_ms"] / 1000)
    pids = subprocess.run(["pgrep", "-f", f"client.py.*--work-dir {job_dir}/"], capture_output=True,
                          text=True).stdout.split()
    killed = []
    for pid in sorted(pids, key=int)[:victims]:
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        try:
            os.killpg(os.getpgid(int(pid)), signal.SIGKILL)
        except ProcessLookupError:
            continue
        killed.append(cmd[cmd.index(b"--partition-id") + 1].decode())
    out.update(killed_partitions=killed, killed_at_s_into_round_2=round(kill_after * first["wall_ms"] / 1000, 2))


def run(args: argparse.Namespace) -> dict[str, Any]:
    from suanli.deploy.flower import ensure_venv
    from suanli.federated_jobs import FederatedRunner, Ports, free_ports, plan

    python = str(ensure_venv())
    only = args.only.split(",") if args.only else list(SCENARIOS)
    figures: dict[str, Any] = {"command": " ".join(["python -m suanli.bench.federated", *sys.argv[1:]]),
                               "machine": f"{os.cpu_count()} CPUs", "target_accuracy": args.target}
    if "centralised" in only:
        out = subprocess.run([python, str(Path(__file__).resolve().parent.parent / "connectors" / "flower" /
                                          "centralised.py"), "--epochs", "20"], capture_output=True, text=True,
                             check=True)
        epochs = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
        hit = next((e for e in epochs if e["accuracy"] >= args.target), None)
        figures["centralised"] = {"epochs": epochs, "to_target": hit}
    plane = Plane()
    plane.start()
    try:
        scenarios = {
            "main": ("main", [5, 5, 5], args.rounds, {"secagg": True}),
            "plain": ("plain", [5, 5, 5], args.rounds, {"secagg": False}),
            "comm-home": ("home", [3, 5, 7], args.comm_rounds, {"secagg": False, "aggregator": "home"}),
            "comm-suanli": ("suanli", [3, 5, 7], args.comm_rounds, {"secagg": False, "quantise": "int8"}),
            "dropout": ("dropout", [2, 2, 1], args.dropout_rounds, {"secagg": True, "threshold": 3}),
        }
        for key, (name, clouds, rounds, extra) in scenarios.items():
            if key not in only:
                continue
            job = _job(plane, name, clouds, rounds, **extra)
            job_id = f"{name}-{uuid.uuid4().hex[:6]}"
            job_dir = Path(plane.settings.home) / "bench-fed" / job_id
            numbers = free_ports(1 + job.num_clients)
            ports = Ports(numbers[0], tuple(numbers[1:]))
            planned = plan(job, job_id=job_id, job_dir=job_dir, ports=ports, python=python)
            print(f"== {key}: {job.num_clients} clients {clouds}, {rounds} rounds, {extra}", flush=True)
            kill: dict[str, Any] = {}
            killer = None
            if key == "dropout":
                killer = threading.Thread(target=_killer, args=(plane, job_dir, planned.report, args.kill_after, 2,
                                                                kill), daemon=True)
                killer.start()
            runner = FederatedRunner(job, planned, settings=plane.settings, ports=ports, python=python,
                                     say=lambda line: print("   " + line, flush=True))
            result = asyncio.run(runner.run())
            kill["stop"] = True
            figures[key] = summarise(result, args.target)
            if key == "dropout":
                figures[key]["killed"] = {k: v for k, v in kill.items() if k != "stop"}
                figures[key]["round_2"] = next((r for r in result.rounds if r["round"] == 2), None)
    finally:
        plane.stop()
    if all(figures.get(k, {}).get("ok") for k in ("comm-home", "comm-suanli")):
        home, suanli = figures["comm-home"], figures["comm-suanli"]
        figures["comm_cross_site_change_pct"] = round(
            100 * (suanli["cross_site_bytes_per_round"] / max(1, home["cross_site_bytes_per_round"]) - 1), 1)
    if all(figures.get(k, {}).get("ok") for k in ("main", "plain")):
        figures["secagg_bytes_ratio"] = round(figures["main"]["bytes_per_round"]
                                              / max(1, figures["plain"]["bytes_per_round"]), 2)
    return figures


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m suanli.bench.federated", description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--comm-rounds", type=int, default=5)
    ap.add_argument("--dropout-rounds", type=int, default=3)
    ap.add_argument("--kill-after", type=float, default=0.6, help="share of round 1's wall time into round 2")
    ap.add_argument("--target", type=float, default=0.9, help="the accuracy the wall times are measured to")
    ap.add_argument("--only", help=f"comma-separated of {', '.join(SCENARIOS)}")
    ap.add_argument("--json", help="write the figures to this file")
    args = ap.parse_args(argv)
    figures = run(args)
    text = json.dumps(figures, indent=1)
    if args.json:
        Path(args.json).write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
