"""``suanli connect up|down|status``: Kafka Connect and PostgreSQL on loopback.

What runs (see ``deploy/connect/README.md`` for the SQL schema and example queries):

* **PostgreSQL** (``deploy/postgres.py``): 127.0.0.1:15432, database ``suanli``, one SQL
  schema per namespace (``deploy/connect/schema.sql``).
* **One Kafka Connect worker** (``ConnectDistributed``, jars from ``deploy/connect/pom.xml``,
  REST on 127.0.0.1:18083 = ``SUANLI_CONNECT_PORT``), shared by every namespace on this
  machine, its state in the topics ``suanli-connect.{configs,offsets,status}``. Plugins,
  each in its own folder under ``plugin.path`` (``<home>/cache/connect/plugins``):
  Debezium JDBC sink, Debezium PostgreSQL source, Apicurio's Avro converter, and Suanli's
  ``DecisionRow`` transform (``deploy/connect/smt``, compiled here with javac).
* **Per namespace**: the connectors ``<ns>.decisions-sink`` (decisions -> table
  ``<schema>.decision``, upsert by event id) and ``<ns>.nodes-source`` (Debezium CDC of
  ``<schema>.nodes`` -> ``<ns>.cdc.<schema>.nodes``), and the *nodes bridge*, a small
  aiokafka process (``python -m suanli.deploy.connect bridge``) that turns those change
  events into ``NodeRegistered`` (insert, update, snapshot) or ``NodeStatusChanged(DOWN)``
  (delete) events in Suanli's Avro on ``<ns>.raw.nodes``.

Everything is started detached with a pid file (``deploy/processes.py``) and logs to
``<home>/logs``; ``down`` stops what ``up`` started, by pid.
"""
from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from string import Template
from typing import Any, Callable

import httpx

from suanli.streams.kafka_security import client_options
from suanli.config import Settings, to_env
from suanli.deploy import postgres
from suanli.deploy.processes import ServiceProcess
from suanli.errors import StackError
from suanli.streams.topics import TopicNames, TopicSpec, core_topics

HERE = Path(__file__).resolve().parent / "connect"
RUNTIME_POM = HERE / "pom.xml"
MAVEN_SETTINGS = HERE / "maven-settings.xml"
PLUGINS = ("debezium-jdbc", "debezium-postgres", "apicurio-converter")
SMT_SOURCES = HERE / "smt" / "src" / "main" / "java"
SMT_CLASS = "io.suanli.connect.DecisionRow"
MAIN_CLASS = "org.apache.kafka.connect.cli.ConnectDistributed"
DEFAULT_PORT = 18083
HEAP = "640m"
WORKER_GROUP = "suanli-connect"

log_ = logging.getLogger(__name__)


def rest_port() -> int:
    return int(os.environ.get("SUANLI_CONNECT_PORT", DEFAULT_PORT))


def rest_url() -> str:
    return f"http://127.0.0.1:{rest_port()}"


def pg_schema(namespace: str) -> str:
    """SQL schema of a namespace: lower case, [a-z0-9_], never starting with a digit."""
    name = re.sub(r"[^a-z0-9_]", "_", namespace.lower())
    return name if name[:1].isalpha() else f"ns_{name}"


def registry_v2_url(settings: Settings) -> str:
    """Apicurio's native v2 API beside the Confluent-compatible URL Suanli uses."""
    url = settings.registry_url
    if "/apis/ccompat/" not in url:
        raise StackError(f"the Connect converter needs Apicurio Registry's native API; {url} is not an "
                         "Apicurio ccompat URL (…/apis/ccompat/v7)")
    return url.split("/apis/ccompat/")[0] + "/apis/registry/v2"


@dataclass(frozen=True)
class ConnectPaths:
    home: Path

    @property
    def work(self) -> Path:
        return self.home / "connect"

    @property
    def worker_properties(self) -> Path:
        return self.work / "worker.properties"

    @property
    def cache(self) -> Path:
        return self.home / "cache" / "connect"

    @property
    def plugins(self) -> Path:
        return self.cache / "plugins"


