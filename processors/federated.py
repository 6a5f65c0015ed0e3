"""Federated training across clouds (issue 22): where a job's aggregator should run, and
what one round of it sends where. Pure functions and frozen dataclasses: no clock, no
I/O, nothing read from a state here (``plugins/federated.py`` feeds them from the cell).

A federated job is one aggregator and N clients, its members labelled
``federated-role=aggregator|client`` and sharing a job id (:func:`job_of`). Each client
is pinned to the site that holds its data partition (``data-site=<site>``). One round:
every client uploads its update to the aggregator (``up`` bytes) and downloads the new
global model (``down`` bytes).

Units, kept in the names: bytes per round; path costs in ms (the topology's weights:
latency, penalised by loss); the *weighted traffic* of a round is ``sum(bytes * path ms)``
in byte·ms (shown as MB·ms, 1 MB = 10**6 bytes). It is a proxy for how long and how
exposed a round's transfers are, not a time: it grows with the bytes and with the
distance they travel.

The byte counts here are a **model** (an estimate from the labels: the update size, the
global model size and the quantisation). The bytes a job really moves will be measured by
its runtime (Flower) later; nothing here claims to be that measurement.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping, Optional, Sequence

import numpy as np

# --------------------------------------------------------------------------- labels
ROLE_LABEL = "federated-role"
AGGREGATOR = "aggregator"
CLIENT = "client"
DATA_SITE_LABEL = "data-site"
HOME_SITE_LABEL = "home-site"
JOB_LABEL = "job"
UP_BYTES_LABEL = "federated-up-bytes"          # float32 update one client uploads per round
DOWN_BYTES_LABEL = "federated-down-bytes"      # global model one client downloads per round
QUANTISATION_LABEL = "federated-quantisation"  # how the updates are encoded: none | float16 | int8
# the labels of a client that rules read once it has finished (its job's later aggregators
# and the elastic policy): all a cell keeps of a client it forgets (``forgotten_clients.ClientView.forgotten``)
CLIENT_LABELS_READ = (ROLE_LABEL, DATA_SITE_LABEL, UP_BYTES_LABEL, DOWN_BYTES_LABEL, QUANTISATION_LABEL)

QUANTISATION_FACTORS: Mapping[str, float] = {"none": 1.0, "float32": 1.0, "float16": 2.0, "int8": 4.0}
"""By how much an encoding divides a float32 update payload: int8 keeps one byte of the
four a float32 takes (scales and zero points, a few bytes per tensor, are ignored: the
estimate is of the payload). Only the *updates* (uploads) are quantised; the global model
sent down stays float32 unless ``quantise_down`` is asked."""

MB = 1_000_000.0


def job_of(task: Any) -> Optional[str]:
    """The job id a task belongs to, None for none. The one place that knows where it is
    kept: the first-class ``Task.job_id`` when the task has one, else the label
    ``job=<id>`` (how jobs were named before the field existed)."""
    jid = getattr(task, "job_id", None)
    if jid:
        return str(jid)
    labels = getattr(task, "labels", None) or {}
    return labels.get(JOB_LABEL) or None


def role_of(task: Any) -> Optional[str]:
    """``aggregator``, ``client`` or None (not a federated task, or an unknown role)."""
    r = (getattr(task, "labels", None) or {}).get(ROLE_LABEL)
    return r if r in (AGGREGATOR, CLIENT) else None


def quantisation_factor(quantisation: str, factors: Mapping[str, float] = QUANTISATION_FACTORS) -> float:
    """The divisor of a float32 update payload under ``quantisation`` (``""`` = none).
    Raises ValueError naming the known encodings for another one."""
    q = quantisation or "none"
    try:
        f = float(factors[q])
    except KeyError:
        raise ValueError(f"unknown quantisation {q!r}; known: {', '.join(sorted(factors))}") from None
    if not f > 0:
        raise ValueError(f"quantisation {q!r}: factor {f} is not > 0")
    return f


# --------------------------------------------------------------------------- one round's bytes
@dataclass(frozen=True, slots=True)
class RoundTrafficEstimate:
    """The bytes of one round, **estimated** from the model sizes (not measured).

    ``links``: directed ``(from_site, to_site) -> bytes`` (a client's own site to the
    aggregator's for uploads, the reverse for downloads; same-site traffic under
    ``(s, s)``). ``pairs``: cross-site traffic per unordered cloud pair ``(a, b)``, ``a < b``,
    both directions summed. ``cross_cloud_bytes`` = the sum of ``pairs``."""
    links: Mapping[tuple[str, str], int]
    pairs: Mapping[tuple[str, str], int]
    total_bytes: int
    cross_cloud_bytes: int
    quantisation: str
    factor: float


def round_traffic(client_sites: Sequence[str], aggregator_site: str, up_bytes: int, down_bytes: int,
                  quantisation: str = "none", quantise_down: bool = False,
                  factors: Mapping[str, float] = QUANTISATION_FACTORS) -> RoundTrafficEstimate:
    """An estimate of one round: each client (one entry of ``client_sites`` per client, its
    site) uploads ``up_bytes`` (a float32 update, divided by the quantisation's factor,
    rounded up to whole bytes) and downloads ``down_bytes`` (float32, divided too only with
    ``quantise_down``). The aggregator is at ``aggregator_site``. Raises ValueError for
    negative sizes or an unknown quantisation."""
    if up_bytes < 0 or down_bytes < 0:
        raise ValueError(f"bytes per round must be >= 0 (up {up_bytes}, down {down_bytes})")
    f = quantisation_factor(quantisation, factors)
    up = math.ceil(up_bytes / f)
    down = math.ceil(down_bytes / f) if quantise_down else int(down_bytes)
    links: dict[tuple[str, str], int] = {}
    pairs: dict[tuple[str, str], int] = {}
    for s in client_sites:
        links[(s, aggregator_site)] = links.get((s, aggregator_site), 0) + up
        links[(aggregator_site, s)] = links.get((aggregator_site, s), 0) + down
        if s != aggregator_site:
            key = (min(s, aggregator_site), max(s, aggregator_site))
            pairs[key] = pairs.get(key, 0) + up + down
    return RoundTrafficEstimate(dict(sorted(links.items())), dict(sorted(pairs.items())),
                                (up + down) * len(client_sites), sum(pairs.values()), quantisation or "none", f)


# --------------------------------------------------------------------------- aggregator placement
@dataclass(frozen=True, slots=True)
class Client:
    """One client as the placement sees it. ``location``: the topology vertex its traffic
    starts from (``node:<id>`` once placed, else ``site:<data-site>``); ``site``: the site
    of its data (the cloud its bytes leave from); bytes per round after quantisation."""
    task_id: str
    site: str
    location: str
    up_bytes: float
    down_bytes: float

    @property
    def round_bytes(self) -> float:
        return self.up_bytes + self.down_bytes


@dataclass(frozen=True, slots=True)
class CandidateCost:
    """What one round costs with the aggregator on one node."""
    node_id: str
    site: Optional[str]
    weighted: float                 # byte·ms per round; inf when a client cannot reach the node
    cross_cloud_bytes: float        # bytes per round whose client site is not the node's site
    pair_bytes: tuple[tuple[tuple[str, str], float], ...]   # ((a, b), bytes), a < b, sorted


@dataclass(frozen=True, slots=True)
class AggregatorCosts:
    """Per candidate node (aligned arrays): total weighted traffic (byte·ms per round,
    ``inf`` where some client cannot reach it) and cross-cloud bytes per round. Cross-cloud
    bytes per cloud pair depend only on the candidate's site: :meth:`pairs`."""
    node_ids: tuple[str, ...]
    sites: tuple[Optional[str], ...]
    weighted: np.ndarray
    cross_cloud: np.ndarray
    clients: tuple[Client, ...]

    def pairs(self, site: Optional[str]) -> tuple[tuple[tuple[str, str], float], ...]:
        """Bytes per round per unordered cloud pair with the aggregator at ``site`` (a node
        without a site crosses from every client's site to ``"?"``)."""
        agg = site or "?"
        out: dict[tuple[str, str], float] = {}
        for c in self.clients:
            if c.site != agg:
                key = (min(c.site, agg), max(c.site, agg))
                out[key] = out.get(key, 0.0) + c.round_bytes
        return tuple(sorted(out.items()))

    def candidate(self, i: int) -> CandidateCost:
        return CandidateCost(self.node_ids[i], self.sites[i], float(self.weighted[i]),
                             float(self.cross_cloud[i]), self.pairs(self.sites[i]))

    def index(self, node_id: str) -> int:
        return self.node_ids.index(node_id)


