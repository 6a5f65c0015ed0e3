"""Scorers and filters for the non-fragmentation strategies: spread, first fit, balance,
cost, reliability, green, latency and analytics.

Node attributes come from ``node_meta`` (zone, region, site, price_per_hour, pricing, pue,
carbon_g_per_kwh, labels) through :meth:`CellState.meta_array`; task attributes (labels,
qos) from the task's record (``ctx.task``). Every scorer is vectorised over the rows, and
"higher is better" as everywhere in the framework.
"""
from __future__ import annotations

import json
from typing import Any, Optional

import numpy as np

from ..framework import REGISTRY, CycleContext, Plugin
from ..state import GPU_MILLI, HOLDING, CellState


def _after(ctx: CycleContext, rows: np.ndarray):
    s, r = ctx.state, ctx.req
    return (s.cpu_free[rows] - r.cpu, s.mem_free[rows] - r.mem, s.gpu_free_total[rows] - r.gpu_total)


# ------------------------------------------------------------------ performance
@REGISTRY.register
class WorstFit(Plugin):
    """Spread (Kubernetes LeastAllocated): the share of the node left free after placing,
    averaged over CPU, memory and GPU (GPU only on GPU nodes). Normalised 0..100."""
    name = "WorstFit"
    normalize = True

    def score(self, ctx, rows):
        s = ctx.state
        cpu, mem, gpu = _after(ctx, rows)
        gcap = s.gpu_count[rows] * GPU_MILLI
        parts = [cpu / np.maximum(s.cpu_cap[rows], 1), mem / np.maximum(s.mem_cap[rows], 1)]
        g = np.where(gcap > 0, gpu / np.maximum(gcap, 1), 1.0)
        return np.trunc((parts[0] + parts[1] + g) / 3.0 * 1000.0)


@REGISTRY.register
class FirstFit(Plugin):
    """The lowest feasible row (registration order) wins."""
    name = "FirstFit"

    def score(self, ctx, rows):
        return -rows.astype(np.float64)


@REGISTRY.register
class Balanced(Plugin):
    """Kubernetes BalancedAllocation: ``100 * (1 - std(cpu, mem, gpu utilisation after))``
    (GPU utilisation only on GPU nodes), so no resource runs out long before the others."""
    name = "Balanced"

    def score(self, ctx, rows):
        s = ctx.state
        cpu, mem, gpu = _after(ctx, rows)
        u_cpu = 1.0 - cpu / np.maximum(s.cpu_cap[rows], 1)
        u_mem = 1.0 - mem / np.maximum(s.mem_cap[rows], 1)
        gcap = s.gpu_count[rows] * GPU_MILLI
        u_gpu = np.where(gcap > 0, 1.0 - gpu / np.maximum(gcap, 1), np.nan)
        u = np.stack([u_cpu, u_mem, u_gpu], axis=1)
        return np.trunc(100.0 * (1.0 - np.nanstd(u, axis=1)))


@REGISTRY.register
class CpuMemFit(Plugin):
    """Analytics: best fit over CPU and memory only; CPU-only tasks keep off GPU nodes
    (``gpu_node_penalty`` points, default 100) so that GPUs are not stranded by CPU work."""
    name = "CpuMemFit"

    def score(self, ctx, rows):
        s = ctx.state
        cpu, mem, _ = _after(ctx, rows)
        fit = 100.0 * (1.0 - 0.5 * cpu / np.maximum(s.cpu_cap[rows], 1) - 0.5 * mem / np.maximum(s.mem_cap[rows], 1))
        if ctx.req.kind == "cpu":
            fit = fit - float(self.args.get("gpu_node_penalty", 100.0)) * (s.gpu_count[rows] > 0)
        return np.trunc(fit)


# ------------------------------------------------------------------------- cost
DEFAULT_PRICING = {"SPOT": 1.0, "RESERVED": 1.0, "ON_DEMAND": 1.0}


