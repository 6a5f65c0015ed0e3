"""Federated training jobs (issue 22): one aggregator and N clients across clouds, run by Suanli.

A federated job file (``suanli job fed run fed.yaml``)::

    name: digits                  # [A-Za-z0-9][A-Za-z0-9._-]*: the job id is <name>-<run id>
    tenant: lab
    cell: fed
    rounds: 20
    secagg: true                  # Flower SecAgg+ (secure aggregation); false: plain FedAvg
    quantise: none                # none | int8: clients send int8-quantised updates
    aggregator: traffic           # traffic: where the topology gives the least weighted traffic;
                                  # home: always in the home cloud
    home: cloud-a                 # the home cloud's site (default: the first cloud's)
    clouds:                       # each client is pinned to its cloud's site (its data partition is there)
      - {site: cloud-a, clients: 3}
      - {site: cloud-b, clients: 5}
    client_resources: {cpu: 0.2, memory: 384Mi}
    aggregator_resources: {cpu: 0.3, memory: 512Mi}
    timeout: 30m                  # the longest the whole job may take
    elastic:                      # optional (C15): the scheduler resizes the job between rounds
      min_clients: 2              # the keys of processors/elastic.py's ElasticArgs (its defaults:
      max_clients: 6              #   min 2, max 16, window 5, plateau 0.01, batch 16..1024, step 2)
      batch_size: 32              # starting batch size per client (default 32, moved into min..max_batch)
      start_clients: 3            # clients at the start (default min_clients; min..max_clients)

**Planning** (pure, :func:`plan`): the job's tasks, each a normal Suanli task carrying the
job id (``job``) and the labels the core's federated plugins read
(``processors/plugins/federated.py``): ``federated-role=client|aggregator``; a client's
``data-site=<its cloud's site>`` (it may run only there) and ``partition``; the aggregator's
``home-site``, and with ``aggregator: home`` also ``data-site=<home>``. The clients'
data partitions are numbered 0..N-1 in cloud order (N = the clouds' ``clients``, every client
is told N). Commands run the Flower runtime (``connectors/flower/``) with the Python of its
own venv (``deploy/flower.py``): it pins versions of FastAPI and friends that the control
plane's own venv cannot share.

**Elastic jobs** (``elastic:``; without it all N clients start and the job never resizes).
The block is checked by ``ElasticArgs.parse`` (an unknown key or a bad value is refused by
name), and ``max_clients`` must not exceed N: the clouds' ``clients`` are the data
partitions, the most clients the job can run. With SecAgg+, ``min_clients`` must be >= 2
and ``threshold`` is refused (it follows each round's clients). The partitions are ordered
round-robin over the clouds, in file order (:func:`growth_order`: cloud-a's first, cloud-b's
first, cloud-a's second, ...); the job starts with the first ``start_clients`` of that order
and grows onto the next ones. The aggregator gets the label ``elastic`` =
``elastic_label(policy, batch_size)`` (the core folds the job's rounds into the policy and
answers ``JobResized`` decisions) and runs Flower with ``--min-clients min_clients`` (every
round samples every connected client, waiting for at least that many), SecAgg+
``--num-shares 1.0 --threshold 0.6`` (fractions of each round's sampled clients: all of them
share, 3/5 rounded and at least 2 reconstruct), ``--batch-size batch_size`` and
``--control <job dir>/control.json``.

**The run** (:class:`FederatedRunner`, the I/O edge): submits the clients and, once each
has a decision (so that the scheduler knows where the job's data is), the aggregator,
through the API's service (the checks of ``POST /v1/tasks``); it follows the namespace's
log with the API's read model. Each round the aggregator appends to its report
file (``<job dir>/rounds.jsonl``) becomes a ``JobRound`` event on the raw status topic
(intake forwards it to the cell log): the loss and accuracy, the contributing client tasks,
the bytes each moved, and those bytes per site pair from where the tasks ran. A client
task that ends while the aggregator runs (killed, its node lost) is reported and, with
``replace_lost`` (default), submitted again for the same partition and site (task id
``...-r<n>``); the scheduler places the replacement. A ``JobResized`` decision about the
job (decisions topic) is applied by the follow loop, in order: its ``clients_to`` is the
number of clients to run. Growing submits clients for the first partitions of the order
that no client runs (a partition released earlier gets a new task, ``...-r<n>``); shrinking
cancels the most recently added clients (reason ``job <id> shrinks: <reason>``), and their
end is not a loss: they are not replaced. A new ``batch_size_to`` is written to the control
file (atomically: temp file + rename), which the ServerApp reads when the next round starts.
Each is printed (``[job] grow 3 -> 5 clients: <reason>``) and kept in the
result's ``resizes``. When the aggregator ends, the clients still running (Flower's
SuperNodes never exit on their own) are cancelled. The summary, with every round, the
placement and the resizes, goes to ``<job dir>/job.json``.
"""
from __future__ import annotations

import asyncio
import json
import os
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Literal, Mapping, Sequence

from pydantic import BaseModel, ConfigDict, Field, ValidationError as PydanticValidationError, model_validator

