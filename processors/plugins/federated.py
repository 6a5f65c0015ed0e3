"""Federated training across clouds (issue 22): keep clients at their data, put the
aggregator where a round's traffic is cheapest (``processors/federated.py`` holds the model).

``DataSite`` (pre_filter and filter)
    A task labelled ``data-site=<s>`` may run only on nodes whose site is ``s`` (the node's
    registered ``site``): a federated client is pinned to the site holding its data
    partition. Filter reason ``data of this task is at site s``. UNRESOLVABLE at pre_filter
    when no registered node of the cell (whatever its status or load) is at ``s``, as
    ``Capacity`` reports a task no node could ever host (an empty cell: OK, it may still
    get nodes). Without the label: no mask, no trace.

    Note: ``TopologyNear`` reads the same label as a *soft* place (a site, zone, rack or node
    name: the nearest feasible nodes). ``DataSite`` is the hard reading; it is not in
    ``default`` for that reason (see ``strategies/federated.py``).

``AggregatorTraffic`` (scorer, normalised 0..100; permit)
    For a task labelled ``federated-role=aggregator`` with a job id (:func:`~..federated.job_of`):
    minus the weighted traffic of one round (byte·ms: the bytes each client sends and
    receives times the topology path cost between it and the node) over the job's client
    tasks. A client's location is its node once it holds one, else its ``data-site``
    (``site:<s>``); distances are ``state.topology.distances`` (hierarchy defaults,
    measured ``LinkMetrics``, node penalties), from the client, used for both directions. A
    node a client cannot reach counts ``unreachable_ms``. Bytes per round: labels
    ``federated-up-bytes`` / ``federated-down-bytes`` (a client's own, else the
    aggregator's, else the arguments' defaults) and ``federated-quantisation``
    (``federated.QUANTISATION_FACTORS``: int8 divides the float32 update by 4).

    At permit it writes the choice for the node the cycle chose, compared with the best node
    of the home cloud (``home-site`` label, else the first client's site), into the
    decision's path (the core inserts ``ctx.scratch["batch_note"]`` before ``bind``): e.g.
    ``federated job j1: aggregator on node:b-1 (site cloud-b): 1.9 MB·ms/round vs 3.4 at
    home cloud-a on node:a-1 (-44 %) over 3 clients; cross-cloud 2 MB/round vs 3 MB``.
    Every other task: zeros (normalised to 0) and no permit note.

A job's clients, in arrival order, come from ``CellState.job_clients``: those the cell
remembers from its ``federated-job`` group index, which every arrival keeps up, and those it
forgot from what it kept of them (``forgotten_clients.ClientView.forgotten``: their data site and byte labels).
Scoring an aggregator costs its job's size, not the cell's history.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Optional

import numpy as np

from ..args import arg
from ..federated import (AGGREGATOR, DATA_SITE_LABEL, DOWN_BYTES_LABEL, QUANTISATION_FACTORS,
                         QUANTISATION_LABEL, UP_BYTES_LABEL, AggregatorCosts, Client, aggregator_costs,
                         describe, home_site_of, job_of, role_of)
from ..framework import OK, REGISTRY, Code, CycleContext, Plan, Plugin, Status
from ..state import HOLDING, CellState
from ..topology import node_vertex

SITE = "site:"


# --------------------------------------------------------------------------- job index
def job_members(state: CellState, job: str) -> tuple[str, ...]:
    """Ids of the tasks of ``job`` (``federated.job_of``), in arrival order: the state's
    ``federated-job`` group index, kept by every arrival, so no walk of the cell's tasks."""
    return tuple(state.group("federated-job", job))


def _has_topology(state: CellState) -> bool:
    """Whether the state's topology covers its rows: a gang planner's scratch cell
    (``plugins/topology.py`` ``substate``) holds rows but an empty topology."""
    return len(state.topology.node_ids) == state.n_nodes


