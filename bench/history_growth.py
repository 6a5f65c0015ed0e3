"""Does a decision cost more as the cell's history grows, and does its memory?

    python -m suanli.bench.history_growth [--levels 0,20000,60000] [--keep-finished N] [--json out.json]

One cell, decided by ``processors.core.decide`` in process with ``default``: 300 nodes of
8 GPUs and 60 CPU nodes, a live load that stays the same, and a history that grows: at each
level, that many more tasks are submitted, placed and COMPLETED (each a finished task the
cell keeps). At each level the same probes run on the same live load and print ms per input:

- ``submit`` / ``complete``: 200 small tasks placed, then completed;
- ``reserved_node_status``: a status report of a bronze task on a node whose GPUs a
  reservation token holds (every such report refills the token: ``reservations.fill``);
- ``clearing``: a reservation bid cleared on the next period (``reservations.plan_of``);
- ``elastic_round``: a round of an elastic federated job (``elastic_jobs.next_step``);
- ``federated_aggregator``: an aggregator of a federated job with three running clients
  submitted (a policy rule gives it the ``federated`` strategy, whose traffic score reads
  the job's members), then completed;
- ``node_down``: a node with tasks reported DOWN, then READY again;
- ``new_gpu_model``: a node of a GPU model the cell has not seen registers, then one task
  is decided (a new model clears the state's derived caches, which are built again).

Before the probes, the heap is collected and frozen, as the scheduler does
(``streams/gc_pauses.py``): a full collection's pause grows with the heap whatever the code
walks, and the probes are to time the code. It also prints the RSS and the snapshot's JSON
size (and seconds to make it) per 1,000 finished tasks. An input
whose ms grows with the level walks the whole history; the ratio of the last level to the
first says how much (the machine is noisy: compare ratios within one run, not runs).

The cell forgets its oldest finished tasks beyond the policy's ``retention.finished_tasks``
(``processors/retention.py``; 10,000 by default), so its memory and snapshot stop growing
there. ``--keep-finished N`` sets it (a number above the last level keeps every task, as
cells did before they forgot, to time the walks of a whole history). ``--memory`` measures
the memory alone (:func:`memory`); with ``--job-size N`` its history is members of array
jobs of N tasks each, and with ``--clients`` too, the clients of federated jobs of N (a cell
kept both whole before job members could be forgotten).
"""
from __future__ import annotations

import argparse
import gc
import json
import time
from typing import Any, Callable

from suanli.bench import save
from suanli.processors import model as m
from suanli.processors.core import decide
from suanli.processors.elastic import ElasticArgs, elastic_label
from suanli.processors.state import CellState

CELL = "hist"
MIN = 60_000
PROBE_TASKS = 200
_FILL: dict[str, dict[str, Any]] = {
    "NodeRegistered": {"event_id": "", "cell": CELL, "site": "s", "region": "r", "zone": "z", "tier": "onprem",
                       "arch": "x86_64", "registered_at": 0, "labels": {}},
    "NodeStatusChanged": {"event_id": "", "cell": CELL, "at": 0, "reason": "bench"},
    "TaskSubmitted": {"event_id": "", "tenant": "t", "cell": CELL, "qos_tier": "SILVER", "priority": 0, "labels": {}},
    "TaskStatusChanged": {"event_id": "", "cell": CELL, "exit_code": 0, "message": ""},
    "PolicyChanged": {"event_id": "", "cell": CELL, "at": 0},
    "CellTick": {"event_id": "", "cell": CELL},
    "ReservationBid": {"tenant": "t", "cell": CELL, "gang": True, "latest_start_at": None},
    "JobRound": {"tenant": "t", "cell": CELL, "accuracy": None, "aggregated": True},
}


