"""Prometheus as a telemetry source: instant queries of a Prometheus server -> NodeMetrics.

This is how a site that already runs Prometheus (node_exporter on every host, the DCGM
exporter on GPU hosts) feeds Suanli: no agent of ours on the nodes, only the server's HTTP
API (``/api/v1/query``).

**Which series belong to which node** is configuration, one *selector* per node id:

=================================  =============================================================
selector                           the node's series are those whose ...
=================================  =============================================================
``10.0.0.5:9100``                  ``instance`` is exactly that target
``10.0.0.5`` / ``gpu-host-7``      ``instance`` is that host on any port (node_exporter on
                                   :9100 and the DCGM exporter on :9400 of one host)
``{Hostname="gpu-host-7"}``        labels match a PromQL matcher list (``=``, ``!=``, ``=~``,
                                   ``!~``; regexes anchored, as in PromQL)
=================================  =============================================================

A series goes to the first node whose selector it matches (exact instances, then hosts, then
matcher lists in configuration order); series of no node are ignored.

**Queries per sample** (all nodes at once, so the cost does not grow with the node count):

* ``{__name__=~INCLUDE, __name__!~EXCLUDE}`` (by default every ``node_*`` and ``DCGM_FI_*``
  series but node_exporter's own bookkeeping and ``*_info``): each becomes an entry of
  ``extended`` under its exporter's name, with its labels as Prometheus prints them
  (sorted) minus ``instance`` and ``job`` and the labels the selector used:
  ``node_memory_MemAvailable_bytes``, ``node_network_receive_bytes_total{device="eth0"}``,
  ``node_cpu_seconds_total{cpu="0",mode="idle"}``. DCGM series keep only their ``gpu``
  (and MIG ``GPU_I_ID``) label: ``DCGM_FI_DEV_GPU_UTIL{gpu="0"}``; their ``UUID``,
  ``device``, ``modelName``, ``Hostname`` ... describe the GPU rather than index it.
  Counters are raw counter values, as the exporters expose them. NaN and infinities are dropped.
* rates over ``window`` (default ``1m``) for the typed fields: ``cpu_util`` = 1 - the idle
  and iowait share of ``node_cpu_seconds_total``; ``net_rx_mbps`` / ``net_tx_mbps`` from
  ``node_network_{receive,transmit}_bytes_total`` (all devices but ``lo``); ``disk_iops``
  from ``node_disk_{reads,writes}_completed_total``. Until Prometheus holds two scrapes
  inside the window a rate is absent and its field is 0.
* ``timestamp(up)``: the time of each target's last scrape. A NodeMetrics' ``at`` is the
  newest scrape among the targets its series came from (the *sample* time, not the query
  time; the query time when none of them is a target, e.g. federated series), so the
  event id ``<name>/<node>/prom/<at>`` is the same however often one scrape is read.

The other typed fields: ``memory_used_mib`` = MemTotal - MemAvailable, ``load1`` =
``node_load1``, per GPU (ordered by the ``gpu`` label) ``gpu_util`` =
``DCGM_FI_DEV_GPU_UTIL`` / 100 and ``gpu_memory_used_mib`` = ``DCGM_FI_DEV_FB_USED``,
``power_w`` = the sum of ``DCGM_FI_DEV_POWER_USAGE``. A node with no series in a sample gets
no NodeMetrics for it.

Three ways to run it: :func:`build_node_metrics` (pure: the query responses -> payloads);
:class:`PrometheusSource` (queries a server); :class:`PrometheusFeed` (a background refresher
whose latest sample an adapter's ``monitor()`` returns without blocking: the local-process
connector does that), and :func:`run_source` (its own loop producing to ``raw.nodes``;
``suanli prometheus source``).
"""
from __future__ import annotations

import asyncio
import logging
import math
import re
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Sequence

import httpx

from suanli.errors import ConnectorError

log = logging.getLogger("suanli.connectors.prometheus")

DEFAULT_INCLUDE = "node_.+|DCGM_FI_.+"
DEFAULT_EXCLUDE = ("node_scrape_collector_.+|node_exporter_build_info|node_textfile_.+|node_timex_.+|.+_info"
                   "|node_network_(iface_|address_assign|name_assign|protocol_type|device_id|net_dev_group|flags"
                   "|carrier_).*")
