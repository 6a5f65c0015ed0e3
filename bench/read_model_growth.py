"""Does an API read cost more as the read model's history grows?

    python -m suanli.bench.read_model_growth [--levels 0,50000,200000] [--json out.json]

The API folds the whole log it can read into its read model (``api/readmodel.py``): every
task ever submitted stays there, as far back as the topics' retention reaches. This feeds
a :class:`~suanli.api.readmodel.ReadModel` exactly as the API's log follower does
(``ReadModel.apply``, no Kafka), with a live load that stays the same (500 pending tasks
of 20 tenants in one cell, and each tenant's one running task) and a history that grows:
at each level, that many more tasks of those tenants are submitted, placed and completed.
At each level the same reads run through the real :class:`~suanli.api.service.ApiService`
and print ms per call:

- ``get_pending_task``: ``GET /v1/tasks/{id}`` of a pending task (its queue position is
  recomputed for its cell);
- ``list_tasks``: ``GET /v1/tasks?limit=100`` (the tenant's oldest 100);
- ``list_pending``: ``GET /v1/tasks?status=PENDING``;
- ``counts``: the lifecycle's tallies (``suanli up``'s summary line, every second).

A read whose ms grows with the level walks the whole history; the ratio of the last level to
the first says how much. The machine is noisy: compare the ratios within one run.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import time
from typing import Any, Callable

TENANTS = 20
PENDING = 500
CELL = "c"


def _prov(offset: int) -> dict[str, Any]:
    return {"input": {"topic": "bench.cells", "partition": 0, "offset": offset},
            "strategy": {"name": "default", "version": "1", "config_digest": "d"},
            "candidates": [], "filtered": [], "path": ["bench"], "decided_at": offset}


class Feeder:
    """Records into a read model, in the API's roles, with offsets of their own."""

    def __init__(self, model: Any):
        self.model, self.offset = model, 0

    def put(self, role: str, kind: str, payload: dict[str, Any]) -> None:
        self.offset += 1
        self.model.apply(role, kind, payload, f"bench.{role}", 0, self.offset)

    def submit(self, task_id: str, tenant: str) -> None:
        self.put("raw_tasks", "TaskSubmitted", self._task(task_id, tenant))
        self.put("cell_log", "TaskSubmitted", self._task(task_id, tenant))

    def _task(self, task_id: str, tenant: str) -> dict[str, Any]:
        return {"event_id": f"sub-{task_id}", "task_id": task_id, "tenant": tenant, "cell": CELL,
                "submitted_at": self.offset, "priority": 0, "qos_tier": "SILVER",
                "resources": {"cpu_milli": 100, "memory_mib": 64, "gpu_count": 0, "gpu_milli": 0}}

    def decide(self, kind: str, task_id: str, tenant: str, **fields: Any) -> None:
        self.put("decisions", kind, {"event_id": f"d-{task_id}-{self.offset}", "decision_id": f"{CELL}/d/{self.offset}",
                                     "task_id": task_id, "tenant": tenant, "cell": CELL,
                                     "provenance": _prov(self.offset), **fields})

    def place(self, task_id: str, tenant: str) -> None:
        self.decide("TaskPlaced", task_id, tenant, node_id="n0", gpu_devices=[], gpu_milli=0, cpu_milli=100,
                    memory_mib=64)

    def finish(self, task_id: str, tenant: str) -> None:
        self.decide("TaskReleased", task_id, tenant, node_id="n0", cause="COMPLETED", gpu_devices=[])


def _timed(call: Callable[[], Any], repeat: int) -> float:
    call()                                       # warm: the first call may fill caches
    started = time.perf_counter()
    for _ in range(repeat):
        call()
    return (time.perf_counter() - started) / repeat * 1000