class Cell:
    """A cell fed through ``decide`` with rising offsets and a cell clock that only rises."""

    def __init__(self, keep_finished: int | None = None) -> None:
        self.state = CellState(CELL)
        self.offset = 0
        self.now = 1
        self.n = 0
        self.aggregator_strategies: list[str] = []
        rules = [{"name": "fed", "match": {"probe": "fed"}, "strategy": "federated"}]
        config: dict[str, Any] = {"seed": 1, "retry_every_ms": 0, "rules": rules}
        if keep_finished is not None:
            config["retention"] = {"finished_tasks": keep_finished}
        self.send("PolicyChanged", {"strategy": "default", "config_json": json.dumps(config, sort_keys=True)})

    def send(self, kind: str, event: dict[str, Any]) -> list[Any]:
        self.offset += 1
        self.state, outs = decide(self.state, m.from_avro(kind, {**_FILL.get(kind, {}), **event}),
                                  ("bench.hist", 0, self.offset))
        return outs

    def tick(self, ms: int = 1) -> int:
        self.now += ms
        return self.now

    def node(self, nid: str, gpus: int = 8, model: str = "V100", cpu: int = 96_000) -> None:
        acc = [{"kind": "GPU", "model": model, "count": gpus, "memory_mib": 16384}] if gpus else []
        self.send("NodeRegistered", {"node_id": nid, "cpu_milli": cpu, "memory_mib": 393_216, "accelerators": acc})

    def task(self, name: str, *, gpus: int = 0, milli: int = 0, qos: str = "SILVER", labels: dict | None = None,
             job: str | None = None, cpu: int = 1000) -> list[Any]:
        self.n += 1
        return self.send("TaskSubmitted", {
            "task_id": name, "submitted_at": self.tick(), "qos_tier": qos, "labels": labels or {}, "job_id": job,
            "resources": {"cpu_milli": cpu, "memory_mib": 1024, "gpu_count": gpus, "gpu_milli": milli,
                          "gpu_models": []}})

    def status(self, tid: str, status: str) -> list[Any]:
        t = self.state.tasks[tid]
        return self.send("TaskStatusChanged", {"task_id": tid, "node_id": t.node or "", "status": status,
                                               "at": self.tick()})


def _rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096 / 2 ** 20


def build(keep_finished: int | None = None) -> tuple[Cell, list[str]]:
    """The cell and its live load: a reserved node whose GPUs bronze work shares, an elastic
    job, and 1,000 running tasks spread over the rest."""
    c = Cell(keep_finished)
    c.node("r0")
    bronze = [f"bronze-{i}" for i in range(8)]
    for tid in bronze:                                   # r0 is alone: they all land on it
        c.task(tid, gpus=1, milli=500, qos="BRONZE")
        c.status(tid, "RUNNING")
    c.send("ReservationBid", {"event_id": "b/r0", "bid_id": "r0", "at": c.tick(),
                              "resources": {"cpu_milli": 1000, "memory_mib": 1024, "gpu_count": 8, "gpu_milli": 1000},
                              "start_at": 300 * MIN, "duration_ms": 30 * MIN, "price": 2.0})
    c.now = MIN
    c.send("CellTick", {"at": c.now})
    assert c.state.reservations["by_node"].get("r0"), "the bid was not granted on r0"
    for i in range(300):
        c.node(f"g{i:03d}")
    for i in range(60):
        c.node(f"c{i:02d}", gpus=0)
    args = ElasticArgs(min_clients=2, max_clients=6, window=2, plateau=0.01)
    for i in range(2):
        c.task(f"job-c{i}", job="job", labels={"federated-role": "client", "data-site": "s"})
    c.task("job-agg", job="job", labels={"federated-role": "aggregator", "elastic": elastic_label(args, 32)})
    for i in range(3):
        c.task(f"fjob-c{i}", job="fjob", labels={"federated-role": "client", "data-site": "s", "probe": "fed"})
        c.status(f"fjob-c{i}", "RUNNING")
    for i in range(1000):
        tid = f"live-{i}"
        c.task(tid, gpus=1 if i % 2 else 0, milli=250 if i % 2 else 0)
        c.status(tid, "RUNNING")
    return c, bronze


