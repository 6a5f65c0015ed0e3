"""``suanli prometheus up|down|status``: Prometheus and node_exporter scraping this machine, on loopback.

Both are Debian's binaries (``apt-get install prometheus prometheus-node-exporter``, done by
``.ci/setup.d/50-prometheus.sh``) run as the project's own pid-file services
(``deploy/processes.py``); no system service is involved:

* **node_exporter** on ``127.0.0.1:19100`` (``SUANLI_NODE_EXPORTER_PORT``), the default
  collectors (less ``systemd`` on a machine without systemd), plus a textfile collector directory ``<home>/prometheus/textfile`` (whose
  path is also the pid file's marker);
* **Prometheus** on ``127.0.0.1:19090`` (``SUANLI_PROMETHEUS_PORT``) with a generated
  ``<home>/prometheus/prometheus.yml`` that scrapes node_exporter (job ``node``), itself
  (job ``prometheus``) and every running plane's workers and API every
  ``SUANLI_PROMETHEUS_SCRAPE_S`` seconds (default 5), storage in ``<home>/prometheus/data``
  (retention 2 days), log ``<home>/logs/prometheus.log``, and the recording and alert rules
  of ``deploy/prometheus/rules/``.

**The plane's targets.** A plane (``suanli up``, ``deploy/plane.py``) and the API
(``suanli api serve``) write their ``/metrics`` addresses into
``<home>/prometheus/targets/<name>.json`` (Prometheus file-based discovery: each entry has
the labels ``job`` = ``suanli-<role>`` and ``plane`` = the namespace) and remove the file
when they stop; Prometheus picks the files up as they come and go. So one Prometheus scrapes
whatever planes run, with no restart. ``deploy/prometheus/prometheus.yml`` is the same
configuration as a template for a Prometheus of your own (static targets at the default ports).

A second, separate Prometheus (its own port, directory and pid file; the tests run one beside
the default) is an *instance*: ``up(settings, instance="name")`` keeps everything under
``<home>/<name>/``; the default instance is ``prometheus``. ``node_exporter=False`` starts
Prometheus alone (ready: it answers ``/-/ready``).

Ready means Prometheus answers ``/-/ready`` and a query of
``node_memory_MemAvailable_bytes`` returns at least one sample, i.e. node_exporter has been
scraped. ``down`` stops both by pid (SIGTERM: Prometheus closes its TSDB head cleanly).
Nothing binds an address other than 127.0.0.1.
"""
from __future__ import annotations

import json
import os
import shutil
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import httpx

from suanli.config import Settings
from suanli.deploy.processes import ServiceProcess
from suanli.errors import StackError

HOST = "127.0.0.1"
READY_METRIC = "node_memory_MemAvailable_bytes"
RETENTION = "2d"
DEFAULT_INSTANCE = "prometheus"
ASSETS = Path(__file__).resolve().parent / "prometheus"        # the template and the rules (deploy/prometheus/)
RULES = ASSETS / "rules"


@dataclass(frozen=True)
class PromPaths:
    home: Path
    instance: str = DEFAULT_INSTANCE

    @property
    def root(self) -> Path:
        return self.home / self.instance

    @property
    def config(self) -> Path:
        return self.root / "prometheus.yml"

    @property
    def data(self) -> Path:
        return self.root / "data"

    @property
    def textfile(self) -> Path:
        return self.root / "textfile"


def targets_dir(settings: Settings) -> Path:
    """Where planes and the API announce their ``/metrics`` targets (shared by every instance)."""
    return Path(settings.home) / "prometheus" / "targets"


def target_file(settings: Settings, name: str) -> Path:
    return targets_dir(settings) / f"{name}.json"


def write_targets(settings: Settings, name: str, targets: dict[str, str]) -> Path:
    """Announce ``{role: "host:port"}`` under ``name`` (file-based discovery): job ``suanli-<role>``,
    label ``plane`` = the namespace. Written atomically (Prometheus may read it at any moment)."""
    path = target_file(settings, name)
    path.parent.mkdir(parents=True, exist_ok=True)
    body = [{"targets": [address], "labels": {"job": f"suanli-{role}", "plane": settings.namespace}}
            for role, address in sorted(targets.items())]
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(body, indent=2) + "\n")
    tmp.replace(path)
    return path


def remove_targets(settings: Settings, name: str) -> None:
    target_file(settings, name).unlink(missing_ok=True)


def api_targets_name(settings: Settings) -> str:
    return f"api-{settings.namespace}"


async def announce_api(settings: Settings, server: Any, host: str) -> None:
    """For ``suanli api serve``: once uvicorn's ``server`` listens, announce its ``/metrics``
    (job ``suanli-api``) until cancelled, then take the announcement back."""
    import asyncio

    try:
        while not server.started:
            await asyncio.sleep(0.05)
        port = server.servers[0].sockets[0].getsockname()[1]
        address = HOST if host in ("", "0.0.0.0", "::") else host
        address = f"[{address}]" if ":" in address else address
        write_targets(settings, api_targets_name(settings), {"api": f"{address}:{port}"})
        await asyncio.Event().wait()
    finally:
        remove_targets(settings, api_targets_name(settings))


