"""The gang experiment: 100 gang jobs of 4-16 tasks among the openb default workload, on the
openb cluster, under the FGD evaluation protocol (``replay/fgd_protocol.py``); no broker.

Cluster: the 1,523 openb nodes with the synthetic layout of ``bench/topology.py``
(racks of 16 consecutive CSV nodes, zones of 8 racks: 96 racks, 12 zones), named
opaquely per seed as the protocol does. Workload: the protocol's (seeded shuffle, tune
1.3), plus 100 gangs: each copies one GPU pod drawn from the pod list (``--shapes gpu``:
any GPU pod, shared or whole; ``whole``: whole-GPU pods only, the shape of distributed
training) N times (N uniform in 4..16), with labels ``gang=<job>`` and ``gang-size=N``. A
gang's members arrive together, at a seeded position early enough that every gang has
arrived before the metric's moment (arrived GPU = 100 % of capacity).

Arms, on the same sequence:

* ``plain``: the protocol's workload without the gangs (the published figure; the racks
  and zones change nothing for ``default``, so this equals ``suanli whatif --protocol fgd``);
* ``blind``: topology-blind ``default`` places every member one by one like any task (no
  gang labels);
* ``core``: every input through ``processors.core.decide``, the gang members with their
  labels: the core holds them until all N arrived, then starts them with the topology
  planner (``plugins/topology.plan_gang``: one rack, else one zone, else the fewest zones,
  all or nothing; inside the domain, ``default`` places the members);
* ``planner``: the same planner driven directly (``default`` places the other tasks; each
  gang's plan is folded into the cell state with ``evolve``), a cross-check of ``core``;
* ``packer``: the planner with ``guide=None``: the packing search's own best-fit choice
  of nodes inside the domain instead of ``default``'s (what the strategy adds).

Figures per arm (mean and sd over the seeds): the protocol's unallocated GPU % and
fragmentation % at arrived 100 %; gangs fully placed; gangs inside one zone and inside
one rack (all members placed there); zones spanned per placed gang.

Run: ``python -m suanli.bench.gangs [--seeds 42-51] [--arms plain,blind,core,packer] [--json FILE]``.
"""
from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from suanli.config import REPO_ROOT
from suanli.processors import CellState, decide, evolve
from suanli.processors import model as m
from suanli.processors.frag import TypicalTasks, cluster_frag_milli
from suanli.processors.plugins.topology import POLICY, plan_gang_detail
from suanli.replay.fgd_protocol import load_inputs, opaque_names, parse_seeds, policy_config, workload
from suanli.replay.openb import gpu_request

from .topology import with_racks

DATA = REPO_ROOT.parent / "shared" / "data" / "openb"
NODES_CSV = DATA / "openb_node_list_all_node.csv"
PODS_CSV = DATA / "openb_pod_list_default.csv"
TOPIC = "cell.openb"
ARMS = ("plain", "blind", "core", "planner", "packer")


def gangs_for(pods: list[dict[str, Any]], seed: int, n_gangs: int = 100, sizes: tuple[int, int] = (4, 16),
              shapes: str = "gpu") -> list[list[dict[str, Any]]]:
    """``n_gangs`` gangs: N copies of one GPU pod each (seeded)."""
    rnd = random.Random(f"gangs/{seed}")
    pool = [p for p in pods if p["resources"]["gpu_count"] > 0
            and (shapes == "gpu" or p["resources"]["gpu_milli"] >= 1000)]
    out = []
    for j in range(n_gangs):
        proto = pool[rnd.randrange(len(pool))]
        n = rnd.randint(*sizes)
        gid = f"gang{j:03d}"
        out.append([{**proto, "task_id": f"{gid}-{i:02d}", "event_id": f"openb/task/{gid}-{i:02d}",
                     "labels": {**proto["labels"], "gang": gid, "gang-size": str(n)}} for i in range(n)])
    return out


def sequence(pods: list[dict[str, Any]], capacity: int, seed: int, gangs: list[list[dict[str, Any]]]) -> list[Any]:
    """The protocol's workload with the gangs inserted as blocks (a list of members) at
    seeded positions, all before the point where arrived GPU could reach capacity."""
    tasks = workload(pods, capacity, seed)
    g_total = sum(gpu_request(t) for g in gangs for t in g)
    cum, last = 0, len(tasks)
    for i, t in enumerate(tasks):
        cum += gpu_request(t)
        if cum > capacity - g_total:
            last = i
            break
    rnd = random.Random(f"gang-positions/{seed}")
    at: dict[int, list[list[dict[str, Any]]]] = {}
    for g in gangs:
        at.setdefault(rnd.randrange(max(1, last)), []).append(g)
    out: list[Any] = []
    for i, t in enumerate(tasks):
        out.extend(at.get(i, ()))
        out.append(t)
    return out


