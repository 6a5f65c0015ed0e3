"""Fixtures of the API tests.

Unit tests build the app over an in-memory :class:`ReadModel` and a :class:`ListSink`
(no Kafka). Stack tests start ``suanli api serve`` as a subprocess on loopback in a
namespace of their own (see :func:`api_server`).
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from api_helpers import TOKENS, ListSink, make_service, write_tokens  # noqa: E402


@pytest.fixture()
def tokens_file(tmp_path: Path) -> Path:
    return write_tokens(tmp_path / "tokens.toml")


@pytest.fixture()
def sink() -> ListSink:
    return ListSink()


@pytest.fixture()
def service(sink):
    return make_service(sink)


@pytest.fixture()
def client(service, tokens_file):
    from fastapi.testclient import TestClient

    from suanli.api.auth import TokenStore
    from suanli.api.rest import create_app

    with TestClient(create_app(service, TokenStore.from_file(tokens_file))) as c:
        yield c


@pytest.fixture()
def alpha() -> dict[str, str]:
    return {"Authorization": f"Bearer {TOKENS['alpha']}"}


@pytest.fixture()
def beta() -> dict[str, str]:
    return {"Authorization": f"Bearer {TOKENS['beta']}"}


@pytest.fixture(scope="session")
def go_client(tmp_path_factory) -> Path:
    """The Go gRPC client of clients/grpc-go, built once (fails if Go is missing: CI installs it)."""
    import shutil
    import subprocess

    from api_helpers import GO_BIN, GO_DIR

    go = shutil.which("go") or (GO_BIN if Path(GO_BIN).exists() else None)
    if go is None:
        pytest.fail("the go command is not installed: .ci/setup.d/30-api.sh installs it")
    out = tmp_path_factory.mktemp("go") / "suanli-grpc"
    build = subprocess.run([go, "build", "-o", str(out), "./cmd/suanli-grpc"], cwd=GO_DIR, capture_output=True,
                           text=True, timeout=600)
    assert build.returncode == 0, build.stderr
    return out
