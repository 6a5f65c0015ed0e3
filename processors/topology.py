"""The cell's network topology: a directed, weighted networkx graph of sites, regions,
zones, racks and nodes, held by :class:`~.state.CellState` (``state.topology``) and kept
up to date by the cell's events, never rebuilt per decision.

Vertices are named by level: ``node:<id>``, ``rack:<zone>/<rack>`` (the rack label is
qualified by the zone, or by the nearest level above when the node has no zone, so that
``r01`` in two zones are two racks), ``zone:<z>``, ``region:<r>``, ``site:<s>``, and one
``backbone`` joining the sites.

Edges, always as a pair of directed edges (one each way):

* **the hierarchy** node -- rack -- zone -- region -- site -- backbone, from the node's
  registration (``site``, ``region``, ``zone``; the rack from ``labels["rack"]``). A level a
  node does not name is skipped, and the edge to the next level it names costs the sum of
  the skipped steps, so distances stay comparable (:class:`Weights`: 0.05, 0.2, 1, 5 ms and
  25 ms to the backbone). An edge is kept while one node's chain uses it (reference counts),
  so a re-registration that moves a node moves its edges.
* **measured links**: a ``LinkMetrics`` (``src -> dst``, ``scope`` NODE or SITE) sets the
  weight of the directed edge ``node:src -> node:dst`` (``site:`` for SITE), overriding the
  hierarchy's default when the edge is one of its: ``latency_ms * (1 + loss_factor *
  loss_pct / 100)``. A link with no bandwidth or 100 % loss is down: the edge is removed
  until a later sample brings it back. The newest sample (by ``at``; on a tie, the later in
  the log) wins.

Node health and telemetry are read from the owning state when a query weighs the graph,
not copied here: edges incident to a node whose ``condition`` is not NORMAL (HOT,
CONGESTED, DEGRADED) or whose ``health`` is SUSPECT cost extra (:attr:`Weights.condition_ms`,
:attr:`Weights.suspect_ms`), and a node whose health or status is DOWN is cut off.

Queries: :meth:`Topology.path` (cost in ms and the hops), :meth:`Topology.distance_from`
(``{row: cost}`` from one source to every node, cached until the graph or a node's
condition changes), :meth:`Topology.distances` (the same as a row-aligned array),
:meth:`Topology.domain_of` and :meth:`Topology.domain_index` (the rack / zone / region /
site of each node, for gang placement). The networkx graph itself is built on the first
query and then updated in place by every event; a cell that is never asked a topology
question never imports networkx.

Pure: no clock, no I/O. Only the measured links are state of their own
(:meth:`Topology.to_snapshot`); the hierarchy is rebuilt by re-adding the nodes.
"""
from __future__ import annotations

import math
import weakref
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Iterable, Mapping, Optional

import numpy as np

if TYPE_CHECKING:
    from .model import LinkMetrics, Node
    from .state import CellState

LEVELS = ("node", "rack", "zone", "region", "site")
DOMAIN_LEVELS = LEVELS[1:]
BACKBONE = "backbone"
INF = math.inf


def _default_condition_ms() -> dict[str, float]:
    return {"HOT": 1.0, "CONGESTED": 10.0, "DEGRADED": 10.0}


@dataclass(frozen=True)
class Weights:
    """Default latencies of the hierarchy (ms, each way) and the penalties of bad nodes."""
    node_rack_ms: float = 0.05
    rack_zone_ms: float = 0.2
    zone_region_ms: float = 1.0
    region_site_ms: float = 5.0
    site_backbone_ms: float = 25.0
    loss_factor: float = 10.0            # weight = latency * (1 + loss_factor * loss_pct / 100)
    condition_ms: Mapping[str, float] = field(default_factory=_default_condition_ms)
    other_condition_ms: float = 10.0     # a condition not in condition_ms (and not NORMAL)
    suspect_ms: float = 10.0             # health SUSPECT

    @property
    def steps(self) -> tuple[float, ...]:
        """Cost of going up one level from ``LEVELS[i]`` (the last: site to the backbone)."""
        return (self.node_rack_ms, self.rack_zone_ms, self.zone_region_ms, self.region_site_ms,
                self.site_backbone_ms)


