"""Node classes: what refreshing a cell's class ids costs after one decision's change.

``refresh_us(n)`` registers ``n`` eight-GPU nodes, then times, over ``changes`` rounds, one
allocation on a random row followed by ``processors.node_classes.node_classes`` (what FGD
does at every decision), and the allocation alone, and reports the difference per round:
the refresh. It should not grow with ``n``: a decision changes one row.

    python -m suanli.bench.class_refresh --nodes 1213 5000 20000 --json bench/node-classes.json
"""
from __future__ import annotations

import random
import sys
import timeit
from typing import Any

from suanli.bench.per_size import per_size_main
from suanli.processors.node_classes import node_classes
from suanli.processors.state import CellState


def refresh_us(node_count: int, changes: int = 3000) -> dict[str, Any]:
    """Microseconds of one ``node_classes`` refresh after one allocation, on ``node_count`` nodes."""
    s = CellState("bench")
    for i in range(node_count):
        s.add_node(f"n{i}", 64000, 256000, 8, "A10")
    node_classes(s)
    rnd = random.Random(1)
    n = [0]

    def allocate() -> None:
        n[0] += 1
        s.allocate(f"t{n[0]}", s.node_ids[rnd.randrange(node_count)], [], 0, 10, 0)

    def allocate_and_refresh() -> None:
        allocate()
        node_classes(s)
    both = timeit.timeit(allocate_and_refresh, number=changes) / changes
    alone = timeit.timeit(allocate, number=changes) / changes
    return {"nodes": node_count, "changes": changes, "refresh_us": round(1e6 * (both - alone), 2),
            "allocate_us": round(1e6 * alone, 2)}


def main(argv: list[str] | None = None) -> int:
    return per_size_main(
        "python -m suanli.bench.class_refresh", __doc__, argv, [1213, 5000, 20000],
        ("--changes", 3000, "rounds timed per size"), refresh_us,
        lambda row: (f"{row['nodes']:>6} nodes: refresh after one change {row['refresh_us']} us "
                     f"(the allocation alone {row['allocate_us']} us)"))


if __name__ == "__main__":
    sys.exit(main())
