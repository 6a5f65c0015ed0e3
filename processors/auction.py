"""Clearing advance-reservation bids (C4): a pure function of the bids and a capacity plan.

**Mechanism** (``ReservationArgs.mechanism``):

- ``auction`` (default): a sealed-bid auction with *critical-value* payments. Bids are
  ranked by their price per GPU-hour (then by arrival, then id) and served greedily in
  that order: each gets the earliest start in its ``[start_at, latest_start_at]`` range at
  which some node has its GPUs free for the whole window. A winner pays its *critical
  price*: the lowest price at which it would still have won against the same other bids
  (the price of the first other bid it would have had to outrank), at least the reserve
  price. A loser is told that price (``needed_price``) or, if it would not have won even
  ranked first, "no capacity in window".

  *Why this one.* It is the generalised second price of multi-unit auctions applied to a
  greedy packing, in the manner of Lehmann, O'Callaghan and Shoham (JACM 2002): the greedy
  allocation is **monotone** (raising one's bid only moves one earlier in the order, where
  fewer tokens have been placed before one, and the feasibility test is exact, so a
  winner stays a winner) and each winner pays its critical value, so for all-or-nothing
  (``gang``) bidders whose wanted capacity is known, **bidding one's true value is a
  dominant strategy** (``tests/processors/test_auction.py`` checks it). It needs no
  solver, clears hundreds of bids in milliseconds, and its prices explain themselves
  ("you needed 2.40"). A uniform price would not be truthful with unequal sizes, and
  Themis' partial allocation needs a finish-time-fairness model we do not have.
  *Not truthful:* a non-gang bid may be granted fewer GPUs (partial); its bidder could
  gain by misreporting its size. Sizes are taken as declared.
- ``fcfs``: bids in arrival order, each granted if it fits, at its own price. The
  baseline of the reservations experiment (Slurm-style reservations have no prices).

**Capacity plan.** Each GPU device of each node carries the windows of the tokens already
on it (``busy``). A window ``[start, end)`` occupies its device until ``end`` rounded up to
``slot_ms`` (the time grid). Candidate starts are the bid's earliest start and the ends of
windows on fitting nodes within its start range (where capacity appears). Work running now
outside the plan (``busy_now``) keeps its GPUs until its expected end — placed time plus
its ``duration_estimate_ms`` — or, with no estimate, for ever: a token is never promised
GPUs that a gold or silver task may still hold when the window opens. Bronze work does not
count: it is lent the GPUs and preempted at the claim.

**Packing** (``packing``): among the nodes that fit at the earliest start, ``frag`` takes
the node whose chosen GPUs are least busy now, then the one left with the fewest free GPUs
in the window (best fit: full nodes stay full and whole nodes stay whole, FGD's reasoning
on future windows), then node order; ``first_fit`` takes the first node in node order.
Devices: the lowest-numbered free ones, those free now first.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from .reservation_args import ReservationArgs


@dataclass(frozen=True, slots=True)
class Bid:
    """One bid, normalised. ``price`` is per GPU-hour; ``models`` empty = any model."""
    bid_id: str
    tenant: str
    gpus: int
    models: tuple[str, ...]
    gpu_memory_mib: int
    cpu: int
    mem: int
    earliest: int
    latest: int
    duration_ms: int
    price: float
    at: int
    gang: bool = True

    def rank(self) -> tuple:
        """Auction order: highest price first, then earlier arrival, then id."""
        return (-self.price, self.at, self.bid_id)


@dataclass(frozen=True, slots=True)
class NodeCap:
    """A node as the plan sees it."""
    node_id: str
    gpus: int
    model: Optional[str]
    gpu_memory_mib: int
    cpu: int
    mem: int
    ready: bool = True


@dataclass(frozen=True, slots=True)
class Grant:
    bid_id: str
    node_id: str
    devices: tuple[int, ...]
    start: int
    end: int
    price: float
    note: str


@dataclass(frozen=True, slots=True)
class Loss:
    bid_id: str
    reason: str
    needed_price: Optional[float]


@dataclass
class Plan:
    """Device windows per node index and device: the capacity plan, extended as bids win.
    ``busy[row][device]`` lists ``(start, end)``; a row without windows is absent (fast path)."""
    nodes: list[NodeCap]
    busy: dict[int, dict[int, list[tuple[int, int]]]] = field(default_factory=dict)
    busy_now: dict[int, dict[int, int]] = field(default_factory=dict)   # row -> {device: busy until ms}
    rows_cache: dict[tuple, list[int]] = field(default_factory=dict)   # shared by copies: nodes do not change

    def copy(self) -> "Plan":
        return Plan(self.nodes, {r: {d: list(w) for d, w in devs.items()} for r, devs in self.busy.items()},
                    self.busy_now, self.rows_cache)

    def rows_for(self, b: "Bid", want: int) -> list[int]:
        key = (b.models, b.gpu_memory_mib, b.cpu, b.mem, want)
        rows = self.rows_cache.get(key)
        if rows is None:
            rows = self.rows_cache[key] = [r for r, n in enumerate(self.nodes) if _fits_node(n, b) and n.gpus >= want]
        return rows

    def add(self, row: int, devices: tuple[int, ...], start: int, end: int) -> None:
        devs = self.busy.setdefault(row, {})
        for d in devices:
            devs.setdefault(d, []).append((start, end))


def _round_up(t: int, slot: int) -> int:
    return -(-t // slot) * slot


def _free_devices(plan: Plan, row: int, start: int, end: int) -> list[int]:
    devs = plan.busy.get(row)
    if not devs:
        return list(range(plan.nodes[row].gpus))
    return [d for d in range(plan.nodes[row].gpus)
            if all(e <= start or s >= end for s, e in devs.get(d, ()))]


def _fits_node(n: NodeCap, b: Bid) -> bool:
    return (n.ready and n.gpus >= 1 and n.cpu >= b.cpu and n.mem >= b.mem
            and (not b.models or n.model in b.models) and n.gpu_memory_mib >= b.gpu_memory_mib)


def _row_start(plan: Plan, r: int, want: int, first: int, latest: int, dur: int, now: int,
               args: ReservationArgs) -> Optional[tuple[int, list[int]]]:
    """The earliest start in ``[first, latest]`` at which row ``r`` has ``want`` GPUs free for
    the whole window, with those GPUs (free now first); None if it never has. Candidate
    starts are ``first`` and the ends of the row's windows (where capacity appears)."""
    devs = plan.busy.get(r)
    cands = [first]
    if devs:
        cands += sorted({e for windows in devs.values() for _, e in windows if first < e <= latest})
    busy_now = plan.busy_now.get(r, {})
    for start in cands:
        until = _round_up(start + dur, args.slot_ms)
        # not on GPUs that work outside the plan holds past the start (unknown end: forever)
        free = [d for d in _free_devices(plan, r, start, until) if busy_now.get(d, 0) <= start]
        if len(free) >= want:
            free.sort(key=lambda d: (d in busy_now, d))
            return start, free
    return None