def url(settings: Settings) -> str:
    """The HTTP API base of the project's Prometheus."""
    return f"http://{HOST}:{settings.prometheus_port}"


def node_exporter_target(settings: Settings) -> str:
    """node_exporter's scrape target, which is also its series' ``instance`` label."""
    return f"{HOST}:{settings.node_exporter_port}"


def _binary(*names: str) -> str:
    for name in names:
        found = shutil.which(name)
        if found:
            return found
    raise StackError(f"{names[0]} not found on PATH: install it with "
                     "`apt-get install prometheus prometheus-node-exporter` (.ci/setup.d/50-prometheus.sh)")


def node_exporter_service(settings: Settings, instance: str = DEFAULT_INSTANCE) -> ServiceProcess:
    home = Path(settings.home)
    name = "node_exporter" if instance == DEFAULT_INSTANCE else f"{instance}-node_exporter"
    return ServiceProcess("node_exporter", home / "run" / f"{name}.pid", home / "logs" / f"{name}.log",
                          marker=str(PromPaths(home, instance).textfile))


def prometheus_service(settings: Settings, instance: str = DEFAULT_INSTANCE) -> ServiceProcess:
    home = Path(settings.home)
    return ServiceProcess("prometheus", home / "run" / f"{instance}.pid", home / "logs" / f"{instance}.log",
                          marker=str(PromPaths(home, instance).config))


def config_text(settings: Settings, node_exporter: bool = True) -> str:
    """The generated prometheus.yml (YAML is a superset of JSON: values are quoted JSON strings)."""
    interval = f"{settings.prometheus_scrape_s}s"
    lines = [
        "# Generated by deploy/prometheus.py (suanli prometheus up); rewritten at every start.",
        "global:",
        f'  scrape_interval: "{interval}"',
        f'  scrape_timeout: "{min(settings.prometheus_scrape_s, 10)}s"',  # at most the interval
        f'  evaluation_interval: "{interval}"',
        "rule_files:",
        f"  - {json.dumps(str(RULES / '*.yml'))}",
        "scrape_configs:",
    ]
    if node_exporter:
        lines += ['  - job_name: "node"',
                  "    static_configs:",
                  f'      - targets: ["{node_exporter_target(settings)}"]']
    lines += [
        '  - job_name: "prometheus"',
        "    static_configs:",
        f'      - targets: ["{HOST}:{settings.prometheus_port}"]',
        "  # the planes' workers and the API: each file names its targets with their job (suanli-<role>)",
        '  - job_name: "suanli"',
        "    file_sd_configs:",
        f"      - files: [{json.dumps(str(targets_dir(settings) / '*.json'))}]",
        '        refresh_interval: "30s"',
        "",
    ]
    return "\n".join(lines)


def node_exporter_command(settings: Settings, instance: str = DEFAULT_INSTANCE) -> list[str]:
    paths = PromPaths(Path(settings.home), instance)
    argv = [_binary("prometheus-node-exporter", "node_exporter"),
            f"--web.listen-address={node_exporter_target(settings)}",
            f"--collector.textfile.directory={paths.textfile}"]
    if not Path("/run/systemd/system").is_dir():
        argv.append("--no-collector.systemd")  # Debian enables it; without systemd it logs an error per scrape
    return argv


def prometheus_command(settings: Settings, instance: str = DEFAULT_INSTANCE) -> list[str]:
    paths = PromPaths(Path(settings.home), instance)
    return [_binary("prometheus"),
            f"--config.file={paths.config}",
            f"--storage.tsdb.path={paths.data}",
            f"--storage.tsdb.retention.time={RETENTION}",
            f"--web.listen-address={HOST}:{settings.prometheus_port}",
            "--log.level=warn"]


def _port_open(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.5)
        return sock.connect_ex((HOST, port)) == 0


def node_exporter_ready(settings: Settings, timeout: float = 3) -> bool:
    try:
        r = httpx.get(f"http://{node_exporter_target(settings)}/metrics", timeout=timeout)
    except httpx.HTTPError:
        return False
    return r.status_code == 200 and READY_METRIC in r.text


def prometheus_ready(settings: Settings, timeout: float = 3, since: float | None = None,
                     metric: str = READY_METRIC) -> bool:
    """``/-/ready`` answers 200 and the store holds a sample of ``metric`` (node_memory_MemAvailable_bytes:
    node_exporter has been scraped) scraped at ``since``, epoch seconds, or later: the store outlives
    restarts, and a sample of the previous run stays visible for Prometheus's 5-minute lookback."""
    base = url(settings)
    try:
        if httpx.get(f"{base}/-/ready", timeout=timeout).status_code != 200:
            return False
        r = httpx.get(f"{base}/api/v1/query", params={"query": f"timestamp({metric})"}, timeout=timeout)
    except httpx.HTTPError:
        return False
    if r.status_code != 200:
        return False
    body = r.json()
    if body.get("status") != "success":
        return False
    stamps = [float(series["value"][1]) for series in body.get("data", {}).get("result", [])]
    return bool(stamps) and (since is None or max(stamps) >= since)


