"""How much of each process's CPU the cyclic garbage collector takes, over a whole command.

``python -m suanli.bench.gc_time [--json F] -- COMMAND...`` runs ``COMMAND`` with
``bench/gc_time_hook`` on ``PYTHONPATH``, so that it and every Python process it starts (the
plane's workers and connectors inherit the environment) count their collections
(``gc.callbacks``), then prints one line per process: the collector's seconds by generation
(0 / 1 / 2), the collections, the process's CPU seconds and the collector's share of them.
For example, ``python -m suanli.bench.gc_time -- python -m suanli.bench.e2e --max-only
--tasks 20000``, with ``SUANLI_GC_THRESHOLDS=default`` and without (``suanli/gc_policy.py``).

The collector's time is wall time inside its passes, which on a busy machine includes a
little waiting for the CPU; the share is of the process's whole life, start-up included.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from suanli.bench import hooked_run

HOOK = Path(__file__).resolve().parent / "gc_time_hook"


def summarised(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The hook's records, each with ``gc_seconds`` (all generations) and ``gc_share`` (of
    its CPU seconds) added, the most collector time first."""
    for row in rows:
        row["gc_seconds"] = round(sum(row["seconds"]), 3)
        row["seconds"] = [round(s, 3) for s in row["seconds"]]
        row["cpu_seconds"] = round(row["cpu_seconds"], 2)
        row["gc_share"] = round(row["gc_seconds"] / row["cpu_seconds"], 3) if row["cpu_seconds"] else None
    return sorted(rows, key=lambda r: -r["gc_seconds"])


def run(command: list[str]) -> dict[str, Any]:
    """Runs ``command`` with the hook; its exit code and every process's record."""
    code, rows = hooked_run.run(command, HOOK, "SUANLI_GC_TIME_DIR")
    return {"command": command, "exit_code": code,
            "gc_thresholds_env": os.environ.get("SUANLI_GC_THRESHOLDS"), "processes": summarised(rows)}


def report(out: dict[str, Any]) -> None:
    """One line per process and the collector, as the module docstring says."""
    for p in out["processes"]:
        share = "-" if p["gc_share"] is None else f"{100 * p['gc_share']:.0f} %"
        print(f"{p['gc_seconds']:7.2f} s in the collector (by generation {p['seconds']}, {p['collections']} "
              f"passes) of {p['cpu_seconds']:.1f} s CPU ({share}), thresholds {p['thresholds']}: "
              f"{' '.join(p['argv'])[:100]}")


def main(argv: list[str] | None = None) -> int:
    return hooked_run.cli(argv, "python -m suanli.bench.gc_time", __doc__.split("\n\n")[0], run, report)


if __name__ == "__main__":
    sys.exit(main())