@dataclass(frozen=True, slots=True)
class Link:
    """The latest sample of one measured directed link."""
    src: str              # graph vertex
    dst: str
    latency_ms: float
    bandwidth_mbps: float
    loss_pct: float
    at: int

    @property
    def up(self) -> bool:
        return self.bandwidth_mbps > 0 and self.loss_pct < 100 and math.isfinite(self.latency_ms)

    def to_json(self) -> list[Any]:
        return [self.src, self.dst, self.latency_ms, self.bandwidth_mbps, self.loss_pct, self.at]

    @classmethod
    def from_json(cls, d: list[Any]) -> "Link":
        return cls(d[0], d[1], float(d[2]), float(d[3]), float(d[4]), int(d[5]))


class UnknownVertex(KeyError):
    """A name that is no vertex of the graph."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "unknown vertex"


def node_vertex(node_id: str) -> str:
    return f"node:{node_id}"


def chain_of(node: "Node") -> list[tuple[int, str]]:
    """The node's way up: ``(level index, vertex)`` from the node to the highest level it
    names (LEVELS order), skipping the levels it does not name."""
    zone, region, site = node.zone or "", node.region or "", node.site or ""
    rack = (node.labels or {}).get("rack") or ""
    out = [(0, node_vertex(node.node_id))]
    if rack:
        parent = zone or region or site
        out.append((1, f"rack:{parent}/{rack}" if parent else f"rack:{rack}"))
    if zone:
        out.append((2, f"zone:{zone}"))
    if region:
        out.append((3, f"region:{region}"))
    if site:
        out.append((4, f"site:{site}"))
    return out


class Topology:
    """The graph of one cell (see the module docstring). ``owner``: the :class:`CellState`
    whose ``condition`` / ``health`` / ``node_status`` weigh the queries (None: no penalties)."""

    def __init__(self, owner: Optional["CellState"] = None, weights: Optional[Weights] = None):
        # a weak reference: the state holds its topology, and a strong one back would make
        # every state a reference cycle, freed only by the cyclic collector's full passes
        self._owner = weakref.ref(owner) if owner is not None else None
        self.weights = weights or Weights()
        self.version = 0
        self.node_ids: list[str] = []                      # row order
        self.rows: dict[str, int] = {}                     # node vertex -> row
        self.chains: dict[str, list[tuple[int, str]]] = {}  # node id -> its way up
        self.tree: dict[tuple[str, str], list[float]] = {}  # hierarchy edge -> [ms, references]
        self.links: dict[tuple[str, str], Link] = {}        # measured edges (latest sample)
        self._g: Any = None                                 # the networkx DiGraph, once materialised
        self._cache: dict[Any, Any] = {}
        self._cache_version = -1

    # ------------------------------------------------------------------ graph
    @property
    def graph(self) -> Any:
        """The networkx ``DiGraph`` (edge attribute ``w``: the weight before node penalties;
        ``ms``: the hierarchy default, ``link``: the measured :class:`Link`, when any)."""
        if self._g is None:
            import networkx as nx

            g = nx.DiGraph()
            for nid in self.node_ids:
                g.add_node(node_vertex(nid))
            for (u, v) in self.tree:
                self._sync_edge(g, u, v)
            for (u, v) in self.links:
                self._sync_edge(g, u, v)
            self._g = g
        return self._g

    def _edge_weight(self, u: str, v: str) -> tuple[Optional[float], Optional[float], Optional[Link]]:
        """(effective weight or None = no edge, hierarchy ms, link)."""
        t = self.tree.get((u, v))
        ln = self.links.get((u, v))
        ms = t[0] if t is not None else None
        if ln is not None:
            if not ln.up:
                return None, ms, ln
            return ln.latency_ms * (1.0 + self.weights.loss_factor * ln.loss_pct / 100.0), ms, ln
        return ms, ms, None

    def _sync_edge(self, g: Any, u: str, v: str) -> None:
        w, ms, ln = self._edge_weight(u, v)
        if w is None:
            if g.has_edge(u, v):
                g.remove_edge(u, v)
            return
        g.add_edge(u, v, w=w, ms=ms, link=ln)

    def _changed(self, *edges: tuple[str, str]) -> None:
        self.version += 1
        if self._g is not None:
            for u, v in edges:
                self._sync_edge(self._g, u, v)

    def _tree_ref(self, u: str, v: str, ms: float, delta: int) -> None:
        t = self.tree.get((u, v))
        if t is None:
            if delta < 0:
                return
            self.tree[(u, v)] = [ms, delta]
        else:
            t[1] += delta
            if t[1] <= 0:
                del self.tree[(u, v)]

    def _chain_edges(self, chain: list[tuple[int, str]]) -> list[tuple[str, str, float]]:
        steps = self.weights.steps
        ups = chain + [(len(LEVELS), BACKBONE)]
        out = []
        for (li, a), (lj, b) in zip(ups, ups[1:]):
            ms = float(sum(steps[li:lj]))
            out.append((a, b, ms))
            out.append((b, a, ms))
        return out

    def _link_chain(self, node_id: str, chain: list[tuple[int, str]], delta: int) -> list[tuple[str, str]]:
        edges = self._chain_edges(chain)
        for a, b, ms in edges:
            self._tree_ref(a, b, ms, delta)
        return [(a, b) for a, b, _ in edges]

    # ----------------------------------------------------------------- events
    def add_node(self, node: "Node", row: Optional[int] = None) -> None:
        """A node registered (row: its row in the state; default the next one)."""
        nid = node.node_id
        if nid in self.chains:
            self.update_node(node)
            return
        row = len(self.node_ids) if row is None else row
        if row != len(self.node_ids):
            raise ValueError(f"topology: node {nid} added at row {row}, expected {len(self.node_ids)}")
        self.node_ids.append(nid)
        self.rows[node_vertex(nid)] = row
        chain = chain_of(node)
        self.chains[nid] = chain
        edges = self._link_chain(nid, chain, +1)
        if self._g is not None:
            self._g.add_node(node_vertex(nid))
        self._changed(*edges)

    def update_node(self, node: "Node") -> None:
        """A re-registration: the node's place in the hierarchy may have moved."""
        nid = node.node_id
        old = self.chains.get(nid)
        if old is None:
            self.add_node(node)
            return
        new = chain_of(node)
        if new == old:
            return
        gone = self._link_chain(nid, old, -1)
        self.chains[nid] = new
        added = self._link_chain(nid, new, +1)
        self._changed(*gone, *added)
        if self._g is not None:
            self._drop_isolated()

    def _drop_isolated(self) -> None:
        g = self._g
        lone = [v for v in g.nodes if g.degree(v) == 0 and v not in self.rows]
        g.remove_nodes_from(lone)

    def observe_link(self, e: "LinkMetrics") -> bool:
        """Fold a LinkMetrics sample: the weight of the directed edge src -> dst. Returns
        whether anything changed (an older sample than the one held changes nothing)."""
        prefix = "site:" if e.scope == "SITE" else "node:"
        u, v = prefix + e.src, prefix + e.dst
        old = self.links.get((u, v))
        if old is not None and e.at < old.at:
            return False
        ln = Link(u, v, float(e.latency_ms), float(e.bandwidth_mbps), float(e.loss_pct), int(e.at))
        if ln == old:
            return False
        self.links[(u, v)] = ln
        self._changed((u, v))
        return True

    # --------------------------------------------------------------- snapshot
    def to_snapshot(self) -> dict[str, Any]:
        """The measured links (the hierarchy comes back with the nodes)."""
        return {"links": [ln.to_json() for _, ln in sorted(self.links.items())]}

    def restore(self, snap: Optional[Mapping[str, Any]]) -> None:
        for d in (snap or {}).get("links", ()):
            ln = Link.from_json(d)
            self.links[(ln.src, ln.dst)] = ln
            self._changed((ln.src, ln.dst))

    # ---------------------------------------------------------------- queries
    def vertices(self) -> frozenset[str]:
        """Every vertex of the graph (cached per version)."""
        hit = self._cached("vertices")
        if hit is not None:
            return hit
        out = set(self.rows) | {BACKBONE}
        for u, v in self.tree:
            out.add(u)
            out.add(v)
        for u, v in self.links:
            out.add(u)
            out.add(v)
        return self._store("vertices", frozenset(out))

    def resolve(self, name: str) -> str:
        """The vertex a name means: a vertex as written (``zone:z1``), else the first of
        ``node:``, ``zone:``, ``site:``, ``region:`` that exists, else the one rack whose
        label is ``name``. Raises :class:`UnknownVertex`."""
        key = ("resolve", name)
        hit = self._cached(key)
        if hit is not None:
            return hit
        known = self.vertices()
        if name in known:
            return self._store(key, name)
        for prefix in ("node:", "zone:", "site:", "region:"):
            if prefix + name in known:
                return self._store(key, prefix + name)
        label = name.split(":", 1)[1] if name.startswith("rack:") else name
        racks = sorted(v for v in known if v.startswith("rack:") and v.rsplit("/", 1)[-1] == label)
        if len(racks) == 1:
            return self._store(key, racks[0])
        if len(racks) > 1:
            raise UnknownVertex(f"{name!r} names {len(racks)} racks ({', '.join(racks[:4])}): write rack:<zone>/<rack>")
        raise UnknownVertex(f"{name!r} is no site, region, zone, rack or node of the topology")

    def _cached(self, key: Any) -> Any:
        if self._cache_version != self.version:
            self._cache.clear()
            self._cache_version = self.version
        return self._cache.get(key)

    @property
    def owner(self) -> Optional["CellState"]:
        """The owning state (None: none, or it is gone)."""
        return self._owner() if self._owner is not None else None

    def _store(self, key: Any, value: Any) -> Any:
        if len(self._cache) > 512:
            self._cache.clear()
        self._cache[key] = value
        return value

    def penalties(self) -> dict[str, float]:
        """Extra ms on every edge into or out of a node in a bad condition or SUSPECT
        (``inf``: cut off, DOWN), read from the owning state's rows."""
        s = self.owner
        if s is None or s.n_nodes == 0:
            return {}
        w = self.weights
        out: dict[str, float] = {}
        bad = np.flatnonzero(~s.condition_ok[: len(self.node_ids)])
        for r in bad.tolist():
            c = s.condition[r]
            out[node_vertex(s.node_ids[r])] = float(w.condition_ms.get(c, w.other_condition_ms))
        health, status = s.health, s.node_status
        for r in range(min(len(health), len(self.node_ids))):
            h = health[r]
            if h == "READY" and status[r] != "DOWN":
                continue
            v = node_vertex(s.node_ids[r])
            if h == "DOWN" or status[r] == "DOWN":
                out[v] = INF
            elif h == "SUSPECT":
                out[v] = out.get(v, 0.0) + w.suspect_ms
        return out

    def _weight(self, pen: Mapping[str, float]) -> Any:
        if not pen:
            return "w"

        def weight(u: str, v: str, d: Mapping[str, Any]) -> Optional[float]:
            x = pen.get(u, 0.0) + pen.get(v, 0.0)
            if x == INF:
                return None
            return d["w"] + x
        return weight

    def _pen_key(self) -> tuple[dict[str, float], tuple]:
        pen = self.penalties()
        return pen, tuple(sorted(pen.items()))

    def edge_cost(self, u: str, v: str) -> Optional[float]:
        """What the directed edge ``u -> v`` costs a query now (node penalties included;
        ``inf`` when an end is cut off); None when there is no such edge (or its link is down)."""
        w = self._edge_weight(u, v)[0]
        if w is None:
            return None
        pen = self.penalties()
        return w + pen.get(u, 0.0) + pen.get(v, 0.0)

    def path(self, a: str, b: str) -> tuple[float, list[str]]:
        """The cheapest directed path from ``a`` to ``b`` (names as :meth:`resolve` takes
        them): ``(cost_ms, [vertex, ...])``; ``(inf, [])`` when ``b`` cannot be reached."""
        import networkx as nx

        u, v = self.resolve(a), self.resolve(b)
        pen, pkey = self._pen_key()
        key = ("path", u, v, pkey)
        hit = self._cached(key)
        if hit is not None:
            return hit[0], list(hit[1])
        g = self.graph
        if u == v:
            res: tuple[float, list[str]] = (0.0, [u]) if pen.get(u, 0.0) != INF else (INF, [])
        else:
            try:
                cost, hops = nx.bidirectional_dijkstra(g, u, v, weight=self._weight(pen))
                res = (float(cost), list(hops))
            except (nx.NetworkXNoPath, nx.NodeNotFound):
                res = (INF, [])
        self._store(key, (res[0], tuple(res[1])))
        return res

    def distances(self, source: str) -> np.ndarray:
        """Cost (ms) from ``source`` to every node, row-aligned; ``inf`` where unreachable.
        Cached per graph version and node penalties. Do not mutate the array."""
        import networkx as nx

        u = self.resolve(source)
        pen, pkey = self._pen_key()
        key = ("dist", u, pkey)
        hit = self._cached(key)
        if hit is not None:
            return hit
        d = np.full(len(self.node_ids), INF)
        if pen.get(u, 0.0) != INF:
            lens = nx.single_source_dijkstra_path_length(self.graph, u, weight=self._weight(pen))
            rows = self.rows
            for vtx, cost in lens.items():
                r = rows.get(vtx)
                if r is not None:
                    d[r] = cost
        d.setflags(write=False)
        return self._store(key, d)

    def distance_from(self, source: str) -> dict[int, float]:
        """``{row: cost_ms}`` for every node reachable from ``source`` (cached)."""
        d = self.distances(source)
        return {int(r): float(d[r]) for r in np.flatnonzero(np.isfinite(d)).tolist()}

    def domain_of(self, node_id: str, level: str) -> Optional[str]:
        """The vertex of the node's ``level`` (``rack``, ``zone``, ``region``, ``site``;
        ``node`` gives the node itself), None when the node names no such level."""
        li = LEVELS.index(level)
        for lj, vtx in self.chains[node_id]:
            if lj == li:
                return vtx
        return None

    def domain_index(self, level: str) -> tuple[list[str], np.ndarray]:
        """``(names, idx)``: the distinct ``level`` domains (sorted) and, per row, the index
        of the row's domain in ``names`` (-1: the node names no such level). Cached."""
        key = ("domains", level)
        hit = self._cached(key)
        if hit is not None:
            return hit
        li = LEVELS.index(level)
        per_row = []
        for nid in self.node_ids:
            per_row.append(next((vtx for lj, vtx in self.chains[nid] if lj == li), None))
        names = sorted({v for v in per_row if v is not None})
        pos = {n: i for i, n in enumerate(names)}
        idx = np.array([pos[v] if v is not None else -1 for v in per_row], dtype=np.int64)
        idx.setflags(write=False)
        return self._store(key, (names, idx))

    def members(self, vertex: str) -> list[int]:
        """Rows of the nodes under a domain vertex (itself for a node vertex), row order."""
        if vertex in self.rows:
            return [self.rows[vertex]]
        return [self.rows[node_vertex(nid)] for nid in self.node_ids
                if any(vtx == vertex for _, vtx in self.chains[nid])]

    def edges(self, vertices: Optional[Iterable[str]] = None) -> list[dict[str, Any]]:
        """The directed edges touching ``vertices`` (all when None), sorted, as dicts:
        ``src, dst, weight_ms`` (before node penalties; None = link down), ``default_ms``
        and the measured ``link`` sample when any."""
        keep = None if vertices is None else set(vertices)
        out = []
        for key in sorted(set(self.tree) | set(self.links)):
            u, v = key
            if keep is not None and u not in keep and v not in keep:
                continue
            w, ms, ln = self._edge_weight(u, v)
            out.append({"src": u, "dst": v, "weight_ms": w, "default_ms": ms,
                        "link": None if ln is None else {"latency_ms": ln.latency_ms,
                                                         "bandwidth_mbps": ln.bandwidth_mbps,
                                                         "loss_pct": ln.loss_pct, "at": ln.at}})
        return out