IDENTITY_LABELS = frozenset({"instance", "job"})
GPU_INDEX_LABELS = ("gpu", "GPU_I_ID")
MIB = 1 << 20


def wall_ms() -> int:
    return time.time_ns() // 1_000_000


# ---- selectors ----------------------------------------------------------------------------
_MATCHER = re.compile(r'\s*([A-Za-z_][A-Za-z0-9_]*)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"\s*(?:,|$)')


@dataclass(frozen=True)
class Matcher:
    label: str
    op: str
    value: str

    def matches(self, labels: Mapping[str, str]) -> bool:
        actual = labels.get(self.label, "")
        if self.op == "=":
            return actual == self.value
        if self.op == "!=":
            return actual != self.value
        found = re.fullmatch(self.value, actual) is not None
        return found if self.op == "=~" else not found


def parse_matchers(text: str) -> tuple[Matcher, ...]:
    """``{a="x", b=~"y.*"}`` -> matchers; ConnectorError naming what is wrong."""
    body = text.strip()
    if not (body.startswith("{") and body.endswith("}")):
        raise ConnectorError(f"a label selector is written in braces: {text!r}")
    body = body[1:-1].strip()
    out, pos = [], 0
    while pos < len(body):
        m = _MATCHER.match(body, pos)
        if not m:
            raise ConnectorError(f"cannot read the label matcher at {body[pos:]!r} in {text!r}")
        value = re.sub(r"\\(.)", lambda e: {"n": "\n", "t": "\t"}.get(e.group(1), e.group(1)), m.group(3))
        if m.group(2) in ("=~", "!~"):
            try:
                re.compile(value)
            except re.error as exc:
                raise ConnectorError(f"bad regular expression {value!r} in {text!r}: {exc}") from None
        out.append(Matcher(m.group(1), m.group(2), value))
        pos = m.end()
    if not out:
        raise ConnectorError(f"an empty label selector matches every series: {text!r}")
    return tuple(out)


def _host_of(instance: str) -> str:
    """``host:port`` -> host (``[v6]:port`` -> ``[v6]``); a bare host stays as it is."""
    if instance.startswith("["):
        return instance.split("]", 1)[0] + "]"
    host, sep, port = instance.rpartition(":")
    return host if sep and port.isdigit() else instance


@dataclass(frozen=True)
class PromNode:
    """A node of Suanli and how to find its series (see the module doc for ``selector``)."""

    node_id: str
    cell: str
    selector: str

    @property
    def kind(self) -> str:
        s = self.selector.strip()
        if s.startswith("{"):
            return "labels"
        return "instance" if _host_of(s) != s else "host"

    @property
    def matchers(self) -> tuple[Matcher, ...]:
        return parse_matchers(self.selector) if self.kind == "labels" else ()

    def used_labels(self) -> frozenset[str]:
        return frozenset(m.label for m in self.matchers)


def nodes_from_mapping(mapping: Mapping[str, str], cell: str) -> list[PromNode]:
    """``{node_id: selector}`` -> PromNodes of one cell (selectors are checked here)."""
    nodes = [PromNode(node_id, cell, selector) for node_id, selector in mapping.items()]
    for node in nodes:
        node.matchers  # noqa: B018 - parse now, so a bad selector fails at configuration time
    return nodes


class NodeIndex:
    """Assigns series (label sets) to nodes: exact instance, then host, then matcher lists."""

    def __init__(self, nodes: Sequence[PromNode]):
        self.nodes = list(nodes)
        self._by_instance: dict[str, PromNode] = {}
        self._by_host: dict[str, PromNode] = {}
        self._by_labels: list[tuple[PromNode, tuple[Matcher, ...]]] = []
        seen: set[str] = set()
        for node in self.nodes:
            if node.node_id in seen:
                raise ConnectorError(f"node {node.node_id!r} is configured twice")
            seen.add(node.node_id)
            kind = node.kind
            if kind == "instance":
                self._by_instance.setdefault(node.selector.strip(), node)
            elif kind == "host":
                self._by_host.setdefault(node.selector.strip(), node)
            else:
                self._by_labels.append((node, node.matchers))

    def node_of(self, labels: Mapping[str, str]) -> PromNode | None:
        instance = labels.get("instance", "")
        node = (self._by_instance.get(instance) or self._by_host.get(_host_of(instance))) if instance else None
        if node is not None:
            return node
        for candidate, matchers in self._by_labels:
            if all(m.matches(labels) for m in matchers):
                return candidate
        return None