def worker_service(settings: Settings) -> ServiceProcess:
    paths = ConnectPaths(Path(settings.home))
    return ServiceProcess("connect", Path(settings.home) / "run" / "connect.pid",
                          Path(settings.home) / "logs" / "connect.log", marker=str(paths.worker_properties))


def bridge_service(settings: Settings) -> tuple[ServiceProcess, list[str]]:
    ns = settings.namespace
    marker = f"suanli-nodes-bridge={ns}"
    svc = ServiceProcess("nodes-bridge", Path(settings.home) / "run" / f"{ns}-nodes-bridge.pid",
                         Path(settings.home) / "logs" / f"{ns}-nodes-bridge.log", marker=marker)
    return svc, [sys.executable, "-X", marker, "-m", "suanli.deploy.connect", "bridge"]


# ------------------------------------------------------------------------------ jars
def _digest(*paths: Path) -> str:
    h = hashlib.sha256()
    for path in paths:
        for f in sorted(path.rglob("*")) if path.is_dir() else [path]:
            if f.is_file():
                h.update(f.name.encode())
                h.update(f.read_bytes())
    return h.hexdigest()[:16]


def _mvn(args: list[str], what: str) -> None:
    mvn = shutil.which("mvn")
    if mvn is None:
        raise StackError("`mvn` not found on PATH (needed once to fetch the Kafka Connect jars)")
    argv = [mvn, "-q", "-B", "-Dstyle.color=never", "-s", str(MAVEN_SETTINGS), *args]
    result = subprocess.run(argv, capture_output=True, text=True)
    if result.returncode != 0:
        tail = "\n".join((result.stdout + result.stderr).splitlines()[-20:])
        raise StackError(f"{what}: `{' '.join(argv)}` failed (exit {result.returncode}):\n{tail}")


def runtime_classpath(cache: Path, log: Callable[[str], None] = print) -> str:
    """Classpath of the Connect worker (resolved once per pom content, pointing into ~/.m2)."""
    cp_file = cache / f"classpath-{_digest(RUNTIME_POM)}.txt"
    if cp_file.exists():
        classpath = cp_file.read_text().strip()
        if all(Path(p).exists() for p in classpath.split(":")):
            return classpath
    cache.mkdir(parents=True, exist_ok=True)
    log("connect: resolving the Kafka Connect runtime with Maven (first run only)...")
    _mvn(["-f", str(RUNTIME_POM), "dependency:build-classpath", f"-Dmdep.outputFile={cp_file}"],
         "resolving the Connect runtime")
    return cp_file.read_text().strip()


def _install_plugin(name: str, plugins: Path, log: Callable[[str], None]) -> None:
    pom = HERE / "plugins" / name / "pom.xml"
    target = plugins / name
    stamp = _digest(pom)
    if (target / ".complete").exists() and (target / ".complete").read_text().strip() == stamp:
        return
    staging = plugins / f".{name}.partial"
    shutil.rmtree(staging, ignore_errors=True)
    log(f"connect: fetching plugin {name} with Maven (first run only)...")
    _mvn(["-f", str(pom), "dependency:copy-dependencies", f"-DoutputDirectory={staging}"], f"plugin {name}")
    (staging / ".complete").write_text(stamp + "\n")
    shutil.rmtree(target, ignore_errors=True)
    staging.rename(target)