def grow_history(c: Cell, n: int, job_size: int = 0, clients: bool = False) -> None:
    """``n`` more finished tasks; with ``job_size``, members of jobs of that many tasks: of
    array jobs (a job id each, no federated role: what a plain job submission makes), or
    with ``clients`` the clients of federated jobs (at a data site, with byte labels)."""
    for _ in range(n):
        tid = f"done-{c.n}"
        job = (f"fl-{c.n // job_size}" if clients else f"array-{c.n // job_size}") if job_size else None
        labels = {"federated-role": "client", "data-site": "s", "federated-up-bytes": "4000000"} if clients else None
        c.task(tid, gpus=1 if c.n % 2 else 0, milli=100 if c.n % 2 else 0, job=job, labels=labels)
        c.status(tid, "COMPLETED")


def probes(c: Cell, bronze: list[str], level: int, rounds: list[int]) -> dict[str, float]:
    def timed(fn: Callable[[], Any], count: int) -> float:
        started = time.perf_counter()
        for _ in range(count):
            fn()
        return round(1000 * (time.perf_counter() - started) / count, 3)

    ids = iter(range(10 ** 9))
    out: dict[str, float] = {}
    names = [f"probe-{level}-{i}" for i in range(PROBE_TASKS)]
    it = iter(names)
    out["submit"] = timed(lambda: c.task(next(it), gpus=1, milli=200), PROBE_TASKS)
    it = iter(names)
    out["complete"] = timed(lambda: c.status(next(it), "COMPLETED"), PROBE_TASKS)
    out["reserved_node_status"] = timed(lambda: c.status(bronze[next(ids) % len(bronze)], "RUNNING"), PROBE_TASKS)

    def clearing() -> None:
        k = next(ids)
        c.send("ReservationBid", {"event_id": f"b/{level}/{k}", "bid_id": f"{level}-{k}", "at": c.tick(),
                                  "resources": {"cpu_milli": 1000, "memory_mib": 1024, "gpu_count": 2,
                                                "gpu_milli": 1000},
                                  "start_at": c.now + 600 * MIN, "duration_ms": MIN, "price": 1.0})
        c.now = (c.now // MIN + 1) * MIN                  # the next clearing period
        c.send("CellTick", {"at": c.now})
    out["clearing"] = timed(clearing, 10)

    def elastic_round() -> None:
        rounds[0] += 1
        c.send("JobRound", {"event_id": f"job:round:{rounds[0]}", "job_id": "job", "round": rounds[0],
                            "loss": 1.0 / rounds[0], "at": c.tick()})
    out["elastic_round"] = timed(elastic_round, 50)

    strategies: set[str] = set()

    def aggregator() -> None:
        tid = f"fjob-agg-{level}-{next(ids)}"
        outs = c.task(tid, job="fjob", gpus=1, milli=500, labels={"federated-role": "aggregator", "probe": "fed"})
        strategies.update(o.provenance.strategy.name for o in outs if isinstance(o, m.TaskPlaced))
        c.status(tid, "COMPLETED")
    out["federated_aggregator"] = timed(aggregator, 50)
    # what the aggregators were placed by (the rule must have given them ``federated``)
    c.aggregator_strategies = sorted(strategies)

    def down_up() -> None:
        node = c.state.node_ids[1 + next(ids) % 300]
        c.send("NodeStatusChanged", {"node_id": node, "status": "DOWN", "at": c.tick()})
        c.send("NodeStatusChanged", {"node_id": node, "status": "READY", "at": c.tick()})
    out["node_down"] = timed(down_up, 10)

    def new_model() -> None:
        k = next(ids)
        c.node(f"new-{level}-{k}", gpus=8, model=f"M{level}-{k}")
        c.task(f"after-new-{level}-{k}", gpus=1, milli=300)
    out["new_gpu_model"] = timed(new_model, 5)
    return out


def run(levels: list[int], progress: Callable[[str], None] = print,
        keep_finished: int | None = None) -> dict[str, Any]:
    c, bronze = build(keep_finished)
    done = 0
    rounds = [0]
    rows = []
    for level in levels:
        grow_history(c, level - done)
        done = level
        rss = _rss_mib()
        started = time.perf_counter()
        snap_mib = len(json.dumps(c.state.to_snapshot())) / 2 ** 20
        snap_s = time.perf_counter() - started
        # what the scheduler does (streams/gc_pauses.py): a full collection's pause grows with
        # the heap, whatever the code walks; frozen, the probes time the code alone
        gc.collect()
        gc.freeze()
        row = {"finished_tasks": level, "tasks_in_cell": len(c.state.tasks),
               "tombstones": len(c.state.forgotten), "rss_mib": round(rss, 1),
               "snapshot_mib": round(snap_mib, 2), "snapshot_s": round(snap_s, 3),
               "ms_per_input": probes(c, bronze, level, rounds),
               # the probe of a reserved node measures a refill only while the token holds r0
               "r0_token": c.state.reservations["tokens"]["rsv-r0"]["status"],
               "aggregators_placed_by": c.aggregator_strategies}
        rows.append(row)
        progress(json.dumps(row))
    first, last = rows[0], rows[-1]
    added = (last["finished_tasks"] - first["finished_tasks"]) / 1000 or 1
    return {"keep_finished": keep_finished, "levels": rows,
            "ratio_last_to_first": {k: round(v / max(first["ms_per_input"][k], 1e-6), 2)
                                    for k, v in last["ms_per_input"].items()},
            "rss_mib_per_1000_finished": round((last["rss_mib"] - first["rss_mib"]) / added, 2),
            "snapshot_kib_per_1000_finished": round(1024 * (last["snapshot_mib"] - first["snapshot_mib"]) / added, 1)}


def memory(levels: list[int], progress: Callable[[str], None] = print,
            keep_finished: int | None = None, job_size: int = 0, clients: bool = False) -> dict[str, Any]:
    """The memory alone, as finished tasks pile up: the same cell and history, no probes, no
    freezing and no snapshot (the worker makes its snapshots in a forked child, so their
    peaks are not its own), with the Python heap's live bytes traced (``tracemalloc``, from
    before the cell is built) beside the RSS, which also counts what the allocator holds and
    does not give back. Slower than :func:`run` (tracing)."""
    import tracemalloc

    tracemalloc.start(1)
    try:
        c, _bronze = build(keep_finished)
        done, rows = 0, []
        for level in levels:
            grow_history(c, level - done, job_size, clients)
            done = level
            gc.collect()
            row = {"finished_tasks": level, "tasks_in_cell": len(c.state.tasks),
                   "tombstones": len(c.state.forgotten),
                   "past_clients": sum(len(cs) for cs in c.state.past_clients.values()),
                   "traced_mib": round(tracemalloc.get_traced_memory()[0] / 2 ** 20, 1),
                   "rss_mib": round(_rss_mib(), 1)}
            rows.append(row)
            progress(json.dumps(row))
    finally:
        tracemalloc.stop()
    return {"keep_finished": keep_finished, "mode": "memory", "job_size": job_size,
            "jobs": ("federated clients" if clients else "array jobs") if job_size else None, "levels": rows}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m suanli.bench.history_growth", description=__doc__.split("\n")[0])
    ap.add_argument("--levels", default="0,20000,60000", help="finished tasks at each measuring point, rising")
    ap.add_argument("--keep-finished", type=int, default=None,
                    help="the cell's retention.finished_tasks (default: the policy's default)")
    ap.add_argument("--memory", action="store_true",
                    help="measure the memory alone (traced heap, RSS, snapshot): no probes, no freezing")
    ap.add_argument("--job-size", type=int, default=0,
                    help="with --memory: the history's tasks are members of array jobs of this many tasks")
    ap.add_argument("--clients", action="store_true",
                    help="with --job-size: the members are federated clients (at a data site) instead")
    ap.add_argument("--json", help="also write the figures here")
    a = ap.parse_args(argv)
    levels = [int(x) for x in a.levels.split(",")]
    if a.job_size and not a.memory:
        ap.error("--job-size goes with --memory")
    if a.clients and not a.job_size:
        ap.error("--clients goes with --job-size")
    figures = (memory(levels, keep_finished=a.keep_finished, job_size=a.job_size, clients=a.clients) if a.memory
               else run(levels, keep_finished=a.keep_finished))
    print(json.dumps({k: v for k, v in figures.items() if k != "levels"}, indent=1))
    save(a.json, figures)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