def _unlabelled(t: dict[str, Any]) -> dict[str, Any]:
    return {**t, "labels": {k: v for k, v in t["labels"].items() if k not in ("gang", "gang-size")}}


def _placed(state: CellState, t: m.TaskSubmitted, row: int, devices: list[int], off: int, where: str) -> m.TaskPlaced:
    req = state.tasks[t.task_id].task.request
    prov = m.Provenance(input=m.LogPosition(topic=TOPIC, partition=0, offset=off),
                        strategy=m.StrategyRef(name="gang-planner", version="bench", config_digest=""),
                        candidates=(m.Candidate(node_id=state.node_ids[row], score=1.0, rank=1),), filtered=(),
                        path=("submitted", where, f"bind {state.node_ids[row]}"), decided_at=t.submitted_at)
    return m.TaskPlaced(event_id=f"{TOPIC}/{off}/placed", decision_id=f"{TOPIC}/{off}", task_id=t.task_id,
                        tenant=t.tenant, cell=state.cell, node_id=state.node_ids[row], gpu_devices=tuple(devices),
                        gpu_milli=req.gpu_milli if devices else 0, cpu_milli=req.cpu, memory_mib=req.mem,
                        provenance=prov)


def run_arm(arm: str, seed: int, nodes_csv: str = str(NODES_CSV), pods_csv: str = str(PODS_CSV),
            n_gangs: int = 100, shapes: str = "gpu") -> dict[str, Any]:
    """One arm, one seed."""
    t0 = time.perf_counter()
    nodes, pods, typical, capacity = load_inputs(nodes_csv, pods_csv)
    nodes = opaque_names(with_racks(nodes), seed)
    gangs = gangs_for(pods, seed, n_gangs, shapes=shapes) if arm != "plain" else []
    items = sequence(pods, capacity, seed, gangs)
    state = CellState("openb")
    off = 0
    for n in nodes:
        state, _ = decide(state, m.from_avro(m.NodeRegistered, n), (TOPIC, 0, off))
        off += 1
    state, _ = decide(state, m.PolicyChanged.of("openb", "default", policy_config("default", seed, typical)),
                      (TOPIC, 0, off))
    off += 1
    arrived = 0
    unalloc = frag = None
    plan_ms: list[float] = []
    for item in items:
        if isinstance(item, dict):
            members = [item]
        else:
            members = item
        if arm in ("planner", "packer") and not isinstance(item, dict):
            subs = [m.from_avro(m.TaskSubmitted, t) for t in members]
            for e in subs:
                evolve(state, e)
            tp = time.perf_counter()
            plan = plan_gang_detail(state, [state.tasks[e.task_id].task.request for e in subs],
                                    [e.task_id for e in subs], guide=POLICY if arm == "planner" else None)
            plan_ms.append((time.perf_counter() - tp) * 1000.0)
            if plan is not None:
                where = plan.describe(state)
                for e, (row, devices) in zip(subs, plan.placements):
                    evolve(state, _placed(state, e, row, devices, off, where))
                    off += 1
            else:
                for e in subs:
                    state.tasks[e.task_id].status = "PENDING"
                    state.enqueue(e.task_id)
            off += 1
            arrived += sum(gpu_request(t) for t in members)
        else:
            for t in members:
                if arm == "blind":
                    t = _unlabelled(t)
                state, _ = decide(state, m.from_avro(m.TaskSubmitted, t), (TOPIC, 0, off))
                off += 1
                arrived += gpu_request(t)
        if arrived >= capacity:
            unalloc = 100.0 - 100.0 * state.gpu_allocated_milli() / capacity
            frag = 100.0 * cluster_frag_milli(TypicalTasks.from_list(typical), state) / capacity
            break
    topo = state.topology
    placed = one_zone = one_rack = 0
    zones_spanned: list[int] = []
    sizes = []
    for g in gangs:
        recs = [state.tasks.get(t["task_id"]) for t in g]
        sizes.append(len(g))
        if not all(r is not None and r.status == "PLACED" for r in recs):
            continue
        placed += 1
        zs = {topo.domain_of(r.node, "zone") for r in recs}
        rs = {topo.domain_of(r.node, "rack") for r in recs}
        zones_spanned.append(len(zs))
        one_zone += len(zs) == 1
        one_rack += len(rs) == 1
    out = {"arm": arm, "seed": seed, "unallocated_gpu_pct": unalloc, "frag_gpu_pct": frag,
           "gangs": len(gangs), "gang_tasks": sum(sizes), "gangs_placed": placed, "gangs_one_zone": one_zone,
           "gangs_one_rack": one_rack,
           "zones_per_placed_gang": round(statistics.fmean(zones_spanned), 3) if zones_spanned else None,
           "seconds": round(time.perf_counter() - t0, 2)}
    if plan_ms:
        out["plan_ms_p50"] = round(statistics.median(plan_ms), 2)
        out["plan_ms_max"] = round(max(plan_ms), 2)
    return out