def _build_smt(classpath: str, plugins: Path, log: Callable[[str], None]) -> None:
    target = plugins / "suanli-smt"
    stamp = _digest(SMT_SOURCES)
    if (target / ".complete").exists() and (target / ".complete").read_text().strip() == stamp:
        return
    javac, jar = shutil.which("javac"), shutil.which("jar")
    if javac is None or jar is None:
        raise StackError("javac/jar not found: the DecisionRow transform is compiled from source "
                         "(`apt-get install openjdk-17-jdk-headless`)")
    log("connect: compiling the DecisionRow transform")
    staging = plugins / ".suanli-smt.partial"
    shutil.rmtree(staging, ignore_errors=True)
    classes = staging / "classes"
    (classes / "META-INF" / "services").mkdir(parents=True)
    sources = [str(p) for p in sorted(SMT_SOURCES.rglob("*.java"))]
    result = subprocess.run([javac, "--release", "17", "-nowarn", "-cp", classpath, "-d", str(classes), *sources],
                            capture_output=True, text=True)
    if result.returncode != 0:
        raise StackError(f"compiling {SMT_SOURCES} failed:\n{result.stderr[-3000:]}")
    (classes / "META-INF" / "services" / "org.apache.kafka.connect.transforms.Transformation").write_text(
        SMT_CLASS + "\n")
    result = subprocess.run([jar, "cf", str(staging / "suanli-connect-smt.jar"), "-C", str(classes), "."],
                            capture_output=True, text=True)
    if result.returncode != 0:
        raise StackError(f"jar failed: {result.stderr[-2000:]}")
    shutil.rmtree(classes)
    (staging / ".complete").write_text(stamp + "\n")
    shutil.rmtree(target, ignore_errors=True)
    staging.rename(target)


def prepare(settings: Settings, log: Callable[[str], None] = print) -> str:
    """Resolve the runtime, fetch the plugins, build the transform (each only once).

    Returns the worker's classpath.
    """
    paths = ConnectPaths(Path(settings.home))
    classpath = runtime_classpath(paths.cache, log)
    paths.plugins.mkdir(parents=True, exist_ok=True)
    for name in PLUGINS:
        _install_plugin(name, paths.plugins, log)
    _build_smt(classpath, paths.plugins, log)
    return classpath


# ------------------------------------------------------------------------------ worker
def worker_properties(settings: Settings) -> str:
    paths = ConnectPaths(Path(settings.home))
    return f"""\
# Written by deploy/connect.py on every start; edit that file, not this one.
bootstrap.servers={settings.bootstrap_servers}
group.id={WORKER_GROUP}
config.storage.topic={WORKER_GROUP}.configs
offset.storage.topic={WORKER_GROUP}.offsets
status.storage.topic={WORKER_GROUP}.status
config.storage.replication.factor=1
offset.storage.replication.factor=1
status.storage.replication.factor=1
offset.storage.partitions=5
status.storage.partitions=1
key.converter=org.apache.kafka.connect.storage.StringConverter
value.converter=org.apache.kafka.connect.json.JsonConverter
value.converter.schemas.enable=false
listeners=http://127.0.0.1:{rest_port()}
rest.advertised.host.name=127.0.0.1
rest.advertised.port={rest_port()}
plugin.path={paths.plugins}
# A restarted worker takes its tasks back at once (default: wait up to 5 min for the lost one).
scheduled.rebalance.max.delay.ms=0
offset.flush.interval.ms=1000
task.shutdown.graceful.timeout.ms=5000
connector.client.config.override.policy=All
topic.creation.enable=true
""" + _security_lines(settings)


def _security_lines(settings: Settings) -> str:
    """On a SASL_SSL cluster, the worker's own clients and those it makes for connectors
    (``producer.``, ``consumer.``, ``admin.``) authenticate as the control plane's principal."""
    security = settings.kafka_security
    if security is None:
        return ""
    props = security.java()
    return "".join(f"{prefix}{key}={value}\n" for prefix in ("", "producer.", "consumer.", "admin.")
                   for key, value in props.items())


def launch_command(classpath: str, properties: Path, heap: str = HEAP) -> list[str]:
    """argv of the worker JVM (Java 17+). The properties path is the pid-file marker."""
    return ["java", f"-Xmx{heap}", "-Xms128m", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=50",
            "-Djava.awt.headless=true", f"-Dlog4j2.configurationFile={HERE / 'log4j2.properties'}",
            "-cp", classpath, MAIN_CLASS, str(properties)]


