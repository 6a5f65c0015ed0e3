"""``suanli stack prune``: remove the topics and local state of namespaces no longer used.

Every test run and bench makes a namespace of its own (``streams/topics.py``: every topic and
worker group starts with it), and nothing removes them: on a long-lived development stack
they pile up as thousands of partitions, whose index and metadata fill the broker's heap
(BENCHMARKS.md: a broker with a nearly full heap pauses every second or two) and gigabytes of
``<home>/kafka-data``, ``<home>/workers`` and ``<home>/audit``.

A namespace is recognised by its cell log (``<ns>.cells``) or its raw task topic
(``<ns>.raw.tasks``), or by its local state alone (its topics gone with an old
``kafka-data``). Its topics are every topic named ``<ns>.…``, and Faust's changelogs and
assignor topics, which start with a worker group, ``<ns>-<role>-…`` (``TopicNames.worker_group``;
the roles of :data:`WORKER_ROLES`). Where one namespace's name starts another's (``bench`` and
``bench-2``), a topic belongs to the longest. Topics of no namespace (the broker's own ``__…``,
the registry's, Connect's ``suanli-connect.…``) are never touched.

:func:`plan` is pure: which namespaces to prune, given the cluster's topics, the namespaces
to keep and an optional glob. :func:`prune` does it, except for a namespace with a running
plane process (tagged ``-X suanli-plane=<ns>``, ``deploy/plane.py``): it deletes the
namespace's topics, its ``<home>/workers/<ns>`` and ``<home>/audit/<ns>`` directories, and its
processes' logs and pid files (:func:`local_files`). Consumer groups are left to the broker,
which expires a group once its topics are gone and it has been empty for
``offsets.retention.minutes`` (aiokafka's admin client has no DeleteGroups call).
"""
from __future__ import annotations

import asyncio
import fnmatch
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable

from suanli.config import Settings
from suanli.errors import StackError

# The topics that make a name a namespace (TopicNames.cell_log, TopicNames.raw_tasks).
MARKERS = (".cells", ".raw.tasks")
WORKER_ROLES = ("intake", "scheduler", "telemetry")      # the worker roles (consumer groups): streams/worker.py
DELETE_CHUNK = 100           # topics per DeleteTopics request
# The services a plane names after its namespace (deploy/plane.py, deploy/connect.py, the API's
# workers and the Kubernetes bench): their logs, pid files and the API's token files.
SERVICE_FILE = r"(intake|scheduler|telemetry|sim|api|nodes-bridge|k8s)(-\d+)?(-tokens)?\.(log|pid|toml)"


@dataclass
class Namespace:
    """One namespace found on the cluster and on disk."""

    name: str
    topics: list[str] = field(default_factory=list)
    local_dirs: list[Path] = field(default_factory=list)
    local_files: list[Path] = field(default_factory=list)
    running: list[int] = field(default_factory=list)       # pids of its plane processes

    def local_bytes(self) -> int:
        files = [f for d in self.local_dirs for f in d.rglob("*")] + self.local_files
        return sum(f.stat().st_size for f in files if f.is_file())


def namespaces(topics: Iterable[str], also: Iterable[str] = ()) -> dict[str, list[str]]:
    """``{namespace: its topics, sorted}`` for every namespace with a marker topic among
    ``topics``, and for the names in ``also`` (namespaces known from their local state,
    whose topics may be gone); a topic of no namespace is in none."""
    topics = sorted(set(topics))
    names = {t[: -len(m)] for t in topics for m in MARKERS if t.endswith(m) and len(t) > len(m)} | set(also)
    owned: dict[str, list[str]] = {n: [] for n in names}
    by_length = sorted(names, key=len, reverse=True)
    for topic in topics:
        owner = next((n for n in by_length
                      if topic.startswith((f"{n}.", *(f"{n}-{role}-" for role in WORKER_ROLES)))), None)
        if owner is not None:
            owned[owner].append(topic)
    return owned


def plan(topics: Iterable[str], keep: Iterable[str], match: str | None = None,
         also: Iterable[str] = ()) -> dict[str, list[str]]:
    """The namespaces to prune and their topics: every namespace of ``topics`` (and ``also``,
    see :func:`namespaces`) that is not in ``keep`` and, when ``match`` is given, whose name
    matches that glob (``bench*``)."""
    kept = set(keep)
    return {n: ts for n, ts in sorted(namespaces(topics, also).items())
            if n not in kept and (match is None or fnmatch.fnmatchcase(n, match))}