def _one(args: tuple) -> dict[str, Any]:
    return run_arm(*args)


def _mean_sd(xs: list[float]) -> dict[str, float]:
    xs = [x for x in xs if x is not None]
    if not xs:
        return {"mean": None, "sd": None}
    return {"mean": round(statistics.fmean(xs), 4), "sd": round(statistics.stdev(xs), 4) if len(xs) > 1 else 0.0}


def run(seeds: list[int], arms: list[str], workers: int = 1, n_gangs: int = 100, shapes: str = "gpu",
        nodes_csv: str = str(NODES_CSV), pods_csv: str = str(PODS_CSV)) -> dict[str, Any]:
    load_inputs(nodes_csv, pods_csv)
    jobs = [(a, s, nodes_csv, pods_csv, n_gangs, shapes) for a in arms for s in seeds]
    if workers > 1:
        with mp.get_context("fork" if sys.platform != "win32" else None).Pool(workers) as pool:
            rows = pool.map(_one, jobs)
    else:
        rows = [_one(j) for j in jobs]
    summary: dict[str, Any] = {}
    for a in arms:
        rs = [r for r in rows if r["arm"] == a]
        summary[a] = {k: _mean_sd([r[k] for r in rs]) for k in
                      ("unallocated_gpu_pct", "frag_gpu_pct", "gangs_placed", "gangs_one_zone", "gangs_one_rack",
                       "zones_per_placed_gang")}
    if "blind" in arms:
        blind = [r for r in rows if r["arm"] == "blind"]
        for a in arms:
            if a not in ("blind", "plain"):
                d = [p["unallocated_gpu_pct"] - b["unallocated_gpu_pct"]
                     for p, b in zip([r for r in rows if r["arm"] == a], blind)]
                summary[f"{a}_minus_blind_unallocated"] = _mean_sd(d)
    return {"experiment": "gangs", "seeds": seeds, "gangs": n_gangs, "shapes": shapes,
            "layout": "racks of 16 nodes, zones of 8 racks (bench/topology.py with_racks)",
            "summary": summary, "runs": rows}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m suanli.bench.gangs", description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", default="42-51")
    ap.add_argument("--arms", default="plain,blind,core,packer", help=f"comma-separated, of {', '.join(ARMS)}")
    ap.add_argument("--gangs", type=int, default=100)
    ap.add_argument("--shapes", choices=("gpu", "whole"), default="gpu",
                    help="gang members copy any GPU pod (gpu) or whole-GPU pods only (whole)")
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--json", help="write every figure here")
    a = ap.parse_args(argv)
    arms = a.arms.split(",")
    bad = [x for x in arms if x not in ARMS]
    if bad:
        ap.error(f"unknown arm(s) {', '.join(bad)}")
    res = run(parse_seeds(a.seeds), arms, a.workers, a.gangs, a.shapes)
    s = res["summary"]
    print(f"gangs: {a.gangs} jobs of 4-16 tasks ({a.shapes} pods), openb default workload, seeds {a.seeds}")
    print(f"  {'arm':8s} {'unalloc GPU %':>16s} {'frag GPU %':>16s} {'placed':>8s} {'one zone':>9s} "
          f"{'one rack':>9s} {'zones/gang':>10s}")
    for arm in arms:
        v = s[arm]

        def f(k: str, w: int = 8, p: int = 2) -> str:
            x = v[k]["mean"]
            return f"{x:{w}.{p}f}" if x is not None else f"{'-':>{w}s}"
        print(f"  {arm:8s} {f('unallocated_gpu_pct')} ± {v['unallocated_gpu_pct']['sd'] or 0:5.2f} "
              f"{f('frag_gpu_pct')} ± {v['frag_gpu_pct']['sd'] or 0:5.2f} {f('gangs_placed', 8, 1)} "
              f"{f('gangs_one_zone', 9, 1)} {f('gangs_one_rack', 9, 1)} {f('zones_per_placed_gang', 10, 2)}")
    for arm in arms:
        d = s.get(f"{arm}_minus_blind_unallocated")
        if d:
            print(f"  {arm} - blind, unallocated GPU %: {d['mean']:+.3f} ± {d['sd']:.3f} points (goal: <= +0.2)")
    if a.json:
        Path(a.json).write_text(json.dumps(res, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
