"""The embedded Kafka broker: one KRaft node (broker + controller) on loopback, or a quorum of three.

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

from suanli.streams.kafka_security import client_options
from suanli.deploy import jvm_gc_log
from suanli.deploy.maven import resolve_classpath
from suanli.errors import StackError

HERE = Path(__file__).resolve().parent / "kafka"
MAIN_CLASS = "kafka.Kafka"


def server_properties(*, data_dir: Path, port: int, controller_port: int, node_id: int = 1,
                      voters: str | None = None, secure_home: Path | None = None) -> str:
    """The broker configuration, loopback only. Alone (``voters`` None): one node, replication
    factor 1. In a quorum (``voters``: ``"1@127.0.0.1:PORT,2@..."``): this node of it, every
    topic replicated 3 times (Faust's changelogs and the registry's journal included, by the
    broker defaults) with ``min.insync.replicas=2``, so one broker may die without losing a
    write that was acknowledged with acks=all. With ``secure_home``, the listeners are those
    of :func:`suanli.deploy.kafka_secure.broker_properties` (SASL_SSL for clients, mutual TLS
    between brokers and controllers, ACLs enforced)."""
    quorum = (f"controller.quorum.voters={voters}" if voters
              else f"controller.quorum.bootstrap.servers=127.0.0.1:{controller_port}")
    rf, isr = (3, 2) if voters else (1, 1)
    # In a quorum a dead broker's partitions move once the controller stops hearing from it:
    # 6 s instead of 9, so that a broker failure delays the cell log less than a node's
    # heartbeat timeouts (SUSPECT after 10 s, DOWN after 15 s).
    session = "broker.heartbeat.interval.ms=1000\nbroker.session.timeout.ms=6000\n" if voters else ""
    if secure_home is None:
        listeners = f"""\
listeners=PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}
advertised.listeners=PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT
"""
    else:
        from suanli.deploy.kafka_secure import broker_properties
        listeners = broker_properties(secure_home, port, controller_port)
    return f"""\
process.roles=broker,controller
node.id={node_id}
{quorum}
{session}{listeners}log.dirs={data_dir / 'logs'}
num.partitions=1
default.replication.factor={rf}
min.insync.replicas={isr}
auto.create.topics.enable=true
offsets.topic.replication.factor={rf}
offsets.topic.num.partitions=8
transaction.state.log.replication.factor={rf}
transaction.state.log.min.isr={isr}
transaction.state.log.num.partitions=8
share.coordinator.state.topic.replication.factor={rf}
share.coordinator.state.topic.min.isr={isr}
group.initial.rebalance.delay.ms=0
log.retention.hours=-1
log.segment.bytes=67108864
"""


def new_cluster_id() -> str:
    """A fresh KRaft cluster id, as Kafka's ``Uuid.randomUuid()`` makes them: URL-safe base64
    of 16 random bytes, never starting with '-' (every broker of a quorum formats with one)."""
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not text.startswith("-"):
            return text


def voters_of(ports: list[tuple[int, int]]) -> str:
    """``controller.quorum.voters`` of a quorum whose node N has the N-th ``(client, controller)`` ports."""
    return ",".join(f"{i}@127.0.0.1:{controller}" for i, (_client, controller) in enumerate(ports, start=1))


def prepare(*, work_dir: Path, data_dir: Path, port: int, controller_port: int,
            log: Callable[[str], None] = print, node_id: int = 1, voters: str | None = None,
            cluster_id: str | None = None, secure_home: Path | None = None) -> tuple[str, Path]:
    """Resolve the jars, write the config and format storage if needed: alone (``--standalone``)
    or, with ``voters``, as node ``node_id`` of that static quorum, every node formatted with
    the same ``cluster_id``.

    Returns ``(classpath, properties_file)``. Idempotent.
    """
    classpath = classpath_of(work_dir, log)
    data_dir.mkdir(parents=True, exist_ok=True)
    props = data_dir / "server.properties"
    props.touch(mode=0o600)         # a secure broker's file holds its SCRAM password
    props.write_text(server_properties(data_dir=data_dir, port=port, controller_port=controller_port,
                                       node_id=node_id, voters=voters, secure_home=secure_home))
    if not (data_dir / "logs" / "meta.properties").exists():
        log(f"formatting Kafka storage in {data_dir / 'logs'}")
        mode = [] if voters else ["--standalone"]
        scram: list[str] = []
        if secure_home is not None:
            from suanli.deploy.kafka_secure import scram_format_args
            scram = scram_format_args(secure_home)
        argv = ["java", "-cp", classpath, "kafka.tools.StorageTool", "format", *mode,
                "-t", cluster_id or new_cluster_id(), "-c", str(props), *scram]
        result = subprocess.run(argv, capture_output=True, text=True)
        if result.returncode != 0:
            raise StackError(f"Kafka storage format failed (exit {result.returncode}):\n"
                             f"{(result.stdout + result.stderr)[-2000:]}")
    return classpath, props


def classpath_of(work_dir: Path, log: Callable[[str], None] = print) -> str:
    """The broker's (and Kafka's admin tools') classpath, resolved once under ``work_dir``."""
    return resolve_classpath(HERE / "pom.xml", work_dir / "kafka", log)


# The collector's options per ``Settings.kafka_gc``. Kafka's scripts use G1 with a 20 ms pause
# goal; on this project's 2-core machine its young pauses took 10-25 ms every few seconds, and
# in the urgent bench (issue 14) they were the largest stalls left on the path of a record.
# ZGC does its work concurrently and stops the broker for well under a millisecond a cycle:
# urgent p99 9-10 ms in 5 runs against 10-14 ms with G1, with no cost to the E2E bench's
# throughput (BENCHMARKS.md, "Stalls of the loop, and a broker that does not pause").
COLLECTORS: dict[str, tuple[str, ...]] = {
    "zgc": ("-XX:+UseZGC",),
    "g1": ("-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20"),
}


def launch_command(*, classpath: str, properties: Path, heap: str, gc_log: Path | None = None,
                   collector: str = "zgc") -> list[str]:
    """argv of the broker JVM. The properties path is the pid-file marker. ``gc_log``: where
    the JVM logs its collections (``deploy/jvm_gc_log.py``), as Kafka's own scripts do.
    ``collector``: a key of :data:`COLLECTORS` (``Settings.kafka_gc``)."""
    if collector not in COLLECTORS:
        raise StackError(f"unknown broker garbage collector {collector!r}: use one of {sorted(COLLECTORS)}")
    return [
        "java", f"-Xmx{heap}", "-Xms128m", *COLLECTORS[collector],
        *([jvm_gc_log.option(gc_log)] if gc_log is not None else []),
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
        admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, **client_options(bootstrap), request_timeout_ms=int(timeout * 1000))
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


def live_brokers(bootstrap: str, timeout: float = 3.0) -> int:
    """How many brokers the cluster at ``bootstrap`` lists as alive (0 when it does not answer)."""
    from aiokafka.admin import AIOKafkaAdminClient

    async def probe() -> int:
        admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, **client_options(bootstrap), request_timeout_ms=int(timeout * 1000))
        try:
            await asyncio.wait_for(admin.start(), timeout)
            cluster = await asyncio.wait_for(admin.describe_cluster(), timeout)
            return len(cluster.get("brokers", []))
        finally:
            await admin.close()

    try:
        return asyncio.run(probe())
    except Exception:  # noqa: BLE001 - not answering counts as none
        return 0
