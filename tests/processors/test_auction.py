"""The clearing (auction.py): exact feasibility, critical prices, and truthful bidding."""
from __future__ import annotations

import random
from dataclasses import replace

from suanli.processors import auction
from suanli.processors.reservation_args import ReservationArgs

H = 3_600_000
ARGS = ReservationArgs(slot_ms=1)


def nodes(n=2, gpus=4):
    return [auction.NodeCap(f"n{i}", gpus, "T4", 16384, 64000, 262144) for i in range(n)]


def bid(i, gpus, price, start=0, latest=None, dur=H, gang=True):
    return auction.Bid(f"b{i}", "t", gpus, (), 0, 0, 0, start, start if latest is None else latest, dur, price, i,
                       gang)


def outcome(bids, n=2, gpus=4, args=ARGS):
    return {o.bid_id: o for o in auction.clear(auction.Plan(nodes(n, gpus)), bids, 0, args)}


def utility(o, value, b):
    return (value - o.price) * b.gpus * b.duration_ms / H if isinstance(o, auction.Grant) else 0.0


def random_case(rng):
    k = rng.randint(2, 6)
    return [bid(i, rng.choice([1, 2, 3, 4]), round(rng.uniform(0.5, 5.0), 2), start=rng.choice([0, H]),
                dur=rng.choice([H, 2 * H])) for i in range(k)]


def test_bidding_the_true_value_is_never_worse_than_shading_or_overbidding():
    """For all-or-nothing bids: any misreport, shaded or inflated, never beats the truth."""
    rng = random.Random(7)
    checked = 0
    for _ in range(150):
        bids = random_case(rng)
        truth = outcome(bids)
        for i, b in enumerate(bids):
            u_true = utility(truth[b.bid_id], b.price, b)
            for factor in (0.0, 0.25, 0.5, 0.8, 0.95, 1.05, 1.25, 2.0, 4.0):
                lie = bids[:i] + [replace(b, price=round(b.price * factor, 4))] + bids[i + 1:]
                u_lie = utility(outcome(lie)[b.bid_id], b.price, b)
                assert u_true >= u_lie - 1e-9, (bids, b, factor, u_true, u_lie)
                checked += 1
    assert checked > 1000


def test_the_critical_price_is_the_threshold_between_winning_and_losing():
    rng = random.Random(3)
    seen = 0
    for _ in range(100):
        bids = random_case(rng)
        res = outcome(bids)
        for i, b in enumerate(bids):
            o = res[b.bid_id]
            if not isinstance(o, auction.Grant) or o.price <= 0:
                continue
            below = bids[:i] + [replace(b, price=o.price - 0.01)] + bids[i + 1:]
            above = bids[:i] + [replace(b, price=o.price + 0.01)] + bids[i + 1:]
            assert isinstance(outcome(above)[b.bid_id], auction.Grant)
            assert isinstance(outcome(below)[b.bid_id], auction.Loss)
            seen += 1
    assert seen > 20


def test_winners_never_pay_more_than_they_bid_and_losers_needed_more_than_they_bid():
    rng = random.Random(11)
    for _ in range(100):
        bids = random_case(rng)
        for o in outcome(bids).values():
            b = next(x for x in bids if x.bid_id == o.bid_id)
            if isinstance(o, auction.Grant):
                assert 0 <= o.price <= b.price
            elif o.needed_price is not None:
                assert o.needed_price >= b.price


def test_grants_never_overlap_on_a_device_and_stay_in_their_start_range():
    rng = random.Random(5)
    for _ in range(100):
        bids = [bid(i, rng.choice([1, 2, 4]), rng.uniform(1, 3), start=rng.choice([0, H, 2 * H]),
                    latest=None, dur=rng.choice([H, 3 * H])) for i in range(8)]
        bids = [replace(b, latest=b.earliest + rng.choice([0, H, 2 * H])) for b in bids]
        windows: dict[tuple[str, int], list[tuple[int, int]]] = {}
        for o in outcome(bids).values():
            if isinstance(o, auction.Grant):
                b = next(x for x in bids if x.bid_id == o.bid_id)
                assert b.earliest <= o.start <= b.latest and o.end == o.start + b.duration_ms
                assert len(o.devices) == b.gpus
                for d in o.devices:
                    for s, e in windows.get((o.node_id, d), []):
                        assert o.end <= s or o.start >= e
                    windows.setdefault((o.node_id, d), []).append((o.start, o.end))


def test_fcfs_serves_in_arrival_order_at_the_bid_price():
    bids = [bid(0, 4, 1.0), bid(1, 4, 9.0), bid(2, 4, 5.0)]
    res = outcome(bids, n=2, args=replace(ARGS, mechanism="fcfs"))
    assert isinstance(res["b0"], auction.Grant) and res["b0"].price == 1.0
    assert isinstance(res["b1"], auction.Grant) and isinstance(res["b2"], auction.Loss)


def test_a_non_gang_bid_may_be_granted_fewer_gpus():
    res = outcome([bid(0, 3, 5.0), bid(1, 3, 1.0, gang=False)], n=1, gpus=4)
    assert len(res["b1"].devices) == 1


def test_frag_packing_prefers_the_node_it_fills_exactly():
    plan = auction.Plan(nodes(2, 4))
    plan.add(1, (0, 1), 0, 10 * H)          # n1 has two GPUs left
    [g] = auction.clear(plan, [bid(0, 2, 1.0)], 0, ARGS)
    assert g.node_id == "n1"
    plan = auction.Plan(nodes(2, 4))
    plan.add(1, (0, 1), 0, 10 * H)
    [g] = auction.clear(plan, [bid(0, 2, 1.0)], 0, replace(ARGS, packing="first_fit"))
    assert g.node_id == "n0"


def test_fast_critical_prices_equal_the_definition():
    """The prices ``clear`` computes from its prefix plans equal the plain definition
    (``critical_price``: re-run the greedy without the bid, ranked at every position)."""
    rng = random.Random(21)
    for _ in range(60):
        bids = random_case(rng) + random_case(rng)
        bids = [replace(b, bid_id=f"x{i}", at=i) for i, b in enumerate(bids)]
        order = sorted(bids, key=auction.Bid.rank)
        res = outcome(bids)
        for i, b in enumerate(order):
            want = auction.critical_price(auction.Plan(nodes()), order[:i] + order[i + 1:], b, 0, ARGS)
            o = res[b.bid_id]
            got = o.price if isinstance(o, auction.Grant) else o.needed_price
            assert got == want, (b, o, want)
