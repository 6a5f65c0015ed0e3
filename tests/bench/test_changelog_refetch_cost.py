"""``bench/changelog_refetch_cost.py`` drains the same records with and without the refetch
layer and prints both times per record."""
from __future__ import annotations

import asyncio
import re

from suanli.bench import changelog_refetch_cost as bench


def test_it_prints_the_cost_per_record_with_and_without_the_layer(capsys):
    assert bench.main(["--records", "2000", "--runs", "1"]) == 0
    out = capsys.readouterr().out
    found = re.search(r"without the refetch layer ([\d.]+) us, with it ([\d.]+) us", out)
    assert found and float(found[1]) > 0 and float(found[2]) > 0


def test_the_layer_delivers_every_record_of_a_whole_batch():
    delivered = []

    async def drain():
        async for tp, record in bench._Refetching().getmany(1.0):
            delivered.append(record.offset)

    asyncio.run(drain())
    assert delivered == list(range(bench.BATCH))
