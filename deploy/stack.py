"""``suanli stack up|down|status``: the embedded Kafka broker and schema registry.

Only the services that the settings leave embedded are managed: with ``SUANLI_KAFKA``
and ``SUANLI_REGISTRY`` set, ``up`` just checks that the external ones answer and
registers the event schemas.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from suanli.config import Settings
from suanli.deploy import kafka_broker
from suanli.deploy.processes import ServiceProcess


def _registry():
    from suanli.deploy import registry  # imported lazily: only the embedded stack needs it
    return registry
from suanli.errors import StackError

COMPATIBILITY = "BACKWARD_TRANSITIVE"


@dataclass(frozen=True)
class StackPaths:
    home: Path

    @property
    def run(self) -> Path:
        return self.home / "run"

    @property
    def logs(self) -> Path:
        return self.home / "logs"

    @property
    def kafka_data(self) -> Path:
        return self.home / "kafka-data"

    @property
    def kafka_secure_data(self) -> Path:
        """The secure broker's data: apart from the plaintext one's, whose storage has no SCRAM users."""
        return self.home / "kafka-secure-data"

    @property
    def registry_data(self) -> Path:
        return self.home / "registry-data"

    @property
    def cache(self) -> Path:
        return self.home / "cache"


def kafka_service(paths: StackPaths, secure: bool = False) -> ServiceProcess:
    """The single broker: ``kafka``, or ``kafka-secure`` (SASL_SSL; data of its own)."""
    name, data = ("kafka-secure", paths.kafka_secure_data) if secure else ("kafka", paths.kafka_data)
    return ServiceProcess(name, paths.run / f"{name}.pid", paths.logs / f"{name}.log",
                          marker=str(data / "server.properties"))


def gc_log_of(broker: ServiceProcess) -> Path:
    """Where a broker's JVM logs its collections: ``kafka-gc.log`` beside ``kafka.log``."""
    return broker.log_file.with_name(f"{broker.name}-gc.log")


def quorum_root(paths: StackPaths, secure: bool = False) -> Path:
    """The three-broker stack's data: ``kafka-quorum`` (or ``kafka-quorum-secure``)."""
    return paths.home / ("kafka-quorum-secure" if secure else "kafka-quorum")


def quorum_dir(paths: StackPaths, node: int, secure: bool = False) -> Path:
    """Data of node ``node`` (1-3) of the three-broker stack (apart from the single broker's)."""
    return quorum_root(paths, secure) / f"node-{node}"


def quorum_service(paths: StackPaths, node: int, secure: bool = False) -> ServiceProcess:
    name = f"kafka-secure-{node}" if secure else f"kafka-{node}"
    return ServiceProcess(name, paths.run / f"{name}.pid", paths.logs / f"{name}.log",
                          marker=str(quorum_dir(paths, node, secure) / "server.properties"))


def broker_services(settings: Settings) -> list[ServiceProcess]:
    """The embedded brokers ``settings`` asks for: ``kafka``, or ``kafka-1`` .. ``kafka-3``."""
    paths = StackPaths(settings.home)
    if settings.brokers == 1:
        return [kafka_service(paths, settings.secure)]
    return [quorum_service(paths, n, settings.secure) for n in range(1, settings.brokers + 1)]


def start_brokers(settings: Settings, log: Callable[[str], None] = print) -> list[ServiceProcess]:
    """Start the embedded brokers that are not running (formatting their storage once);
    returns them all. The quorum's nodes share one cluster id, kept beside their data."""
    paths = StackPaths(settings.home)
    services = broker_services(settings)
    secure_home = None
    if settings.secure:
        from suanli.deploy import kafka_secure
        kafka_secure.ensure_material(settings.home, log)
        secure_home = settings.home
    voters = kafka_broker.voters_of(settings.broker_ports) if settings.brokers > 1 else None
    cluster_id = None
    if voters:
        id_file = quorum_root(paths, settings.secure) / "cluster.id"
        id_file.parent.mkdir(parents=True, exist_ok=True)
        if not id_file.exists():
            id_file.write_text(kafka_broker.new_cluster_id())
        cluster_id = id_file.read_text().strip()
    for node, (service, (port, controller)) in enumerate(zip(services, settings.broker_ports), start=1):
        if service.pid() is not None:
            continue
        data = (quorum_dir(paths, node, settings.secure) if voters else
                paths.kafka_secure_data if secure_home else paths.kafka_data)
        classpath, props = kafka_broker.prepare(work_dir=paths.cache, data_dir=data, port=port,
                                                controller_port=controller, log=log, node_id=node,
                                                voters=voters, cluster_id=cluster_id, secure_home=secure_home)
        service.start(kafka_broker.launch_command(classpath=classpath, properties=props, heap=settings.kafka_heap,
                                                  gc_log=gc_log_of(service), collector=settings.kafka_gc))
        log(f"{service.name}: starting on 127.0.0.1:{port} (log: {service.log_file})")
    return services


def _all_brokers(paths: StackPaths) -> list[ServiceProcess]:
    """Every embedded broker a home can run: plaintext, secure, and the quorum's three."""
    return [kafka_service(paths), kafka_service(paths, secure=True),
            *(quorum_service(paths, n, secure) for secure in (False, True) for n in (1, 2, 3))]


def registry_service(paths: StackPaths) -> ServiceProcess:
    return ServiceProcess("registry", paths.run / "registry.pid", paths.logs / "registry.log",
                          marker=str(paths.registry_data))