def site_of_row(state: CellState) -> tuple[list[str], np.ndarray]:
    """``(site vertices, per-row index into them or -1)``: the topology's site domains
    (cached per topology version, so a re-registration that moves a node is seen); from
    the registered nodes in a scratch cell without a topology."""
    if _has_topology(state):
        return state.topology.domain_index("site")

    def build() -> tuple[list[str], np.ndarray]:
        per_row = [SITE + state.nodes[nid].site if state.nodes[nid].site else None for nid in state.node_ids]
        names = sorted({v for v in per_row if v is not None})
        pos = {v: i for i, v in enumerate(names)}
        return names, np.array([pos[v] if v is not None else -1 for v in per_row], dtype=np.int64)
    return state.derived(("federated-sites", state.n_nodes), build)


# --------------------------------------------------------------------------- DataSite
@dataclass(frozen=True, slots=True)
class DataSiteArgs:
    label: str = arg(DATA_SITE_LABEL, "the task label naming the site that holds the task's data", nonempty=True)


@REGISTRY.register
class DataSite(Plugin):
    """Only nodes at the site a task's ``data-site`` label names (module docstring)."""
    name = "DataSite"
    Args = DataSiteArgs
    args: DataSiteArgs

    def site(self, ctx: CycleContext) -> Optional[str]:
        return ctx.labels.get(self.args.label) or None

    def pre_filter(self, ctx: CycleContext) -> Status:
        s = self.site(ctx)
        if s is None or ctx.state.n_nodes == 0:
            return OK
        names, _ = site_of_row(ctx.state)
        if SITE + s in names:
            return OK
        return Status(Code.UNRESOLVABLE, f"no node of this cell is at site {s} (data of this task is there)",
                      self.name)

    def filter(self, ctx: CycleContext) -> Optional[tuple[np.ndarray, str]]:
        s = self.site(ctx)
        if s is None:
            return None
        names, idx = site_of_row(ctx.state)
        v = SITE + s
        mask = idx == names.index(v) if v in names else np.zeros(ctx.state.n_nodes, dtype=bool)
        return mask, f"data of this task is at site {s}"


# --------------------------------------------------------------------------- AggregatorTraffic
@dataclass(frozen=True, slots=True)
class AggregatorTrafficArgs:
    up_bytes: int = arg(1_000_000, "float32 update a client uploads per round, bytes, when neither it nor "
                        "the aggregator carries federated-up-bytes", ge=0)
    down_bytes: int = arg(1_000_000, "global model a client downloads per round, bytes, when neither it nor "
                          "the aggregator carries federated-down-bytes", ge=0)
    quantise_down: bool = arg(False, "also divide the downloaded model by the quantisation's factor")
    unreachable_ms: float = arg(1000.0, "path cost of a node a client cannot reach, ms", ge=0)
    explain: bool = arg(True, "write the choice, against the home cloud, into the decision's path")


def _bytes(labels: Mapping[str, str], fallback: Mapping[str, str], key: str, default: int) -> tuple[int, bool]:
    """A byte count from the first of ``labels``, ``fallback`` carrying ``key`` (a
    non-negative integer; anything else is ignored), else ``default``. Second: whether it
    came from a label."""
    for lab in (labels, fallback):
        v = lab.get(key)
        if v is not None and v.strip().isdigit():
            return int(v), True
    return default, False


@dataclass(frozen=True, slots=True)
class _Round:
    """What one cycle of an aggregator learned (kept in ``ctx.scratch`` for permit)."""
    job: str
    home: Optional[str]
    rows: np.ndarray
    costs: AggregatorCosts
    notes: tuple[str, ...]