def node_price(s: CellState, args: dict[str, Any]) -> np.ndarray:
    """Price per hour of each node: ``price_per_hour`` from node_meta, else
    ``args.price_by_model[model]`` per GPU (+ ``price_per_core`` per core), times the
    ``args.pricing_factor[pricing]`` multiplier (SPOT / RESERVED / ON_DEMAND)."""
    price = s.meta_array("price_per_hour", 0.0)
    by_model = args.get("price_by_model") or {}
    if by_model or args.get("price_per_core"):
        est = np.array([float(by_model.get(s.models[m], 0.0)) if m >= 0 else 0.0 for m in s.model_idx]) * s.gpu_count
        est = est + float(args.get("price_per_core", 0.0)) * s.cpu_cap / 1000.0
        price = np.where(price > 0, price, est)
    factors = {**DEFAULT_PRICING, **(args.get("pricing_factor") or {})}
    kinds = s.meta_array("pricing", "ON_DEMAND", object)
    return price * np.array([float(factors.get(k, 1.0)) for k in kinds])


def slice_share(ctx: CycleContext, rows: np.ndarray) -> np.ndarray:
    """The largest share of the node (CPU, memory or GPU) the task takes: the part of the
    node's price it is charged for."""
    s, r = ctx.state, ctx.req
    sh = np.maximum(r.cpu / np.maximum(s.cpu_cap[rows], 1), r.mem / np.maximum(s.mem_cap[rows], 1))
    gcap = s.gpu_count[rows] * GPU_MILLI
    return np.maximum(sh, np.where(gcap > 0, r.gpu_total / np.maximum(gcap, 1), 0.0))


@REGISTRY.register
class Cheapest(Plugin):
    """Cheapest feasible: minus the cost per hour of the slice the task takes
    (``node price x largest share``), in milli-currency."""
    name = "Cheapest"

    def score(self, ctx, rows):
        return -np.round(node_price(ctx.state, self.args)[rows] * slice_share(ctx, rows) * 1000.0, 3)


@REGISTRY.register
class SpotMix(Plugin):
    """Spot / reserved / on-demand mix. The marginal cost of a slice is: RESERVED
    capacity ``reserved_marginal`` x price (already paid for: default 0), SPOT price x
    (1 + interruption risk), ON_DEMAND full price. The risk depends on the task: GOLD
    (or label ``preemptible=false``) ``risk_gold`` (default 10: spot only as a last
    resort), SILVER ``risk_silver`` (1.0), BRONZE or ``preemptible=true`` 0."""
    name = "SpotMix"

    def score(self, ctx, rows):
        s, a = ctx.state, self.args
        price = node_price(s, a)[rows] * slice_share(ctx, rows)
        kinds = s.meta_array("pricing", "ON_DEMAND", object)[rows]
        t = ctx.task
        pre = str(ctx.labels.get("preemptible", "")).lower()
        if pre == "true" or t.get("qos") == "BRONZE":
            risk = float(a.get("risk_bronze", 0.0))
        elif pre == "false" or t.get("qos") == "GOLD":
            risk = float(a.get("risk_gold", 10.0))
        else:
            risk = float(a.get("risk_silver", 1.0))
        mult = np.where(kinds == "RESERVED", float(a.get("reserved_marginal", 0.0)),
                        np.where(kinds == "SPOT", 1.0 + risk, 1.0))
        return -np.round(price * mult * 1000.0, 3)


# ------------------------------------------------------------------ reliability
def holders(s: CellState, key: str, value: str) -> list[dict[str, Any]]:
    """Tasks holding resources whose label ``key`` equals ``value``."""
    return [t for t in s.tasks.values()
            if t["status"] in HOLDING and (t.get("labels") or {}).get(key) == value]


