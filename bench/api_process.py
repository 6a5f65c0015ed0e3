"""``suanli api serve`` in a subprocess for a bench: started on free loopback ports with its
own token file and log, ready (``/healthz``) before it is handed out, stopped afterwards."""
from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import httpx

from suanli.api.auth import hash_token
from suanli.config import Settings, to_env
from suanli.deploy.processes import stop_child
from suanli.errors import StackError


@dataclass
class BenchApi:
    proc: subprocess.Popen
    url: str
    log_path: Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def bench_api(settings: Settings, log_dir: Path, tokens: dict[str, str], *, name: str = "api",
              env: dict[str, str] | None = None, ready_timeout: float = 90.0) -> Iterator[BenchApi]:
    """A ready ``suanli api serve`` of ``settings``' namespace; ``tokens``: token -> tenant
    (written as digests); ``env``: more environment (``SUANLI_API_*`` settings)."""
    log_dir.mkdir(parents=True, exist_ok=True)
    stem = f"{settings.namespace}-{name}"
    token_file = log_dir / f"{stem}-tokens.toml"
    token_file.write_text("[tokens]\n" + "".join(f'"{hash_token(t)}" = "{tenant}"\n' for t, tenant in tokens.items()))
    port, grpc_port = free_port(), free_port()
    api = BenchApi(None, f"http://127.0.0.1:{port}", log_dir / f"{stem}.log")   # type: ignore[arg-type]
    with open(api.log_path, "w") as log:
        api.proc = subprocess.Popen([sys.executable, "-m", "suanli", "api", "serve", "--port", str(port),
                                     "--grpc-port", str(grpc_port), "--tokens", str(token_file)],
                                    env={**os.environ, **to_env(settings), **(env or {})}, stdout=log,
                                    stderr=subprocess.STDOUT)
    try:
        _wait_ready(api, ready_timeout)
        yield api
    finally:
        stop_child(api.proc)


def _wait_ready(api: BenchApi, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if api.proc.poll() is not None:
            raise StackError(f"suanli api serve exited {api.proc.returncode}: {api.log_path.read_text()[-2000:]}")
        try:
            if httpx.get(f"{api.url}/healthz", timeout=2).json().get("ready"):
                return
        except (httpx.HTTPError, ValueError):
            pass
        time.sleep(0.3)
    raise StackError(f"suanli api serve not ready after {timeout:.0f}s (log: {api.log_path})")
