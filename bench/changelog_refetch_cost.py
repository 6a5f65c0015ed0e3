"""What the changelog refetch (``streams/changelog_refetch.py``) adds to every fetched record.

    python -m suanli.bench.changelog_refetch_cost [--records 200000] [--runs 3]

The refetch puts one async-generator layer between Faust's ``Consumer.getmany`` and its fetch
loop, and notes each delivered record's offset. This drains ``--records`` records through a
stand-in for Faust's ``getmany`` (500-record batches of one stream partition, all delivered,
no broker) with and without that layer, alternating within each run so the machine's drift
touches both alike, and prints the time per record and the difference.
"""
from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections import namedtuple
from typing import Any

from suanli.streams.changelog_refetch import ChangelogRefetch

_TP = namedtuple("_TP", "topic partition")
_Record = namedtuple("_Record", "offset")
BATCH = 500


class _Fetching:
    """Faust's ``getmany`` reduced to what the layer sees: batches from ``_wait_next_records``."""

    def __init__(self) -> None:
        self.batch = {_TP("bench.cells", 0): [_Record(i) for i in range(BATCH)]}

    async def _wait_next_records(self, timeout: float) -> tuple[Any, Any]:
        return self.batch, set(self.batch)

    async def getmany(self, timeout: float) -> Any:
        records, _active = await self._wait_next_records(timeout)
        for tp, batch in records.items():
            for record in batch:
                yield tp, record

    def _is_changelog_tp(self, tp: Any) -> bool:
        return tp.topic.endswith("-changelog")


class _Refetching(ChangelogRefetch, _Fetching):
    pass


def per_record_us(consumer: Any, records: int) -> float:
    async def drain() -> None:
        n = 0
        while n < records:
            async for _tp, _record in consumer.getmany(1.0):
                n += 1
    began = time.perf_counter()
    asyncio.run(drain())
    return (time.perf_counter() - began) / records * 1e6


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m suanli.bench.changelog_refetch_cost",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args(argv)
    without, with_layer = [], []
    for _ in range(args.runs):
        without.append(per_record_us(_Fetching(), args.records))
        with_layer.append(per_record_us(_Refetching(), args.records))
    best_without, best_with = min(without), min(with_layer)
    print(f"per record, best of {args.runs} runs of {args.records:,}: without the refetch layer "
          f"{best_without:.2f} us, with it {best_with:.2f} us; it adds {best_with - best_without:.2f} us "
          f"({best_with / best_without:.2f}x this stand-in's own cost)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