@REGISTRY.register
class ZoneSpread(Plugin):
    """Replicas of one ``replica-group`` (label key in ``group_label``) spread over failure
    domains: minus ``100 x replicas already in the node's zone + 10 x in its region +
    1000 x on the node itself``. Tasks without the label score 0 everywhere."""
    name = "ZoneSpread"

    def score(self, ctx, rows):
        key = self.args.get("group_label", "replica-group")
        group = ctx.labels.get(key)
        if not group:
            return np.zeros(rows.size)
        s = ctx.state
        zones = s.meta_array("zone", "", object)
        regions = s.meta_array("region", "", object)
        zc: dict[str, int] = {}
        rc: dict[str, int] = {}
        nc = np.zeros(s.n_nodes)
        for t in holders(s, key, group):
            row = s.node_index[t["node"]]
            nc[row] += 1
            zc[zones[row]] = zc.get(zones[row], 0) + 1
            rc[regions[row]] = rc.get(regions[row], 0) + 1
        z = np.array([zc.get(zones[r], 0) for r in rows.tolist()], dtype=np.float64)
        g = np.array([rc.get(regions[r], 0) for r in rows.tolist()], dtype=np.float64)
        return -(1000.0 * nc[rows] + 100.0 * z + 10.0 * g)


@REGISTRY.register
class AntiAffinity(Plugin):
    """Filter: the task's label ``anti-affinity: "k=v[,k2=v2]"`` keeps it off nodes that
    hold a task labelled ``k=v``; with ``strict_replicas`` also off nodes holding a replica
    of its own ``replica-group``."""
    name = "AntiAffinity"

    def filter(self, ctx):
        rules = []
        spec = ctx.labels.get("anti-affinity", "")
        for part in spec.split(","):
            if "=" in part:
                k, v = part.split("=", 1)
                rules.append((k.strip(), v.strip()))
        group = ctx.labels.get("replica-group")
        if self.args.get("strict_replicas") and group:
            rules.append(("replica-group", group))
        if not rules:
            return None
        s = ctx.state
        bad = np.zeros(s.n_nodes, dtype=bool)
        for k, v in rules:
            for t in holders(s, k, v):
                if t.get("node") is not None and t is not ctx.task:
                    bad[s.node_index[t["node"]]] = True
        return ~bad, "anti-affinity"


# ------------------------------------------------------------------------ green
def task_power_w(ctx: CycleContext, args: dict[str, Any]) -> float:
    """Power the task draws: GPUs x ``watts_per_gpu`` (per model via
    ``watts_per_gpu_model``) + cores x ``watts_per_core``; a default-model estimate."""
    r = ctx.req
    return r.gpu_total / GPU_MILLI * float(args.get("watts_per_gpu", 300.0)) \
        + r.cpu / 1000.0 * float(args.get("watts_per_core", 10.0))


@REGISTRY.register
class Carbon(Plugin):
    """Green: minus the grams of CO2 per hour the task causes on the node,
    ``pue x carbon_g_per_kwh x power_kw`` (GPU power per model from
    ``watts_per_gpu_model``). Nodes without carbon data count ``default_carbon`` (400)."""
    name = "Carbon"

    def score(self, ctx, rows):
        s, a = ctx.state, self.args
        pue = s.meta_array("pue", float(a.get("default_pue", 1.5)))[rows]
        pue = np.where(pue > 0, pue, float(a.get("default_pue", 1.5)))
        ci = s.meta_array("carbon_g_per_kwh", float(a.get("default_carbon", 400.0)))[rows]
        ci = np.where(ci > 0, ci, float(a.get("default_carbon", 400.0)))
        per_model = a.get("watts_per_gpu_model") or {}
        r = ctx.req
        gpu_w = np.array([float(per_model.get(s.models[m], a.get("watts_per_gpu", 300.0))) if m >= 0 else 0.0
                          for m in s.model_idx[rows]])
        kw = (r.gpu_total / GPU_MILLI * gpu_w + r.cpu / 1000.0 * float(a.get("watts_per_core", 10.0))) / 1000.0
        return -np.round(pue * ci * kw, 4)


