"""A local PostgreSQL for Kafka Connect: the decisions sink and the nodes inventory source.

``initdb`` once into ``<SUANLI_HOME>/pg`` (trust authentication, loopback only), then the
server runs as a pid-file service (``deploy/processes.py``) on 127.0.0.1:15432
(``SUANLI_PG_PORT``) with ``wal_level=logical`` so Debezium can decode its WAL. The
database ``suanli`` is created on first start.

PostgreSQL refuses to run as root: as root, the data directory belongs to the ``postgres``
system user (the Debian package creates it) and the server runs as that user through
``setpriv`` (an exec, so the pid file holds the postmaster's own pid).

Binaries: ``$SUANLI_PG_BIN``, else the newest ``/usr/lib/postgresql/*/bin``, else
``pg_ctl`` on PATH. Debian: ``apt-get install postgresql``.
"""
from __future__ import annotations

import os
import pwd
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from suanli.config import Settings
from suanli.deploy.processes import ServiceProcess
from suanli.errors import StackError

DATABASE = "suanli"
USER = "postgres"
DEFAULT_PORT = 15432


def port() -> int:
    return int(os.environ.get("SUANLI_PG_PORT", DEFAULT_PORT))


def bin_dir() -> Path:
    """Directory of initdb/postgres/psql; StackError naming the fix if there is none."""
    configured = os.environ.get("SUANLI_PG_BIN")
    if configured:
        return Path(configured)
    root = Path("/usr/lib/postgresql")
    if root.is_dir():
        versions = sorted((p for p in root.iterdir() if (p / "bin" / "postgres").exists()),
                          key=lambda p: int(p.name) if p.name.isdigit() else 0)
        if versions:
            return versions[-1] / "bin"
    on_path = shutil.which("pg_ctl")
    if on_path:
        return Path(on_path).parent
    raise StackError("PostgreSQL binaries not found (looked in $SUANLI_PG_BIN, /usr/lib/postgresql/*/bin, PATH): "
                     "install them with `apt-get install postgresql`")


@dataclass(frozen=True)
class PgPaths:
    home: Path

    @property
    def data(self) -> Path:
        return self.home / "pg"

    @property
    def log(self) -> Path:
        return self.home / "logs" / "postgres.log"

    @property
    def pid(self) -> Path:
        return self.home / "run" / "postgres.pid"


def service(settings: Settings) -> ServiceProcess:
    paths = PgPaths(Path(settings.home))
    return ServiceProcess("postgres", paths.pid, paths.log, marker=str(paths.data))


def _as_postgres() -> list[str]:
    """argv prefix that runs a command as the postgres user when we are root."""
    if os.geteuid() != 0:
        return []
    try:
        pwd.getpwnam(USER)
    except KeyError:
        raise StackError("running as root, and PostgreSQL refuses root: create the 'postgres' user "
                         "(`apt-get install postgresql` does)") from None
    return ["setpriv", f"--reuid={USER}", f"--regid={USER}", "--init-groups", "--"]


def _chown(path: Path) -> None:
    if os.geteuid() == 0:
        entry = pwd.getpwnam(USER)
        os.chown(path, entry.pw_uid, entry.pw_gid)


def _run(argv: list[str], what: str) -> subprocess.CompletedProcess:
    result = subprocess.run(argv, capture_output=True, text=True)
    if result.returncode != 0:
        raise StackError(f"{what} failed (exit {result.returncode}): `{' '.join(argv)}`\n"
                         f"{(result.stdout + result.stderr)[-2000:]}")
    return result


def prepare(settings: Settings, log: Callable[[str], None] = print) -> None:
    """initdb into <home>/pg once (trust auth, UTF8, C locale)."""
    paths = PgPaths(Path(settings.home))
    if (paths.data / "PG_VERSION").exists():
        return
    bins = bin_dir()
    paths.data.mkdir(parents=True, exist_ok=True)
    _chown(paths.data)
    log(f"postgres: initdb into {paths.data}")
    _run([*_as_postgres(), str(bins / "initdb"), "-D", str(paths.data), "-U", USER, "--auth=trust",
          "-E", "UTF8", "--locale=C"], "initdb")


