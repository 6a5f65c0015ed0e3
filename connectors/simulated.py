"""A simulated heterogeneous cluster: the openb node list, given a topology, running tasks as sleeps.

Nodes come from an openb node CSV through :func:`suanli.replay.openb.read_nodes`, so their
CPU, memory and GPU counts are the trace's. What the trace lacks is filled in
deterministically from a hash of the node id (never Python's salted ``hash``): region,
zone and site (3 regions x 3 zones x 2 sites), pricing model and price, PUE and the
region's grid carbon intensity, and the per-device memory of known GPU models. The same
file always describes the same cluster, so topology-, cost- and carbon-aware strategies
have something stable to work with.

**Prices** (``describe_node``; the operator's currency per hour, made up but in the
proportions of public cloud list prices). A node's on-demand price is its GPUs at the
model's GPU-hour price plus 0.04 per core and 0.005 per GiB of memory:

=========  =============  =========  =============
GPU model  per GPU-hour   GPU model  per GPU-hour
=========  =============  =========  =============
A100       3.0            G3         2.0
V100M32    2.5            G2         1.5
V100M16    2.0            A10        1.2
P100       1.0            T4         0.6
=========  =============  =========  =============

(any other model: 1.0). ``pricing`` is drawn per node from a hash of its id: 70 %
ON_DEMAND (the price as is), 20 % RESERVED (x 0.6), 10 % SPOT (x 0.3); ``price_per_hour``
is the result. ``idle_price_per_hour``, what BRONZE work pays for the node's idle
capacity, is ``IDLE_PRICE_SHARE`` (40 %) of ``price_per_hour``, so a spot node's idle
capacity is the cheapest of all.

**Gold pool.** With ``gold_pool_share`` S > 0, within every GPU model (CPU-only nodes
being one more group) the ``round(S x n)`` nodes with the smallest ``unit_hash("pool",
node_id)`` carry the label ``pool: gold`` (the QoS core's dedicated gold pool). The default
0 labels no node, so the cluster is described exactly as before.

A dispatched task "runs" for ``duration_estimate_ms * time_scale`` seconds of wall time
(``default_duration_ms`` when the command has no estimate), then COMPLETES with exit code
0, or FAILS with exit code 1 if :func:`fails` selects its task id (``fail_fraction``,
seeded). Reported usage is in *simulated* time: what the task would have used unscaled, each
task kind with a load of its own (:func:`simulated_usage`).

**Heartbeats and metrics.** Every node heartbeats every 5 s (the runner's heartbeat period)
and reports its metrics every 15 s (``_metrics``, see ``sim_telemetry.py``), in
``metric_parts`` (15) parts of the nodes (by a hash of the node id) spread over the period,
as Prometheus spreads its scrapes: about 100 nodes' metrics a second rather than all 1,523
at once.

**Stop.** A StopCommand for a task on a node ends that simulated run when its grace is over:
the grace is *simulated*, like every run time here, so the run ends ``grace_ms x
time_scale`` wall seconds after the stop (a process that uses its whole SIGTERM grace, e.g.
to write a checkpoint), and at once when the grace is 0. A StopCommand without a grace
(null) uses ``stop_grace_ms`` (default 0: at once). Until then the copy still runs (its
node's metrics show it). It then reports FAILED (no exit code) "stopped by the scheduler:
<reason>" with the time it ran and the usage of that time, and nothing more; a run whose
natural end comes first completes as usual (it finished within its grace). A second stop
can only bring the end forward. Every accepted dispatch thus ends with one outcome, as the
kit promises (its recovery closes dispatches that never got one); the core ignores a
status from a node that is not the task's, so this outcome never touches the new placement.

**A task dispatched again elsewhere** (a TaskMigrated: a new DispatchCommand for the same
task on another node, under a new dispatch id) is simply another run: it reports RUNNING
on its new node under its own dispatch id while the old copy (if its node still runs it)
carries on until a StopCommand for the old node ends it; runs are keyed by dispatch id and
stops match task and node, so neither copy touches the other.

**Model weights.** With ``model_cache_mib`` > 0 every node has a model cache of that size
(its own view, ``processors/model_cache.py``, LRU; also registered as the node's
``model_cache_mib``). A dispatch whose command carries ``model`` starts only once the weights
are loaded: ``processors/model_loading.py``'s time from the node's own cache, else a node of
its site holding them, else the origin (scaled by the time scale like every run time; a load
in flight counts what is left of it); the model is then in the node's cache. A
``PrewarmCommand`` puts the model in the node's cache, ready after its load time (from a site
peer if one holds it, else the origin). The RUNNING message names the source and the wait.

**Faults: silencing nodes.** :meth:`SimulatedCluster.silence` (from ``suanli sim fault
silence`` through the control topic, see :meth:`control`) makes chosen nodes stop sending
heartbeats and metrics, as if the network between them and the control plane were cut;
:meth:`restore` makes them talk again (the scheduler then brings them back READY), and a
restored node re-states what it runs, as an agent reconnecting would: each of its tasks
reports RUNNING again (:meth:`TaskReporter.resync`, a new event id), so the scheduler can
stop the copies it has placed elsewhere meanwhile (StopCommand, see Stop above). A
silenced node is otherwise unchanged: the tasks running on it keep running and report
their completion as usual, and it accepts and runs what is dispatched to it (the scheduler
stops placing on it after the suspect timeout). So the scheduler sees what a real partition
looks like: the node goes SUSPECT, then DOWN, its tasks are lost and placed elsewhere, and
later the stale copies' completions arrive from a node that is no longer theirs. The
silenced set lives in this process only: a restarted connector starts with every node
talking.
"""
from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import random
import time
from pathlib import Path
from typing import Any

