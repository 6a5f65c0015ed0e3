"""The embedded Kafka broker: one KRaft node (broker + controller) on loopback.

Jars come from Maven Central through ``deploy/kafka/pom.xml``. Storage is formatted once
(``meta.properties`` marks it); the broker then runs as ``java kafka.Kafka``.
"""
from __future__ import annotations

import asyncio
import base64
import subprocess
import uuid
from pathlib import Path
from typing import Callable

from suanli.deploy.maven import resolve_classpath
from suanli.errors import StackError

HERE = Path(__file__).resolve().parent / "kafka"
MAIN_CLASS = "kafka.Kafka"


def server_properties(*, data_dir: Path, port: int, controller_port: int) -> str:
    """The broker configuration: single node, replication factor 1, loopback only."""
    return f"""\
process.roles=broker,controller
node.id=1
controller.quorum.bootstrap.servers=127.0.0.1:{controller_port}
listeners=PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}
advertised.listeners=PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT
log.dirs={data_dir / 'logs'}
num.partitions=1
auto.create.topics.enable=true
offsets.topic.replication.factor=1
offsets.topic.num.partitions=8
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
transaction.state.log.num.partitions=8
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
log.retention.hours=-1
log.segment.bytes=67108864
"""


def _cluster_id() -> str:
    # Kafka's Uuid.randomUuid(): URL-safe base64 of 16 random bytes, never starting with '-'.
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not text.startswith("-"):
            return text


def prepare(*, work_dir: Path, data_dir: Path, port: int, controller_port: int,
            log: Callable[[str], None] = print) -> tuple[str, Path]:
    """Resolve the jars, write the config and format storage if needed.

    Returns ``(classpath, properties_file)``. Idempotent.
    """
    classpath = resolve_classpath(HERE / "pom.xml", work_dir / "kafka", log)
    data_dir.mkdir(parents=True, exist_ok=True)
    props = data_dir / "server.properties"
    props.write_text(server_properties(data_dir=data_dir, port=port, controller_port=controller_port))
    if not (data_dir / "logs" / "meta.properties").exists():
        log(f"formatting Kafka storage in {data_dir / 'logs'}")
        argv = ["java", "-cp", classpath, "kafka.tools.StorageTool", "format", "--standalone",
                "-t", _cluster_id(), "-c", str(props)]
        result = subprocess.run(argv, capture_output=True, text=True)
        if result.returncode != 0:
            raise StackError(f"Kafka storage format failed (exit {result.returncode}):\n"
                             f"{(result.stdout + result.stderr)[-2000:]}")
    return classpath, props


def launch_command(*, classpath: str, properties: Path, heap: str) -> list[str]:
    """argv of the broker JVM. The properties path is the pid-file marker."""
    return [
        "java", f"-Xmx{heap}", "-Xms128m", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20",
        "-Djava.awt.headless=true",
        f"-Dlog4j2.configurationFile={HERE / 'log4j2.properties'}",
        "-cp", classpath, MAIN_CLASS, str(properties),
    ]


def is_ready(bootstrap: str, timeout: float = 3.0) -> bool:
    """True when the broker answers a metadata request and has an active controller."""
    import logging

    from aiokafka.admin import AIOKafkaAdminClient

    # A broker that is still starting refuses connections; aiokafka logs each refusal.
    logging.getLogger("aiokafka").setLevel(logging.CRITICAL)

    async def probe() -> bool:
        admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=int(timeout * 1000))
        try:
            await asyncio.wait_for(admin.start(), timeout)
            await asyncio.wait_for(admin.list_topics(), timeout)
            return True
        finally:
            await admin.close()

    try:
        return asyncio.run(probe())
    except Exception:  # noqa: BLE001 - any failure just means "not ready yet"
        return False