def _start(svc: ServiceProcess, argv: list[str], port: int, log: Callable[[str], None]) -> bool:
    """Start ``svc`` unless it runs; refuse a port that something else holds. True if started."""
    if svc.pid() is not None:
        return False
    if _port_open(port):
        raise StackError(f"{svc.name}: 127.0.0.1:{port} is taken by a process that is not ours "
                         f"(set SUANLI_{'PROMETHEUS' if svc.name == 'prometheus' else 'NODE_EXPORTER'}_PORT)")
    svc.start(argv)
    log(f"{svc.name}: starting on 127.0.0.1:{port} (log: {svc.log_file})")
    return True


def _wait(what: str, svc: ServiceProcess, ready: Callable[[], bool], deadline: float) -> None:
    while not ready():
        if svc.pid() is None:
            raise StackError(f"{what} exited during start-up; last lines of {svc.log_file}:\n{svc.log_tail()}")
        if time.monotonic() > deadline:
            raise StackError(f"{what} not ready in time; last lines of {svc.log_file}:\n{svc.log_tail()}")
        time.sleep(0.2)


def up(settings: Settings, log: Callable[[str], None] = print, timeout: float = 60,
       instance: str = DEFAULT_INSTANCE, node_exporter: bool = True) -> dict[str, Any]:
    """Start node_exporter (unless ``node_exporter`` is False) and Prometheus if they are not
    running and wait until Prometheus holds a node_exporter sample (without node_exporter: a
    sample of its own ``up``). Returns which were started, the URL and the seconds it took."""
    began = time.monotonic()
    deadline = began + timeout
    paths = PromPaths(Path(settings.home), instance)
    for folder in (paths.data, paths.textfile, targets_dir(settings)):
        folder.mkdir(parents=True, exist_ok=True)
    started = {}
    if node_exporter:
        exporter = node_exporter_service(settings, instance)
        started["node_exporter"] = _start(exporter, node_exporter_command(settings, instance),
                                          settings.node_exporter_port, log)
        _wait("node_exporter", exporter, lambda: node_exporter_ready(settings), deadline)
    prom = prometheus_service(settings, instance)
    if prom.pid() is None:
        paths.config.write_text(config_text(settings, node_exporter=node_exporter))
    since = time.time()
    started["prometheus"] = _start(prom, prometheus_command(settings, instance), settings.prometheus_port, log)
    metric = READY_METRIC if node_exporter else 'up{job="prometheus"}'
    _wait("prometheus", prom,
          lambda: prometheus_ready(settings, since=since if started["prometheus"] else None, metric=metric), deadline)
    seconds = round(time.monotonic() - began, 2)
    scraping = f"node_exporter {node_exporter_target(settings)} and " if node_exporter else ""
    log(f"prometheus: ready at {url(settings)} in {seconds:.1f}s, scraping {scraping}the planes in "
        f"{targets_dir(settings)} every {settings.prometheus_scrape_s}s")
    return {"started": started, "url": url(settings),
            "node_exporter": node_exporter_target(settings) if node_exporter else None,
            "targets": str(targets_dir(settings)), "seconds": seconds}


def down(settings: Settings, log: Callable[[str], None] = print, instance: str = DEFAULT_INSTANCE) -> dict[str, bool]:
    """Stop Prometheus, then node_exporter, by pid. Which of them were running."""
    stopped = {}
    for svc in (prometheus_service(settings, instance), node_exporter_service(settings, instance)):
        stopped[svc.name] = svc.stop(timeout=30)
        log(f"{svc.name}: {'stopped' if stopped[svc.name] else 'not running'}")
    return stopped


def targets(settings: Settings, timeout: float = 5) -> list[dict[str, Any]]:
    """The active targets of the Prometheus at ``settings.prometheus_port`` (``/api/v1/targets``)."""
    r = httpx.get(f"{url(settings)}/api/v1/targets", params={"state": "active"}, timeout=timeout)
    r.raise_for_status()
    return r.json()["data"]["activeTargets"]


def query(settings: Settings, expr: str, timeout: float = 5) -> list[dict[str, Any]]:
    """An instant query; the result vector (``[{"metric": {...}, "value": [t, "v"]}, ...]``)."""
    r = httpx.get(f"{url(settings)}/api/v1/query", params={"query": expr}, timeout=timeout)
    r.raise_for_status()
    body = r.json()
    if body.get("status") != "success":
        raise StackError(f"query {expr!r} failed: {body}")
    return body["data"]["result"]


def status(settings: Settings) -> list[dict[str, Any]]:
    exporter, prom = node_exporter_service(settings), prometheus_service(settings)
    return [
        {"service": "node_exporter", "address": f"http://{node_exporter_target(settings)}/metrics",
         "pid": exporter.pid(), "rss_mib": exporter.rss_mib(), "ready": node_exporter_ready(settings)},
        {"service": "prometheus", "address": url(settings), "pid": prom.pid(), "rss_mib": prom.rss_mib(),
         "ready": prometheus_ready(settings)},
    ]
