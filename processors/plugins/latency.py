"""``Latency``: network distance from a node to the task's data or users, as shortest
paths in a networkx graph of zones, regions and sites (:func:`build_topology`)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

import numpy as np

from ..args import DEFAULT, arg, parse_args
from ..framework import REGISTRY, CycleContext, Plugin
from ..state import CellState


@dataclass(frozen=True, slots=True)
class Link:
    """An explicit edge of the topology, e.g. ``{"a": "zone:z1", "b": "zone:z2", "ms": 2.0}``."""
    a: str = arg(doc="one end (zone:<z>, region:<r>, site:<s> or backbone)", nonempty=True)
    b: str = arg(doc="the other end", nonempty=True)
    ms: float = arg(doc="latency, ms", ge=0)


@dataclass(frozen=True, slots=True)
class LatencyArgs:
    zone_region_ms: float = arg(1.0, "zone to its region (or to its site when there is no region), ms", ge=0)
    region_site_ms: float = arg(5.0, "site to its region, ms", ge=0)
    region_backbone_ms: float = arg(25.0, "region to the backbone joining the regions, ms", ge=0)
    links: tuple[Link, ...] = arg((), "extra edges [{a, b, ms}]", null=DEFAULT)
    unreachable_ms: float = arg(1000.0, "distance of a node the target cannot reach, ms", ge=0)


def build_topology(s: CellState, cfg: Any):
    """A networkx graph of locations: ``zone:<z>`` -- ``region:<r>`` -- ``site:<s>``
    edges from the nodes' zone/region/site (``zone_region_ms``, ``region_site_ms``),
    regions joined through ``backbone`` (``region_backbone_ms`` each way), plus explicit
    ``links: [{"a": "zone:z1", "b": "zone:z2", "ms": 2.0}]``. ``cfg``: :class:`LatencyArgs`
    or its JSON object. Returns (graph, location of each row)."""
    import networkx as nx

    a: LatencyArgs = parse_args(LatencyArgs, cfg, "plugin 'Latency'")
    g = nx.Graph()
    locs = []
    zr, rs, bb = a.zone_region_ms, a.region_site_ms, a.region_backbone_ms
    for nid in s.node_ids:
        node = s.nodes[nid]
        z, r, st = node.zone or "", node.region or "", node.site or ""
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
    for ln in a.links:
        g.add_edge(ln.a, ln.b, ms=ln.ms)
    return g, locs


@REGISTRY.register
class Latency(Plugin):
    """Latency: minus the network distance (ms, shortest path in the topology graph of
    :func:`build_topology`) from the node to the task's data or users, named by the task
    label ``data-zone`` / ``users-zone`` / ``data-region`` / ``users-region`` /
    ``data-site`` / ``users-site`` / ``near`` (a graph node such as ``zone:z1``).
    Unreachable: ``unreachable_ms`` (1000). No target label: 0 everywhere.
    Args: :class:`LatencyArgs`."""
    name = "Latency"
    Args = LatencyArgs
    args: LatencyArgs

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

        # the args are frozen and hashable: plugins with equal args share the cached table
        key = ("latency", self.args, tgt, s.n_nodes)
        cache = s._derived.setdefault("meta", {})
        d = cache.get(key)
        if d is None:
            g, locs = build_topology(s, self.args)
            far = self.args.unreachable_ms
            lens = nx.single_source_dijkstra_path_length(g, tgt, weight="ms") if tgt in g else {}
            d = cache[key] = np.array([float(lens.get(loc, far)) for loc in locs])
        return d

    def score(self, ctx, rows):
        tgt = self.target(ctx)
        if tgt is None:
            return np.zeros(rows.size)
        return -self.distances(ctx.state, tgt)[rows]
