"""The secure stack (`suanli stack up --secure`): SASL/SCRAM-SHA-512 over TLS, ACLs, tenants.

The session's secure broker (``secure_stack`` in tests/conftest.py: loopback ports 29192 and
29193, a home of its own, the plaintext stack's schema registry). Checked here:

- a plaintext client is refused, on the client port and on the controller port;
- a tenant's principal may write its own raw topic and nothing else: not another tenant's,
  not the shared raw topic, and it cannot read the decisions either;
- a control plane whose every worker authenticates as the plane's principal places the tasks
  a tenant submitted on its own topic, and dead-letters, with the reason, a task that the
  tenant sent in another tenant's name; the API and the CLI work on it as well;
- Connect's worker and sink authenticate too: a secure plane's decisions land in PostgreSQL;
- no password of the stack appears in any log it wrote.
"""
from __future__ import annotations

import asyncio
import os
import shlex
import socket
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.errors import KafkaConnectionError, KafkaError, TopicAuthorizationFailedError

from suanli.bench.cells_across_workers import read_topic
from suanli.config import REPO_ROOT, Settings, to_env
from suanli.deploy import kafka_secure
from suanli.deploy import stack as stack_mod
from suanli.deploy.plane import Plane, PlaneOptions
from suanli.deploy.waiting import wait_for
from suanli.schemas.codec import Codec
from suanli.schemas.registry import RegistryClient
from suanli.streams.kafka_io import EventProducer
from suanli.streams.kafka_security import KafkaSecurity
from suanli.streams.topics import TopicNames

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "api"))
from api_helpers import ApiProcess, write_tokens  # noqa: E402

pytestmark = pytest.mark.stack
DECIDED_OK = ("PLACED", "DISPATCHED", "RUNNING", "COMPLETED")


TENANTS: dict[str, KafkaSecurity] = {}


@pytest.fixture(scope="module")
def secure(secure_stack) -> Settings:
    """The session's secure broker, with tenants alpha (added as a user would, with the CLI,
    whose ``--env`` exports become alpha's client settings) and beta, in a namespace of this module."""
    settings = secure_stack.model_copy(update={"namespace": f"sec{uuid.uuid4().hex[:8]}", "partitions": 2})
    cli = subprocess.run([sys.executable, "-m", "suanli", "tenant", "add", "alpha", "--env"], capture_output=True,
                         text=True, timeout=180, cwd=REPO_ROOT, env={**os.environ, **to_env(settings)})
    assert cli.returncode == 0, cli.stdout + cli.stderr
    exports = dict(shlex.split(line.removeprefix("export "))[0].split("=", 1)
                   for line in cli.stdout.splitlines() if line.startswith("export "))
    assert exports["SUANLI_KAFKA_USERNAME"] == "alpha" and exports["SUANLI_KAFKA_SECURITY_PROTOCOL"] == "SASL_SSL"
    TENANTS["alpha"] = KafkaSecurity(username="alpha", password=exports["SUANLI_KAFKA_PASSWORD"],
                                     ca=Path(exports["SUANLI_KAFKA_CA"]))
    kafka_secure.add_tenant(settings, "beta", log=lambda _m: None)
    TENANTS["beta"] = KafkaSecurity(username="beta", password=kafka_secure.stored_password(settings.home, "beta"),
                                    ca=settings.home / "secure" / "ca.crt")
    return settings


def _tenant(_settings: Settings, name: str) -> KafkaSecurity:
    return TENANTS[name]


async def _write(bootstrap: str, topic: str, security: KafkaSecurity | None) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, request_timeout_ms=5000,
                                **(security.aiokafka() if security else {}))
    try:
        await asyncio.wait_for(producer.start(), 15)
        await asyncio.wait_for(producer.send_and_wait(topic, b"x", key=b"k"), 15)
    finally:
        await producer.stop()


def test_a_plaintext_client_is_refused_on_both_ports(secure):
    names = TopicNames(secure.namespace)
    for port in (29192, 29193):
        with pytest.raises(KafkaConnectionError):
            asyncio.run(_write(f"127.0.0.1:{port}", names.tenant_raw("alpha"), None))


def test_a_tenant_writes_its_own_raw_topic_and_nothing_else(secure):
    names = TopicNames(secure.namespace)
    alpha = _tenant(secure, "alpha")
    asyncio.run(_write(secure.bootstrap_servers, names.tenant_raw("alpha"), alpha))        # its own: accepted
    for topic in (names.tenant_raw("beta"), names.raw_tasks, names.cell_log):
        with pytest.raises(TopicAuthorizationFailedError) as refused:
            asyncio.run(_write(secure.bootstrap_servers, topic, alpha))
        print(f"alpha -> {topic}: {refused.value}")
    wrong = KafkaSecurity(username="alpha", password="not-the-password", ca=alpha.ca)
    with pytest.raises(KafkaError):
        asyncio.run(_write(secure.bootstrap_servers, names.tenant_raw("alpha"), wrong))