# ---- queries and the pure conversion ---------------------------------------------------------
def queries(window: str = "1m", include: str = DEFAULT_INCLUDE, exclude: str = DEFAULT_EXCLUDE) -> dict[str, str]:
    """The instant queries of one sample, by role."""
    def quoted(regex: str) -> str:
        return regex.replace("\\", "\\\\").replace('"', '\\"')

    series = f'{{__name__=~"{quoted(include)}"' + (f', __name__!~"{quoted(exclude)}"' if exclude else "") + "}"
    return {
        "series": series,
        "scraped": "timestamp(up)",
        "cpu_util": f'1 - avg without (cpu) (sum without (mode) '
                    f'(rate(node_cpu_seconds_total{{mode=~"idle|iowait"}}[{window}])))',
        "net_rx": f'sum without (device) (rate(node_network_receive_bytes_total{{device!="lo"}}[{window}]))',
        "net_tx": f'sum without (device) (rate(node_network_transmit_bytes_total{{device!="lo"}}[{window}]))',
        "disk_iops": f"sum without (device) (rate(node_disk_reads_completed_total[{window}]) "
                     f"+ rate(node_disk_writes_completed_total[{window}]))",
    }


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def series_key(labels: Mapping[str, str], drop: Iterable[str] = ()) -> str:
    """A series' name for ``extended``: ``name{a="x",b="y"}`` (labels sorted), as Prometheus prints it."""
    name = labels.get("__name__", "")
    if name.startswith("DCGM_"):
        kept = {k: labels[k] for k in GPU_INDEX_LABELS if k in labels}
    else:
        dropped = IDENTITY_LABELS | set(drop)
        kept = {k: v for k, v in labels.items() if k != "__name__" and k not in dropped}
    if not kept:
        return name
    return name + "{" + ",".join(f'{k}="{_escape(kept[k])}"' for k in sorted(kept)) + "}"


def _vector(response: Mapping[str, Any] | None, role: str) -> list[tuple[dict[str, str], float]]:
    """The (labels, value) pairs of an instant-query response; finite values only."""
    if response is None:
        return []
    if response.get("status") != "success":
        raise ConnectorError(f"Prometheus query {role!r} failed: {response.get('errorType', '')} "
                             f"{response.get('error', response)}")
    data = response.get("data") or {}
    if data.get("resultType") not in ("vector", None):
        raise ConnectorError(f"Prometheus query {role!r} returned a {data.get('resultType')}, not a vector")
    out = []
    for item in data.get("result") or []:
        try:
            value = float(item["value"][1])
        except (KeyError, IndexError, TypeError, ValueError):
            continue
        if math.isfinite(value):
            out.append((dict(item.get("metric") or {}), value))
    # Prometheus does not promise an order: sort, so that "first series wins" is deterministic.
    out.sort(key=lambda lv: sorted(lv[0].items()))
    return out


def _gpu_order(key: str) -> tuple[int, str]:
    return (int(key), "") if key.isdigit() else (1 << 30, key)


@dataclass
class _Acc:
    extended: dict[str, float] = field(default_factory=dict)
    derived: dict[str, float] = field(default_factory=dict)
    gpu_util: dict[str, float] = field(default_factory=dict)
    gpu_fb: dict[str, float] = field(default_factory=dict)
    power: float = 0.0
    targets: set[tuple[str, str]] = field(default_factory=set)  # (instance, job) the series came from
    scraped_ms: int = 0


