"""Cold start vs. a warmed node on the local-process connector: a real copy of real weights
(issue 20, acceptance check "A real copy").

    python -m suanli.bench.prewarm_copy [--size-mib 512] [--repeats 5] [--json OUT] [--dir DIR]

Writes a weights file of ``--size-mib`` MiB of random bytes (``os.urandom``: every block
written, nothing sparse, nothing compressible) into a temporary *origin* directory, then, per
repeat, runs the ``LocalProcesses`` adapter in this process (no Kafka: the figure is the
connector's, not the broker's) with a fresh, empty model cache and measures **dispatch →
process start**: from the call of ``adapter.execute(command)`` to its RUNNING report, which
the adapter makes once the task's process group exists (the connector's small trampoline has
been started; it spawns the command, ``true``, at once). Each node first starts one process
unmeasured (an event loop's first child process costs a few ms of set-up), then:

- **baseline**: a task without a model (the process start alone);
- **cold**: the model is not cached: ``execute`` copies it (fsynced) before the process starts;
- **hit**: a second task of the same model on the same node: the cached copy is used;
- **warmed**: on another fresh node cache, a PrewarmCommand is handled first
  (``adapter.prewarm``, timed too), then the task is dispatched: it starts as a hit.

It prints the medians over the repeats and the ratios cold/hit and cold/warmed (acceptance:
a warmed start begins >= 3x sooner than a cold one). Honest limits: dropping the page cache
needs root, so the origin file may be (and, just written, mostly is) in the page cache: the
cold copy reads from memory, not from disk or a network, which *flatters the cold start*; the
ratios are therefore conservative. The copy's writes are fsynced, as the cache does. Every
temporary file is deleted at the end (``--keep`` keeps them).
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from suanli.connectors.kit import TaskReporter
from suanli.connectors.local_process import LocalProcesses, cpu_count

MIB = 1 << 20
GOAL_RATIO = 3.0
PAGE_CACHE_NOTE = ("the origin file may be in the page cache (dropping it needs root): the cold copy then reads "
                   "from memory, which flatters the cold start, so the ratios are conservative")
NODE = "bench-node"


def write_weights(path: Path, size_mib: int, chunk_mib: int = 16) -> dict[str, Any]:
    """A file of ``size_mib`` MiB of random bytes, fsynced; its size and allocated bytes (not sparse)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        left = size_mib * MIB
        while left:
            n = min(left, chunk_mib * MIB)
            f.write(os.urandom(n))
            left -= n
        f.flush()
        os.fsync(f.fileno())
    st = path.stat()
    return {"path": str(path), "bytes": st.st_size, "allocated_bytes": st.st_blocks * 512,
            "sparse": st.st_blocks * 512 < st.st_size}


def _command(i: str, model: dict[str, Any] | None) -> dict[str, Any]:
    return {"event_id": f"bench-{i}", "dispatch_id": f"bench-d{i}", "task_id": f"bench-t{i}", "tenant": "bench",
            "cell": "bench", "node_id": NODE, "connector": "local", "gpu_devices": [], "gpu_milli": 0,
            "cpu_milli": 1000, "memory_mib": 64, "command": ["true"], "duration_estimate_ms": None,
            "issued_at": int(time.time() * 1000), "env": {}, "model": model}


async def start_ms(adapter: LocalProcesses, command: dict[str, Any]) -> tuple[float, str, str]:
    """Dispatch -> process start (the RUNNING report), ms; the RUNNING message and the outcome."""
    seen: dict[str, Any] = {}

    async def emit(payload: dict[str, Any]) -> None:
        if payload["status"] == "RUNNING":
            seen["running"] = time.perf_counter()
            seen["message"] = payload["message"]
        else:
            seen["outcome"] = (payload["status"], payload["message"])

    assert adapter.admit(command) is None, adapter.admit(command)
    began = time.perf_counter()
    await adapter.execute(command, TaskReporter(command, adapter.now_ms, emit))
    if "running" not in seen:
        raise RuntimeError(f"the task did not start: {seen.get('outcome')}")
    return (seen["running"] - began) * 1000, seen["message"], seen["outcome"][0]


async def one_repeat(work: Path, model: dict[str, Any], i: int) -> dict[str, Any]:
    """The four figures on fresh caches (a cold node, then a warmed one)."""
    cold_node = LocalProcesses(cell="bench", node_id=NODE, max_concurrent=1, model_cache=work / f"cache-{i}-cold")
    warm_node = LocalProcesses(cell="bench", node_id=NODE, max_concurrent=1, model_cache=work / f"cache-{i}-warm")
    try:
        for node in (cold_node, warm_node):     # unmeasured: the loop's first process start sets up its child watcher
            await start_ms(node, _command(f"{i}-warm-up-{id(node)}", None))
        baseline, _, _ = await start_ms(cold_node, _command(f"{i}-base", None))
        cold, cold_msg, cold_end = await start_ms(cold_node, _command(f"{i}-cold", model))
        hit, hit_msg, hit_end = await start_ms(cold_node, _command(f"{i}-hit", model))
        began = time.perf_counter()
        await warm_node.prewarm({"event_id": f"bench-pw-{i}", "node_id": NODE, "cell": "bench", "at": 0,
                                 "reason": "bench", **model})
        prewarm = (time.perf_counter() - began) * 1000
        warmed, warmed_msg, warmed_end = await start_ms(warm_node, _command(f"{i}-warmed", model))
    finally:
        await cold_node.aclose()
        await warm_node.aclose()
        for node in (cold_node, warm_node):
            shutil.rmtree(node.model_cache, ignore_errors=True)     # keep one repeat's copies on disk at most
    return {"repeat": i, "baseline_ms": round(baseline, 2), "cold_ms": round(cold, 2), "hit_ms": round(hit, 2),
            "prewarm_ms": round(prewarm, 2), "warmed_ms": round(warmed, 2),
            "outcomes": [cold_end, hit_end, warmed_end],
            "messages": {"cold": _without_pid(cold_msg), "hit": _without_pid(hit_msg),
                         "warmed": _without_pid(warmed_msg)}}