def place(plan: Plan, b: Bid, now: int, args: ReservationArgs, gpus: Optional[int] = None
          ) -> Optional[tuple[int, tuple[int, ...], int, int, str]]:
    """Where ``b`` (``gpus`` of it, default all) fits in ``plan``: ``(row, devices, start,
    end, note)`` at the earliest start any node offers, or None. Exact: if any node has the
    GPUs free for some start in the bid's range, one is returned."""
    want = b.gpus if gpus is None else gpus
    first = max(b.earliest, now)          # a window never opens in the past
    best = None
    for r in plan.rows_for(b, want):
        hit = _row_start(plan, r, want, first, b.latest, b.duration_ms, now, args)
        if hit is None:
            continue
        start, free = hit
        if args.packing == "first_fit":
            key: tuple = (start, r)
        else:
            busy_now = plan.busy_now.get(r, {})
            key = (start, sum(d in busy_now for d in free[:want]), len(free) - want, r)
        if best is None or key < best[0]:
            best = (key, r, tuple(sorted(free[:want])), len(free) - want)
            if key[:-1] == (first,) or key[:-1] == (first, 0, 0):
                break                      # nothing can do better than this
    if best is None:
        return None
    key, r, chosen, left = best
    start = key[0]
    how = ("first node in order that fits" if args.packing == "first_fit" else
           f"least busy now, then best fit ({left} GPUs left free in the window)")
    return r, chosen, start, start + b.duration_ms, how


def _try(plan: Plan, b: Bid, now: int, args: ReservationArgs):
    """Place ``b`` whole, or — a non-gang bid — as many GPUs as fit (at least one)."""
    hit = place(plan, b, now, args)
    if hit is not None or b.gang:
        return hit
    for g in range(b.gpus - 1, 0, -1):
        hit = place(plan, b, now, args, g)
        if hit is not None:
            return hit
    return None


def _greedy(plan: Plan, bids: list[Bid], now: int, args: ReservationArgs) -> Plan:
    """The plan after serving ``bids`` in order (a copy)."""
    p = plan.copy()
    for b in bids:
        hit = _try(p, b, now, args)
        if hit is not None:
            r, devs, s, e, _ = hit
            p.add(r, devs, s, _round_up(e, args.slot_ms))
    return p