from suanli.config import settings
from suanli.connectors.kit import Adapter, TaskReporter, heartbeat_event, stopped_message
from suanli.processors.model_loading import load_ms
from suanli.connectors.sim_telemetry import TelemetryGenerator
from suanli.errors import ConnectorError
from suanli.processors.model_cache import PREWARM, TASK, ModelCache
from suanli.replay.openb import read_nodes

DEFAULT_NODES = settings().openb_dir / "openb_node_list_all_node.csv"
REGIONS = ("cn-beijing", "cn-hangzhou", "cn-shenzhen")
CARBON_G_PER_KWH = {"cn-beijing": 580.0, "cn-hangzhou": 510.0, "cn-shenzhen": 420.0}
ZONES = ("a", "b", "c")
SITES_PER_ZONE = 2
# Nominal per-device memory (MiB) of the trace's GPU models; G2/G3 are unpublished (0 = unknown).
GPU_MEMORY_MIB = {"A10": 24576, "A100": 40960, "P100": 16384, "T4": 16384, "V100M16": 16384, "V100M32": 32768}
# On-demand price per GPU-hour by model; CPU and memory are priced per core and per GiB.
GPU_PRICE = {"A10": 1.2, "A100": 3.0, "G2": 1.5, "G3": 2.0, "P100": 1.0, "T4": 0.6, "V100M16": 2.0, "V100M32": 2.5}
PRICING = (("ON_DEMAND", 1.0), ("RESERVED", 0.6), ("SPOT", 0.3))
# What BRONZE work pays for a node's idle capacity, as a share of the node's price.
IDLE_PRICE_SHARE = 0.4
GOLD_POOL_LABEL = ("pool", "gold")