class ConnectClient:
    """The few REST calls of the Connect worker that Suanli makes."""

    def __init__(self, url: str | None = None, timeout: float = 15.0):
        self.url = url or rest_url()
        self._http = httpx.Client(base_url=self.url, timeout=timeout, trust_env=False)

    def __enter__(self) -> ConnectClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self._http.close()

    def _call(self, method: str, path: str, **kw: Any) -> Any:
        try:
            resp = self._http.request(method, path, **kw)
        except httpx.HTTPError as exc:
            raise StackError(f"Kafka Connect at {self.url} unreachable: {exc}") from exc
        if resp.status_code == 404 and method == "GET":
            return None
        if resp.status_code >= 400:
            raise StackError(f"Kafka Connect {method} {path}: HTTP {resp.status_code}: {resp.text[:2000]}")
        return resp.json() if resp.content else None

    def ready(self) -> bool:
        try:
            return self._http.get("/connectors").status_code == 200
        except httpx.HTTPError:
            return False

    def plugins(self) -> list[str]:
        return [p["class"] for p in self._call("GET", "/connector-plugins", params={"connectorsOnly": "false"})]

    def put_config(self, name: str, config: dict[str, str]) -> Any:
        return self._call("PUT", f"/connectors/{name}/config", json=config)

    def status(self, name: str) -> dict | None:
        return self._call("GET", f"/connectors/{name}/status")

    def delete(self, name: str) -> None:
        try:
            self._call("DELETE", f"/connectors/{name}")
        except StackError as exc:
            if "404" not in str(exc):
                raise

    def restart(self, name: str) -> None:
        self._call("POST", f"/connectors/{name}/restart", params={"includeTasks": "true", "onlyFailed": "true"})

    def connectors(self) -> list[str]:
        return self._call("GET", "/connectors") or []


def _running(status: dict | None) -> bool:
    return bool(status and status["connector"]["state"] == "RUNNING" and status["tasks"]
                and all(t["state"] == "RUNNING" for t in status["tasks"]))


def wait_running(client: ConnectClient, name: str, timeout: float = 120) -> dict:
    """Wait until the connector and all its tasks run; StackError with the trace if one failed."""
    deadline = time.monotonic() + timeout
    status = None
    while time.monotonic() < deadline:
        status = client.status(name)
        if _running(status):
            return status
        if status:
            failed = [t for t in status["tasks"] if t["state"] == "FAILED"]
            if status["connector"]["state"] == "FAILED" or failed:
                trace = (failed[0] if failed else status["connector"]).get("trace", "")
                raise StackError(f"connector {name} failed:\n{trace[:4000]}")
        time.sleep(0.5)
    raise StackError(f"connector {name} not running after {timeout:.0f}s: {json.dumps(status)[:2000]}")


# ------------------------------------------------------------------------------ connectors
def template_values(settings: Settings) -> dict[str, str]:
    schema = pg_schema(settings.namespace)
    return {
        "namespace": settings.namespace,
        "decisions_topic": TopicNames(settings.namespace).decisions,
        "registry_v2_url": registry_v2_url(settings),
        "jdbc_url": postgres.jdbc_url(),
        "pg_user": postgres.USER,
        "pg_port": str(postgres.port()),
        "pg_database": postgres.DATABASE,
        "pg_schema": schema,
        "slot_name": f"suanli_{schema}"[:63],
        "publication_name": f"suanli_{schema}"[:63],
    }


def cdc_topic(settings: Settings) -> str:
    return f"{settings.namespace}.cdc.{pg_schema(settings.namespace)}.nodes"