def running_planes(proc: Path = Path("/proc")) -> dict[str, list[int]]:
    """``{namespace: pids}`` of the processes tagged ``-X suanli-plane=<namespace>``."""
    found: dict[str, list[int]] = {}
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue                                   # gone meanwhile, or not ours to read
        for arg in argv:
            if arg.startswith(b"suanli-plane="):
                found.setdefault(arg.split(b"=", 1)[1].decode(errors="replace"), []).append(int(entry.name))
    return {ns: sorted(pids) for ns, pids in found.items()}


def local_namespaces(settings: Settings) -> set[str]:
    """The namespaces with local state (``<home>/workers/<ns>``, ``<home>/audit/<ns>``): the
    topics of some are gone (a fresh ``kafka-data``), their state is not."""
    home = Path(settings.home)
    return {d.name for sub in ("workers", "audit") if (home / sub).is_dir() for d in (home / sub).iterdir()
            if d.is_dir()}


def local_dirs(settings: Settings, namespace: str) -> list[Path]:
    """The local state a namespace leaves under ``<home>``: its workers' and its audit index."""
    home = Path(settings.home)
    return [d for d in (home / "workers" / namespace, home / "audit" / namespace) if d.is_dir()]


def local_files(settings: Settings, namespace: str) -> list[Path]:
    """The namespace's process logs and pid files under ``<home>/logs`` and ``<home>/run``:
    ``<ns>-<service>`` for the services of :data:`SERVICE_FILE` only, so that ``bench`` never
    takes ``bench-2``'s files."""
    home = Path(settings.home)
    pattern = re.compile(re.escape(namespace) + "-" + SERVICE_FILE)
    return sorted(f for d in (home / "logs", home / "run") if d.is_dir()
                  for f in d.glob(f"{namespace}-*") if pattern.fullmatch(f.name))


async def _topics(bootstrap: str) -> list[str]:
    from suanli.streams.kafka_io import list_topics

    return await list_topics(bootstrap)


async def _delete(bootstrap: str, topics: list[str], timeout_s: float) -> None:
    from aiokafka.admin import AIOKafkaAdminClient

    from suanli.streams.kafka_security import client_options

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, **client_options(bootstrap))
    await admin.start()
    try:
        for i in range(0, len(topics), DELETE_CHUNK):
            response = await admin.delete_topics(topics[i:i + DELETE_CHUNK], timeout_ms=int(timeout_s * 1000))
            failed = [(name, code) for name, code, *_ in response.topic_error_codes if code != 0]
            # 3: UNKNOWN_TOPIC_OR_PARTITION (deleted meanwhile by someone else): the goal holds
            failed = [(name, code) for name, code in failed if code != 3]
            if failed:
                raise StackError(f"the broker refused to delete {len(failed)} topics (name, error code): "
                                 f"{failed[:5]}")
    finally:
        await admin.close()


def survey(settings: Settings, keep: Iterable[str], match: str | None = None) -> list[Namespace]:
    """What :func:`prune` would remove: the namespaces of :func:`plan` with their local
    directories and files and their running plane processes. ``settings.namespace`` is always kept."""
    topics = asyncio.run(_topics(settings.bootstrap_servers))
    running = running_planes()
    chosen = plan(topics, {settings.namespace, *keep}, match, also=local_namespaces(settings))
    return [Namespace(n, ts, local_dirs(settings, n), local_files(settings, n), running.get(n, []))
            for n, ts in chosen.items()]


def prune(settings: Settings, found: list[Namespace], log: Callable[[str], None] = print,
          timeout_s: float = 60.0) -> list[Namespace]:
    """Delete the topics, local directories and files of ``found`` (from :func:`survey`), except
    namespaces with a running plane process; return those pruned. :class:`StackError` if the
    broker refuses a deletion."""
    idle = [ns for ns in found if not ns.running]
    for ns in found:
        if ns.running:
            log(f"{ns.name}: kept, plane processes running (pids {', '.join(map(str, ns.running))})")
    topics = [t for ns in idle for t in ns.topics]
    if topics:
        asyncio.run(_delete(settings.bootstrap_servers, topics, timeout_s))
    for ns in idle:
        for d in ns.local_dirs:
            shutil.rmtree(d, ignore_errors=True)
        for f in ns.local_files:
            f.unlink(missing_ok=True)
    return idle