def test_a_tenant_cannot_read_the_decisions(secure):
    """Decisions stay one topic for the whole plane; tenants read theirs through the API, which
    redacts other tenants, so no tenant principal may read the topic itself."""
    names = TopicNames(secure.namespace)

    async def read() -> None:
        consumer = AIOKafkaConsumer(names.decisions, bootstrap_servers=secure.bootstrap_servers, group_id=None,
                                    auto_offset_reset="earliest", **_tenant(secure, "alpha").aiokafka())
        try:
            await asyncio.wait_for(consumer.start(), 15)
            await asyncio.wait_for(consumer.getmany(timeout_ms=5000), 15)
        finally:
            await consumer.stop()

    with pytest.raises(TopicAuthorizationFailedError):
        asyncio.run(read())


def test_a_plane_on_the_secure_stack_places_a_tenants_tasks_and_refuses_a_spoofed_tenant(secure, tmp_path):
    names = TopicNames(secure.namespace)
    alpha = _tenant(secure, "alpha")
    spoof_id = f"spoof-{uuid.uuid4().hex[:8]}"

    async def workload(publish, send_raw, tasks, names_):
        with RegistryClient(secure.registry_url) as registry:
            codec = Codec(registry)
            async with EventProducer(secure.bootstrap_servers, codec, security=alpha) as tenant:
                for task in tasks:
                    await tenant.send(names.tenant_raw("alpha"), "TaskSubmitted", {**task, "tenant": "alpha"},
                                      key=task["task_id"])
                # alpha, on its own topic, submitting in beta's name
                await tenant.send(names.tenant_raw("alpha"), "TaskSubmitted",
                                  {**tasks[0], "task_id": spoof_id, "event_id": f"submit/{spoof_id}",
                                   "tenant": "beta"}, key=spoof_id)
                await tenant.flush()

    plane = Plane(secure, PlaneOptions(tasks=150, rate=0, exit_when_drained=True, quiet=True, drain_timeout=240,
                                       metrics_port=0, workload=workload), out=print)
    api = None
    try:
        plane.start()
        # the API and the CLI on the secure stack too: a task submitted over REST (the tenant
        # from its token; the API writes as the plane's principal) is placed, and both say so
        api = ApiProcess(secure, write_tokens(tmp_path / "tokens.toml"), tmp_path / "api.log")
        api.wait_ready()
        with api.client("alpha") as http:
            answer = http.post("/v1/tasks", json={"id": f"rest-{spoof_id}", "cell": plane.cell,
                                                  "resources": {"cpu": 1, "memory": "1Gi"}})
            assert answer.status_code == 202, answer.text
            rest_id = answer.json()["task_id"]
        result = asyncio.run(plane.run())
        with api.client("alpha") as http:
            status = wait_for(f"REST task {rest_id} decided",
                              lambda: (st := http.get(f"/v1/tasks/{rest_id}").json().get("status")) in DECIDED_OK
                              and st)
        cli = subprocess.run([sys.executable, "-m", "suanli", "status", rest_id], capture_output=True, text=True,
                             timeout=120, cwd=REPO_ROOT, env={**os.environ, **to_env(secure)})
        assert cli.returncode == 0 and rest_id in cli.stdout, cli.stdout + cli.stderr
        print(f"REST task {rest_id}: {status}; suanli status: {cli.stdout.splitlines()[0]}")
    finally:
        if api is not None:
            api.stop()
        plane.stop()
    print(f"secure plane: {result}")
    assert result["placed"] + result["pending"] + result["unschedulable"] == 150, result
    assert result["placed"] > 0 and result["capacity_violations"] == 0, result
    assert result["worker_restarts"] == {}

    decisions = asyncio.run(read_topic(secure, names.decisions))
    assert {r.payload.get("tenant") for r in decisions if r.kind == "TaskPlaced"} <= {"alpha"}
    assert spoof_id not in {r.payload.get("task_id") for r in decisions}
    letters = [r for r in asyncio.run(read_topic(secure, names.dead_letters))
               if r.kind == "DeadLetter" and r.payload["source_topic"] == names.tenant_raw("alpha")
               and r.payload["key"] == spoof_id.encode()]
    assert [r.payload["error_kind"] for r in letters] == ["INVALID"], letters
    reason = letters[0].payload["reason"]
    assert "tenant mismatch" in reason and "'beta'" in reason and "'alpha'" in reason, reason
    print(f"spoofed record dead-lettered: {reason}")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_connect_sinks_the_decisions_of_a_plane_on_the_secure_stack(secure, stack, monkeypatch):
    """The Connect worker and its sink connector authenticate as the plane: every decision of a
    secure plane lands in PostgreSQL, once. (PostgreSQL is the suite's; only Kafka is secure.)"""
    from suanli.deploy import connect, postgres
    from suanli.processors.model import TASK_DECISION_KINDS

    monkeypatch.setenv("SUANLI_CONNECT_PORT", str(_free_port()))      # a worker of its own, beside the suite's
    settings = secure.model_copy(update={"namespace": f"tcs{uuid.uuid4().hex[:8]}"})
    quiet = lambda _m: None                                             # noqa: E731
    started_pg = postgres.up(stack, log=quiet)
    started_worker = False
    try:
        connect.apply_schema(settings)
        started_worker = connect.start_worker(settings, log=quiet)
        connect.register(settings, sink=True, source=False)
        plane = Plane(settings, PlaneOptions(tasks=200, rate=0, exit_when_drained=True, quiet=True, drain_timeout=240,
                                             metrics_port=0), out=quiet)
        try:
            plane.start()
            result = asyncio.run(plane.run())
        finally:
            plane.stop()
        assert result["placed"] + result["pending"] + result["unschedulable"] == 200, result
        decided = {r.payload["event_id"] for r in asyncio.run(read_topic(settings, TopicNames(settings.namespace)
                                                                          .decisions))
                   if r.kind in TASK_DECISION_KINDS}
        table = f"{connect.pg_schema(settings.namespace)}.decision"
        wait_for(f"{len(decided)} rows in {table}",
                 lambda: int(postgres.psql(f"SELECT count(*) FROM {table}")[0][0]) >= len(decided))
        rows = {r[0] for r in postgres.psql(f"SELECT event_id FROM {table}")}
        assert rows == decided and len(decided) >= 200
        print(f"secure Connect: {len(rows)} decisions in {table}")
    finally:
        connect.unregister(settings, drop_schema=True)
        if started_worker:
            connect.stop_worker(settings, log=quiet)
        if started_pg:
            postgres.down(stack, log=quiet)