def connector_configs(settings: Settings) -> dict[str, dict[str, str]]:
    """``{name: config}`` of the namespace's connectors, from ``deploy/connect/*.json``."""
    values = template_values(settings)
    out = {}
    for path in (HERE / "decisions-sink.json", HERE / "nodes-source.json"):
        doc = json.loads(Template(path.read_text()).substitute(values))
        out[doc["name"]] = doc["config"]
    return out


def sink_name(settings: Settings) -> str:
    return f"{settings.namespace}.decisions-sink"


def source_name(settings: Settings) -> str:
    return f"{settings.namespace}.nodes-source"


def apply_schema(settings: Settings) -> None:
    sql = Template((HERE / "schema.sql").read_text()).substitute(template_values(settings))
    postgres.psql(sql)


def start_worker(settings: Settings, log: Callable[[str], None] = print, timeout: float = 180) -> bool:
    """Start the worker if it is not running; wait for its REST API. True if started here."""
    svc = worker_service(settings)
    started = False
    if svc.pid() is None:
        classpath = prepare(settings, log)
        paths = ConnectPaths(Path(settings.home))
        paths.work.mkdir(parents=True, exist_ok=True)
        paths.worker_properties.touch(mode=0o600)          # may hold the SCRAM password
        paths.worker_properties.write_text(worker_properties(settings))
        with ConnectClient() as probe:
            if probe.ready():
                raise StackError(f"port {rest_port()} already serves a Connect worker that is not ours "
                                 "(set SUANLI_CONNECT_PORT)")
        svc.start(launch_command(classpath, paths.worker_properties))
        started = True
        log(f"connect: worker starting on {rest_url()} (log: {svc.log_file})")
    deadline = time.monotonic() + timeout
    with ConnectClient() as client:
        while not client.ready():
            if svc.pid() is None:
                raise StackError(f"Connect worker exited during start-up; last lines of {svc.log_file}:\n"
                                 f"{svc.log_tail(40)}")
            if time.monotonic() > deadline:
                raise StackError(f"Connect worker not ready after {timeout:.0f}s:\n{svc.log_tail(40)}")
            time.sleep(0.5)
    return started


def stop_worker(settings: Settings, log: Callable[[str], None] = print) -> bool:
    if worker_service(settings).stop(timeout=30):
        log("connect: worker stopped")
        return True
    return False


def register(settings: Settings, *, sink: bool = True, source: bool = True, timeout: float = 120) -> dict[str, dict]:
    """PUT the namespace's connector configs (idempotent) and wait until they run."""
    from suanli.streams.kafka_io import ensure_topics

    specs = core_topics(settings.partitions, settings.namespace)
    if source:
        specs.append(TopicSpec(cdc_topic(settings), 1))
    asyncio.run(ensure_topics(settings.bootstrap_servers, specs))
    configs = connector_configs(settings)
    wanted = ([sink_name(settings)] if sink else []) + ([source_name(settings)] if source else [])
    out = {}
    with ConnectClient() as client:
        for name in wanted:
            client.put_config(name, configs[name])
        for name in wanted:
            out[name] = wait_running(client, name, timeout)
    return out


def unregister(settings: Settings, *, drop_schema: bool = False) -> None:
    """Delete the namespace's connectors, its replication slot and publication (and with
    ``drop_schema`` its SQL schema): what a throwaway namespace leaves behind."""
    values = template_values(settings)
    with ConnectClient() as client:
        if client.ready():
            for name in (sink_name(settings), source_name(settings)):
                client.delete(name)
    if postgres.is_ready():
        deadline = time.monotonic() + 30
        while True:   # the slot stays active until the source task has stopped
            try:
                postgres.psql(f"SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
                              f"WHERE slot_name = '{values['slot_name']}'")
                break
            except StackError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
        postgres.psql(f"DROP PUBLICATION IF EXISTS {values['publication_name']}")
        if drop_schema:
            postgres.psql(f"DROP SCHEMA IF EXISTS {values['pg_schema']} CASCADE")


