"""How many requests each process sends to Kafka, by API, over a whole command.

``python -m suanli.bench.kafka_requests [--json F] -- COMMAND...`` runs ``COMMAND`` with
``bench/kafka_requests_hook`` on ``PYTHONPATH``, so that it and every Python process it
starts (the plane's workers and connectors inherit the environment) count the requests they
send through aiokafka, by API and by second. It prints one line per process and API: the
requests in all, and the median requests a second over the seconds in which that process
sent any (so a long measured phase sets it, not start-up). For example
``python -m suanli.bench.kafka_requests -- python -m suanli.bench.e2e --rate 100 --tasks
6000``: a request's cost is mostly fixed (a syscall each way, the broker's handling, the
client's bookkeeping), so a process making many small ones pays for the requests, not the
records.
"""
from __future__ import annotations

import statistics
import sys
from pathlib import Path
from typing import Any

from suanli.bench import hooked_run

HOOK = Path(__file__).resolve().parent / "kafka_requests_hook"


def summarised(row: dict[str, Any]) -> dict[str, Any]:
    """One process's record with, per API, ``total`` and ``median_per_s`` (over the seconds
    in which the process sent any request)."""
    seconds = list(row.pop("by_second").values())
    apis = sorted({api for counts in seconds for api in counts})
    row["active_seconds"] = len(seconds)
    row["cpu_seconds"] = round(row["cpu_seconds"], 2)
    row["apis"] = {api: {"total": sum(c.get(api, 0) for c in seconds),
                         "median_per_s": statistics.median(c.get(api, 0) for c in seconds)} for api in apis}
    return row


def run(command: list[str]) -> dict[str, Any]:
    """Runs ``command`` with the hook; its exit code and every process's counts."""
    code, rows = hooked_run.run(command, HOOK, "SUANLI_KAFKA_REQUESTS_DIR")
    return {"command": command, "exit_code": code, "processes": [summarised(r) for r in rows]}


def report(out: dict[str, Any]) -> None:
    """One line per process and API, as the module docstring says."""
    for p in out["processes"]:
        print(f"{' '.join(p['argv'])[:110]} (pid {p['pid']}, {p['cpu_seconds']:.1f} s CPU, "
              f"{p['active_seconds']} s sending)")
        for api, c in p["apis"].items():
            print(f"  {api:28s} {c['total']:8d} in all, median {c['median_per_s']:g}/s")


def main(argv: list[str] | None = None) -> int:
    return hooked_run.cli(argv, "python -m suanli.bench.kafka_requests", __doc__.split("\n\n")[0], run, report)


if __name__ == "__main__":
    sys.exit(main())
