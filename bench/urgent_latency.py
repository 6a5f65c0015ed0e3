"""Urgent tasks behind a full queue and an open batch window, on the real stack (issue 14,
acceptance check "Tiers").

    python -m suanli.bench.urgent_latency [--queued 5000] [--urgent 500] [--rate 20] [--json out.json]

A control plane of its own (a fresh namespace on the running broker and registry: the intake,
scheduler and telemetry workers of ``suanli up`` and the simulated openb cluster, 1,523 nodes),
then, each step waiting on the log (never a sleep):

1. **fill**: the openb trace's GPU pods (SILVER, normal tier) until their GPU demand is
   ``--fill`` times the cluster's GPUs; every one decided, every placed one RUNNING;
2. **queue**: ``--queued`` normal tasks that cannot fit now (``--queued-gpus`` whole GPUs each,
   more than any node has free): each must be answered TaskPending and stay queued;
3. **batch window**: ``--batch`` tasks labelled ``scheduling: batch`` (trace GPU shapes), with
   the policy's ``qos.batch_window_ms`` (``--batch-window-ms``, default 10 minutes) so the
   window is open for the whole measurement; then a marker task, decided after them (the log
   is ordered), so the window holds them before the first urgent task arrives;
4. **urgent**: ``--urgent`` CPU-only tasks labelled ``scheduling: urgent`` at ``--rate`` per
   second, each running ``--urgent-run-s`` wall seconds (so they also complete during the run:
   releases, queue retries, as in life).

**The figure**: per urgent task, its first decision's record timestamp on the decisions topic
minus its TaskSubmitted record's timestamp in the cell log. The cell log's is the broker's
append time (``core_topics`` creates it with LogAppendTime): when the submission arrived in
the log. The decision's is CreateTime, the scheduler's producer's clock when it produced the
decision (after its micro-batch was decided, before the broker's acknowledgement). Both clocks
are this machine's. The bench reads both topics' types and reports them
(``timestamp_types``); on a cell log created before 2026-12-05 (CreateTime) the start is
intake's send instead, before its produce request. p50 / p99 / max (nearest rank, 1 ms resolution) against the goal
p99 <= 10 ms. Besides, from the scheduler worker's own histogram (``streams/app.py``,
``DecisionLatency``; the window's difference of two writes): for the TaskSubmitted inputs of the
window, wall ms from the record's log timestamp to (a) the start of its micro-batch, (b) the
core's answer, (c) the broker's acknowledgement of the outputs, and from (a) to (b); the core's
time per input kind, the micro-batch sizes and the snapshot writes, which say where a slow
answer waited; the CPU each plane process and the whole machine used meanwhile; and the
brokers' partition count and GC pauses meanwhile (``deploy/jvm_gc_log.py``: a broker whose heap
is nearly full, e.g. from thousands of partitions of old namespaces, pauses every second or two). As a
control, the same cell-log records as received by the bench's own aiokafka consumer (the
transport's floor on this machine, plus the bench process's own delays).

A run is void when a node turns SUSPECT (heartbeats late in the cell log: a starved machine);
the bench then stops with ``MachineTooBusy``. The setup submits at ``--submit-rate`` (150/s) so
the scheduler keeps up. The stack must be up (``suanli stack up``); this never starts or stops
it. The workers and the simulator it starts are stopped at the end.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from suanli.bench.gold_migration import (Follower, StackPlane, cluster_gpus, dist, gpu_milli, gpu_pods, make_task,
                                         publish_all, set_policy)

GOAL_P99_MS = 10
URGENT = {"scheduling": "urgent"}
BATCH = {"scheduling": "batch"}


@dataclass
class Options:
    nodes_csv: Path
    pods_csv: Path
    fill: float = 1.0
    queued: int = 5000
    queued_gpus: int = 8
    batch: int = 100
    batch_window_ms: int = 600_000
    urgent: int = 500
    rate: float = 20.0
    urgent_run_s: float = 5.0
    submit_rate: float = 150.0          # fill, queue and batch submissions per second
    time_scale: float = 0.001
    timeout: float = 300.0
    policy: dict[str, Any] = field(default_factory=dict)    # merged over {"qos": {"batch_window_ms": ...}}


def _policy(o: Options) -> dict[str, Any]:
    pol = json.loads(json.dumps(o.policy))
    pol.setdefault("qos", {}).setdefault("batch_window_ms", o.batch_window_ms)
    return pol


def read_latency(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


async def fresh_latency(path: Path, after_ms: int, timeout: float = 30.0) -> dict[str, Any]:
    """The scheduler's next latency write after wall time ``after_ms``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        s = read_latency(path)
        if s and s["updated_ms"] > after_ms:
            return s
        await asyncio.sleep(0.1)
    raise TimeoutError(f"the scheduler did not write {path} after {after_ms} within {timeout:.0f} s")