def run(levels: list[int], repeat: int = 20, out: Callable[[str], None] = print) -> dict[str, Any]:
    from suanli.api.audit import FollowerAuditSource
    from suanli.api.readmodel import ReadModel
    from suanli.api.service import ApiService

    model = ReadModel()
    service = ApiService(model, None, FollowerAuditSource(model), namespace="bench")   # type: ignore[arg-type]
    feed = Feeder(model)
    feed.put("cell_log", "NodeRegistered", {"event_id": "reg-n0", "node_id": "n0", "cell": CELL,
                                            "cpu_milli": 10 ** 9, "memory_mib": 10 ** 9, "connector": "sim",
                                            "accelerators": []})
    for i in range(PENDING):
        tenant = f"tenant-{i % TENANTS}"
        feed.submit(f"p{i}", tenant)
        feed.decide("TaskPending", f"p{i}", tenant, reasons=[{"reason": "bench", "nodes": 1}], queue_position=i + 1)
    for t in range(TENANTS):
        feed.submit(f"r{t}", f"tenant-{t}")
        feed.place(f"r{t}", f"tenant-{t}")
    loop = asyncio.new_event_loop()
    probes: dict[str, Callable[[], Any]] = {
        "get_pending_task": lambda: loop.run_until_complete(service.get_task("tenant-3", "p3")),
        "list_tasks": lambda: loop.run_until_complete(service.list_tasks("tenant-3", limit=100)),
        "list_pending": lambda: loop.run_until_complete(service.list_tasks("tenant-3", status="PENDING")),
        "counts": lambda: model.lifecycle.counts(),
    }
    rows, done = [], 0
    try:
        for level in levels:
            while done < level:
                tenant = f"tenant-{done % TENANTS}"
                feed.submit(f"h{done}", tenant)
                feed.place(f"h{done}", tenant)
                feed.finish(f"h{done}", tenant)
                done += 1
            row: dict[str, Any] = {"finished_tasks": level, "tasks_in_model": len(model.lifecycle.tasks),
                                   "submissions_held": len(model.submissions)}
            row["ms"] = {name: round(_timed(call, repeat), 3) for name, call in probes.items()}
            # what each probe answered (the probes read what they are named for)
            row["answers"] = {"get_pending_task": probes["get_pending_task"]().status,
                              "list_tasks": len(probes["list_tasks"]().tasks),
                              "list_pending": len(probes["list_pending"]().tasks),
                              "completed": probes["counts"]()["completed"]}
            rows.append(row)
            out(json.dumps(row))
    finally:
        loop.close()
    first, last = rows[0]["ms"], rows[-1]["ms"]
    ratios = {name: round(last[name] / first[name], 2) if first[name] else None for name in first}
    out(f"last level / first, ms per call: {json.dumps(ratios)}")
    return {"levels": rows, "ratio_last_to_first": ratios, "repeat": repeat}


def levels_arg(parser: argparse.ArgumentParser, text: str, least: int = 0) -> list[int]:
    """``--levels``: comma-separated whole numbers, ascending, none below ``least`` (else the
    parser's usage error)."""
    try:
        levels = [int(x) for x in text.split(",")]
    except ValueError:
        parser.error(f"--levels: comma-separated whole numbers, not {text!r}")
    if levels != sorted(levels) or levels[0] < least:
        parser.error(f"--levels: ascending, none below {least}, not {text!r}")
    return levels


def write_json(path: str | None, result: dict[str, Any]) -> None:
    """The figures to ``path`` (nothing when None), indented, ending in a newline."""
    if path:
        with open(path, "w") as fh:
            json.dump(result, fh, indent=2)
            fh.write("\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m suanli.bench.read_model_growth",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--levels", default="0,50000,200000", help="finished tasks at each level (ascending)")
    parser.add_argument("--repeat", type=int, default=20, help="calls per probe and level")
    parser.add_argument("--json", help="write the figures to this file")
    args = parser.parse_args(argv)
    write_json(args.json, run(levels_arg(parser, args.levels), args.repeat))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