def aggregator_costs(clients: Sequence[Client], node_ids: Sequence[str], sites: Sequence[Optional[str]],
                     up_ms: Mapping[str, np.ndarray], down_ms: Optional[Mapping[str, np.ndarray]] = None
                     ) -> AggregatorCosts:
    """The cost of one round for every candidate node (``node_ids``, their ``sites``).

    ``up_ms[client.location]``: the path cost (ms) from that client's location to each
    candidate, aligned with ``node_ids`` (``inf`` = unreachable): the upload direction.
    ``down_ms`` the same from each candidate to the location; None = use ``up_ms`` (the
    topology's hierarchy edges are symmetric, only measured links are directed; the
    plugin passes None and so weighs downloads by the upload path).

    weighted[i] = sum over clients of up_bytes * up_ms[i] + down_bytes * down_ms[i];
    cross_cloud[i] = sum of the round bytes of the clients whose site is not sites[i]."""
    n = len(node_ids)
    if len(sites) != n:
        raise ValueError(f"{n} candidate nodes but {len(sites)} sites")
    down_ms = up_ms if down_ms is None else down_ms
    weighted = np.zeros(n, dtype=np.float64)
    cross = np.zeros(n, dtype=np.float64)
    site_arr = np.array([s or "" for s in sites], dtype=object)
    for c in clients:
        for dist, b in ((up_ms[c.location], c.up_bytes), (down_ms[c.location], c.down_bytes)):
            d = np.asarray(dist, dtype=np.float64)
            if d.shape != (n,):
                raise ValueError(f"path costs from {c.location}: {d.shape}, expected ({n},)")
            if b:
                weighted += b * d            # inf stays inf: that node cannot aggregate this client
            else:
                weighted[~np.isfinite(d)] = math.inf
        cross += np.where(site_arr != c.site, c.round_bytes, 0.0)
    weighted.setflags(write=False)
    cross.setflags(write=False)
    return AggregatorCosts(tuple(node_ids), tuple(sites), weighted, cross, tuple(clients))