def hist_delta(after: dict[str, int], before: dict[str, int]) -> dict[int, int]:
    out = {int(k): v - before.get(k, 0) for k, v in after.items()}
    return {k: v for k, v in out.items() if v > 0}


def hist_dist(h: dict[int, int]) -> dict[str, Any]:
    """count, p50, p99, max (nearest rank) of a {bucket: count} histogram (bucket lower bounds)."""
    total = sum(h.values())
    if not total:
        return {"count": 0}
    out: dict[str, Any] = {"count": total}
    for name, q in (("p50", 50), ("p90", 90), ("p99", 99)):
        rank, seen = max(1, -(-q * total // 100)), 0
        for b in sorted(h):
            seen += h[b]
            if seen >= rank:
                out[name] = b
                break
    out["max"] = max(h)
    return out


def worker_window(s0: dict[str, Any], s1: dict[str, Any]) -> dict[str, Any]:
    """What the scheduler measured between two of its writes."""
    if s0["pid"] != s1["pid"]:
        raise RuntimeError("the scheduler restarted during the window; its figures would mix two processes")
    out: dict[str, Any] = {"window_s": round((s1["updated_ms"] - s0["updated_ms"]) / 1000, 1)}
    stages = s1["kinds"].get("TaskSubmitted", {})
    before = s0["kinds"].get("TaskSubmitted", {})
    out["task_submitted"] = {stage: hist_dist(hist_delta(h, before.get(stage, {}))) for stage, h in stages.items()
                             if stage.endswith("_ms")}
    inb = hist_dist(hist_delta(stages.get("in_batch_100us", {}), before.get("in_batch_100us", {})))
    out["task_submitted"]["in_batch_ms"] = {k: (v / 10 if k != "count" else v) for k, v in inb.items()}
    apply = {}
    for kind, a in s1["apply"].items():
        b = s0["apply"].get(kind, {"count": 0, "total_us": 0, "max_us": 0})
        n = a["count"] - b["count"]
        if n:
            apply[kind] = {"count": n, "mean_us": round((a["total_us"] - b["total_us"]) / n),
                           "max_us_ever": a["max_us"]}
    out["apply"] = apply
    batches = s1["batches"] - s0["batches"]
    out["batches"] = {"count": batches, "mean_events": round((s1["batch_events"] - s0["batch_events"]) / batches, 1)
                      if batches else None, "max_events_ever": s1["batch_max"]}
    snaps = s1["snapshots"] - s0["snapshots"]
    out["snapshots"] = {"count": snaps, "mean_ms": round((s1["snapshot_ms_total"] - s0["snapshot_ms_total"]) / snaps, 1)
                        if snaps else None, "max_ms_ever": s1["snapshot_ms_max"]}
    if "batch_waits" in s1:             # batches begun after a quiet (2 ms wait) and a busy (20 ms) one
        out["batches"]["waits"] = {k: n - s0.get("batch_waits", {}).get(k, 0) for k, n in s1["batch_waits"].items()}
    if "snapshot_forks" in s1:          # serialised in a forked child: what the loop itself spent
        forks = s1["snapshot_forks"] - s0["snapshot_forks"]
        out["snapshots"]["loop"] = {
            "forks": forks,
            "fork_mean_ms": round((s1["snapshot_fork_ms_total"] - s0["snapshot_fork_ms_total"]) / forks, 2)
            if forks else None, "fork_max_ms_ever": s1["snapshot_fork_ms_max"],
            "store_mean_ms": round((s1["snapshot_store_ms_total"] - s0["snapshot_store_ms_total"]) / snaps, 2)
            if snaps else None, "store_max_ms_ever": s1["snapshot_store_ms_max"]}
    if "gc" in s1:                      # the collector's pauses (streams/gc_pauses.py), per generation
        out["gc"] = {}
        for g, a in s1["gc"].items():
            if not isinstance(a, dict):         # freezes, frozen: as of the window's end
                out["gc"][g] = a
                continue
            b = s0.get("gc", {}).get(g, {"count": 0, "total_ms": 0.0})
            out["gc"][g] = {"count": a["count"] - b["count"], "total_ms": round(a["total_ms"] - b["total_ms"], 1),
                            "max_ms_ever": a["max_ms"]}
    return out


def cpu_sample(pids: dict[str, int | None]) -> dict[str, Any]:
    """utime + stime (s) of each process, the machine's busy and total jiffies, and when."""
    from suanli.bench.telemetry import proc_cpu_seconds

    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]
    procs = {}
    for name, pid in pids.items():
        try:
            procs[name] = proc_cpu_seconds(pid) if pid else None
        except OSError:
            procs[name] = None
    return {"at": time.monotonic(), "procs": procs, "busy": sum(fields) - idle, "total": sum(fields)}


def cpu_window(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """% of one core per process, and the machine's busy % (all CPUs), between two samples."""
    wall = b["at"] - a["at"]
    procs = {k: round(100 * (b["procs"][k] - a["procs"][k]) / wall, 1) for k in a["procs"]
             if a["procs"].get(k) is not None and b["procs"].get(k) is not None}
    return {"process_pct_of_one_core": procs,
            "machine_busy_pct": round(100 * (b["busy"] - a["busy"]) / max(1, b["total"] - a["total"]), 1)}


async def broker_window(s: Any, start: float, end: float) -> dict[str, Any]:
    """The brokers while the urgent tasks arrived: how many partitions they hold (each costs
    heap) and each one's GC pauses in ``[start, end)`` from its collection log
    (``deploy/jvm_gc_log.py``; None for a broker started without one)."""
    from aiokafka import AIOKafkaClient

    from suanli.deploy import jvm_gc_log
    from suanli.deploy.stack import broker_services, gc_log_of
    from suanli.streams.kafka_security import client_options

    client = AIOKafkaClient(bootstrap_servers=s.bootstrap_servers, **client_options(s.bootstrap_servers))
    await client.bootstrap()
    try:
        md = await client.fetch_all_metadata()
    finally:
        await client.close()
    pauses = {b.name: jvm_gc_log.read_pauses(gc_log_of(b), start, end) for b in broker_services(s)}
    return {"partitions": sum(len(md.partitions_for_topic(t) or ()) for t in md.topics()),
            "gc_pauses": {k: p.as_dict() if p is not None else None for k, p in pauses.items()}}


def workload(o: Options, run: str, cell: str) -> dict[str, list[dict[str, Any]]]:
    pods = gpu_pods(o.pods_csv)
    fill, demand, i = [], 0, 0
    capacity = cluster_gpus(o.nodes_csv) * 1000
    while demand < o.fill * capacity:
        t = make_task(pods[i % len(pods)], run=run, cell=cell, name=f"fill-{i:05d}", tier="SILVER")
        fill.append(t)
        demand += gpu_milli(t)
        i += 1
    big = {**pods[0], "resources": {**pods[0]["resources"], "gpu_count": o.queued_gpus, "gpu_milli": 1000,
                                    "cpu_milli": 4000, "memory_mib": 8192}}
    queued = [make_task(big, run=run, cell=cell, name=f"queued-{i:05d}", tier="SILVER") for i in range(o.queued)]
    batch = [make_task(pods[(i * 7) % len(pods)], run=run, cell=cell, name=f"batch-{i:04d}", tier="SILVER",
                       labels=BATCH) for i in range(o.batch)]
    marker = [make_task(big, run=run, cell=cell, name="marker", tier="SILVER")]
    small = {**pods[0], "resources": {**pods[0]["resources"], "gpu_count": 0, "gpu_milli": 0, "cpu_milli": 1000,
                                      "memory_mib": 2048, "gpu_models": []}}
    run_ms = int(o.urgent_run_s / o.time_scale * 1000) if o.time_scale else 0
    urgent = [make_task(small, run=run, cell=cell, name=f"urgent-{i:04d}", tier="SILVER", labels=URGENT,
                        duration_ms=run_ms) for i in range(o.urgent)]
    return {"fill": fill, "queued": queued, "batch": batch, "marker": marker, "urgent": urgent}


def _timestamps_meaning(cell_log: str, decisions: str) -> str:
    """What the figure subtracts, given the two topics' timestamp types."""
    whose = {("cell", "LogAppendTime"): "the broker's append time (its arrival in the cell log)",
             ("cell", "CreateTime"): "CreateTime (intake's producer, before its produce request)",
             ("decision", "CreateTime"): "CreateTime (the scheduler's producer, once decided)",
             ("decision", "LogAppendTime"): "the broker's append time (once the decision was written)"}
    return (f"decision record timestamp on the decisions topic, {whose['decision', decisions]}, minus the "
            f"TaskSubmitted record's timestamp in the cell log, {whose['cell', cell_log]}; one machine's clock, ms")


async def scenario(o: Options, plane: StackPlane, say: Callable[[str], None]) -> dict[str, Any]:
    from suanli.schemas.codec import Codec
    from suanli.schemas.registry import RegistryClient
    from suanli.streams.app import latency_path
    from suanli.streams.kafka_io import EventProducer, timestamp_types

    s = plane.settings
    w = workload(o, plane.run, plane.cell)
    ids = {k: {t["task_id"] for t in v} for k, v in w.items()}
    path = latency_path(s)
    marks: dict[str, float] = {"began": time.monotonic()}
    with RegistryClient(s.registry_url) as registry:
        codec = Codec(registry)
        async with Follower(plane, codec) as f, \
                EventProducer(s.bootstrap_servers, codec, namespace=s.namespace, linger_ms=0) as producer:
            await set_policy(producer, plane.cell, plane.run, _policy(o))
            await f.until(lambda v: len(v.nodes) >= plane.expected_nodes and v.policies >= 1, o.timeout,
                          f"{plane.expected_nodes} nodes registered and the policy in the cell log")
            marks["registered"] = time.monotonic()
            say(f"urgent latency: {plane.expected_nodes} nodes registered; filling with {len(w['fill'])} tasks")

            await publish_all(producer, w["fill"], o.submit_rate)
            await f.until(lambda v: all(v.decided(t) for t in ids["fill"])
                          and all(v.runs_where_placed(t) for t in ids["fill"] if t in v.holding), o.timeout,
                          "every fill task decided and every placed one RUNNING")
            marks["filled"] = time.monotonic()
            v = f.view
            say(f"urgent latency: fill placed {sum(1 for t in ids['fill'] if t in v.holding)}, pending "
                f"{len(ids['fill'] & v.pending)}; queueing {len(w['queued'])} normal tasks")

            await publish_all(producer, w["queued"], o.submit_rate)
            await f.until(lambda v: all(v.decided(t) for t in ids["queued"]), o.timeout,
                          f"the {len(w['queued'])} queued tasks decided")
            marks["queued"] = time.monotonic()
            say(f"urgent latency: queued {len(ids['queued'] & f.view.pending)} pending; {len(w['batch'])} batch "
                "tasks into the window")

            await publish_all(producer, w["batch"] + w["marker"], o.submit_rate)
            await f.until(lambda v: v.decided(w["marker"][0]["task_id"])
                          and all(t in v.submitted for t in ids["batch"]), o.timeout,
                          "the batch tasks in the cell log and the marker after them decided")
            await asyncio.sleep(0)
            v = f.view
            batch_before = {t: v.first_decision.get(t) for t in ids["batch"]}
            pending_before = len(v.pending & ids["queued"])
            marks["batch_open"] = time.monotonic()
            s0 = await fresh_latency(path, int(time.time() * 1000))
            say(f"urgent latency: window holds {len(ids['batch'])} batch tasks "
                f"({sum(1 for x in batch_before.values() if x)} answered so far); {pending_before} normal tasks "
                f"queued; submitting {o.urgent} urgent tasks at {o.rate:g}/s")
            load0 = os.getloadavg()[0]
            cpu0 = cpu_sample(plane.pids())
            wall0 = time.time()

            publishing = asyncio.create_task(publish_all(producer, w["urgent"], o.rate))
            await f.until(lambda v: publishing.done() and all(v.decided(t) for t in ids["urgent"]),
                          o.timeout + o.urgent / o.rate, f"the {o.urgent} urgent tasks decided")
            await publishing
            marks["urgent_decided"] = time.monotonic()
            load1 = os.getloadavg()[0]
            cpu1 = cpu_sample(plane.pids())
            wall1 = time.time()
            s1 = await fresh_latency(path, int(time.time() * 1000))
            broker = await broker_window(s, wall0, wall1)
            stamps = await timestamp_types(s.bootstrap_servers, [f.names.cell_log, f.names.decisions])
            await f.catch_up()
            v = f.view

    rows = []
    for t in sorted(ids["urgent"]):
        kind, ts = v.first_decision[t]
        rows.append({"task_id": t, "kind": kind, "ms": ts - v.submitted[t], "submitted_at_ms": v.submitted[t]})
    lat = [r["ms"] for r in rows]
    queued_pending_after = len(v.pending & ids["queued"])
    batch_after = Counter(v.first_decision[t][0] if t in v.first_decision else "none" for t in ids["batch"])
    figures: dict[str, Any] = {
        "namespace": s.namespace, "cell": plane.cell, "nodes": plane.expected_nodes,
        "cluster_gpus": cluster_gpus(o.nodes_csv), "policy": _policy(o), "cpus": os.cpu_count(),
        "fill_tasks": len(w["fill"]), "fill_placed": sum(1 for t in ids["fill"] if v.first_decision.get(t, ("",))[0]
                                                         == "TaskPlaced"),
        "queued_tasks": len(w["queued"]), "queued_pending_before": pending_before,
        "queued_pending_after": queued_pending_after, "normal_pending_total_after": len(
            v.pending & (ids["queued"] | ids["fill"] | ids["marker"])),
        "batch_tasks": len(w["batch"]), "batch_first_answers": dict(batch_after),
        "batch_placed": sum(1 for t in ids["batch"] if t in v.holding),
        "urgent_tasks": len(rows), "urgent_rate": o.rate, "urgent_run_s": o.urgent_run_s,
        "urgent_answers": dict(Counter(r["kind"] for r in rows)),
        "submitted_to_decision_ms": dist(lat),
        # control: the same cell-log records as received by this bench's own aiokafka consumer (the
        # transport alone, plus this process's own delays): the floor any consumer of the log sees here
        "bench_reader_ms": dist([round(v.received[t] - v.submitted[t], 1) for t in ids["urgent"]]),
        "timestamps": _timestamps_meaning(stamps[f.names.cell_log], stamps[f.names.decisions]),
        "timestamp_types": {"cell_log": stamps[f.names.cell_log], "decisions": stamps[f.names.decisions]},
        "worker": worker_window(s0, s1),
        "loadavg_1m": {"before": load0, "after": load1},
        "cpu_during_urgent": cpu_window(cpu0, cpu1),
        "broker_during_urgent": broker,
        "goal_p99_ms": GOAL_P99_MS,
        "phases_s": {k: round(marks[k] - marks["began"], 1) for k in marks},
        "slowest": sorted(rows, key=lambda r: -r["ms"])[:10],
    }
    figures["goal_met"] = bool(lat) and figures["submitted_to_decision_ms"]["p99"] <= GOAL_P99_MS
    return figures


def run(o: Options, say: Callable[[str], None] = print, prefix: str = "benchul",
        argv: dict[str, list[str]] | None = None) -> dict[str, Any]:
    plane = StackPlane(o.nodes_csv, time_scale=o.time_scale, prefix=prefix, log=say, argv=argv)
    plane.start()
    try:
        return asyncio.run(scenario(o, plane, say))
    finally:
        plane.stop()


def report(f: dict[str, Any]) -> str:
    d = f["submitted_to_decision_ms"]
    wk = f["worker"]["task_submitted"]

    def stage(name: str) -> str:
        x = wk.get(name, {})
        return (f"p50 {x.get('p50')} / p99 {x.get('p99')} / max {x.get('max')} ms (n={x.get('count', 0)})"
                if x.get("count") else "(none)")

    lines = [
        f"urgent tasks on the real stack: {f['nodes']} simulated nodes, {f['cpus']} CPUs; "
        f"{f['fill_tasks']} fill tasks ({f['fill_placed']} placed), {f['queued_pending_before']} normal tasks "
        f"queued (PENDING), {f['batch_tasks']} batch tasks in an open window "
        f"({f['policy']['qos']['batch_window_ms'] / 1000:g} s)",
        f"  {f['urgent_tasks']} urgent tasks at {f['urgent_rate']:g}/s: answers {f['urgent_answers']}",
        f"  cell-log arrival -> decision (record timestamps; cell log {f['timestamp_types']['cell_log']}, "
        f"decisions {f['timestamp_types']['decisions']}): p50 {d['p50']} ms, p99 {d['p99']} ms, "
        f"max {d['max']} ms (mean {d['mean']})",
        f"  control: the bench's own aiokafka reader got the same cell-log records after p50 "
        f"{f['bench_reader_ms']['p50']} / p99 {f['bench_reader_ms']['p99']} / max {f['bench_reader_ms']['max']} ms",
        f"  scheduler worker, TaskSubmitted inputs of the window: log -> batch start {stage('start_ms')}; "
        f"-> decided {stage('decided_ms')}; -> acked {stage('acked_ms')}; batch start -> decided "
        f"{stage('in_batch_ms')}",
        "  core time per input kind (mean us): " + ", ".join(f"{k} {a['mean_us']} (n={a['count']})"
                                                          for k, a in sorted(f["worker"]["apply"].items())),
        f"  micro-batches {f['worker']['batches']}; snapshots {f['worker']['snapshots']}",
        f"  queued normal tasks still pending after: {f['queued_pending_after']}; batch answers "
        f"{f['batch_first_answers']}; load average {f['loadavg_1m']}",
        f"  CPU while the urgent tasks arrived: machine {f['cpu_during_urgent']['machine_busy_pct']} % busy; "
        + ", ".join(f"{k} {v} %" for k, v in sorted(f["cpu_during_urgent"]["process_pct_of_one_core"].items()))
        + " of one core",
        f"  brokers meanwhile: {f['broker_during_urgent']['partitions']} partitions; GC pauses "
        + ", ".join(f"{k} {v['count']} ({v['total_ms']} ms, longest {v['max_ms']} ms)" if v else f"{k} (no GC log)"
                    for k, v in f["broker_during_urgent"]["gc_pauses"].items()),
        f"  goal p99 <= {GOAL_P99_MS} ms: {'met' if f['goal_met'] else 'NOT met'}",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    from suanli.config import settings

    openb = settings().openb_dir
    ap = argparse.ArgumentParser(prog="python -m suanli.bench.urgent_latency", description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=Path, default=openb / "openb_node_list_all_node.csv")
    ap.add_argument("--pods", type=Path, default=openb / "openb_pod_list_default.csv")
    ap.add_argument("--fill", type=float, default=1.0, help="fill GPU demand / cluster GPUs (default 1.0)")
    ap.add_argument("--queued", type=int, default=5000, help="normal tasks queued (default 5000)")
    ap.add_argument("--queued-gpus", type=int, default=8, help="whole GPUs each queued task asks for (default 8)")
    ap.add_argument("--batch", type=int, default=100, help="batch tasks in the open window (default 100)")
    ap.add_argument("--batch-window-ms", type=int, default=600_000, help="policy qos.batch_window_ms")
    ap.add_argument("--urgent", type=int, default=500, help="urgent tasks (default 500)")
    ap.add_argument("--rate", type=float, default=20.0, help="urgent tasks per second (default 20)")
    ap.add_argument("--urgent-run-s", type=float, default=5.0, help="wall seconds each urgent task runs")
    ap.add_argument("--submit-rate", type=float, default=150.0,
                    help="fill, queue and batch submissions per second (default 150: the scheduler keeps up)")
    ap.add_argument("--policy", default="{}", help="more policy config (JSON), merged under the batch window")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds per wait")
    ap.add_argument("--json", metavar="FILE", help="write every figure here")
    args = ap.parse_args(argv)
    o = Options(nodes_csv=args.nodes, pods_csv=args.pods, fill=args.fill, queued=args.queued,
                queued_gpus=args.queued_gpus, batch=args.batch, batch_window_ms=args.batch_window_ms,
                urgent=args.urgent, rate=args.rate, urgent_run_s=args.urgent_run_s, submit_rate=args.submit_rate,
                timeout=args.timeout,
                policy=json.loads(args.policy))
    figures = run(o, say=lambda m: print(m, file=sys.stderr, flush=True))
    print(report(figures))
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2) + "\n")
    return 0 if figures["goal_met"] else 1


if __name__ == "__main__":
    sys.exit(main())
