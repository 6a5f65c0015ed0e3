"""How long one auction clearing takes (``processors/auction.py``), by the number of bids.

    python -m suanli.bench.auction_clearing [--nodes 121] [--bids 16,32,64,100] [--seed 1]

A synthetic cell of ``--nodes`` nodes of 2, 4 or 8 GPUs and, for each count, that many
all-or-nothing bids (1, 2, 4 or 8 GPUs, windows opening in 30-90 s with up to 60 s of slack,
60 s long, prices 1-5), cleared on an empty plan: the greedy allocation plus every winner's
and loser's critical price. Prints the seconds per clearing and how many bids won. The
figure that matters is the ratio between counts (the machine is noisy): critical prices cost
O(n^2) placements, which is why ``reservations.max_bids`` defaults to 64.
"""
from __future__ import annotations

import argparse
import random
import time


def run(nodes: int, counts: list[int], seed: int) -> list[dict]:
    from suanli.processors import auction
    from suanli.processors.reservation_args import ReservationArgs

    rng = random.Random(seed)
    caps = [auction.NodeCap(f"n{i}", rng.choice([2, 4, 8]), "V100", 16384, 96000, 393216) for i in range(nodes)]
    bids = [auction.Bid(f"b{i}", "t", rng.choice([1, 2, 4, 8]), (), 0, 1000, 1024,
                        30_000 + rng.randint(0, 60_000), 30_000 + rng.randint(60_000, 90_000), 60_000,
                        round(rng.uniform(1, 5), 2), i, True) for i in range(max(counts))]
    out = []
    for n in counts:
        t = time.perf_counter()
        res = auction.clear(auction.Plan(caps), bids[:n], 0, ReservationArgs())
        out.append({"bids": n, "seconds": round(time.perf_counter() - t, 3),
                    "granted": sum(isinstance(o, auction.Grant) for o in res)})
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m suanli.bench.auction_clearing", description=__doc__.split("\n")[0])
    ap.add_argument("--nodes", type=int, default=121)
    ap.add_argument("--bids", default="16,32,64,100", help="comma-separated bid counts")
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args(argv)
    rows = run(a.nodes, [int(x) for x in a.bids.split(",")], a.seed)
    base = rows[0]["seconds"] or 1e-9
    print(f"{'bids':>6} {'seconds':>9} {'x first':>8} {'granted':>8}")
    for r in rows:
        print(f"{r['bids']:>6} {r['seconds']:>9.3f} {r['seconds'] / base:>8.1f} {r['granted']:>8}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