def up(settings: Settings, *, sink: bool = True, source: bool = True,
       log: Callable[[str], None] = print) -> dict[str, Any]:
    """PostgreSQL, the worker, the namespace's SQL schema, connectors and nodes bridge."""
    began = time.monotonic()
    started = {"postgres": postgres.up(settings, log)}
    apply_schema(settings)
    started["connect"] = start_worker(settings, log)
    statuses = register(settings, sink=sink, source=source)
    for name in statuses:
        log(f"connect: {name} running")
    if source:
        svc, argv = bridge_service(settings)
        started["nodes-bridge"] = svc.pid() is None
        if started["nodes-bridge"]:
            svc.start(argv, env=to_env(settings))
            log(f"connect: nodes bridge {cdc_topic(settings)} -> {TopicNames(settings.namespace).raw_nodes} "
                f"(log: {svc.log_file})")
    return {"started": started, "connectors": statuses, "seconds": round(time.monotonic() - began, 2),
            "postgres": postgres.dsn(), "connect": rest_url(), "schema": pg_schema(settings.namespace)}


def down(settings: Settings, log: Callable[[str], None] = print) -> None:
    """Stop the namespace's bridge, the worker and PostgreSQL (by pid). Connector configs
    stay in the worker's config topic, so the next ``up`` resumes where this one stopped."""
    svc, _argv = bridge_service(settings)
    if svc.stop():
        log("connect: nodes bridge stopped")
    if not stop_worker(settings, log):
        log("connect: worker not running")
    if not postgres.down(settings, log):
        log("postgres: not running")


def status(settings: Settings) -> list[dict[str, Any]]:
    rows = []
    pg = postgres.service(settings)
    rows.append({"service": "postgres", "address": postgres.dsn(), "pid": pg.pid(), "ready": postgres.is_ready()})
    worker = worker_service(settings)
    with ConnectClient(timeout=3) as client:
        ready = client.ready()
        rows.append({"service": "connect", "address": rest_url(), "pid": worker.pid(), "ready": ready})
        for name in (sink_name(settings), source_name(settings)):
            st = client.status(name) if ready else None
            detail = "not registered" if st is None else \
                f"{st['connector']['state']}, tasks: {','.join(t['state'] for t in st['tasks']) or '-'}"
            rows.append({"service": name, "address": rest_url(), "pid": worker.pid(), "ready": _running(st),
                         "detail": detail})
    svc, _argv = bridge_service(settings)
    rows.append({"service": "nodes-bridge", "address": f"{cdc_topic(settings)} -> {TopicNames(settings.namespace).raw_nodes}",
                 "pid": svc.pid(), "ready": svc.pid() is not None})
    return rows


# ------------------------------------------------------------------------------ nodes bridge
_TIERS = {"cloud", "edge", "onprem"}
_ARCHS = {"x86_64", "arm64", "riscv64", "other"}