from suanli.errors import JobError, SuanliError, ValidationError
from suanli.schemas.models import format_errors
from suanli.schemas.task_spec import TaskSpec, _duration_ms

_NAME = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$"
_SITE = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$"
ROLE, DATA_SITE, HOME_SITE, PARTITION = "federated-role", "data-site", "home-site", "partition"
REPO = Path(__file__).resolve().parent.parent
FLOWER_DIR = REPO / "connectors" / "flower"
ENDED = ("COMPLETED", "FAILED", "CANCELLED", "UNSCHEDULABLE")
ELASTIC_SHARES, ELASTIC_THRESHOLD = 1.0, 0.6   # SecAgg+ of an elastic job: fractions of each round's clients
DEFAULT_BATCH = 32                             # the aggregator's --batch-size default
_ELASTIC_EXTRA = ("batch_size", "start_clients")


class CloudSpec(BaseModel):
    """One cloud: the site its data is at and how many clients (data partitions) it has."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    site: str = Field(..., pattern=_SITE)
    clients: int = Field(..., ge=1, le=10)


class ElasticSpec(BaseModel):
    """The ``elastic:`` block (module docstring): the keys of
    :class:`suanli.processors.elastic.ElasticArgs` (checked by ``ElasticArgs.parse``), the
    starting ``batch_size`` and ``start_clients``."""

    model_config = ConfigDict(extra="forbid", frozen=True, arbitrary_types_allowed=True)
    policy: Any                  # ElasticArgs
    batch_size: int
    start_clients: int

    @model_validator(mode="before")
    @classmethod
    def _parse(cls, doc: Any) -> Any:
        from suanli.errors import StrategyConfigError
        from suanli.processors.elastic import ElasticArgs, elastic_label

        if isinstance(doc, ElasticSpec):
            return {"policy": doc.policy, "batch_size": doc.batch_size, "start_clients": doc.start_clients}
        if not isinstance(doc, Mapping):
            raise ValueError(f"a mapping of {', '.join(_elastic_keys())} (or leave elastic out), not {doc!r}")
        doc = dict(doc)
        unknown = sorted(str(k) for k in doc if k not in _elastic_keys())
        if unknown:
            raise ValueError(f"unknown key {unknown[0]!r}; allowed: {', '.join(_elastic_keys())}")
        extra = {k: doc.pop(k) for k in _ELASTIC_EXTRA if k in doc}
        try:
            args = ElasticArgs.parse(doc)
        except StrategyConfigError as exc:
            raise ValueError(str(exc).removeprefix("elastic: ")) from None
        batch = extra.get("batch_size")
        if batch is None:
            batch = min(max(DEFAULT_BATCH, args.min_batch), args.max_batch)
        if isinstance(batch, bool) or not isinstance(batch, int):
            raise ValueError(f"bad value for batch_size: {batch!r}; allowed: an integer from min_batch "
                             f"({args.min_batch}) to max_batch ({args.max_batch})")
        try:
            elastic_label(args, batch)
        except StrategyConfigError as exc:
            raise ValueError(str(exc).removeprefix("elastic: ")) from None
        start = extra.get("start_clients")
        if start is None:
            start = args.min_clients
        if isinstance(start, bool) or not isinstance(start, int) or not args.min_clients <= start <= args.max_clients:
            raise ValueError(f"bad value for start_clients: {start!r}; allowed: an integer from min_clients "
                             f"({args.min_clients}) to max_clients ({args.max_clients})")
        return {"policy": args, "batch_size": batch, "start_clients": start}

    @property
    def label(self) -> str:
        """The aggregator's ``elastic`` label (``processors/elastic.py``)."""
        from suanli.processors.elastic import elastic_label
        return elastic_label(self.policy, self.batch_size)


def _elastic_keys() -> tuple[str, ...]:
    from dataclasses import fields

    from suanli.processors.elastic import ElasticArgs
    return (*(f.name for f in fields(ElasticArgs)), *_ELASTIC_EXTRA)


