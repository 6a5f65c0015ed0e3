"""Helpers of the API tests: tokens, an in-memory sink, hand-made log records, and a
``suanli api serve`` subprocess on loopback."""
from __future__ import annotations

import contextlib
import json
import os
import uuid
import socket
import ssl
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from suanli.api.models import LogPosition

TOKENS = {"alpha": "tok-alpha-0123456789", "beta": "tok-beta-9876543210"}
REPO = Path(__file__).resolve().parents[2]
GO_DIR = REPO / "clients" / "grpc-go"
GO_BIN = "/usr/local/go/bin/go"     # where the polyglot image keeps Go, when it is not on PATH


def go_env() -> dict[str, str]:
    """The environment with Go's directory on PATH."""
    return {**os.environ, "PATH": f"{os.environ.get('PATH', '')}:{Path(GO_BIN).parent}"}


def write_tokens(path: Path) -> Path:
    lines = ["[tokens]"] + [f'"{token}" = "{tenant}"' for tenant, token in TOKENS.items()]
    path.write_text("\n".join(lines) + "\n")
    return path


class ListSink:
    """An EventSink that keeps what it is given (and encodes nothing)."""

    def __init__(self) -> None:
        self.events: list[tuple[str, dict[str, Any]]] = []

    async def publish(self, kind: str, payload: dict[str, Any]) -> LogPosition:
        self.events.append((kind, payload))
        return LogPosition(topic="raw", partition=0, offset=len(self.events) - 1)


def make_service(sink: ListSink, model=None):
    from suanli.api.audit import FollowerAuditSource
    from suanli.api.readmodel import ReadModel
    from suanli.api.service import ApiService

    model = model or ReadModel()
    return ApiService(model, sink, FollowerAuditSource(model), namespace="unit", clock=lambda: 1_700_000_000.0)


# ------------------------------------------------------------------ hand-made records
def node(node_id: str = "n1", cell: str = "c", gpus: int = 2) -> tuple[str, str, dict]:
    return ("cell_log", "NodeRegistered", {
        "event_id": f"reg-{node_id}", "node_id": node_id, "cell": cell, "cpu_milli": 8000, "memory_mib": 16384,
        "connector": "sim", "accelerators": [{"kind": "GPU", "model": "T4", "count": gpus, "memory_mib": 0}]})


def submitted(task_id: str, tenant: str, cell: str = "c", priority: int = 0) -> tuple[str, str, dict]:
    return ("cell_log", "TaskSubmitted", {
        "event_id": f"sub-{task_id}", "task_id": task_id, "tenant": tenant, "cell": cell, "submitted_at": 1,
        "priority": priority, "qos_tier": "SILVER",
        "resources": {"cpu_milli": 1000, "memory_mib": 1024, "gpu_count": 1, "gpu_milli": 500}})


def provenance(offset: int, path: list[str]) -> dict[str, Any]:
    return {"input": {"topic": "x.cells", "partition": 0, "offset": offset},
            "strategy": {"name": "bestfit", "version": "1", "config_digest": "abc"},
            "candidates": [{"node_id": "n1", "score": 0.75, "rank": 1}],
            "filtered": [{"reason": "insufficient gpu milli", "nodes": 3, "sample": ["n2"]}],
            "path": path, "decided_at": 1000 + offset, "matched_rule": None}


def placed(task_id: str, tenant: str, cell: str = "c", offset: int = 5) -> tuple[str, str, dict]:
    return ("decisions", "TaskPlaced", {
        "event_id": f"d-{task_id}-{offset}", "decision_id": f"{cell}/x/0/{offset}/0", "task_id": task_id,
        "tenant": tenant, "cell": cell, "node_id": "n1", "gpu_devices": [0], "gpu_milli": 500, "cpu_milli": 1000,
        "memory_mib": 1024, "provenance": provenance(offset, ["filter: 1 of 4 nodes fit", "score: bestfit",
                                                              "place on n1 GPU 0"])})


def pending(task_id: str, tenant: str, cell: str = "c", offset: int = 6) -> tuple[str, str, dict]:
    return ("decisions", "TaskPending", {
        "event_id": f"d-{task_id}-{offset}", "decision_id": f"{cell}/x/0/{offset}/0", "task_id": task_id,
        "tenant": tenant, "cell": cell, "reasons": [{"reason": "insufficient gpu milli", "nodes": 4}],
        "queue_position": 1, "provenance": provenance(offset, ["filter: 0 of 4 nodes fit", "queue"])})


def released(task_id: str, tenant: str, cell: str = "c", offset: int = 9) -> tuple[str, str, dict]:
    return ("decisions", "TaskReleased", {
        "event_id": f"d-{task_id}-{offset}", "decision_id": f"{cell}/x/0/{offset}/0", "task_id": task_id,
        "tenant": tenant, "cell": cell, "node_id": "n1", "cause": "COMPLETED", "gpu_devices": [0],
        "provenance": provenance(offset, ["completed", "release n1"])})