def best_index(costs: AggregatorCosts, among: Optional[np.ndarray] = None) -> Optional[int]:
    """The candidate with the least weighted traffic (``among``: a boolean mask over the
    candidates), equal ones by the smallest node id, so the answer never depends on the
    candidates' order; None when none is reachable from every client."""
    ok = np.isfinite(costs.weighted)
    if among is not None:
        ok &= among
    idx = np.flatnonzero(ok)
    if idx.size == 0:
        return None
    w = costs.weighted[idx]
    tied = idx[w == w.min()]
    return int(min(tied.tolist(), key=lambda i: costs.node_ids[i]))


@dataclass(frozen=True, slots=True)
class AggregatorChoice:
    """Where the aggregator goes (``chosen``), the best node of the home cloud for
    comparison (``home``: None when the home site has no candidate), and the sentence the
    audit shows."""
    chosen: CandidateCost
    home_site: Optional[str]
    home: Optional[CandidateCost]
    explanation: str


def home_site_of(aggregator_labels: Mapping[str, str], clients: Sequence[Client]) -> Optional[str]:
    """The job's home cloud: the aggregator's ``home-site`` label, else the site of the
    job's first client (``clients`` in arrival order), else None."""
    h = aggregator_labels.get(HOME_SITE_LABEL)
    if h:
        return h
    return clients[0].site if clients else None


def _mb(x: float) -> str:
    return f"{x / MB:.3g}"


def describe(costs: AggregatorCosts, i: int, home_site: Optional[str]) -> AggregatorChoice:
    """The choice of candidate ``i`` (whoever made it) compared with the "always at home"
    policy: the best home-site candidate (:func:`best_index` among them)."""
    c = costs.candidate(i)
    at = f"aggregator on node:{c.node_id} (site {c.site or '?'})"
    n = len(costs.clients)
    if not math.isfinite(c.weighted):
        return AggregatorChoice(c, home_site, None, f"{at}: some of its {n} clients cannot reach it on the topology")
    here = f"{_mb(c.weighted)} MB·ms/round"
    cross = f"cross-cloud {_mb(c.cross_cloud_bytes)} MB/round"
    if home_site is None:
        return AggregatorChoice(c, None, None, f"{at}: {here} over {n} clients; {cross}; no home cloud named")
    if c.site == home_site:
        return AggregatorChoice(c, home_site, c, f"{at}, the home cloud: {here} over {n} clients; {cross}")
    h_i = best_index(costs, np.array([s == home_site for s in costs.sites], dtype=bool))
    if h_i is None:
        return AggregatorChoice(c, home_site, None,
                                f"{at}: {here} over {n} clients; {cross}; no candidate at home {home_site}")
    h = costs.candidate(h_i)
    if h.weighted > 0:
        pct = f" ({(c.weighted - h.weighted) / h.weighted * 100:+.0f} %)"
    else:
        pct = ""
    text = (f"{at}: {here} vs {_mb(h.weighted)} at home {home_site} on node:{h.node_id}{pct} over {n} clients; "
            f"{cross} vs {_mb(h.cross_cloud_bytes)} MB")
    return AggregatorChoice(c, home_site, h, text)


def choose_aggregator(costs: AggregatorCosts, home_site: Optional[str] = None) -> Optional[AggregatorChoice]:
    """The candidate with the least weighted traffic per round (ties: smallest node id),
    explained against the home cloud's best; None when no candidate reaches every client."""
    i = best_index(costs)
    return None if i is None else describe(costs, i, home_site)
