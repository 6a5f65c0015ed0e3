"""The garbage collector's pauses while a scheduler's cell grows, with and without freezing.

    python -m suanli.bench.gc_pauses [--runs 2] [--json out.json]

Each run is a fresh process (the collector's state is the process's) that times every
collection (``streams/gc_pauses.py``) while it builds ``bench/queue_retry.py``'s cell in
process (1,523 openb nodes, 6,918 placed, 5,000 queued, 3,500 status changes: 12,206 tasks)
and then reports, per generation, the collections' count, total and longest pause, the
freezes and the process's RSS. Modes alternate: ``off`` (measuring only) and ``freeze``
(``GcPauses(GC_FREEZE_AFTER_MS)`` as the scheduler worker installs it: a collection and a
freeze at start-up, then a freeze after each full collection longer than that). Wall-clock
figures of one machine: compare the modes within one run of this command.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from typing import Any

from suanli.bench import save


def one(mode: str) -> dict[str, Any]:
    """One build of the cell in this process, timed as ``mode`` says."""
    from suanli.bench import queue_retry
    from suanli.streams.app import GC_FREEZE_AFTER_MS
    from suanli.streams.gc_pauses import GcPauses

    pauses = GcPauses(GC_FREEZE_AFTER_MS if mode == "freeze" else None).install()
    figures = queue_retry.run()
    with open("/proc/self/status") as f:
        rss = next(int(line.split()[1]) // 1024 for line in f if line.startswith("VmRSS:"))
    return {"mode": mode, "gc": pauses.as_json(), "rss_mib": rss, "tasks_in_cell": figures["tasks_in_cell"]}


def run(runs: int = 2) -> dict[str, Any]:
    rows = []
    for i in range(runs):
        for mode in ("off", "freeze"):
            out = subprocess.run([sys.executable, "-c", f"import json; from suanli.bench.gc_pauses import one; "
                                  f"print(json.dumps(one({mode!r})))"], check=True, capture_output=True, text=True)
            rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
            g2 = rows[-1]["gc"]["2"]
            print(f"run {i + 1} {mode:>6}: full collections {g2['count']}, longest {g2['max_ms']} ms, "
                  f"total {g2['total_ms']} ms; RSS {rows[-1]['rss_mib']} MiB", file=sys.stderr)
    return {"runs": rows}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m suanli.bench.gc_pauses", description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=2, help="pairs of runs (off, freeze)")
    ap.add_argument("--json", help="also write the figures here")
    args = ap.parse_args(argv)
    figures = run(args.runs)
    print(json.dumps(figures, indent=1))
    save(args.json, figures)
    return 0


if __name__ == "__main__":
    sys.exit(main())