def node_event(change: dict[str, Any]) -> tuple[str, dict[str, Any]] | None:
    """A Debezium change event of ``<schema>.nodes`` (JSON, no schema) -> a Suanli event.

    Insert, update and snapshot read -> NodeRegistered; delete -> NodeStatusChanged(DOWN).
    The event id is derived from the change's WAL position, so a redelivered change event
    yields the same Suanli event id. Pure; returns None for anything else.
    """
    op = change.get("op")
    source = change.get("source") or {}
    at = int(change.get("ts_ms") or source.get("ts_ms") or 0)
    where = f"{source.get('lsn', '')}/{source.get('txId', '')}"
    if op in ("c", "u", "r"):
        row = change.get("after") or {}
        gpus = int(row.get("gpu_count") or 0)
        labels = row.get("labels") or {}
        if isinstance(labels, str):
            labels = json.loads(labels or "{}")
        accelerators = []
        if gpus > 0:
            accelerators.append({"kind": "GPU", "model": row.get("gpu_model") or "GPU", "count": gpus,
                                 "memory_mib": int(row.get("gpu_memory_mib") or 0)})
        return "NodeRegistered", {
            "event_id": f"cdc/{row['node_id']}/{op}/{where}",
            "node_id": row["node_id"], "cell": row["cell"], "site": row.get("site") or "inventory",
            "region": row.get("region") or "", "zone": row.get("zone") or "",
            "tier": row.get("tier") if row.get("tier") in _TIERS else "onprem",
            "arch": row.get("arch") if row.get("arch") in _ARCHS else "other",
            "cpu_milli": int(row["cpu_milli"]), "memory_mib": int(row["memory_mib"]),
            "accelerators": accelerators, "pricing": row.get("pricing") or "ON_DEMAND",
            "price_per_hour": float(row.get("price_per_hour") or 0.0), "pue": 1.0, "carbon_g_per_kwh": 0.0,
            "connector": row.get("connector") or "sim",
            "labels": {str(k): str(v) for k, v in labels.items()}, "registered_at": at,
        }
    if op == "d":
        row = change.get("before") or {}
        if not row.get("node_id") or not row.get("cell"):
            return None
        return "NodeStatusChanged", {"event_id": f"cdc/{row['node_id']}/d/{where}", "node_id": row["node_id"],
                                     "cell": row["cell"], "status": "DOWN",
                                     "reason": "deleted from the nodes inventory table", "at": at}
    return None


async def run_bridge(settings: Settings, stop: asyncio.Event) -> None:
    """Consume the CDC topic (group ``<ns>.nodes-bridge``), publish Suanli events, commit
    after the broker has stored them: at-least-once, and duplicates keep their event id."""
    from aiokafka import AIOKafkaConsumer

    from suanli.schemas.codec import Codec
    from suanli.schemas.models import validate_event
    from suanli.schemas.registry import RegistryClient
    from suanli.streams.kafka_io import EventProducer

    topic = cdc_topic(settings)
    consumer = AIOKafkaConsumer(topic, bootstrap_servers=settings.bootstrap_servers,
                                **client_options(settings.bootstrap_servers),
                                group_id=f"{settings.namespace}.nodes-bridge", enable_auto_commit=False,
                                auto_offset_reset="earliest")
    with RegistryClient(settings.registry_url) as registry:
        async with EventProducer(settings.bootstrap_servers, Codec(registry), namespace=settings.namespace) as producer:
            await consumer.start()
            try:
                while not stop.is_set():
                    fetched = await consumer.getmany(timeout_ms=500, max_records=500)
                    futures = []
                    for records in fetched.values():
                        for record in records:
                            if record.value is None:
                                continue
                            try:
                                change = json.loads(record.value)
                                event = node_event(change.get("payload", change))
                            except (ValueError, KeyError, TypeError) as exc:
                                log_.warning("bridge: skipping %s[%d]@%d: %s", record.topic, record.partition,
                                             record.offset, exc)
                                continue
                            if event is None:
                                continue
                            kind, payload = event
                            problem = validate_event(kind, payload)
                            if problem:     # still published: intake dead-letters it with the reason
                                log_.warning("bridge: %s %s is invalid: %s", kind, payload["node_id"], problem)
                            futures.append(await producer.publish(kind, payload))
                            log_.info("bridge: %s %s (cell %s)", kind, payload["node_id"], payload["cell"])
                    if futures:
                        await asyncio.gather(*futures)
                    if fetched:
                        await consumer.commit()
            finally:
                await consumer.stop()


def _bridge_main() -> int:
    import signal

    from suanli.config import settings

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    logging.getLogger("aiokafka").setLevel(logging.WARNING)
    logging.getLogger("httpx").setLevel(logging.WARNING)

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        await run_bridge(settings(), stop)

    asyncio.run(main())
    return 0


if __name__ == "__main__":
    if sys.argv[1:] == ["bridge"]:
        raise SystemExit(_bridge_main())
    print("usage: python -m suanli.deploy.connect bridge", file=sys.stderr)
    raise SystemExit(2)
