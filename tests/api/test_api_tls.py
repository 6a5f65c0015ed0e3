"""``suanli api serve --tls-cert/--tls-key`` on the real stack: REST and gRPC speak TLS only,
a plaintext client is refused on both ports, a task submitted over TLS reaches the raw topic,
and the server's log holds no token (the token file keeps one tenant's token in plain text,
which the server names with a warning, and the other's digest)."""
from __future__ import annotations

import asyncio
import shutil
import subprocess
import uuid
from pathlib import Path

import grpc
import httpx
import pytest
from api_helpers import TOKENS, ApiProcess

from suanli.api import suanli_pb2 as pb
from suanli.api import suanli_pb2_grpc as pb_grpc
from suanli.api.auth import hash_token
from suanli.config import load_settings

pytestmark = pytest.mark.stack


def _self_signed(tmp: Path) -> tuple[Path, Path]:
    openssl = shutil.which("openssl")
    assert openssl, "openssl (Debian package 'openssl') must be installed: .ci/setup.d/00-debian.sh installs it"
    cert, key = tmp / "api.crt", tmp / "api.key"
    subprocess.run([openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(cert),
                    "-days", "1", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
                   check=True, capture_output=True, timeout=60)
    return cert, key


def test_the_api_serves_tls_only_and_logs_no_token(stack, tmp_path):
    cert, key = _self_signed(tmp_path)
    tokens = tmp_path / "tokens.toml"
    tokens.write_text(f'[tokens]\n"{TOKENS["alpha"]}" = "alpha"\n"{hash_token(TOKENS["beta"])}" = "beta"\n')
    settings = load_settings(namespace=f"t{uuid.uuid4().hex[:10]}")
    api = ApiProcess(settings, tokens, tmp_path / "api.log", tls=(cert, key), extra=("--log-level", "info"))
    try:
        api.wait_ready()
        task = f"tls-{uuid.uuid4().hex[:8]}"
        with api.client("alpha") as alpha, api.client("beta") as beta:
            r = alpha.post("/v1/tasks", json={"id": task, "resources": {"cpu": 1, "memory": "1Gi"}})
            assert r.status_code == 202, r.text
            assert r.json()["position"]["offset"] >= 0          # on the raw topic: the broker acknowledged it
            assert beta.get("/v1/tasks").status_code == 200      # the hashed token works as well
        # a plaintext HTTP client on the TLS port gets no answer
        with pytest.raises(httpx.HTTPError):
            httpx.get(f"http://127.0.0.1:{api.port}/healthz", timeout=5)

        async def over_grpc() -> tuple[pb.Health, grpc.StatusCode]:
            creds = grpc.ssl_channel_credentials(root_certificates=cert.read_bytes())
            async with grpc.aio.secure_channel(api.grpc_address, creds) as channel:
                health = await pb_grpc.SuanliStub(channel).GetHealth(pb.HealthRequest(), timeout=10)
            async with grpc.aio.insecure_channel(api.grpc_address) as channel:
                with pytest.raises(grpc.aio.AioRpcError) as refused:
                    await pb_grpc.SuanliStub(channel).GetHealth(pb.HealthRequest(), timeout=5)
            return health, refused.value.code()

        health, refused = asyncio.run(over_grpc())
        assert health.ready
        assert refused == grpc.StatusCode.UNAVAILABLE
    finally:
        api.stop()
    log = (tmp_path / "api.log").read_text()
    assert "REST https://127.0.0.1:" in log and "(TLS)" in log
    assert "tokens of alpha in plain text" in log
    assert all(token not in log for token in TOKENS.values())
    assert "Bearer" not in log
