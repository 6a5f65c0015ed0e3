"""The API's memory on the real stack as its history grows: ``python -m suanli.bench.api_memory_stack``.

``bench/read_model_memory.py`` measures the read model in process, without Kafka. This bench
measures whole ``suanli api serve`` processes following a real plane:

- a control plane (intake, scheduler and a simulated openb cluster, time compressed by
  ``--time-scale``) runs ``--tasks`` openb tasks (the trace repeated under new ids beyond its
  8,152 pods, each running at most an hour of its time: :data:`CAP_MS`) at ``--rate`` a
  second, on the running stack, in a fresh namespace;
- two ``suanli api serve`` processes follow that namespace from its start: ``keeps N`` with
  ``SUANLI_API_FINISHED_TASKS=--keep``, and ``keeps all`` with a setting above ``--tasks``;
- every ``--every`` seconds the bench scrapes both processes' ``/metrics``: the read model's
  tasks (kept, finished, forgotten: ``suanli_api_read_model_tasks``) and the process's
  resident memory (``process_resident_memory_bytes``).

It waits until both have folded every task (kept + forgotten = ``--tasks``) and every task
the log had finished when the plane drained. It prints each process's RSS where its fold
had first read ``--levels`` finished tasks (the history), and what a finished task more cost
from the first level to the end, and from the next-to-last level to the end (the fold reads
submissions ahead of their finishes, so early levels also hold the tasks in flight). Resident
memory is what the operating system sees: it includes the interpreter, the libraries and
the allocator's free lists, so it is a ceiling on the fold's own bytes, and it does not fall
back when Python frees objects.

    python -m suanli.bench.api_memory_stack --tasks 30000 --keep 5000 --json bench/api-memory-stack.json
"""
from __future__ import annotations

import argparse
import asyncio
import contextlib
import re
import secrets
import sys
import threading
import time
import uuid
from typing import Any

import httpx

from suanli.bench.api_process import BenchApi, bench_api
from suanli.bench.read_model_growth import levels_arg, write_json
from suanli.config import load_settings
from suanli.errors import StackError

# Each task runs at most an hour of the trace's time, so that the history is of finished tasks:
# the trace's first pods run for days, and would fill the cluster and leave the rest pending.
CAP_MS = 3_600_000
_SERIES = re.compile(r'^(suanli_api_read_model_tasks\{held="(\w+)"\}|process_resident_memory_bytes) (\S+)$', re.M)


def scrape(api: BenchApi) -> dict[str, float]:
    """The read model's task counts and the process's RSS from one ``/metrics``."""
    text = httpx.get(f"{api.url}/metrics", timeout=10).text
    out: dict[str, float] = {}
    for _series, held, value in _SERIES.findall(text):
        out[held or "rss_bytes"] = float(value)
    if "kept" not in out or "rss_bytes" not in out:
        raise StackError(f"{api.url}/metrics has no read-model or RSS series")
    return out


def _ended(sample: dict[str, float]) -> float:
    """Finished tasks a fold has read: those it keeps and those it forgot."""
    return sample["finished"] + sample["forgotten"]


def at_levels(samples: list[dict[str, float]], levels: list[int]) -> list[dict[str, Any]]:
    """For each level, the first sample whose fold had read that many finished tasks."""
    rows = []
    for level in levels:
        hit = next((s for s in samples if _ended(s) >= level), None)
        if hit is not None:
            rows.append({"level": level, "finished_read": int(_ended(hit)), "kept": int(hit["kept"]),
                         "forgotten": int(hit["forgotten"]), "rss_bytes": int(hit["rss_bytes"]),
                         "rss_mib": round(hit["rss_bytes"] / 2**20, 1)})
    return rows


def per_task(row: dict[str, Any] | None, last: dict[str, float]) -> float | None:
    """Bytes of RSS a finished task more cost, from a level's sample to the end."""
    if row is None:
        return None
    more = _ended(last) - row["finished_read"]
    return round((last["rss_bytes"] - row["rss_bytes"]) / more) if more > 0 else None