def clear(plan: Plan, bids: list[Bid], now: int, args: ReservationArgs) -> list[Grant | Loss]:
    """Clear ``bids`` against ``plan`` (which is extended by the grants). Outcomes in the
    order bids were served. Deterministic: no clock, no randomness."""
    if args.mechanism == "fcfs":
        order = sorted(bids, key=lambda b: (b.at, b.bid_id))
    else:
        order = sorted(bids, key=Bid.rank)
    out: list[Grant | Loss] = []
    for b in order:
        if b.price < args.reserve_price:
            out.append(Loss(b.bid_id, f"below the reserve price {args.reserve_price:g} per GPU-hour "
                                      f"(it bid {b.price:g})", args.reserve_price))
        elif b.latest < now:
            out.append(Loss(b.bid_id, f"its latest start {b.latest} has passed (cleared at {now})", None))
    order = [b for b in order if b.price >= args.reserve_price and b.latest >= now]
    if args.mechanism == "fcfs":
        for i, b in enumerate(order):
            hit = _try(plan, b, now, args)
            if hit is None:
                out.append(Loss(b.bid_id, "no capacity in window (first come, first served)", None))
                continue
            r, devs, s, e, how = hit
            plan.add(r, devs, s, _round_up(e, args.slot_ms))
            out.append(Grant(b.bid_id, plan.nodes[r].node_id, devs, s, e, b.price,
                             f"first come, first served (#{i + 1}); {how}; pays its bid"))
        return out
    prefix = [plan.copy()]          # prefix[q]: the plan after serving order[:q] (critical prices)
    hits = []
    for b in order:
        hit = _try(plan, b, now, args)
        hits.append(hit)
        if hit is not None:
            r, devs, s, e, _ = hit
            plan.add(r, devs, s, _round_up(e, args.slot_ms))
        prefix.append(plan.copy())
    for i, (b, hit) in enumerate(zip(order, hits)):
        if hit is None:
            needed = _loser_price(prefix, order, i, now, args)
            if needed is None:
                out.append(Loss(b.bid_id, "no capacity in window: no node has the GPUs free for it even if "
                                          "it had bid highest", None))
            else:
                out.append(Loss(b.bid_id, f"outbid: it needed a price above {needed:g} per GPU-hour "
                                          f"(it bid {b.price:g})", needed))
            continue
        r, devs, s, e, how = hit
        price = _winner_price(prefix[i], order, i, now, args)     # <= b.price: it won at its rank
        out.append(Grant(b.bid_id, plan.nodes[r].node_id, devs, s, e, price,
                         f"auction rank {i + 1} of {len(order)} by price; pays its critical price {price:g} "
                         f"(the lowest bid that still wins); {how}"))
    return out


def _loser_price(prefix: list[Plan], order: list[Bid], i: int, now: int, args: ReservationArgs) -> Optional[float]:
    """A loser at rank ``i``: ranked at ``q < i`` it meets the plan ``prefix[q]``; the largest
    ``q`` where it still wins (monotone: binary search) names the bid it must outrank."""
    b = order[i]
    if _try(prefix[0], b, now, args) is None:
        return None
    lo, hi = 0, i                    # wins at lo, loses at hi (its own rank)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if _try(prefix[mid], b, now, args) is not None:
            lo = mid
        else:
            hi = mid
    return max(args.reserve_price, order[lo].price)


def _winner_price(before: Plan, order: list[Bid], i: int, now: int, args: ReservationArgs) -> float:
    """A winner at rank ``i``: the others ranked after it are served, in order, without it,
    from the plan it met (``before``); the first one after which it no longer fits is the bid
    it must outrank (its price is the critical price); if it always fits, the reserve price."""
    b = order[i]
    p = before.copy()
    mine = set(p.rows_for(b, 1))
    for c in order[i + 1:]:
        hit = _try(p, c, now, args)
        if hit is None:
            continue
        r, devs, s, e, _ = hit
        p.add(r, devs, s, _round_up(e, args.slot_ms))
        if r in mine and _try(p, b, now, args) is None:    # only a window on its nodes can stop it
            return max(args.reserve_price, c.price)
    return args.reserve_price


def critical_price(base: Plan, others: list[Bid], b: Bid, now: int, args: ReservationArgs) -> Optional[float]:
    """The lowest price at which ``b`` wins against ``others`` (ranked as the auction ranks
    them) from the plan ``base``: the price of the first other bid it must outrank, the
    reserve price if it wins even ranked last, None if it loses even ranked first.
    Winning is monotone in the rank (see the module docstring), so a binary search over
    the rank finds it."""
    def wins(q: int) -> bool:
        return _try(_greedy(base, others[:q], now, args), b, now, args) is not None

    if not wins(0):
        return None
    if wins(len(others)):
        return args.reserve_price
    lo, hi = 0, len(others)          # wins(lo), not wins(hi)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if wins(mid):
            lo = mid
        else:
            hi = mid
    return max(args.reserve_price, others[lo].price)