def build_node_metrics(responses: Mapping[str, Mapping[str, Any]], nodes: Sequence[PromNode] | NodeIndex, *,
                       name: str = "prometheus", default_at: int | None = None) -> list[dict[str, Any]]:
    """NodeMetrics payloads from the JSON bodies of :func:`queries` (keyed by role). Pure.

    ``default_at`` (epoch ms) is the ``at`` of a node none of whose targets appear in
    ``timestamp(up)`` (matched by labels other than the target's); by default the query's
    evaluation time. Nodes without a single series are left out. Order: configuration order.
    """
    index = nodes if isinstance(nodes, NodeIndex) else NodeIndex(nodes)
    acc: dict[str, _Acc] = {}
    eval_ms = default_at or 0
    for labels, value in _vector(responses.get("series"), "series"):
        node = index.node_of(labels)
        if node is None:
            continue
        a = acc.setdefault(node.node_id, _Acc())
        a.extended.setdefault(series_key(labels, node.used_labels()), value)
        a.targets.add((labels.get("instance", ""), labels.get("job", "")))
        metric = labels.get("__name__", "")
        gpu = labels.get("gpu", "")
        if metric == "DCGM_FI_DEV_GPU_UTIL":
            a.gpu_util.setdefault(gpu, value)
        elif metric == "DCGM_FI_DEV_FB_USED":
            a.gpu_fb.setdefault(gpu, value)
        elif metric == "DCGM_FI_DEV_POWER_USAGE":
            a.power += value
    if not default_at:
        for item in ((responses.get("series") or {}).get("data") or {}).get("result") or []:
            eval_ms = int(float(item["value"][0]) * 1000)
            break
    for role in ("cpu_util", "net_rx", "net_tx", "disk_iops"):
        for labels, value in _vector(responses.get(role), role):
            node = index.node_of(labels)
            if node is not None and node.node_id in acc:
                acc[node.node_id].derived.setdefault(role, value)
    # By target, not by selector: a node found by a label its series carry (dcgm-exporter's
    # Hostname) is still timed by the scrapes of the targets those series came from.
    by_target: dict[tuple[str, str], list[_Acc]] = {}
    for a in acc.values():
        for target in a.targets:
            by_target.setdefault(target, []).append(a)
    for labels, value in _vector(responses.get("scraped"), "scraped"):
        for a in by_target.get((labels.get("instance", ""), labels.get("job", "")), ()):
            a.scraped_ms = max(a.scraped_ms, int(round(value * 1000)))

    out = []
    for node in index.nodes:
        a = acc.get(node.node_id)
        if a is None:
            continue
        ext = a.extended
        total, avail = ext.get("node_memory_MemTotal_bytes"), ext.get("node_memory_MemAvailable_bytes")
        used_mib = int(max(0.0, total - avail) // MIB) if total is not None and avail is not None else 0
        gpus = sorted(set(a.gpu_util) | set(a.gpu_fb), key=_gpu_order)
        at = a.scraped_ms or eval_ms or wall_ms()
        out.append({
            "event_id": f"{name}/{node.node_id}/prom/{at}", "node_id": node.node_id, "cell": node.cell, "at": at,
            "cpu_util": round(min(1.0, max(0.0, a.derived.get("cpu_util", 0.0))), 4),
            "memory_used_mib": used_mib,
            "gpu_util": [round(min(1.0, max(0.0, a.gpu_util.get(g, 0.0) / 100.0)), 4) for g in gpus],
            "gpu_memory_used_mib": [int(a.gpu_fb.get(g, 0.0)) for g in gpus],
            "load1": ext.get("node_load1", 0.0),
            "disk_iops": round(a.derived.get("disk_iops", 0.0), 3),
            "net_rx_mbps": round(a.derived.get("net_rx", 0.0) * 8 / 1e6, 6),
            "net_tx_mbps": round(a.derived.get("net_tx", 0.0) * 8 / 1e6, 6),
            "power_w": round(a.power, 3),
            "extended": ext,
        })
    return out


# ---- talking to a server ---------------------------------------------------------------------
class PrometheusSource:
    """Samples a Prometheus server for ``nodes``: ``await source.sample()`` -> NodeMetrics payloads."""

    def __init__(self, url: str, nodes: Sequence[PromNode], *, name: str = "prometheus", window: str = "1m",
                 include: str = DEFAULT_INCLUDE, exclude: str = DEFAULT_EXCLUDE, timeout_s: float = 5.0):
        if not url:
            raise ConnectorError("the Prometheus source needs the server's URL")
        if not nodes:
            raise ConnectorError("the Prometheus source needs at least one node (node id -> selector)")
        self.url = url.rstrip("/")
        self.index = NodeIndex(nodes)
        self.name = name
        self.queries = queries(window, include, exclude)
        self.timeout_s = timeout_s

    @property
    def nodes(self) -> list[PromNode]:
        return self.index.nodes

    def _body(self, role: str, response: httpx.Response) -> dict[str, Any]:
        try:
            body = response.json()
        except ValueError:
            raise ConnectorError(f"Prometheus at {self.url}: query {role!r} answered HTTP {response.status_code} "
                                 f"with no JSON: {response.text[:200]}") from None
        if response.status_code != 200 or body.get("status") != "success":
            raise ConnectorError(f"Prometheus at {self.url}: query {role!r} failed (HTTP {response.status_code}): "
                                 f"{body.get('errorType', '')} {body.get('error', '')}".rstrip())
        return body

    async def fetch(self, client: httpx.AsyncClient | None = None) -> dict[str, dict[str, Any]]:
        """The JSON bodies of every query, by role (concurrently)."""
        if client is None:
            async with httpx.AsyncClient(timeout=self.timeout_s) as own:
                return await self.fetch(own)

        async def one(role: str, promql: str) -> tuple[str, dict[str, Any]]:
            try:
                response = await client.get(f"{self.url}/api/v1/query", params={"query": promql})
            except httpx.HTTPError as exc:
                raise ConnectorError(f"Prometheus at {self.url} unreachable: {type(exc).__name__}: {exc}") from None
            return role, self._body(role, response)

        return dict(await asyncio.gather(*(one(r, q) for r, q in self.queries.items())))

    def fetch_blocking(self) -> dict[str, dict[str, Any]]:
        """:meth:`fetch` without an event loop (scripts, tests); never call it on one."""
        out = {}
        with httpx.Client(timeout=self.timeout_s) as client:
            for role, promql in self.queries.items():
                try:
                    response = client.get(f"{self.url}/api/v1/query", params={"query": promql})
                except httpx.HTTPError as exc:
                    raise ConnectorError(f"Prometheus at {self.url} unreachable: {type(exc).__name__}: {exc}") from None
                out[role] = self._body(role, response)
        return out

    async def sample(self, client: httpx.AsyncClient | None = None) -> list[dict[str, Any]]:
        return build_node_metrics(await self.fetch(client), self.index, name=self.name)

    def sample_blocking(self) -> list[dict[str, Any]]:
        return build_node_metrics(self.fetch_blocking(), self.index, name=self.name)


class PrometheusFeed:
    """The latest sample of each node, refreshed in the background, for an adapter's ``monitor()``.

    ``monitor()`` runs on the event loop and must not block, so it cannot wait for HTTP. The
    first :meth:`take` on a running loop starts a refresher task (a sample every
    ``refresh_s``); :meth:`take` returns the newest sample of a node if it is at most
    ``max_age_s`` old, else None (the caller falls back to its own probe). The refresher
    ends by itself when nobody has taken a sample for ``idle_s``, or at :meth:`aclose` (call it
    from the adapter's ``aclose``); a later take starts it again. Outside an event loop, take
    samples synchronously.
    """

    def __init__(self, source: PrometheusSource, *, refresh_s: float = 5.0, max_age_s: float = 30.0,
                 idle_s: float = 120.0, clock: Callable[[], int] = wall_ms):
        self.source = source
        self.refresh_s, self.max_age_s, self.idle_s = refresh_s, max_age_s, idle_s
        self.clock = clock
        self.latest: dict[str, dict[str, Any]] = {}
        self.errors = 0
        self.last_error: str | None = None
        self._task: asyncio.Task | None = None
        self._last_take = time.monotonic()

    def take(self, node_id: str) -> dict[str, Any] | None:
        self._last_take = time.monotonic()
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            self._store(self._guard(self.source.sample_blocking))
        else:
            if self._task is None or self._task.done():
                self._task = asyncio.get_running_loop().create_task(self._refresh(), name="prometheus-feed")
        payload = self.latest.get(node_id)
        if payload is None or self.clock() - payload["at"] > self.max_age_s * 1000:
            return None
        return payload

    async def aclose(self) -> None:
        """Stop the refresher now (an adapter's ``aclose``); a later take starts it again."""
        task, self._task = self._task, None
        if task is not None and not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    def _store(self, payloads: list[dict[str, Any]] | None) -> None:
        for p in payloads or ():
            if p["at"] >= self.latest.get(p["node_id"], {}).get("at", 0):
                self.latest[p["node_id"]] = p

    def _guard(self, sample: Callable[[], list[dict[str, Any]]]) -> list[dict[str, Any]] | None:
        try:
            return sample()
        except ConnectorError as exc:
            self._note(exc)
            return None

    def _note(self, exc: Exception) -> None:
        self.errors += 1
        if str(exc) != self.last_error:
            log.warning("prometheus feed: %s", exc)
        self.last_error = str(exc)

    async def _refresh(self) -> None:
        async with httpx.AsyncClient(timeout=self.source.timeout_s) as client:
            while time.monotonic() - self._last_take < self.idle_s:
                began = time.monotonic()
                try:
                    self._store(await self.source.sample(client))
                    self.last_error = None
                except ConnectorError as exc:
                    self._note(exc)
                await asyncio.sleep(max(0.0, self.refresh_s - (time.monotonic() - began)))


# ---- its own loop: NodeMetrics onto raw.nodes ----------------------------------------------------
@dataclass
class SourceStats:
    samples: int = 0
    produced: int = 0
    skipped_same_scrape: int = 0
    errors: int = 0
    last_error: str | None = None


async def run_source(source: PrometheusSource, *, codec: Any, bootstrap: str, namespace: str,
                     interval_s: float = 15.0, partitions: int | None = None, stop: asyncio.Event | None = None,
                     max_samples: int | None = None, stats: SourceStats | None = None,
                     on_sent: Callable[[list[dict[str, Any]]], None] | None = None) -> SourceStats:
    """Sample every ``interval_s`` and produce each node's new NodeMetrics to ``<namespace>.raw.nodes``
    (key: node id), until ``stop`` is set, ``max_samples`` samples were taken, or cancelled.

    A sample whose scrape time did not move since the last one is not sent again. A failing
    query is logged and counted, and the loop goes on; Kafka errors are raised.
    """
    from suanli.streams.kafka_io import EventProducer, ensure_topics
    from suanli.streams.topics import TopicNames, TopicSpec

    stats = stats or SourceStats()
    topic = TopicNames(namespace).raw_nodes
    if partitions:
        await ensure_topics(bootstrap, [TopicSpec(topic, partitions)])
    await asyncio.to_thread(codec.schema_id, "NodeMetrics")  # a blocking registry call, once
    sent_at: dict[str, int] = {}
    async with EventProducer(bootstrap, codec, namespace=namespace) as producer, \
            httpx.AsyncClient(timeout=source.timeout_s) as client:
        while not (stop is not None and stop.is_set()):
            began = time.monotonic()
            try:
                payloads = await source.sample(client)
            except ConnectorError as exc:
                stats.errors += 1
                stats.last_error = str(exc)
                log.warning("prometheus source: %s", exc)
                payloads = []
            fresh = [p for p in payloads if p["at"] > sent_at.get(p["node_id"], 0)]
            stats.skipped_same_scrape += len(payloads) - len(fresh)
            futures = [await producer.send(topic, "NodeMetrics", p, key=p["node_id"]) for p in fresh]
            await asyncio.gather(*futures)
            for p in fresh:
                sent_at[p["node_id"]] = p["at"]
            stats.samples += 1
            stats.produced += len(fresh)
            if on_sent is not None and fresh:
                on_sent(fresh)
            if max_samples is not None and stats.samples >= max_samples:
                break
            wait = max(0.0, interval_s - (time.monotonic() - began))
            if stop is None:
                await asyncio.sleep(wait)
            else:
                try:
                    await asyncio.wait_for(stop.wait(), wait)
                except TimeoutError:
                    pass
    return stats