def unit_hash(*parts: object) -> float:
    """A deterministic number in [0, 1) from its arguments."""
    digest = hashlib.blake2b(":".join(map(str, parts)).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2 ** 64


def _bucket(node_id: str) -> int:
    return int.from_bytes(hashlib.blake2b(node_id.encode(), digest_size=8).digest(), "big")


def topology(node_id: str) -> tuple[str, str, str]:
    """``(region, zone, site)`` of a node, from a hash of its id."""
    h = _bucket(node_id)
    region = REGIONS[h % len(REGIONS)]
    zone = f"{region}-{ZONES[(h // len(REGIONS)) % len(ZONES)]}"
    site = f"{zone}-dc{(h // (len(REGIONS) * len(ZONES))) % SITES_PER_ZONE + 1}"
    return region, zone, site


def content_id(connector: str, node: dict[str, Any]) -> str:
    """A deterministic NodeRegistered event id: the same description always gets the same id,
    a changed one a new id (so consumers that drop duplicate ids keep real changes)."""
    body = {k: v for k, v in node.items() if k not in ("event_id", "registered_at")}
    digest = hashlib.blake2b(json.dumps(body, sort_keys=True).encode(), digest_size=8).hexdigest()
    return f"{connector}/{node['node_id']}/registered/{digest}"


def describe_node(node: dict[str, Any], connector: str = "sim", *, gold: bool = False) -> dict[str, Any]:
    """Complete one ``read_nodes`` payload with topology, prices, carbon and GPU memory;
    ``gold`` adds the label ``pool: gold``."""
    out = dict(node)
    region, zone, site = topology(node["node_id"])
    pricing, factor = PRICING[_pick_pricing(node["node_id"])]
    accelerators = [{**a, "memory_mib": a["memory_mib"] or GPU_MEMORY_MIB.get(a["model"], 0)}
                    for a in node["accelerators"]]
    price = (node["cpu_milli"] / 1000 * 0.04 + node["memory_mib"] / 1024 * 0.005
             + sum(a["count"] * GPU_PRICE.get(a["model"], 1.0) for a in accelerators))
    labels = {**node.get("labels", {}), "source": "openb-sim"}
    if gold:
        labels[GOLD_POOL_LABEL[0]] = GOLD_POOL_LABEL[1]
    out.update(region=region, zone=zone, site=site, accelerators=accelerators, connector=connector,
               pricing=pricing, price_per_hour=round(price * factor, 4),
               idle_price_per_hour=round(price * factor * IDLE_PRICE_SHARE, 4),
               pue=round(1.15 + 0.35 * unit_hash("pue", site), 3),
               carbon_g_per_kwh=CARBON_G_PER_KWH[region], labels=labels)
    out["event_id"] = content_id(connector, out)
    return out


def gold_pool(nodes: list[dict[str, Any]], share: float) -> set[str]:
    """The node ids of the gold pool: per GPU model (CPU-only nodes are one more group), the
    ``round(share x n)`` nodes with the smallest ``unit_hash("pool", node_id)``."""
    if not 0.0 <= share <= 1.0:
        raise ConnectorError(f"sim: gold_pool_share must be in [0, 1], not {share}")
    groups: dict[str, list[str]] = {}
    for n in nodes:
        models = sorted(a["model"] for a in n["accelerators"] if a["kind"] == "GPU" and a["count"] > 0)
        groups.setdefault(models[0] if models else "", []).append(n["node_id"])
    chosen: set[str] = set()
    for ids in groups.values():
        take = int(share * len(ids) + 0.5)
        chosen.update(sorted(ids, key=lambda i: (unit_hash("pool", i), i))[:take])
    return chosen


def _pick_pricing(node_id: str) -> int:
    u = unit_hash("pricing", node_id)
    return 0 if u < 0.7 else 1 if u < 0.9 else 2  # 70% on demand, 20% reserved, 10% spot


def scaled_duration_s(duration_ms: int | None, time_scale: float, default_ms: int) -> float:
    """Wall seconds a task with this estimate runs for in the simulator."""
    return max(0.0, (default_ms if duration_ms is None else duration_ms) * time_scale / 1000.0)


DEVICE_MEMORY_MIB = 16384     # a device of a model GPU_MEMORY_MIB does not know


def simulated_usage(command: dict[str, Any], ran_ms: int, seed: int = 0,
                    device_mib: int = DEVICE_MEMORY_MIB) -> dict[str, Any]:
    """What a simulated run used over ``ran_ms`` of simulated time (the connector's usage report:
    the live part of task profiles, C9).

    A task *kind* (its shape: CPU, memory, GPU count and share) has a typical load drawn from a
    hash of the shape: CPU busy 15-95 % of its cores, peak memory 30-100 % of its request, disk
    read and write and network rates with a heavy tail (uniform cubed: most kinds light, up to
    200, 100 and 100 MiB/s), and on GPUs 20-95 % utilisation and 30-95 % of its share of
    the device's memory (``device_mib``). Each run varies by a factor 0.8-1.2 per figure, seeded by ``seed`` and the
    task id; CPU busy is capped at 100 % and peak memory at 110 % of the request. So a
    profiler can learn kinds, not noise; nothing is random across processes."""
    shape = (command["cpu_milli"], command["memory_mib"], len(command.get("gpu_devices") or ()),
             command.get("gpu_milli") or 0)
    task_id = command["task_id"]

    def kind(name: str, lo: float, hi: float) -> float:
        return lo + (hi - lo) * unit_hash("usage", name, *shape)

    def run(name: str) -> float:
        return 0.8 + 0.4 * unit_hash("run", seed, name, task_id)

    seconds = ran_ms / 1000
    cores = command["cpu_milli"] / 1000
    usage: dict[str, Any] = {
        "cpu_seconds": round(cores * seconds * min(1.0, kind("cpu", 0.15, 0.95) * run("cpu")), 3),
        "max_rss_mib": int(command["memory_mib"] * min(1.1, kind("rss", 0.3, 1.0) * run("rss"))),
        "wall_ms": ran_ms,
        "io_read_mib": round(200 * kind("read", 0, 1) ** 3 * run("read") * seconds, 3),
        "io_write_mib": round(100 * kind("write", 0, 1) ** 3 * run("write") * seconds, 3),
        "net_mib": round(100 * kind("net", 0, 1) ** 3 * run("net") * seconds, 3),
    }
    if shape[2]:
        share = shape[2] * (shape[3] or 1000) / 1000
        usage["gpu_util"] = round(min(1.0, kind("gpu", 0.2, 0.95) * run("gpu")), 4)
        usage["gpu_memory_peak_mib"] = round(device_mib * share * kind("gmem", 0.3, 0.95) * run("gmem"), 1)
    return usage


def fails(task_id: str, fraction: float, seed: int = 0) -> bool:
    """Whether the simulator fails this task: a seeded, deterministic ``fraction`` of task ids."""
    return fraction > 0 and unit_hash("fail", seed, task_id) < fraction


class SimulatedCluster(Adapter):
    """The 'sim' connector. ``nodes_csv`` is an openb node list (CSV: sn,cpu_milli,memory_mib,gpu,model).

    ``gold_pool_share``: the share of each GPU model's nodes labelled ``pool: gold`` (see the
    module docstring); ``stop_grace_ms``: the simulated grace of a StopCommand whose
    ``grace_ms`` is null (0: such a stop ends the run at once).
    """

    def __init__(self, nodes_csv: str | Path = DEFAULT_NODES, *, cell: str = "openb", name: str = "sim",
                 time_scale: float = 0.001, default_duration_ms: int = 60_000, fail_fraction: float = 0.0,
                 seed: int = 0, gold_pool_share: float = 0.0, stop_grace_ms: int = 0, model_cache_mib: int = 0):
        if time_scale < 0 or not 0.0 <= fail_fraction <= 1.0 or default_duration_ms < 0 or stop_grace_ms < 0:
            raise ConnectorError("sim: time_scale, default_duration_ms and stop_grace_ms must be >= 0, "
                                 "fail_fraction in [0, 1]")
        if not 0.0 <= gold_pool_share <= 1.0:
            raise ConnectorError(f"sim: gold_pool_share must be in [0, 1], not {gold_pool_share}")
        try:
            raw = read_nodes(nodes_csv, cell)
        except (OSError, KeyError, ValueError) as exc:
            raise ConnectorError(f"sim: cannot read node list {nodes_csv}: {exc}") from exc
        if not raw:
            raise ConnectorError(f"sim: node list {nodes_csv} has no nodes")
        self.name, self.cell = name, cell
        self.time_scale, self.default_duration_ms = time_scale, default_duration_ms
        self.fail_fraction, self.seed = fail_fraction, seed
        self.gold_pool_share, self.stop_grace_ms = gold_pool_share, stop_grace_ms
        gold = gold_pool(raw, gold_pool_share) if gold_pool_share > 0 else set()
        self.nodes = {n["node_id"]: describe_node(n, name, gold=n["node_id"] in gold) for n in raw}
        if model_cache_mib < 0:
            raise ConnectorError("sim: model_cache_mib must be >= 0")
        self.model_cache_mib = model_cache_mib
        if model_cache_mib:
            for node in self.nodes.values():
                node["model_cache_mib"] = model_cache_mib
        # node -> its model cache, times in wall ms (now_ms); empty without model_cache_mib
        self.caches: dict[str, ModelCache] = {n: ModelCache(model_cache_mib) for n in self.nodes} \
            if model_cache_mib else {}
        self.running: dict[str, dict[str, dict[str, Any]]] = {}  # node_id -> dispatch_id -> command
        self.silenced: set[str] = set()                            # nodes whose heartbeats/metrics stop
        self._ends: dict[str, float] = {}                          # dispatch_id -> monotonic end of its run
        self._stops: dict[str, tuple[asyncio.Event, list[str]]] = {}  # dispatch_id -> (wake up, [reason])
        self._stop_at: dict[str, float] = {}                       # dispatch_id -> monotonic end of its grace
        self._grace: dict[str, int] = {}                           # dispatch_id -> the grace (simulated ms)
        self._reporters: dict[str, TaskReporter] = {}              # dispatch_id -> its reporter, while it runs
        self._resyncing: set[asyncio.Task] = set()                 # re-statements after a restore

    # -- discover ----------------------------------------------------------------------------
    def discover(self) -> list[dict[str, Any]]:
        at = self.now_ms()
        return [{**n, "registered_at": at} for n in self.nodes.values()]

    # -- monitor -----------------------------------------------------------------------------
    def monitor(self, at: int, seq: int) -> list[tuple[str, dict[str, Any]]]:
        """Heartbeat then metrics of every node that is not silenced."""
        out: list[tuple[str, dict[str, Any]]] = []
        for node_id, node in self.nodes.items():
            if node_id in self.silenced:
                continue
            out.append(heartbeat_event(self.name, node, seq, at))
            out.append(("NodeMetrics", self._metrics(node, at, seq, f"{self.name}/{node_id}/metrics/{seq}")))
        return out

    def heartbeats(self, at: int, seq: int) -> list[tuple[str, dict[str, Any]]]:
        return [heartbeat_event(self.name, node, seq, at) for node_id, node in self.nodes.items()
                if node_id not in self.silenced]

    metric_parts = 15

    def metrics(self, at: int, seq: int, part: int = 0, parts: int = 1) -> list[tuple[str, dict[str, Any]]]:
        return [("NodeMetrics", self._metrics(node, at, seq, f"{self.name}/{node_id}/metrics/{seq}"))
                for node_id, node in self.nodes.items()
                if node_id not in self.silenced and (parts == 1 or _bucket(node_id) % parts == part)]

    # -- faults ------------------------------------------------------------------------------
    def silence(self, nodes: list[str] | None = None, *, count: int = 0, seed: int = 0,
                busy_for_s: float = 0.0) -> list[str]:
        """Silence ``nodes``, or ``count`` nodes drawn with ``seed``: first among the nodes
        running a task that still has at least ``busy_for_s`` wall seconds to go, then among
        the other busy nodes, then among idle ones. Returns the nodes silenced by this call."""
        if nodes:
            unknown = sorted(set(nodes) - set(self.nodes))
            if unknown:
                raise ConnectorError(f"sim: no such node(s) in {self.name}: {', '.join(unknown[:5])}")
            chosen = sorted(set(nodes))
        else:
            if count < 1:
                raise ConnectorError("sim: silence needs node ids or a count >= 1")
            now = time.monotonic()
            talking = [n for n in sorted(self.nodes) if n not in self.silenced]
            remaining = {n: max((self._ends.get(d, now) - now for d in self.running.get(n, {})), default=-1.0)
                         for n in talking}
            tiers = ([n for n in talking if self.running.get(n) and remaining[n] >= busy_for_s],
                     [n for n in talking if self.running.get(n) and remaining[n] < busy_for_s],
                     [n for n in talking if not self.running.get(n)])
            rng, chosen = random.Random(seed), []
            for tier in tiers:
                chosen += rng.sample(tier, min(len(tier), count - len(chosen)))
            chosen.sort()
        self.silenced.update(chosen)
        return chosen

    def restore(self, nodes: list[str] | None = None) -> list[str]:
        """Let ``nodes`` (default: every silenced node) heartbeat again, and have each re-state
        the tasks it runs (RUNNING again, when called on the event loop); returns those restored."""
        back = sorted(self.silenced if not nodes else self.silenced & set(nodes))
        self.silenced.difference_update(back)
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return back                                  # no loop: nothing runs, nothing to re-state
        for node_id in back:
            for dispatch_id in sorted(self.running.get(node_id, {})):
                reporter = self._reporters.get(dispatch_id)
                if reporter is not None:
                    task = loop.create_task(reporter.resync(f"node {node_id} reconnected; still running"))
                    self._resyncing.add(task)
                    task.add_done_callback(self._resyncing.discard)
        return back

    async def aclose(self) -> None:
        if self._resyncing:
            await asyncio.gather(*self._resyncing, return_exceptions=True)

    def control(self, request: dict[str, Any]) -> dict[str, Any]:
        """``{"action": "silence", "nodes": [...] | "count": N, "seed": S, "busy_for_s": T}``,
        ``{"action": "restore", "nodes": [...] (default all)}`` or ``{"action": "status"}``.
        The reply names the nodes and, per node, the tasks running on it."""
        action = request.get("action")
        if action == "silence":
            changed = self.silence(request.get("nodes") or None, count=int(request.get("count") or 0),
                                   seed=int(request.get("seed") or 0),
                                   busy_for_s=float(request.get("busy_for_s") or 0.0))
        elif action == "restore":
            changed = self.restore(request.get("nodes") or None)
        elif action == "status":
            changed = []
        else:
            raise ConnectorError(f"sim: unknown control action {action!r} (silence, restore, status)")
        return {"action": action, "nodes": changed, "silenced": sorted(self.silenced),
                "running": {n: sorted(c["task_id"] for c in self.running.get(n, {}).values()) for n in changed}}

    @property
    def telemetry(self) -> TelemetryGenerator:
        """The exporter-named metrics of every node (``connectors/sim_telemetry.py``), seeded
        with the cluster's seed; its ``set_fault`` makes a node's metrics say HOT, CONGESTED or
        DEGRADED."""
        gen = self.__dict__.get("_telemetry")
        if gen is None:
            gen = self.__dict__["_telemetry"] = TelemetryGenerator(seed=self.seed)
        return gen

    def _metrics(self, node: dict[str, Any], at: int, seq: int, event_id: str) -> dict[str, Any]:
        """200+ node_exporter and DCGM series that follow the tasks running on the node, seeded noise."""
        return self.telemetry.node_metrics(node, self.running.get(node["node_id"], {}).values(), at, seq,
                                           event_id, self.cell)

    # -- dispatch ----------------------------------------------------------------------------
    def admit(self, command: dict[str, Any]) -> str | None:
        if command["node_id"] not in self.nodes:
            return f"node {command['node_id']!r} is not in the simulated cluster {self.name!r}"
        return None

    # -- model weights -----------------------------------------------------------------------
    def model_source(self, node_id: str, arch: str) -> tuple[str, int]:
        """``(source, wall ms left of a load in flight)`` for a model on ``node_id`` now: its own
        cache, a node of its site holding it (the soonest ready), else the origin."""
        now = self.now_ms()
        own = self.caches.get(node_id)
        if own is not None and own.holds(arch):
            return "local", max(0, own.entries[arch].ready_at - now)
        site = self.nodes[node_id].get("site")
        peers = [max(0, c.entries[arch].ready_at - now) for n, c in sorted(self.caches.items())
                 if n != node_id and c.holds(arch) and self.nodes[n].get("site") == site]
        return ("peer", min(peers)) if peers else ("origin", 0)

    def load_model(self, node_id: str, model: dict[str, Any], via: str = TASK) -> tuple[str, float]:
        """Bring ``model`` (a ModelRef dict) to ``node_id``: ``(source, wall seconds until it is
        in memory)``; the node's cache holds it from now on (ready when its load ends)."""
        arch, size = model["model_arch"], int(model.get("size_mib") or 0)
        source, left_ms = self.model_source(node_id, arch)
        wall_ms = left_ms + load_ms(size, source) * self.time_scale
        cache = self.caches.get(node_id)
        if cache is not None:
            now = self.now_ms()
            if source == "local":
                if via == TASK:
                    cache.touch(arch, now)
            else:
                cache.insert(arch, size, now, now + int(wall_ms), via)
        return source, wall_ms / 1000.0

    async def prewarm(self, command: dict[str, Any]) -> None:
        """A PrewarmCommand: the model goes into the node's cache, ready after its load time."""
        if command["node_id"] in self.nodes:
            self.load_model(command["node_id"], {"model_arch": command["model_arch"],
                                                 "size_mib": command.get("size_mib", 0)}, PREWARM)

    async def execute(self, command: dict[str, Any], report: TaskReporter) -> None:
        node_id, dispatch_id = command["node_id"], command["dispatch_id"]
        duration_ms = command["duration_estimate_ms"]
        simulated_ms = self.default_duration_ms if duration_ms is None else duration_ms
        wall_s = scaled_duration_s(duration_ms, self.time_scale, self.default_duration_ms)
        wake, reasons = self._stops[dispatch_id] = (asyncio.Event(), [])   # stoppable from here on
        self._reporters[dispatch_id] = report
        self.running.setdefault(node_id, {})[dispatch_id] = command
        loaded = ""
        if command.get("model"):                 # the weights first (modelled load time, scaled)
            source, wait_s = self.load_model(node_id, command["model"])
            loaded = f"; model {command['model']['model_arch']} from {source} in {wait_s:.3f} s"
            if wait_s > 0:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(wait_s):   # no task per wait, as wait_for makes
                        await wake.wait()
        started = time.monotonic()
        end = self._ends[dispatch_id] = started + wall_s
        stopped = False
        try:
            await report.running(f"simulated on {node_id}{loaded}")
            while True:                       # until the run ends or a stop's grace is over
                wake.clear()
                stop_at = self._stop_at.get(dispatch_id)
                stopped = stop_at is not None and stop_at < end
                remaining = (stop_at if stopped else end) - time.monotonic()
                if remaining <= 0:
                    break
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(remaining):
                        await wake.wait()
            grace_ms = self._grace.get(dispatch_id, 0)
        finally:
            self.running[node_id].pop(dispatch_id, None)
            self._ends.pop(dispatch_id, None)
            self._stops.pop(dispatch_id, None)
            self._stop_at.pop(dispatch_id, None)
            self._grace.pop(dispatch_id, None)
            self._reporters.pop(dispatch_id, None)
        if stopped:
            ran_s = time.monotonic() - started
            ran_ms = min(simulated_ms, int(ran_s / self.time_scale)) if self.time_scale else 0
            usage = simulated_usage(command, ran_ms, self.seed, self._device_mib(node_id))
            grace = f" including a {grace_ms} ms grace" if grace_ms else ""
            await report.failed(None, f"{stopped_message(reasons[0] if reasons else 'no reason given')} (after "
                                      f"{ran_ms} of {simulated_ms} ms of simulated time{grace}, {ran_s:.3f} s)", usage)
            return
        usage = simulated_usage(command, simulated_ms, self.seed, self._device_mib(node_id))
        ran = (f"ran {simulated_ms} ms of simulated time ({'default' if duration_ms is None else 'the estimate'}) "
               f"in {wall_s:.3f} s (time scale {self.time_scale:g})")
        if fails(command["task_id"], self.fail_fraction, self.seed):
            await report.failed(1, f"simulated failure (fail_fraction={self.fail_fraction}, seed={self.seed}); {ran}",
                                usage)
        else:
            await report.completed(usage, ran)

    def _device_mib(self, node_id: str) -> int:
        """Memory of one of the node's GPUs (for usage reports)."""
        gpus = [a for a in self.nodes[node_id]["accelerators"] if a["kind"] == "GPU"]
        return int(gpus[0]["memory_mib"]) if gpus and gpus[0]["memory_mib"] else DEVICE_MEMORY_MIB

    async def stop(self, task_id: str, node_id: str, reason: str, grace_ms: int | None = None) -> bool:
        """End the simulated runs of ``task_id`` on ``node_id`` once ``grace_ms`` of simulated
        time (``stop_grace_ms`` when None; 0: now) has passed; they report FAILED, stopped.
        False if none runs here (the runner then cancels what it has in flight)."""
        grace = self.stop_grace_ms if grace_ms is None else max(0, grace_ms)
        stop_at = time.monotonic() + scaled_duration_s(grace, self.time_scale, 0)
        found = False
        for dispatch_id, command in list(self.running.get(node_id, {}).items()):
            if command["task_id"] == task_id and dispatch_id in self._stops:
                wake, reasons = self._stops[dispatch_id]
                reasons.append(reason)
                if stop_at < self._stop_at.get(dispatch_id, float("inf")):
                    self._stop_at[dispatch_id], self._grace[dispatch_id] = stop_at, grace
                wake.set()
                found = True
        return found