def _without_pid(message: str) -> str:
    return message.rsplit("; process group ", 1)[0]


def run(size_mib: int = 512, repeats: int = 5, work_dir: Path | None = None, keep: bool = False,
        log: Any = lambda _m: None) -> dict[str, Any]:
    """Measure ``repeats`` times; the result as a JSON-able dict."""
    work = Path(tempfile.mkdtemp(prefix="suanli-prewarm-", dir=work_dir))
    try:
        log(f"writing {size_mib} MiB of random bytes into {work / 'origin'} ...")
        origin = write_weights(work / "origin" / "weights.bin", size_mib)
        model = {"model_arch": f"bench-model-{size_mib}m@1", "artifact_uri": Path(origin["path"]).as_uri(),
                 "size_mib": size_mib}
        rows = []
        for i in range(repeats):
            row = asyncio.run(one_repeat(work, model, i))
            log(f"repeat {i + 1}/{repeats}: cold {row['cold_ms']:.1f} ms, hit {row['hit_ms']:.1f} ms, "
                f"warmed {row['warmed_ms']:.1f} ms (prewarm {row['prewarm_ms']:.1f} ms)")
            rows.append(row)
    finally:
        if not keep:
            shutil.rmtree(work, ignore_errors=True)
    median = {k: round(statistics.median(r[k] for r in rows), 2)
              for k in ("baseline_ms", "cold_ms", "hit_ms", "prewarm_ms", "warmed_ms")}
    ratios = {"cold_over_hit": round(median["cold_ms"] / median["hit_ms"], 1),
              "cold_over_warmed": round(median["cold_ms"] / median["warmed_ms"], 1)}
    return {"bench": "prewarm_copy", "issue": 20, "measured": "dispatch -> process start (RUNNING report), ms",
            "weights": {"size_mib": size_mib, "bytes": origin["bytes"], "allocated_bytes": origin["allocated_bytes"],
                        "sparse": origin["sparse"], "content": "os.urandom"},
            "repeats": repeats, "median": median, "ratios": ratios, "goal_ratio": GOAL_RATIO,
            "meets_goal": min(ratios.values()) >= GOAL_RATIO,
            "copy_mib_per_s": round(size_mib / ((median["cold_ms"] - median["baseline_ms"]) / 1000), 1)
            if median["cold_ms"] > median["baseline_ms"] else None,
            "page_cache": PAGE_CACHE_NOTE, "rows": rows,
            "machine": {"cpus": cpu_count(), "kernel": platform.release(), "python": platform.python_version(),
                        "filesystem_dir": str(work.parent)}}


def report(result: dict[str, Any]) -> str:
    m, r, w = result["median"], result["ratios"], result["weights"]
    lines = [f"prewarm copy: {w['bytes']:,} bytes ({w['size_mib']} MiB) of random weights, "
             f"{'SPARSE (void)' if w['sparse'] else 'not sparse'}; median of {result['repeats']} repeats, "
             "dispatch -> process start:",
             f"  baseline (no model)   {m['baseline_ms']:10.1f} ms",
             f"  cold (copied)         {m['cold_ms']:10.1f} ms   (~{result['copy_mib_per_s']} MiB/s)",
             f"  hit (second start)    {m['hit_ms']:10.1f} ms   cold/hit    = {r['cold_over_hit']}x",
             f"  warmed (prewarmed)    {m['warmed_ms']:10.1f} ms   cold/warmed = {r['cold_over_warmed']}x",
             f"  the prewarm itself    {m['prewarm_ms']:10.1f} ms (off the task's path)",
             f"goal: a warmed start >= {result['goal_ratio']:g}x sooner than a cold one: "
             f"{'met' if result['meets_goal'] else 'NOT met'}",
             f"note: {result['page_cache']}"]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m suanli.bench.prewarm_copy", description=__doc__.split("\n\n")[0])
    parser.add_argument("--size-mib", type=int, default=512, help="size of the weights file (default 512 MiB)")
    parser.add_argument("--repeats", type=int, default=5, help="repeats; the medians are reported (default 5)")
    parser.add_argument("--dir", type=Path, default=None, help="where the temporary files go (default: the temp dir)")
    parser.add_argument("--keep", action="store_true", help="keep the temporary files")
    parser.add_argument("--json", type=Path, help="write the result to this file")
    args = parser.parse_args(argv)
    if args.size_mib < 1 or args.repeats < 1:
        parser.error("--size-mib and --repeats must be >= 1")
    result = run(args.size_mib, args.repeats, args.dir, args.keep, log=lambda m: print(m, file=sys.stderr, flush=True))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    print(report(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