@REGISTRY.register
class AggregatorTraffic(Plugin):
    """Minus a round's weighted traffic to the job's clients (module docstring)."""
    name = "AggregatorTraffic"
    normalize = True
    Args = AggregatorTrafficArgs
    args: AggregatorTrafficArgs

    KEY = "federated-aggregator"

    def clients(self, ctx: CycleContext) -> Optional[tuple[str, list[Client], list[str]]]:
        """``(job, clients in arrival order, notes)`` for an aggregator task, else None."""
        rec = ctx.task
        if rec is None or role_of(rec.task) != AGGREGATOR:
            return None
        job = job_of(rec.task)
        if job is None:
            return None
        s, a = ctx.state, self.args
        alab = rec.task.labels
        known = s.topology.vertices()
        out: list[Client] = []
        notes: list[str] = []
        unsized = 0
        for client in s.job_clients(job):
            tid = client.task_id
            if tid == ctx.task_id:
                continue
            lab = client.labels
            site = lab.get(DATA_SITE_LABEL)
            node = client.node if client.status in HOLDING and client.node in s.node_index else None
            if node is not None:
                loc = node_vertex(node)
                site = site or (s.topology.domain_of(node, "site") or SITE + "?")[len(SITE):]
            elif site and SITE + site in known:
                loc = SITE + site
            else:
                notes.append(f"client {tid} has no node and no known data-site: left out")
                continue
            up, u_lab = _bytes(lab, alab, UP_BYTES_LABEL, a.up_bytes)
            down, d_lab = _bytes(lab, alab, DOWN_BYTES_LABEL, a.down_bytes)
            unsized += not (u_lab and d_lab)
            q = lab.get(QUANTISATION_LABEL) or alab.get(QUANTISATION_LABEL) or "none"
            f = QUANTISATION_FACTORS.get(q)
            if f is None:
                notes.append(f"client {tid}: unknown quantisation {q!r}, counted unquantised")
                f = 1.0
            out.append(Client(tid, site, loc, up / f, down / f if a.quantise_down else float(down)))
        if unsized:
            notes.append(f"{unsized} clients without federated-up/down-bytes labels: "
                         f"{a.up_bytes} B up, {a.down_bytes} B down assumed")
        return job, out, notes

    def _round(self, ctx: CycleContext, rows: np.ndarray) -> Optional[_Round]:
        if not _has_topology(ctx.state):
            return None                  # a scratch cell: no paths to weigh (the packing decides)
        found = self.clients(ctx)
        if found is None:
            return None
        job, clients, notes = found
        s = ctx.state
        dist: dict[str, np.ndarray] = {}
        for c in clients:
            if c.location not in dist:
                d = s.topology.distances(c.location)[rows]
                dist[c.location] = np.where(np.isfinite(d), d, self.args.unreachable_ms)
        names, idx = site_of_row(s)
        sites = [names[i][len(SITE):] if i >= 0 else None for i in idx[rows].tolist()]
        costs = aggregator_costs(clients, [s.node_ids[r] for r in rows.tolist()], sites, dist)
        rec = ctx.task
        home = home_site_of(rec.task.labels if rec is not None else {}, clients)
        return _Round(job, home, rows, costs, tuple(notes))

    def score(self, ctx: CycleContext, rows: np.ndarray) -> np.ndarray:
        r = self._round(ctx, rows)
        if r is None:
            return np.zeros(rows.size)
        ctx.scratch[self.KEY] = r
        return -r.costs.weighted

    def permit(self, ctx: CycleContext, plan: Plan) -> Status:
        """Never vetoes: writes the explanation of the chosen node into the path."""
        if not self.args.explain:
            return OK
        r: Optional[_Round] = ctx.scratch.get(self.KEY)
        if r is None:
            return OK
        hit = np.flatnonzero(r.rows == plan.row)
        if not r.costs.clients:
            text = f"federated job {r.job}: no clients known yet, placed by the other scores"
        elif hit.size == 0:
            return OK
        else:
            text = f"federated job {r.job}: {describe(r.costs, int(hit[0]), r.home).explanation}"
        if r.notes:
            text += " (" + "; ".join(r.notes) + ")"
        prev = ctx.scratch.get("batch_note")
        ctx.scratch["batch_note"] = f"{prev}; {text}" if prev else text
        return OK
