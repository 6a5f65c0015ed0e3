"""The Go gRPC client (clients/grpc-go) against a live ``suanli api serve``, and its
committed stubs against the proto. ``test_api_with_plane.py`` also follows a task the Go
client submits to its placement."""
from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import uuid

import pytest
from api_helpers import GO_DIR, go_env, run_go, running_api

from suanli.schemas.codec import Codec
from suanli.schemas.registry import RegistryClient
from suanli.streams.kafka_io import end_offsets, read_range
from suanli.streams.topics import TopicNames


@pytest.fixture(scope="module")
def api(stack, tmp_path_factory):
    with running_api(tmp_path_factory.mktemp("go-api"), partitions=1) as server:
        yield server


def test_committed_go_stubs_are_current(go_client, tmp_path):
    """gen.sh regenerates byte-identical stubs (same protoc and pinned plugin versions)."""
    gen = subprocess.run(["bash", str(GO_DIR / "gen.sh"), str(tmp_path)], capture_output=True, text=True, timeout=600,
                         env={**go_env(), "PYTHON": sys.executable})
    assert gen.returncode == 0, gen.stderr
    committed = sorted(p.name for p in (GO_DIR / "suanlipb").glob("*.go"))
    assert sorted(p.name for p in tmp_path.glob("*.go")) == committed
    for name in committed:
        assert (tmp_path / name).read_bytes() == (GO_DIR / "suanlipb" / name).read_bytes(), \
            f"clients/grpc-go/suanlipb/{name} is stale: run clients/grpc-go/gen.sh"


@pytest.mark.stack
def test_go_client_submits_a_task_and_reads_its_status(api, go_client):
    task = f"go-{uuid.uuid4().hex[:8]}"
    out = run_go(go_client, api, "alpha", "submit", "-id", task, "-cell", "c1", "-cpu", "2", "-memory", "3Gi",
                 "-gpu", "0.25", "-gpu-models", "T4,P100", "-qos", "gold", "-duration", "45m")
    assert out.returncode == 0, out.stderr
    reply = json.loads(out.stdout)
    assert reply["task_id"] == task and reply["tenant"] == "alpha" and reply["cell"] == "c1"

    with RegistryClient(api.settings.registry_url) as registry:
        position = reply["position"]
        [record] = asyncio.run(read_range(api.settings.bootstrap_servers, position["topic"],
                                          int(position["partition"]), int(position["offset"]),
                                          int(position["offset"]) + 1))
        kind, payload = Codec(registry).decode(record.value)
    assert kind == "TaskSubmitted" and payload["tenant"] == "alpha" and payload["qos_tier"] == "GOLD"
    assert payload["resources"]["cpu_milli"] == 2000 and payload["resources"]["gpu_milli"] == 250
    assert payload["resources"]["gpu_models"] == ["T4", "P100"] and payload["duration_estimate_ms"] == 2_700_000

    status = run_go(go_client, api, "alpha", "status", task)
    assert status.returncode == 0, status.stderr
    body = json.loads(status.stdout)
    assert body["task_id"] == task and body["status"] == "SUBMITTED" and body["tenant"] == "alpha"

    other = run_go(go_client, api, "beta", "status", task)
    assert other.returncode == 2 and "NotFound" in other.stderr


@pytest.mark.stack
def test_go_client_gets_the_field_error_and_nothing_is_produced(api, go_client):
    topic = TopicNames(api.settings.namespace).raw_tasks
    before = asyncio.run(end_offsets(api.settings.bootstrap_servers, topic))
    bad = run_go(go_client, api, "alpha", "submit", "-cpu", "1", "-memory", "1Gi", "-gpu", "70")
    assert bad.returncode == 2 and "InvalidArgument" in bad.stderr and "resources.gpu" in bad.stderr
    unknown = run_go(go_client, api, "alpha", "status", "x")
    assert unknown.returncode == 2 and "NotFound" in unknown.stderr
    env_less = subprocess.run([str(go_client), "-addr", api.grpc_address, "-token", "wrong-token-0000", "status", "x"],
                              capture_output=True, text=True, timeout=60)
    assert env_less.returncode == 2 and "Unauthenticated" in env_less.stderr
    assert asyncio.run(end_offsets(api.settings.bootstrap_servers, topic)) == before