def _wait(what: str, ready: Callable[[], bool], service: ServiceProcess | None, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if ready():
            return
        if service is not None and service.pid() is None:
            raise StackError(f"{what} exited during start-up; last lines of {service.log_file}:\n"
                             f"{service.log_tail()}")
        time.sleep(0.25)
    tail = service.log_tail() if service else ""
    raise StackError(f"{what} not ready after {timeout:.0f}s. {tail}")


def up(settings: Settings, log: Callable[[str], None] = print) -> dict:
    """Start what is embedded and not running yet, wait until ready, register schemas.

    Returns timings and memory: ``{"ready_seconds", "kafka_rss_mib", "registry_rss_mib", "subjects"}``.
    Raises :class:`StackError` with the failing service's log tail.
    """
    started = time.monotonic()
    paths = StackPaths(settings.home)
    bootstrap = settings.bootstrap_servers
    if settings.embedded_kafka:
        wanted = {s.name for s in broker_services(settings)}
        clash = [s.name for s in _all_brokers(paths) if s.name not in wanted and s.pid() is not None]
        if clash:
            raise StackError(f"another embedded stack runs in {settings.home} ({', '.join(clash)}): "
                             f"`suanli stack down` first")
        brokers = start_brokers(settings, log)
        if settings.secure:
            # this process's own clients (readiness probes, schema registration) use the new credentials
            from suanli.streams.kafka_security import register
            register(bootstrap, settings.kafka_security)
        for service, (port, _controller) in zip(brokers, settings.broker_ports):
            _wait(f"Kafka broker {service.name}", lambda a=f"127.0.0.1:{port}": kafka_broker.is_ready(a), service, 120)
        if len(brokers) > 1:
            _wait(f"all {len(brokers)} brokers in the cluster",
                  lambda: kafka_broker.live_brokers(bootstrap) == len(brokers), None, 60)
        log(f"kafka: ready on {bootstrap} after {time.monotonic() - started:.1f}s")
    elif not kafka_broker.is_ready(bootstrap, timeout=10):
        raise StackError(f"external Kafka at {bootstrap} (SUANLI_KAFKA) does not answer")

    if settings.embedded_registry:
        reg = registry_service(paths)
        if reg.pid() is None:
            try:
                _registry().prepare(paths.cache / "registry", log=log)
                argv, env = _registry().launch_command(work_dir=paths.cache / "registry", port=settings.registry_port,
                                                       kafka_bootstrap=bootstrap, data_dir=paths.registry_data,
                                                       kafka_security=settings.kafka_security)
            except RuntimeError as exc:
                raise StackError(f"schema registry: {exc}") from exc
            paths.registry_data.mkdir(parents=True, exist_ok=True)
            reg.start(argv, env=env, cwd=paths.registry_data)
            log(f"registry: starting on {settings.registry_url} (log: {reg.log_file})")
        _wait("schema registry", lambda: _registry().is_ready(settings.registry_port), reg, 180)
        log(f"registry: ready at {settings.registry_url} after {time.monotonic() - started:.1f}s")

    subjects = register_schemas(settings)
    log(f"schemas: {len(subjects)} subjects registered ({COMPATIBILITY})")
    ready_seconds = time.monotonic() - started
    return {
        "ready_seconds": round(ready_seconds, 2),
        "kafka_rss_mib": (sum(s.rss_mib() or 0 for s in broker_services(settings))
                          if settings.embedded_kafka else None),
        "registry_rss_mib": registry_service(paths).rss_mib() if settings.embedded_registry else None,
        "subjects": subjects,
    }


def register_schemas(settings: Settings) -> dict[str, int]:
    """Register every event schema with BACKWARD_TRANSITIVE compatibility; ``{subject: id}``."""
    from suanli.schemas.catalog import catalog
    from suanli.schemas.registry import RegistryClient

    ids: dict[str, int] = {}
    with RegistryClient(settings.registry_url) as client:
        for event in catalog().values():
            ids[event.subject] = client.register(event.subject, event.schema)
            client.set_compatibility(COMPATIBILITY, event.subject)
    return ids


def down(settings: Settings, log: Callable[[str], None] = print) -> None:
    """Stop every embedded service this stack started (by pid), registry first."""
    paths = StackPaths(settings.home)
    for service in (registry_service(paths), *_all_brokers(paths)):
        if service.name != "kafka" and service.pid() is None:
            continue                                # the quorum's nodes: said only when they ran
        if service.stop():
            log(f"{service.name}: stopped")
        else:
            log(f"{service.name}: not running")


def status(settings: Settings) -> list[dict]:
    """One row per service: name, where, pid, rss, ready."""
    paths = StackPaths(settings.home)
    rows = []
    if settings.embedded_kafka:
        for kafka, (port, _controller) in zip(broker_services(settings), settings.broker_ports):
            address = f"127.0.0.1:{port}"
            rows.append({"service": kafka.name, "address": address, "embedded": True, "pid": kafka.pid(),
                         "rss_mib": kafka.rss_mib(), "ready": kafka_broker.is_ready(address)})
    else:
        rows.append({"service": "kafka", "address": settings.bootstrap_servers, "embedded": False, "pid": None,
                     "rss_mib": None, "ready": kafka_broker.is_ready(settings.bootstrap_servers)})
    reg = registry_service(paths)
    ready = (_registry().is_ready(settings.registry_port) if settings.embedded_registry
             else _external_registry_ready(settings.registry_url))
    rows.append({"service": "registry", "address": settings.registry_url,
                 "embedded": settings.embedded_registry, "pid": reg.pid() if settings.embedded_registry else None,
                 "rss_mib": reg.rss_mib() if settings.embedded_registry else None, "ready": ready})
    return rows


def _external_registry_ready(url: str) -> bool:
    from suanli.errors import RegistryError
    from suanli.schemas.registry import RegistryClient

    try:
        with RegistryClient(url, timeout=3) as client:
            client.subjects()
        return True
    except RegistryError:
        return False