def test_no_password_appears_in_any_log(secure):
    """After the tests that use the secure broker: every log it, its planes' workers and its Connect worker wrote."""
    passwords = list(kafka_secure.stored_users(secure.home).values())
    logs = [p for p in Path(secure.home).rglob("*") if p.is_file() and p.suffix in (".log", ".txt", ".out", ".err")]
    assert any(p.name == "kafka-secure.log" for p in logs) and any(p.name == "connect.log" for p in logs), logs
    for log_file in logs:
        text = log_file.read_text(errors="replace")
        assert not any(p in text for p in passwords), f"a password appears in {log_file}"


def test_the_three_broker_quorum_runs_secure_too(side_stack, stack):
    """`suanli stack up --secure --brokers 3`: brokers replicate to each other and controllers
    vote over their authenticated listeners; a tenant's ACL holds on every broker."""
    from aiokafka.admin import AIOKafkaAdminClient

    from suanli.streams.kafka_io import ensure_topics
    from suanli.streams.topics import TopicSpec

    with side_stack("secure-quorum", secure=True, brokers=3, kafka_port=29292, controller_port=29293,
                    registry=stack.registry_url, namespace=f"sq{uuid.uuid4().hex[:8]}") as quorum:
        rows = stack_mod.status(quorum)
        assert [r["service"] for r in rows[:3]] == ["kafka-secure-1", "kafka-secure-2", "kafka-secure-3"]
        assert all(r["ready"] for r in rows[:3]), rows
        names = TopicNames(quorum.namespace)
        topic = kafka_secure.add_tenant(quorum, "gamma", log=lambda _m: None)
        asyncio.run(ensure_topics(quorum.bootstrap_servers, [TopicSpec(names.decisions, 2)]))

        async def replicas() -> dict[str, list[int]]:
            admin = AIOKafkaAdminClient(bootstrap_servers=quorum.bootstrap_servers,
                                        **quorum.kafka_security.aiokafka())
            await admin.start()
            try:
                return {d["topic"]: [len(p["replicas"]) for p in d["partitions"]]
                        for d in await admin.describe_topics([topic, names.decisions])}
            finally:
                await admin.close()

        found = wait_for("both topics described on the quorum",
                         lambda: (f := asyncio.run(replicas())) and all(f.get(t) for t in (topic, names.decisions)) and f,
                         timeout=30, every=0.2)
        assert all(n == 3 for counts in found.values() for n in counts), found
        gamma = KafkaSecurity(username="gamma", password=kafka_secure.stored_password(quorum.home, "gamma"),
                              ca=quorum.home / "secure" / "ca.crt")
        for port in (29292, 29294, 29296):                         # any broker bootstraps it
            asyncio.run(_write(f"127.0.0.1:{port}", topic, gamma))
        with pytest.raises(TopicAuthorizationFailedError):
            asyncio.run(_write(quorum.bootstrap_servers, names.decisions, gamma))
        with pytest.raises(KafkaConnectionError):
            asyncio.run(_write("127.0.0.1:29294", topic, None))