def run(tasks: int, keep: int, levels: list[int], every: float = 1.0, rate: float = 400.0,
        time_scale: float = 1e-4, settle_timeout: float = 600.0) -> dict[str, Any]:
    """One run (see the module docstring); the figures as a dict."""
    from suanli.deploy.plane import Plane, PlaneOptions

    settings = load_settings(namespace=f"m{uuid.uuid4().hex[:10]}", partitions=1)
    log_dir = settings.home / "logs"
    token = secrets.token_urlsafe(24)
    arms = {f"keeps {keep}": keep, "keeps all": tasks + 1}
    samples: dict[str, list[dict[str, float]]] = {name: [] for name in arms}

    async def workload(publish: Any, _send_raw: Any, trace: list[dict[str, Any]], _names: Any) -> None:
        from suanli.replay.driver import drive

        await drive(publish, [dict(t, duration_estimate_ms=min(t["duration_estimate_ms"] or CAP_MS, CAP_MS))
                              for t in trace], rate)

    plane = Plane(settings, PlaneOptions(tasks=tasks, rate=rate, time_scale=time_scale, exit_when_drained=True,
                                         workload=workload, quiet=True, metrics_interval_s=0,
                                         drain_timeout=settle_timeout, metrics_port=None), out=lambda _m: None)
    with contextlib.ExitStack() as started_apis:
        apis = {name: started_apis.enter_context(bench_api(
                    settings, log_dir, {token: "bench"}, name=f"api-{i}",
                    env={"SUANLI_API_FINISHED_TASKS": str(setting)}))
                for i, (name, setting) in enumerate(arms.items())}
        stop = threading.Event()

        def sample() -> None:
            while not stop.is_set():
                for name, api in apis.items():
                    try:
                        samples[name].append({"t": time.monotonic(), **scrape(api)})
                    except httpx.HTTPError:
                        pass                 # a busy moment: the next scrape counts
                stop.wait(every)

        sampler = threading.Thread(target=sample, daemon=True)
        started = time.monotonic()
        plane.start()
        try:
            sampler.start()
            result = asyncio.run(plane.run())
            # every task folded by both, and every task the log had finished when the plane drained
            # (tasks still running then may finish later: the condition does not wait for them)
            ended = sum(result.get(k, 0) for k in ("completed", "failed", "unschedulable"))
            deadline = time.monotonic() + settle_timeout
            while True:
                last = {name: scrape(api) for name, api in apis.items()}
                if all(s["kept"] + s["forgotten"] >= tasks and s["finished"] + s["forgotten"] >= ended
                       for s in last.values()):
                    break
                if time.monotonic() > deadline:
                    raise StackError(f"the APIs did not settle in {settle_timeout:.0f}s: {last}")
                time.sleep(every)
        finally:
            stop.set()
            if sampler.is_alive():
                sampler.join()
            plane.stop()
        seconds = time.monotonic() - started
    out: dict[str, Any] = {"tasks": tasks, "keep": keep, "rate": rate, "time_scale": time_scale, "plane": {k: result.get(k) for k in
                                                                   ("placed", "completed", "running", "pending",
                                                                    "unschedulable")},
                           "seconds": round(seconds, 1), "arms": {}}
    for name in arms:
        rows = at_levels(samples[name], levels)
        out["arms"][name] = {"finished_tasks_setting": arms[name], "levels": rows,
                             "end": {"kept": int(last[name]["kept"]), "finished": int(last[name]["finished"]),
                                     "forgotten": int(last[name]["forgotten"]),
                                     "rss_mib": round(last[name]["rss_bytes"] / 2**20, 1)},
                             "bytes_per_task_more": per_task(rows[0] if rows else None, last[name]),
                             "bytes_per_task_more_late": per_task(rows[-2] if len(rows) > 1 else None, last[name]),
                             "samples": len(samples[name])}
    return out


def render(doc: dict[str, Any]) -> str:
    lines = [f"{doc['tasks']} openb tasks through a plane ({doc['plane']}), {doc['seconds']} s; "
             f"RSS (MiB) where each API's fold had first read so many finished tasks:"]
    arms = list(doc["arms"])
    levels = sorted({r["level"] for a in doc["arms"].values() for r in a["levels"]})
    lines.append("finished read " + "  ".join(f"{a:>22}" for a in arms))
    for level in levels:
        cells = []
        for a in arms:
            row = next((r for r in doc["arms"][a]["levels"] if r["level"] == level), None)
            cells.append(f"{row['rss_mib']:>10.1f} ({row['kept']:>6} kept)" if row else f"{'-':>22}")
        lines.append(f"{level:>12}  " + "  ".join(cells))
    lines.append("end           " + "  ".join(f"{doc['arms'][a]['end']['rss_mib']:>10.1f} "
                                              f"({doc['arms'][a]['end']['kept']:>6} kept)" for a in arms))
    lines.append("bytes of RSS a finished task more, first level -> end: " + ", ".join(
        f"{a}: {doc['arms'][a]['bytes_per_task_more']}" for a in arms))
    lines.append("                                 next-to-last level -> end: " + ", ".join(
        f"{a}: {doc['arms'][a]['bytes_per_task_more_late']}" for a in arms))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m suanli.bench.api_memory_stack", description=__doc__.split("\n\n")[0])
    p.add_argument("--tasks", type=int, default=30_000, help="openb tasks through the plane (default 30000)")
    p.add_argument("--keep", type=int, default=5_000, help="SUANLI_API_FINISHED_TASKS of the API that forgets")
    p.add_argument("--levels", default="5000,10000,20000,28000",
                   help="finished tasks read at which to report RSS, comma-separated (ascending)")
    p.add_argument("--rate", type=float, default=400.0, help="submissions a second (default 400: the cluster keeps up)")
    p.add_argument("--time-scale", type=float, default=1e-4, dest="time_scale",
                   help="simulated seconds to wall seconds (default 1e-4: a task's hour passes in 0.36 s)")
    p.add_argument("--every", type=float, default=1.0, help="seconds between scrapes (default 1)")
    p.add_argument("--json", metavar="FILE", help="also write the figures to FILE")
    args = p.parse_args(argv)
    if args.keep >= args.tasks:
        p.error("--keep must be below --tasks, or nothing is forgotten")
    doc = run(args.tasks, args.keep, levels_arg(p, args.levels, least=1), args.every, args.rate, args.time_scale)
    doc["command"] = "python -m suanli.bench.api_memory_stack " + " ".join(argv if argv is not None else sys.argv[1:])
    print(render(doc))
    if args.json:
        write_json(args.json, doc)
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    try:
        raise SystemExit(main())
    except StackError as exc:
        print(f"api_memory_stack: {exc}", file=sys.stderr)
        raise SystemExit(2)