class FederatedJobSpec(BaseModel):
    """A federated job file (module docstring)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    name: str = Field(..., pattern=_NAME)
    tenant: str = Field("default", min_length=1)
    cell: str = Field("openb", min_length=1)
    rounds: int = Field(20, ge=1, le=1000)
    secagg: bool = True
    quantise: Literal["none", "int8"] = "none"
    aggregator: Literal["traffic", "home"] = "traffic"
    home: str | None = Field(None, pattern=_SITE)
    clouds: list[CloudSpec] = Field(..., min_length=1, max_length=10)
    threshold: int | None = Field(None, ge=2, description="SecAgg+ reconstruction threshold (default: "
                                  "max(2, 3/5 of the clients, rounded up))")
    qos: str = "silver"
    client_resources: dict[str, Any] = Field(default_factory=lambda: {"cpu": 0.2, "memory": "384Mi"})
    aggregator_resources: dict[str, Any] = Field(default_factory=lambda: {"cpu": 0.3, "memory": "512Mi"})
    timeout: str | int = "30m"
    replace_lost: bool = True
    elastic: ElasticSpec | None = None

    @model_validator(mode="after")
    def _consistent(self) -> FederatedJobSpec:
        sites = [c.site for c in self.clouds]
        if len(set(sites)) != len(sites):
            raise ValueError(f"clouds: each site once (got {sites})")
        if self.home is not None and self.home not in sites:
            raise ValueError(f"home: {self.home!r} is not one of the clouds' sites {sites}")
        if self.quantise != "none" and self.secagg:
            raise ValueError(f"quantise: {self.quantise} needs secagg: false (SecAgg+ re-encodes every update "
                             "into its own 32-bit masked field, so quantising cannot shrink it)")
        if self.elastic is not None:
            e, n = self.elastic.policy, self.num_clients
            if e.max_clients > n:
                raise ValueError(f"elastic.max_clients: {e.max_clients} is more than the job's {n} data partitions "
                                 "(the clouds' clients; each client trains one): lower it (its default is 16) "
                                 "or give the clouds more clients")
            if self.secagg and e.min_clients < 2:
                raise ValueError(f"elastic.min_clients: {e.min_clients}, but SecAgg+ needs at least 2 clients in "
                                 "a round")
            if self.threshold is not None:
                raise ValueError(f"threshold: {self.threshold}, but with elastic the SecAgg+ threshold follows "
                                 "each round's clients (3/5 of them, at least 2): leave threshold out")
        if self.threshold is not None and self.threshold > self.num_clients:
            raise ValueError(f"threshold: {self.threshold} is more than the job's {self.num_clients} clients")
        if _duration_ms(self.timeout) <= 0:
            raise ValueError("timeout must be positive")
        return self

    @property
    def num_clients(self) -> int:
        """The data partitions (the clouds' clients): the most clients the job can run."""
        return sum(c.clients for c in self.clouds)

    @property
    def start_clients(self) -> int:
        """The clients submitted at the start: all of them, or elastic's ``start_clients``."""
        return self.elastic.start_clients if self.elastic is not None else self.num_clients

    @property
    def home_site(self) -> str:
        return self.home or self.clouds[0].site

    @property
    def secagg_threshold(self) -> int:
        return self.threshold or max(2, -(-3 * self.num_clients // 5))

    @property
    def timeout_s(self) -> float:
        return _duration_ms(self.timeout) / 1000.0


@dataclass(frozen=True)
class Ports:
    """Loopback ports of one run: the SuperLink's (Flower 1.42 serves its Fleet, Control and
    ServerAppIo APIs on one port) and each client's ClientAppIo port."""
    fleet: int
    clients: tuple[int, ...]


@dataclass(frozen=True)
class PlannedTask:
    role: str                    # "client" | "aggregator"
    task_id: str
    site: str                    # a client's data site; the aggregator's home site
    partition: int | None        # a client's data partition
    spec: TaskSpec


@dataclass(frozen=True)
class FederatedPlan:
    job_id: str
    job_dir: Path
    report: Path                 # the aggregator's per-round JSON lines
    clients: tuple[PlannedTask, ...]            # the clients submitted at the start
    aggregator: PlannedTask
    order: tuple[tuple[int, str], ...] = ()     # every (partition, site), in the order clients are added
    control: Path | None = None  # elastic: the aggregator's control file ({"batch_size": N})


def load_spec(doc: Any) -> FederatedJobSpec:
    """A validated :class:`FederatedJobSpec`; ValidationError naming the bad field."""
    try:
        return FederatedJobSpec.model_validate(doc)
    except PydanticValidationError as exc:
        raise ValidationError(f"invalid federated job: {format_errors(exc)}") from None


def _task(job: FederatedJobSpec, job_id: str, task_id: str, resources: Mapping[str, Any], labels: dict[str, str],
          command: list[str], env: dict[str, str]) -> TaskSpec:
    try:
        return TaskSpec.model_validate({
            "id": task_id, "tenant": job.tenant, "cell": job.cell, "qos": job.qos, "resources": dict(resources),
            "job": job_id, "labels": labels, "command": command, "env": env})
    except PydanticValidationError as exc:
        raise ValidationError(f"invalid federated job: task {task_id}: {format_errors(exc)}") from None


def client_task(job: FederatedJobSpec, job_id: str, *, partition: int, site: str, fleet_port: int,
                clientappio_port: int, python: str, job_dir: Path, attempt: int = 0) -> PlannedTask:
    """The client task of ``partition`` (pinned to ``site``): a SuperNode talking to the
    SuperLink on ``fleet_port``, its ClientApp on ``clientappio_port``. ``attempt`` > 0: a
    later task of the same partition (task id ``...-r<attempt>``): the replacement of a lost
    client, or an elastic job growing back onto a partition it released."""
    task_id = f"{job_id}-c{partition}" + (f"-r{attempt}" if attempt else "")
    command = [python, str(FLOWER_DIR / "client.py"), "--superlink", f"127.0.0.1:{fleet_port}",
               "--clientappio-port", str(clientappio_port),
               "--partition-id", str(partition), "--num-partitions", str(job.num_clients), "--cloud", site,
               "--work-dir", str(job_dir / task_id)]
    labels = {ROLE: "client", DATA_SITE: site, PARTITION: str(partition)}
    return PlannedTask("client", task_id, site, partition,
                       _task(job, job_id, task_id, job.client_resources, labels, command, {}))


def aggregator_task(job: FederatedJobSpec, job_id: str, *, ports: Ports, python: str, report: Path,
                    work_dir: Path, control: Path | None = None) -> PlannedTask:
    """The aggregator task. Elastic (``control`` given): Flower waits for ``min_clients``,
    SecAgg+'s shares and threshold are fractions of each round's clients, the batch size
    starts at the spec's and follows ``control``, and the task carries the ``elastic`` label."""
    task_id = f"{job_id}-agg"
    e = job.elastic
    if e is None:
        flex = ["--min-clients", str(job.num_clients), "--num-shares", str(job.num_clients),
                "--threshold", str(job.secagg_threshold)]
    else:
        if control is None:
            raise ValidationError("an elastic job's aggregator needs its control file")
        flex = ["--min-clients", str(e.policy.min_clients), "--num-shares", str(ELASTIC_SHARES),
                "--threshold", str(ELASTIC_THRESHOLD), "--batch-size", str(e.batch_size), "--control", str(control)]
    command = [python, str(FLOWER_DIR / "aggregator.py"), "--fleet-port", str(ports.fleet), "--rounds", str(job.rounds),
               *flex[:2], "--secagg" if job.secagg else "--no-secagg", *flex[2:],
               "--quantise", job.quantise, "--report", str(report), "--work-dir", str(work_dir)]
    labels = {ROLE: "aggregator", HOME_SITE: job.home_site}
    if job.aggregator == "home":
        labels[DATA_SITE] = job.home_site
    if e is not None:
        from suanli.processors.elastic import ELASTIC_LABEL
        labels[ELASTIC_LABEL] = e.label
    return PlannedTask("aggregator", task_id, job.home_site, None,
                       _task(job, job_id, task_id, job.aggregator_resources, labels, command, {}))


def partition_sites(job: FederatedJobSpec) -> list[tuple[int, str]]:
    """Every (partition, site): partitions numbered 0..N-1 in cloud order."""
    return [(i, site) for i, site in enumerate(c.site for c in job.clouds for _ in range(c.clients))]


def growth_order(job: FederatedJobSpec) -> list[tuple[int, str]]:
    """Every (partition, site) in the order an elastic job adds clients: round-robin over
    the clouds in file order, each cloud's partitions in number order (deterministic)."""
    per_cloud: list[list[tuple[int, str]]] = [[] for _ in job.clouds]
    index = {c.site: i for i, c in enumerate(job.clouds)}
    for partition, site in partition_sites(job):
        per_cloud[index[site]].append((partition, site))
    order = []
    for depth in range(max(len(c) for c in per_cloud)):
        order += [c[depth] for c in per_cloud if depth < len(c)]
    return order


def plan(job: FederatedJobSpec, *, job_id: str, job_dir: Path, ports: Ports, python: str) -> FederatedPlan:
    """The job's tasks (module docstring). Pure: ``ports`` and the Flower venv's ``python`` are given."""
    if len(ports.clients) < job.num_clients:
        raise ValidationError(f"{job.num_clients} clients need as many client ports, got {len(ports.clients)}")
    order = growth_order(job) if job.elastic is not None else partition_sites(job)
    clients = [client_task(job, job_id, partition=partition, site=site, fleet_port=ports.fleet,
                           clientappio_port=ports.clients[partition], python=python, job_dir=job_dir)
               for partition, site in order[:job.start_clients]]
    report = job_dir / "rounds.jsonl"
    control = job_dir / "control.json" if job.elastic is not None else None
    agg = aggregator_task(job, job_id, ports=ports, python=python, report=report, work_dir=job_dir / "aggregator",
                          control=control)
    return FederatedPlan(job_id, job_dir, report, tuple(clients), agg, tuple(order), control)


def free_ports(n: int) -> list[int]:
    """``n`` distinct free TCP ports on 127.0.0.1 (bound together, then released)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


# ------------------------------------------------------------------------------ rounds
def site_links(bytes_up: Mapping[str, int], bytes_down: Mapping[str, int], site_of: Mapping[str, str],
               aggregator_site: str) -> list[dict[str, Any]]:
    """The round's bytes per directed site pair: each client's upload goes from its site to
    the aggregator's, its download back. Sorted, so equal inputs give equal events."""
    links: dict[tuple[str, str], int] = {}
    for task_id, n in bytes_up.items():
        key = (site_of.get(task_id, "?"), aggregator_site)
        links[key] = links.get(key, 0) + int(n)
    for task_id, n in bytes_down.items():
        key = (aggregator_site, site_of.get(task_id, "?"))
        links[key] = links.get(key, 0) + int(n)
    return [{"src_site": a, "dst_site": b, "bytes": n} for (a, b), n in sorted(links.items())]


def cross_site_bytes(links: Sequence[Mapping[str, Any]]) -> int:
    """Bytes of ``links`` that crossed from one site to another."""
    return sum(int(ln["bytes"]) for ln in links if ln["src_site"] != ln["dst_site"])


def round_event(report: Mapping[str, Any], *, job_id: str, tenant: str, cell: str, task_of: Mapping[str, str],
                site_of: Mapping[str, str], aggregator_site: str, aggregator_node: str, at: int) -> dict[str, Any]:
    """The ``JobRound`` payload of one report line. ``task_of``: the client task that holds
    each partition (as a string) when the line is read; a partition no task holds keeps
    its number, prefixed ``partition-``."""
    def task(p: Any) -> str:
        p = str(p)
        return task_of.get(p, p if p.startswith("node:") else f"partition-{p}")

    up = {task(p): int(n) for p, n in (report.get("bytes_up") or {}).items()}
    down = {task(p): int(n) for p, n in (report.get("bytes_down") or {}).items()}
    loss, acc = report.get("loss"), report.get("accuracy")
    return {
        "event_id": f"{job_id}:round:{int(report['round'])}", "job_id": job_id, "tenant": tenant, "cell": cell,
        "round": int(report["round"]), "loss": None if loss is None else float(loss),
        "accuracy": None if acc is None else float(acc),
        "aggregated": bool(report.get("ok", acc is not None)),
        "clients": sorted(task(p) for p in report.get("clients") or []),
        "bytes_up": up, "bytes_down": down,
        "links": site_links(up, down, site_of, aggregator_site),
        "secagg": bool(report.get("secagg", False)), "quantise": str(report.get("quantise", "none")),
        "aggregator_node": aggregator_node, "wall_ms": int(report.get("wall_ms", 0)), "at": at,
    }


def round_line(e: Mapping[str, Any], rounds: int) -> str:
    """One progress line for a JobRound payload."""
    up, down = sum(e["bytes_up"].values()), sum(e["bytes_down"].values())
    acc = "no model" if e["accuracy"] is None else f"accuracy {e['accuracy']:.3f}, loss {e['loss']:.3f}"
    return (f"round {e['round']}/{rounds}: {acc}; {len(e['clients'])} clients; {up / 1024:.1f} KiB up, "
            f"{down / 1024:.1f} KiB down, {cross_site_bytes(e['links']) / 1024:.1f} KiB across sites; "
            f"{e['wall_ms'] / 1000:.1f} s")


# ------------------------------------------------------------------------------ elastic
def partitions_to_add(order: Sequence[int], running: Sequence[int], target: int) -> list[int]:
    """The partitions to start so that ``target`` clients run: the first of ``order`` not
    running (fewer when ``order`` runs out; none when ``target`` clients already run)."""
    busy = set(running)
    need = target - len(running)
    return [p for p in order if p not in busy][:need] if need > 0 else []


def partitions_to_release(running: Sequence[int], target: int) -> list[int]:
    """The partitions to stop so that ``target`` clients run: the most recently added
    (``running`` is in the order they were added), newest first."""
    extra = len(running) - max(target, 0)
    return list(reversed(running))[:extra] if extra > 0 else []


def write_control(path: Path, batch_size: int) -> None:
    """Write the aggregator's control file ``{"batch_size": N}`` atomically (temp + rename):
    the ServerApp reads it at the start of every round."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps({"batch_size": int(batch_size)}))
    os.replace(tmp, path)


def resize_record(payload: Mapping[str, Any]) -> dict[str, Any]:
    """The part of a ``JobResized`` decision a :class:`FederatedResult` keeps."""
    return {"action": str(payload.get("action", "")), "clients_from": int(payload["clients_from"]),
            "clients_to": int(payload["clients_to"]), "batch_size_from": int(payload["batch_size_from"]),
            "batch_size_to": int(payload["batch_size_to"]), "round": int(payload.get("round", 0)),
            "reason": str(payload.get("reason", ""))}


def resize_line(r: Mapping[str, Any]) -> str:
    """One progress line for a :func:`resize_record`: ``[job] grow 3 -> 5 clients: <reason>``,
    ``[job] hold 3 clients, batch 32 -> 64: <reason>``."""
    a, c0, c1, b0, b1 = r["action"], r["clients_from"], r["clients_to"], r["batch_size_from"], r["batch_size_to"]
    clients = f"{c0} -> {c1} clients" if c0 != c1 else f"{c1} clients"
    batch = f", batch {b0} -> {b1}" if b0 != b1 else ""
    return f"[job] {a} {clients}{batch}: {r['reason']}"


@dataclass
class FederatedResult:
    job_id: str
    job_dir: str
    ok: bool = False
    reason: str = ""
    seconds: float = 0.0
    rounds: list[dict[str, Any]] = field(default_factory=list)
    placement: dict[str, dict[str, str]] = field(default_factory=dict)   # task id -> {node, site, role}
    lost: list[dict[str, str]] = field(default_factory=list)             # each: task_id, status, message
    replacements: list[str] = field(default_factory=list)
    resizes: list[dict[str, Any]] = field(default_factory=list)          # resize_record + started, cancelled

    def to_json(self) -> dict[str, Any]:
        return {"job_id": self.job_id, "job_dir": self.job_dir, "ok": self.ok, "reason": self.reason,
                "seconds": self.seconds, "rounds": self.rounds, "placement": self.placement, "lost": self.lost,
                "replacements": self.replacements, "resizes": self.resizes}


class FederatedRunner:
    """Runs a planned federated job against the namespace of ``settings`` (module docstring)."""

    def __init__(self, job: FederatedJobSpec, planned: FederatedPlan, *, settings: Any, ports: Ports, python: str,
                 say: Callable[[str], None] | None = None, ready_timeout_s: float = 120.0,
                 report_poll_s: float = 0.5):
        self.job, self.plan, self.settings, self.ports, self.python = job, planned, settings, ports, python
        self.say = say or (lambda line: print(line, flush=True))
        self.ready_timeout_s, self.report_poll_s = ready_timeout_s, report_poll_s
        self._sites: dict[str, str] = {}                  # node id -> site (this cell's registrations)
        self._changed: asyncio.Event | None = None
        self._watching: set[str] = set()
        # partition -> its latest task (kept after an elastic shrink: round reports still name it)
        self.holder: dict[int, str] = {c.partition: c.task_id for c in planned.clients if c.partition is not None}
        # the partitions whose clients should run, in the order they were added (a replacement
        # keeps its partition's place; an elastic shrink releases the last ones)
        self.running: list[int] = [c.partition for c in planned.clients if c.partition is not None]
        self._site_of_partition = dict(planned.order) or {c.partition: c.site for c in planned.clients}
        self._retired: set[str] = set()                   # clients released by a shrink: not losses
        self._cancel_sent: set[str] = set()               # ... whose cancellation was accepted
        self._attempts: dict[int, int] = {}
        self._offset = 0                                  # bytes of the report read so far
        self.batch_size = job.elastic.batch_size if job.elastic is not None else None
        self._resizes: list[dict[str, Any]] = []          # JobResized decisions not applied yet
        self._resize_ids: set[str] = set()

    def _listen(self, role: str, kind: str, payload: dict[str, Any], *_coords: Any) -> None:
        if kind == "NodeRegistered" and payload.get("cell") == self.job.cell:
            self._sites[payload["node_id"]] = payload.get("site") or ""
        elif kind == "JobResized" and isinstance(payload, dict) and payload.get("job_id") == self.plan.job_id:
            # applied by the follow loop (this callback is synchronous); a repeat is ignored
            key = str(payload.get("decision_id") or payload.get("event_id")
                      or json.dumps(payload, sort_keys=True, default=str))
            if key not in self._resize_ids:
                self._resize_ids.add(key)
                self._resizes.append(payload)
                if self._changed is not None:
                    self._changed.set()
        elif isinstance(payload, dict) and payload.get("task_id") in self._watching and self._changed is not None:
            self._changed.set()

    async def run(self) -> FederatedResult:
        from suanli.jobs import api_session

        p = self.plan
        started = time.monotonic()
        self._changed = asyncio.Event()
        result = FederatedResult(p.job_id, str(p.job_dir))
        p.job_dir.mkdir(parents=True, exist_ok=True)
        p.report.unlink(missing_ok=True)
        if p.control is not None:
            p.control.unlink(missing_ok=True)         # the aggregator starts from the spec's batch size
        e = self.job.elastic
        elastic = "" if e is None else (f" (elastic: {e.policy.min_clients}..{e.policy.max_clients} of "
                                        f"{self.job.num_clients} partitions, batch {e.batch_size})")
        async with api_session(self.settings, self._listen, self.ready_timeout_s) as (service, model, sink):
            self.say(f"job {p.job_id}: {len(p.clients)} clients{elastic} in {len(self.job.clouds)} clouds, "
                     f"{self.job.rounds} rounds, secagg {'on' if self.job.secagg else 'off'}, "
                     f"quantise {self.job.quantise}, aggregator by {self.job.aggregator}; directory {p.job_dir}")
            try:
                await self._follow(service, sink, model, result, started)
            except JobError as exc:
                result.reason = str(exc)
            finally:
                await self._cancel_rest(service, model)
                self._placement(model, result)
        result.seconds = round(time.monotonic() - started, 3)
        (p.job_dir / "job.json").write_text(json.dumps(result.to_json(), indent=1))
        self.say(f"job {p.job_id}: " + (f"COMPLETED, {len(result.rounds)} rounds in {result.seconds:.1f} s"
                                        if result.ok else f"FAILED: {result.reason}"))
        return result

    async def _submit(self, service: Any, task: PlannedTask) -> None:
        self._watching.add(task.task_id)
        try:
            await service.submit_task(self.job.tenant, task.spec)
        except SuanliError as exc:
            raise JobError(f"{task.role} {task.task_id} cannot be submitted: {exc}") from None
        self.say(f"[{task.role} {task.task_id}] submitted" + (f" (partition {task.partition}, site {task.site})"
                                                                if task.partition is not None else ""))

    async def _follow(self, service: Any, sink: Any, model: Any, result: FederatedResult, started: float) -> None:
        assert self._changed is not None
        for c in self.plan.clients:
            await self._submit(service, c)
        deadline = started + self.job.timeout_s
        # The aggregator goes last, once every client has a decision: the scheduler places it
        # by the clients the cell log has shown, and submissions on several raw partitions
        # may reach the cell log in another order than they were sent.
        while any(getattr(model.lifecycle.tasks.get(c.task_id), "status", "SUBMITTED") == "SUBMITTED"
                  for c in self.plan.clients):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise JobError(f"timed out after {self.job.timeout_s:g} s waiting for the clients' decisions")
            try:
                await asyncio.wait_for(self._changed.wait(), remaining)
            except TimeoutError:
                pass
            self._changed.clear()
        agg = self.plan.aggregator
        await self._submit(service, agg)
        seen: dict[str, tuple[str, str]] = {}
        while True:
            for tid in sorted(self._watching):
                view = model.lifecycle.tasks.get(tid)
                if view is None:
                    continue
                now = (view.status, view.node_id)
                if now != seen.get(tid):
                    seen[tid] = now
                    self.say(f"[{tid}] {view.status}" + (f" on {view.node_id}" if view.node_id else "")
                             + (f": {view.message}" if view.message else ""))
                    if tid != agg.task_id and view.status in ENDED and self._partition_of(tid) is not None:
                        await self._client_ended(service, tid, view, result)
            await self._read_rounds(sink, model, result)
            await self._apply_resizes(service, model, result)
            aview = model.lifecycle.tasks.get(agg.task_id)
            if aview is not None and aview.status in ENDED:
                await self._read_rounds(sink, model, result)
                if aview.status == "COMPLETED" and len(result.rounds) >= self.job.rounds:
                    result.ok = True
                    return
                raise JobError(f"the aggregator {aview.status}" + (f": {aview.message}" if aview.message else "")
                               + f" after {len(result.rounds)} of {self.job.rounds} rounds")
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise JobError(f"timed out after {self.job.timeout_s:g} s ({len(result.rounds)} of "
                               f"{self.job.rounds} rounds)")
            # wake on any record about the job's tasks; the report file is a file, not a log:
            # it is checked at most report_poll_s after a line lands
            try:
                await asyncio.wait_for(self._changed.wait(), min(remaining, self.report_poll_s))
            except TimeoutError:
                pass
            self._changed.clear()

    def _partition_of(self, task_id: str) -> int | None:
        """The running partition ``task_id`` holds (None: not a running client, e.g. one
        an elastic shrink cancelled, or a lost client already replaced)."""
        if task_id in self._retired:
            return None
        return next((pt for pt in self.running if self.holder.get(pt) == task_id), None)

    def _new_client(self, partition: int) -> PlannedTask:
        """A client task for ``partition`` submitted while the job runs (a replacement or a
        growth): a fresh ClientAppIo port; ``-r<n>`` when the partition had a task before."""
        attempt = 0
        if partition in self.holder:
            attempt = self._attempts.get(partition, 0) + 1
            self._attempts[partition] = attempt
        task = client_task(self.job, self.plan.job_id, partition=partition, site=self._site_of_partition[partition],
                           fleet_port=self.ports.fleet, clientappio_port=free_ports(1)[0], python=self.python,
                           job_dir=self.plan.job_dir, attempt=attempt)
        self.holder[partition] = task.task_id
        return task

    async def _client_ended(self, service: Any, task_id: str, view: Any, result: FederatedResult) -> None:
        partition = self._partition_of(task_id)
        assert partition is not None
        result.lost.append({"task_id": task_id, "status": view.status, "message": view.message or ""})
        self.say(f"[{task_id}] client of partition {partition} ended ({view.status}) while the job runs")
        if not self.job.replace_lost:
            self.running.remove(partition)
            return
        repl = self._new_client(partition)
        result.replacements.append(repl.task_id)
        await self._submit(service, repl)

    async def _apply_resizes(self, service: Any, model: Any, result: FederatedResult) -> None:
        """Apply the JobResized decisions the listener recorded, in order: grow (submit the
        next unused partitions in the plan's order), shrink (cancel the most recently added
        clients), batch size (the control file)."""
        from suanli.api.models import CancelRequest

        while self._resizes:
            payload = self._resizes.pop(0)
            try:
                r = resize_record(payload)
            except (KeyError, TypeError, ValueError) as exc:
                self.say(f"[job] ignored a malformed JobResized decision ({exc!r}): {payload}")
                continue
            r["started"], r["cancelled"] = [], []
            self.say(resize_line(r))
            target = r["clients_to"]
            add = partitions_to_add([pt for pt, _ in self.plan.order], self.running, target)
            if len(self.running) + len(add) < target:
                self.say(f"[job] only {len(self.running) + len(add)} of {target} clients: the job has "
                         f"{self.job.num_clients} data partitions")
            for partition in add:
                task = self._new_client(partition)
                self.running.append(partition)
                r["started"].append(task.task_id)
                await self._submit(service, task)
            for partition in partitions_to_release(self.running, target):
                tid = self.holder[partition]
                self.running.remove(partition)
                self._retired.add(tid)
                r["cancelled"].append(tid)
                view = model.lifecycle.tasks.get(tid)
                if view is not None and view.status in ENDED:
                    continue
                why = f"job {self.plan.job_id} shrinks: {r['reason']}"
                try:
                    await service.cancel_task(self.job.tenant, tid, CancelRequest(reason=why[:1000]))
                except SuanliError as exc:      # ended meanwhile, or not known yet: the end cancels it again
                    self.say(f"[{tid}] could not be cancelled now ({exc}); it is cancelled when the job ends")
                    continue
                self._cancel_sent.add(tid)
                self.say(f"[{tid}] cancelled: the job shrinks (partition {partition} released)")
            if self.plan.control is not None and r["batch_size_to"] != self.batch_size:
                write_control(self.plan.control, r["batch_size_to"])
                self.batch_size = r["batch_size_to"]
            result.resizes.append(r)

    async def _read_rounds(self, sink: Any, model: Any, result: FederatedResult) -> None:
        try:
            with self.plan.report.open("rb") as f:
                f.seek(self._offset)
                data = f.read()
        except FileNotFoundError:
            return
        end = data.rfind(b"\n") + 1          # only whole lines: the aggregator may be mid-write
        self._offset += end
        for line in data[:end].splitlines():
            if not line.strip():
                continue
            try:
                report = json.loads(line)
            except ValueError as exc:
                raise JobError(f"the aggregator's report {self.plan.report} has a bad line: {exc}") from None
            aview = model.lifecycle.tasks.get(self.plan.aggregator.task_id)
            agg_node = aview.node_id if aview is not None else ""
            site_of = {t: self._site_of(model, t) for t in self._all_tasks()}
            event = round_event(report, job_id=self.plan.job_id, tenant=self.job.tenant, cell=self.job.cell,
                                task_of={str(k): v for k, v in self.holder.items()}, site_of=site_of,
                                aggregator_site=self._sites.get(agg_node, ""), aggregator_node=agg_node,
                                at=int(time.time() * 1000))
            await sink.publish("JobRound", event)
            result.rounds.append(event)
            self.say(round_line(event, self.job.rounds))

    def _all_tasks(self) -> list[str]:
        return sorted(self._watching)

    def _site_of(self, model: Any, task_id: str) -> str:
        view = model.lifecycle.tasks.get(task_id)
        return self._sites.get(view.node_id, "") if view is not None and view.node_id else ""

    def _placement(self, model: Any, result: FederatedResult) -> None:
        for tid in self._all_tasks():
            view = model.lifecycle.tasks.get(tid)
            if view is not None and view.node_id:
                role = "aggregator" if tid == self.plan.aggregator.task_id else "client"
                result.placement[tid] = {"node": view.node_id, "site": self._sites.get(view.node_id, ""),
                                         "role": role}

    async def _cancel_rest(self, service: Any, model: Any) -> None:
        """Cancel the job's tasks still running: SuperNodes never exit on their own."""
        from suanli.api.models import CancelRequest
        for tid in self._all_tasks():
            view = model.lifecycle.tasks.get(tid)
            if tid in self._cancel_sent or (view is not None and view.status in ENDED):
                continue
            try:
                await service.cancel_task(self.job.tenant, tid, CancelRequest(reason=f"job {self.plan.job_id} ended"))
            except SuanliError:
                pass                      # ended meanwhile: nothing to cancel


def read_spec_file(path: Path, overrides: Mapping[str, Any] | None = None) -> FederatedJobSpec:
    """A federated job file (YAML; ``-`` for stdin) with ``overrides`` over its top-level keys."""
    from suanli.jobs import read_yaml_document

    doc = read_yaml_document(path)
    if not isinstance(doc, dict):
        raise ValidationError(f"{path}: a federated job file is a mapping (name, clouds, rounds, ...)")
    return load_spec({**doc, **(overrides or {})})


def run_federated(job: FederatedJobSpec, *, settings: Any, job_dir: Path | None = None, run_id: str | None = None,
                  python: str | None = None, say: Callable[[str], None] | None = None) -> FederatedResult:
    """Plan and run ``job`` (blocking); the summary is also in ``<job dir>/job.json``."""
    from suanli.jobs import new_run_id

    if python is None:
        from suanli.deploy.flower import ensure_venv
        python = str(ensure_venv())
    job_id = f"{job.name}-{run_id or new_run_id()}"
    job_dir = (job_dir or settings.home / "jobs" / job_id).resolve()
    numbers = free_ports(1 + job.num_clients)
    ports = Ports(numbers[0], tuple(numbers[1:]))
    planned = plan(job, job_id=job_id, job_dir=job_dir, ports=ports, python=python)
    runner = FederatedRunner(job, planned, settings=settings, ports=ports, python=python, say=say)
    return asyncio.run(runner.run())