def launch_command(settings: Settings) -> list[str]:
    """The postmaster, loopback only, TCP only, logical decoding on. The data dir is the marker."""
    paths = PgPaths(Path(settings.home))
    options = {
        "port": str(port()),
        "listen_addresses": "127.0.0.1",
        "unix_socket_directories": "",
        "wal_level": "logical",
        "max_wal_senders": "10",
        "max_replication_slots": "10",
        "max_connections": "60",
        "shared_buffers": "64MB",
        "synchronous_commit": "off",
        "fsync": "on",
        "log_min_messages": "warning",
    }
    argv = [*_as_postgres(), str(bin_dir() / "postgres"), "-D", str(paths.data)]
    for key, value in options.items():
        argv += ["-c", f"{key}={value}"]
    return argv


def dsn(database: str = DATABASE) -> str:
    return f"postgresql://{USER}@127.0.0.1:{port()}/{database}"


def jdbc_url(database: str = DATABASE) -> str:
    # stringtype=unspecified: text parameters are typed by the server, so JSON text can fill jsonb columns.
    return f"jdbc:postgresql://127.0.0.1:{port()}/{database}?stringtype=unspecified"


def psql(sql: str, database: str = DATABASE, *, timeout: float = 60) -> list[list[str]]:
    """Run SQL with psql (stop at the first error); the rows of the last statement, as text."""
    argv = [str(bin_dir() / "psql"), "-X", "-q", "-At", "-F", "\t", "-v", "ON_ERROR_STOP=1",
            "-h", "127.0.0.1", "-p", str(port()), "-U", USER, "-d", database, "-c", sql]
    try:
        result = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise StackError(f"psql timed out after {timeout:.0f}s: {sql[:200]}") from None
    if result.returncode != 0:
        raise StackError(f"psql failed: {result.stderr.strip()[-1500:]}\nSQL: {sql[:500]}")
    return [line.split("\t") for line in result.stdout.splitlines() if line]


def is_ready() -> bool:
    result = subprocess.run([str(bin_dir() / "pg_isready"), "-q", "-h", "127.0.0.1", "-p", str(port())],
                            capture_output=True)
    return result.returncode == 0


def up(settings: Settings, log: Callable[[str], None] = print, timeout: float = 60) -> bool:
    """Start PostgreSQL if it is not running, wait until it accepts connections, create the
    database. Returns True if this call started it."""
    svc = service(settings)
    started = False
    if svc.pid() is None:
        if is_ready():
            raise StackError(f"port {port()} already has a PostgreSQL that is not ours (set SUANLI_PG_PORT)")
        prepare(settings, log)
        svc.log_file.parent.mkdir(parents=True, exist_ok=True)
        svc.log_file.touch()
        svc.start(launch_command(settings))
        started = True
        log(f"postgres: starting on 127.0.0.1:{port()} (log: {svc.log_file})")
    deadline = time.monotonic() + timeout
    while not is_ready():
        if svc.pid() is None:
            raise StackError(f"postgres exited during start-up; last lines of {svc.log_file}:\n{svc.log_tail()}")
        if time.monotonic() > deadline:
            raise StackError(f"postgres not ready after {timeout:.0f}s:\n{svc.log_tail()}")
        time.sleep(0.2)
    if not psql(f"SELECT 1 FROM pg_database WHERE datname = '{DATABASE}'", "postgres"):
        psql(f"CREATE DATABASE {DATABASE}", "postgres")
        log(f"postgres: database {DATABASE} created")
    return started


def down(settings: Settings, log: Callable[[str], None] = print) -> bool:
    """Fast shutdown (SIGINT: roll back open transactions, close replication connections),
    then the usual SIGTERM/SIGKILL escalation if it lingers. True if it was running."""
    svc = service(settings)
    pid = svc.pid()
    if pid is None:
        return False
    try:
        os.kill(pid, signal.SIGINT)
    except ProcessLookupError:
        pass
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and svc.pid() is not None:
        time.sleep(0.1)
    svc.stop()
    log("postgres: stopped")
    return True
