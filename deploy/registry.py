"""The schema registry: Apicurio Registry 3.x speaking the Confluent REST API.

What runs: the ready-made Quarkus distribution of ``io.apicurio:apicurio-registry-app``
(classifier ``all``, type ``tar.gz``) from Maven Central, unpacked by
``deploy/registry/pom.xml`` into ``work_dir`` and started as ``java -jar quarkus-run.jar``.
Storage is ``kafkasql``: a Kafka journal topic (``kafkasql-journal``, kept forever) replayed
into an in-memory H2 database on every start, so schema ids survive restarts as long as the
Kafka data does. Static settings live in ``deploy/registry/registry.properties``.

Apicurio 3.3 is compiled for Java 21: a JDK >= 21 is looked up (``$SUANLI_REGISTRY_JAVA``,
``$JAVA_HOME``, ``java`` on PATH, then ``/usr/lib/jvm/*``).

The server listens on two loopback ports: ``port`` (REST API) and a management port
(health checks; ``port + 1`` unless given). Quarkus fixes the management interface at build
time, so it cannot be folded into the main port. Readiness must come from the management
port's ``/health/ready``: the REST API answers 200 a moment *before* the journal replay has
finished, and a read then could miss schemas (see ``is_ready``).

Stdlib only.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import urllib.error
import urllib.request
import xml.etree.ElementTree as ET
from functools import lru_cache
from pathlib import Path
from typing import Callable

HERE = Path(__file__).resolve().parent / "registry"
POM = HERE / "pom.xml"
PROPERTIES = HERE / "registry.properties"
MIN_JAVA = 21
_CDS_DYNAMIC_MAGIC = (0xF00BABA8).to_bytes(4, "little")  # header of a JDK dynamic CDS archive
HEAP = "384m"
JVM_OPTS = [
    f"-Xmx{HEAP}",
    "-XX:+UseSerialGC",          # smallest footprint; the registry sees little load
    "-XX:TieredStopAtLevel=1",   # C1 only: ~1 s faster start, ~50 MB less RSS
    "-XX:+ExitOnOutOfMemoryError",
    "-Djava.util.logging.manager=org.jboss.logmanager.LogManager",
]


def apicurio_version() -> str:
    """The Apicurio Registry version pinned in deploy/registry/pom.xml."""
    ns = {"m": "http://maven.apache.org/POM/4.0.0"}
    node = ET.parse(POM).getroot().find("m:properties/m:apicurio.version", ns)
    if node is None or not (node.text or "").strip():
        raise RuntimeError(f"{POM}: <apicurio.version> property missing")
    return node.text.strip()


def registry_home(work_dir: Path) -> Path:
    """Directory holding the unpacked distribution (quarkus-run.jar, lib/, ...)."""
    return Path(work_dir) / f"apicurio-registry-{apicurio_version()}"


def _tail(text: str, lines: int = 25) -> str:
    return "\n".join(text.splitlines()[-lines:])


def _java_major(java: str) -> int | None:
    try:
        out = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    m = re.search(r'version "(\d+)(?:\.(\d+))?', out.stderr + out.stdout)
    if not m:
        return None
    major = int(m.group(1))
    return int(m.group(2) or 0) if major == 1 else major


@lru_cache(maxsize=1)
def find_java() -> str:
    """Path of a ``java`` executable of version >= 21 (raises RuntimeError if none)."""
    candidates: list[str] = []
    if os.environ.get("SUANLI_REGISTRY_JAVA"):
        candidates.append(os.environ["SUANLI_REGISTRY_JAVA"])
    if os.environ.get("JAVA_HOME"):
        candidates.append(str(Path(os.environ["JAVA_HOME"]) / "bin" / "java"))
    on_path = shutil.which("java")
    if on_path:
        candidates.append(on_path)
    jvm_root = Path("/usr/lib/jvm")
    if jvm_root.is_dir():
        candidates += [str(p / "bin" / "java") for p in sorted(jvm_root.iterdir(), reverse=True)
                       if (p / "bin" / "java").exists()]
    seen: list[str] = []
    for java in candidates:
        if java in seen:
            continue
        seen.append(java)
        major = _java_major(java)
        if major is not None and major >= MIN_JAVA:
            return java
    raise RuntimeError(
        f"Apicurio Registry {apicurio_version()} needs Java >= {MIN_JAVA}; none found among "
        f"{seen or ['(no java)']}. Set SUANLI_REGISTRY_JAVA=/path/to/bin/java.")


def prepare(work_dir: Path, log: Callable[[str], None] = print) -> None:
    """Unpack Apicurio Registry into ``work_dir`` (once) and check for a Java >= 21.

    Idempotent: if ``<work_dir>/apicurio-registry-<version>/quarkus-run.jar`` exists, Maven
    is not run. The first run downloads ~160 MB into ~/.m2 (later runs work offline).
    Raises RuntimeError naming the failing command and the tail of its output.
    """
    work_dir = Path(work_dir)
    home = registry_home(work_dir)
    java = find_java()
    if (home / "quarkus-run.jar").is_file() and (home / ".complete").is_file():
        return
    mvn = shutil.which("mvn")
    if mvn is None:
        raise RuntimeError("`mvn` not found on PATH (needed once to fetch Apicurio Registry)")
    work_dir.mkdir(parents=True, exist_ok=True)
    staging = home.with_name(home.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    log(f"fetching Apicurio Registry {apicurio_version()} with Maven into {home} "
        f"(first run only; java: {java})...")
    argv = [mvn, "-B", "-q", "-Dstyle.color=never", "-f", str(POM), "package",
            f"-Dregistry.home={staging}"]
    result = subprocess.run(argv, capture_output=True, text=True)
    if result.returncode != 0 or not (staging / "quarkus-run.jar").is_file():
        shutil.rmtree(staging, ignore_errors=True)
        raise RuntimeError(f"`{' '.join(argv)}` failed (exit {result.returncode}):\n"
                           f"{_tail(result.stdout + result.stderr)}")
    shutil.rmtree(staging / ".maven-target", ignore_errors=True)
    (staging / ".complete").write_text(apicurio_version() + "\n")
    shutil.rmtree(home, ignore_errors=True)
    staging.rename(home)
    log(f"Apicurio Registry {apicurio_version()} ready in {home}")


def _static_properties() -> list[tuple[str, str]]:
    props = []
    for raw in PROPERTIES.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", "!")):
            continue
        key, sep, value = line.partition("=")
        if not sep:
            raise RuntimeError(f"{PROPERTIES}: not key=value: {raw!r}")
        props.append((key.strip(), value.strip()))
    return props


def launch_command(*, work_dir: Path, port: int, kafka_bootstrap: str, data_dir: Path,
                   management_port: int | None = None, kafka_security=None) -> tuple[list[str], dict[str, str]]:
    """argv and extra environment to run the registry on 127.0.0.1:``port``.

    Storage is the Kafka cluster at ``kafka_bootstrap`` (topics ``kafkasql-journal``,
    ``kafkasql-snapshots``, ``registry-events``; created by Apicurio if missing; Kafka
    must be up before the registry starts). ``data_dir`` only holds scratch files
    (temp dir, snapshot/import work dirs); it is created here. The management/health
    interface listens on 127.0.0.1:``management_port`` (default ``port + 1``).
    Call ``prepare()`` first. With ``kafka_security`` (a KafkaSecurity), its Kafka clients use
    SASL_SSL: the settings go to ``data_dir/config/application.properties`` (mode 0600; Quarkus
    reads that file from the working directory, which must be ``data_dir``) as
    ``apicurio.kafka.common.*``, never onto the command line, which ``ps`` shows.
    """
    home = registry_home(Path(work_dir))
    jar = home / "quarkus-run.jar"
    if not jar.is_file():
        raise RuntimeError(f"{jar} missing: call deploy.registry.prepare() first")
    data_dir = Path(data_dir).resolve()
    tmp = data_dir / "tmp"
    tmp.mkdir(parents=True, exist_ok=True)
    config = data_dir / "config" / "application.properties"
    if kafka_security is not None:
        config.parent.mkdir(parents=True, exist_ok=True)
        config.touch(mode=0o600)
        config.write_text("".join(f"apicurio.kafka.common.{k}={_escape(v)}\n"
                                  for k, v in kafka_security.java().items()))
    elif config.exists():
        config.unlink()
    mport = port + 1 if management_port is None else management_port
    dynamic = [
        ("quarkus.http.host", "127.0.0.1"),
        ("quarkus.http.port", str(port)),
        ("quarkus.management.host", "127.0.0.1"),
        ("quarkus.management.port", str(mport)),
        ("apicurio.kafkasql.bootstrap.servers", kafka_bootstrap),
        ("apicurio.storage.snapshot.location", str(data_dir)),
        ("apicurio.import.work-dir", str(tmp)),
    ]
    props = [f"-D{k}={v}" for k, v in _static_properties() + dynamic]
    # Dynamic CDS archive (JDK >= 19): written at the first clean exit (SIGTERM; takes a few
    # seconds once), reused afterwards (~1 s faster start). The JVM regenerates an archive of
    # another JDK build, but keeps ignoring a corrupt one, so drop a file with a bad header.
    jsa = home / "registry-cds.jsa"
    try:
        with open(jsa, "rb") as fh:
            if fh.read(4) != _CDS_DYNAMIC_MAGIC:
                jsa.unlink()
    except FileNotFoundError:
        pass
    cds = ["-XX:+AutoCreateSharedArchive", f"-XX:SharedArchiveFile={jsa}"]
    argv = [find_java(), *JVM_OPTS, *cds, f"-Djava.io.tmpdir={tmp}", *props, "-jar", str(jar)]
    return argv, {}


def _escape(value: str) -> str:
    """A value as a .properties line keeps it (backslashes and the separators escaped)."""
    return value.replace("\\", "\\\\").replace("=", "\\=").replace(":", "\\:")


# Loopback requests must never go through an http_proxy from the environment.
_LOCAL = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def ccompat_url(port: int) -> str:
    """Base URL of the Confluent-compatible REST API."""
    return f"http://127.0.0.1:{port}/apis/ccompat/v7"


def is_ready(port: int, timeout: float = 1.0, management_port: int | None = None) -> bool:
    """True once the registry serves complete data.

    Requires both ``GET {ccompat_url}/subjects`` -> 200 and the management port's
    ``/health/ready`` -> 200 with status UP. The latter turns UP only when the Kafka
    journal has been replayed; the REST port alone can answer 200 (with missing
    subjects) up to a second or so earlier.
    """
    mport = port + 1 if management_port is None else management_port
    try:
        with _LOCAL.open(f"{ccompat_url(port)}/subjects", timeout=timeout) as resp:
            if resp.status != 200:
                return False
        with _LOCAL.open(f"http://127.0.0.1:{mport}/health/ready", timeout=timeout) as resp:
            return resp.status == 200 and json.load(resp).get("status") == "UP"
    except (urllib.error.URLError, OSError, ValueError):
        return False