def feed(model, *records: tuple[str, str, dict]) -> None:
    for i, (role, kind, payload) in enumerate(records):
        model.apply(role, kind, payload, f"x.{role}", 0, i)


# ------------------------------------------------------------------ a live server
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ApiProcess:
    """``suanli api serve`` in a subprocess for one namespace; stopped by its pid."""

    def __init__(self, settings, tokens_file: Path, log_file: Path, *, tls: tuple[Path, Path] | None = None,
                 extra: tuple[str, ...] = ()):
        """``tls``: (certificate, key) PEM files to serve TLS with; clients then verify against
        the certificate. ``extra``: more ``suanli api serve`` options."""
        from suanli.config import to_env

        self.settings = settings
        self.port, self.grpc_port = free_port(), free_port()
        self.verify: Any = ssl.create_default_context(cafile=str(tls[0])) if tls else True
        self.url = f"{'https' if tls else 'http'}://127.0.0.1:{self.port}"
        tls_args = ["--tls-cert", str(tls[0]), "--tls-key", str(tls[1])] if tls else []
        self.grpc_address = f"127.0.0.1:{self.grpc_port}"
        self.log_file = log_file
        env = {**os.environ, **to_env(settings), "SUANLI_API_TOKENS": str(tokens_file)}
        self._log = open(log_file, "w")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "suanli", "api", "serve", "--port", str(self.port), "--grpc-port",
             str(self.grpc_port), "--log-level", "warning", *tls_args, *extra],
            cwd=REPO, env=env, stdout=self._log, stderr=subprocess.STDOUT)

    def wait_ready(self, timeout: float = 90.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"api server exited {self.proc.returncode}:\n{self.log_file.read_text()}")
            try:
                if httpx.get(f"{self.url}/healthz", timeout=2, verify=self.verify).json().get("ready"):
                    return
            except (httpx.HTTPError, json.JSONDecodeError):
                pass
            time.sleep(0.3)
        raise RuntimeError(f"api server not ready after {timeout}s:\n{self.log_file.read_text()}")

    def stop(self) -> None:
        from suanli.deploy.processes import stop_child

        stop_child(self.proc)
        self._log.close()

    def client(self, tenant: str | None) -> httpx.Client:
        headers = {"Authorization": f"Bearer {TOKENS[tenant]}"} if tenant else {}
        return httpx.Client(base_url=self.url, headers=headers, timeout=30, verify=self.verify)


@contextlib.contextmanager
def running_api(tmp: Path, partitions: int = 1):
    """A live ``suanli api serve`` in a fresh namespace, ready, stopped afterwards."""
    from suanli.config import load_settings

    settings = load_settings(namespace=f"t{uuid.uuid4().hex[:10]}", partitions=partitions)
    server = ApiProcess(settings, write_tokens(tmp / "tokens.toml"), tmp / "api.log")
    try:
        server.wait_ready()
        yield server
    finally:
        server.stop()


@contextlib.contextmanager
def plane_with_api(tmp: Path, nodes: int, **settings: Any):
    """A control plane (intake, scheduler, ``nodes`` simulated openb nodes, time at 1x) and a
    ready ``suanli api serve`` in front of it, in a fresh namespace with ``settings`` on top;
    yields (plane, api), both stopped afterwards."""
    from suanli.config import load_settings
    from suanli.deploy.plane import Plane, PlaneOptions

    csv = tmp / "nodes.csv"
    all_nodes = (load_settings().openb_dir / "openb_node_list_gpu_node.csv").read_text().splitlines()
    csv.write_text("\n".join(all_nodes[:1] + all_nodes[300:300 + nodes]) + "\n")
    config = load_settings(namespace=f"t{uuid.uuid4().hex[:10]}", partitions=1, **settings)
    plane = Plane(config, PlaneOptions(tasks=0, time_scale=1.0, quiet=True, nodes_csv=csv), out=lambda _m: None)
    plane.start()
    server = None
    try:
        server = ApiProcess(config, write_tokens(tmp / "tokens.toml"), tmp / "api.log")
        server.wait_ready()
        yield plane, server
    finally:
        if server is not None:
            server.stop()
        plane.stop()


def run_go(binary: Path, api: ApiProcess, tenant: str, *args: str) -> subprocess.CompletedProcess:
    """Run the Go client against ``api`` with ``tenant``'s token (from $SUANLI_API_TOKEN)."""
    env = {**os.environ, "SUANLI_API_TOKEN": TOKENS[tenant]}
    return subprocess.run([str(binary), "-addr", api.grpc_address, *args], capture_output=True, text=True,
                          env=env, timeout=60)