@REGISTRY.register
class Pue(Plugin):
    """Green (energy): minus the facility power the placement adds, ``pue x (task power
    + idle power if the node is idle now)``: low-PUE sites first, and busy nodes before
    idle ones so that idle nodes can stay powered down (``idle_watts``, default 200)."""
    name = "Pue"

    def score(self, ctx, rows):
        s, a = ctx.state, self.args
        pue = s.meta_array("pue", float(a.get("default_pue", 1.5)))[rows]
        pue = np.where(pue > 0, pue, float(a.get("default_pue", 1.5)))
        idle = (s.cpu_free[rows] == s.cpu_cap[rows]) & (s.gpu_free_total[rows] == s.gpu_count[rows] * GPU_MILLI)
        w = task_power_w(ctx, a) + np.where(idle, float(a.get("idle_watts", 200.0)), 0.0)
        return -np.round(pue * w, 3)


# ---------------------------------------------------------------------- latency
def build_topology(s: CellState, cfg: dict[str, Any]):
    """A networkx graph of locations: ``zone:<z>`` -- ``region:<r>`` -- ``site:<s>``
    edges from the nodes' zone/region/site (``zone_region_ms``, ``region_site_ms``),
    regions joined through ``backbone`` (``region_backbone_ms`` each way), plus explicit
    ``links: [{"a": "zone:z1", "b": "zone:z2", "ms": 2.0}]``. Returns (graph, location of
    each row)."""
    import networkx as nx

    g = nx.Graph()
    locs = []
    zr = float(cfg.get("zone_region_ms", 1.0))
    rs = float(cfg.get("region_site_ms", 5.0))
    bb = float(cfg.get("region_backbone_ms", 25.0))
    for nid in s.node_ids:
        m = s.node_meta[nid]
        z, r, st = m.get("zone") or "", m.get("region") or "", m.get("site") or ""
        loc = f"zone:{z}" if z else f"site:{st}" if st else f"region:{r}" if r else "region:"
        locs.append(loc)
        g.add_node(loc)
        if r:
            if z:
                g.add_edge(f"zone:{z}", f"region:{r}", ms=zr)
            if st:
                g.add_edge(f"site:{st}", f"region:{r}", ms=rs)
            g.add_edge(f"region:{r}", "backbone", ms=bb)
        elif z and st:
            g.add_edge(f"zone:{z}", f"site:{st}", ms=zr)
    for ln in cfg.get("links") or []:
        g.add_edge(ln["a"], ln["b"], ms=float(ln["ms"]))
    return g, locs


@REGISTRY.register
class Latency(Plugin):
    """Latency: minus the network distance (ms, shortest path in the topology graph of
    :func:`build_topology`) from the node to the task's data or users, named by the task
    label ``data-zone`` / ``users-zone`` / ``data-region`` / ``users-region`` /
    ``data-site`` / ``users-site`` / ``near`` (a graph node such as ``zone:z1``).
    Unreachable: ``unreachable_ms`` (1000). No target label: 0 everywhere."""
    name = "Latency"

    def target(self, ctx: CycleContext) -> Optional[str]:
        lab = ctx.labels
        if lab.get("near"):
            return lab["near"]
        for who in ("data", "users"):
            for lvl in ("zone", "site", "region"):
                v = lab.get(f"{who}-{lvl}")
                if v:
                    return f"{lvl}:{v}"
        return None

    def distances(self, s: CellState, tgt: str) -> np.ndarray:
        import networkx as nx

        key = ("latency", json.dumps(self.args, sort_keys=True, default=str), tgt, s.n_nodes)
        cache = s._derived.setdefault("meta", {})
        d = cache.get(key)
        if d is None:
            g, locs = build_topology(s, self.args)
            far = float(self.args.get("unreachable_ms", 1000.0))
            lens = nx.single_source_dijkstra_path_length(g, tgt, weight="ms") if tgt in g else {}
            d = cache[key] = np.array([float(lens.get(loc, far)) for loc in locs])
        return d

    def score(self, ctx, rows):
        tgt = self.target(ctx)
        if tgt is None:
            return np.zeros(rows.size)
        return -self.distances(ctx.state, tgt)[rows]
