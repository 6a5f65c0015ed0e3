"""``suanli bench``: run every benchmark, print a Markdown table, write JSON.

``--quick`` uses small sizes (CI runs it: it checks only that every figure is produced).
The full run uses the issue's sizes: E2E 5,000 nodes x 10,000 tasks; core at 1,000,
5,000 and 20,000 nodes; replay and one FGD-protocol experiment on the openb trace.
"""
from __future__ import annotations

import json
import os
import platform
import time
from pathlib import Path
from typing import Any, Callable

from suanli.bench.stages import markdown_rows as stage_rows
from suanli.bench.stages import missing_figures as missing_stage_figures
from suanli.config import settings

ANCHORS = {
    "kube-scheduler scheduler_perf (5,000 nodes)": "680-810 pods/s",
    "Nomad C1M (5,000 hosts, 5 servers)": "3,750 placements/s",
    "Armada design target": "1,666 jobs/s",
    "FGD simulator, one experiment": "~10 min",
    "plain numpy loop, one experiment": "~1.2 s",
}

SIZES = {
    "quick": {"core_nodes": (200, 1000, 2000), "core_tasks": 500, "replay_nodes": 500, "replay_tasks": 1000,
              "e2e_nodes": 300, "e2e_tasks": 600, "mem_nodes": 2000, "mem_tasks": 5000},
    "full": {"core_nodes": (1000, 5000, 20000), "core_tasks": 5000, "replay_nodes": 5000, "replay_tasks": 20000,
             "e2e_nodes": 5000, "e2e_tasks": 10000, "mem_nodes": 20000, "mem_tasks": 100000},
}


def machine() -> dict[str, Any]:
    mem_kib = 0
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            mem_kib = int(line.split()[1])
    return {"cores": os.cpu_count(), "memory_gib": round(mem_kib / 1024 / 1024, 1),
            "python": platform.python_version(), "platform": platform.platform()}


def run_suite(quick: bool, log: Callable[[str], None] = print, progress: bool = False) -> dict[str, Any]:
    """Every benchmark in turn. ``progress``: a bar over the steps on a terminal, labelled
    with the running one (``replay/progress.py``); ``log`` gets one line per step."""
    from suanli.bench import core, e2e, replay_speed
    from suanli.replay.progress import Progress
    from suanli.schemas.codec import Codec
    from suanli.schemas.registry import RegistryClient

    size = SIZES["quick" if quick else "full"]
    s = settings()
    openb = s.openb_dir
    out: dict[str, Any] = {"date": time.strftime("%Y-%m-%d"), "mode": "quick" if quick else "full",
                           "machine": machine(), "anchors": ANCHORS}
    fgd_policies = ("bestfit", "default")
    with Progress(5 + len(fgd_policies), "bench", unit="steps", enabled=progress) as bar:
        def step(label: str, message: str) -> None:
            bar.describe(f"bench: {label}")
            log(message)

        step("core", "core: decisions/s of the pure processor ...")
        out["core"] = core.scaling_curve(size["core_nodes"], size["core_tasks"])
        bar.update()
        step("memory", f"memory: a cell with {size['mem_nodes']} nodes and {size['mem_tasks']} tasks ...")
        out["memory"] = core.memory_footprint(size["mem_nodes"], size["mem_tasks"])
        bar.update()
        step("replay", "replay: events/s through the replay path ...")
        with RegistryClient(s.registry_url) as registry:
            out["replay"] = replay_speed.replay_events_per_second(Codec(registry), size["replay_nodes"],
                                                                  size["replay_tasks"])
        bar.update()
        step("fgd", "replay: one FGD-protocol experiment (default workload, seed 42) ...")
        out["fgd_experiment"] = []
        for policy in fgd_policies:
            bar.describe(f"bench: fgd {policy}")
            out["fgd_experiment"].append(replay_speed.fgd_experiment(
                str(openb / "openb_node_list_gpu_node.csv"), str(openb / "openb_pod_list_default.csv"), policy))
            bar.update()
        step("e2e", f"e2e: {size['e2e_nodes']} nodes, {size['e2e_tasks']} tasks through Kafka (three phases: "
                    "sustained, then stage latencies at 100/s and at half the sustained rate) ...")
        out["e2e"] = e2e.run(size["e2e_nodes"], size["e2e_tasks"])
        bar.update()
        bar.describe("bench: audit")
        out["audit"] = _audit(quick, log)
        bar.update()
    return out


def _audit(quick: bool, log: Callable[[str], None]) -> dict[str, Any]:
    """Audit query latency after N decisions (RocksDB index) and the rebuild rate from Kafka."""
    import asyncio
    import tempfile

    from suanli.projections import audit_bench

    n = 10_000 if quick else 100_000
    log(f"audit: {n} decisions into the RocksDB index, then queries; rebuild from Kafka ...")
    s = settings()
    with tempfile.TemporaryDirectory() as tmp:
        direct = audit_bench.bench_direct(n, Path(tmp))
        # the full run also rebuilds the same topic the pre-issue-16 way (record by record) and
        # times the queries on both rebuilt indexes (raw rows are decoded when a query reads them)
        rebuilt = asyncio.run(audit_bench.bench_kafka(n, Path(tmp), s.bootstrap_servers, s.registry_url,
                                                      previous=not quick))
    q = direct["queries"]
    return {"decisions": direct["decisions"], "p95_ms_by_task": q["why_by_task"]["p95_ms"],
            "p95_ms_by_node": q["list_by_node"]["p95_ms"],
            "p95_ms_by_node_one_tenant": q["list_by_node_and_tenant"]["p95_ms"],
            "rebuild": rebuilt["rebuild"], "rebuild_previous": rebuilt.get("rebuild_previous"),
            "rebuild_identical": rebuilt.get("identical"), "direct": direct}


def markdown(r: dict[str, Any]) -> str:
    lines = [f"# Benchmarks ({r['mode']}, {r['date']})", "",
             f"Machine: {r['machine']['cores']} cores, {r['machine']['memory_gib']} GiB, Python {r['machine']['python']}.",
             "", "| figure | value | anchor |", "|---|---|---|"]
    e = r["e2e"]
    lines += [
        f"| E2E sustained placements/s ({e['nodes']} nodes, {e['max']['tasks']} tasks) | {e['max']['placements_per_s']} | "
        "kube-scheduler 680-810; Nomad C1M 3,750; Armada 1,666 |",
        f"| E2E latency p50 / p95 / p99 at {e['half_load']['offered_rate']}/s offered (ms) | "
        f"{e['half_load']['latency_ms']['p50']} / {e['half_load']['latency_ms']['p95']} / {e['half_load']['latency_ms']['p99']} | target p99 <= 100 ms |",
    ]
    lines += stage_rows(e)
    for name, w in e["max"]["workers"].items():
        lines.append(f"| {name}: CPU s / RSS MiB (max phase) | {w['cpu_seconds']} / {w['rss_mib']} | |")
    if "placement_window" in e["max"]:
        win = e["max"]["placement_window"]
        per = ", ".join(f"{name} {us:,}" for name, us in win["cpu_us_per_placement"].items())
        lines.append(f"| CPU us per placement, first submission to last placement (max phase) | {per} "
                     f"({win['cores_busy']} of 2 cores busy) | target 10,000/s: 200 us in all |")
    for row in r["core"]["rows"]:
        lines.append(f"| core decisions/s at {row['nodes']} nodes | {row['decisions_per_s']} "
                     f"({row['us_per_decision']} us; cost x{row['cost_ratio']} for size x{row['size_ratio']}) | target >= 50,000 at 5,000 |")
    m = r["memory"]
    lines.append(f"| cell state: {m['nodes']} nodes + {m['tasks']} tasks, process RSS (MiB) | {m['rss_mib']} "
                 f"(state {m['state_mib']}) | target <= 1024 MiB |")
    rp = r["replay"]
    lines.append(f"| replay events/s ({rp['events']} events) | {rp['events_per_s']} | |")
    for x in r["fgd_experiment"]:
        lines.append(f"| one FGD-protocol experiment, {x['policy']} (s) | {x['seconds']} | target <= 1 s |")
    a = r["audit"]
    if "p95_ms_by_task" in a:
        lines.append(f"| audit query p95 by task / by node (all tenants) / by node (one tenant) after "
                     f"{a['decisions']} decisions (ms) | {a['p95_ms_by_task']} / {a['p95_ms_by_node']} / "
                     f"{a['p95_ms_by_node_one_tenant']} | target <= 20 ms |")
        lines.append(f"| audit rebuild from Kafka (events/s) | {a['rebuild'].get('events_per_s')} | |")
        prev = a.get("rebuild_previous")
        if prev:
            rq, pq = a["rebuild"].get("queries", {}), prev.get("queries", {})
            lines.append(f"| audit rebuild, the same topic record by record (pre-issue-16 way; events/s) | "
                         f"{prev.get('events_per_s')} (answers identical: {a.get('rebuild_identical')}) | |")
            if rq and pq:
                lines.append("| audit query p95 on the rebuilt index by task / by node / by node (one tenant), "
                             "raw rows vs JSON rows (ms) | " + " / ".join(
                                 f"{rq[k]['p95_ms']} vs {pq[k]['p95_ms']}" for k in
                                 ("why_by_task", "list_by_node", "list_by_node_and_tenant") if k in rq and k in pq)
                             + " | target <= 20 ms |")
    else:
        lines.append(f"| audit query p95 | {a.get('status')} | target <= 20 ms |")
    return "\n".join(lines) + "\n"


def check_complete(r: dict[str, Any]) -> list[str]:
    """Figures that are missing (the quick run's only check: nothing about speed)."""
    missing = []
    if not r["core"]["rows"] or any(row["decisions_per_s"] <= 0 for row in r["core"]["rows"]):
        missing.append("core decisions/s")
    if not r["memory"]["rss_mib"]:
        missing.append("memory footprint")
    if not r["replay"]["events_per_s"]:
        missing.append("replay events/s")
    if any(x["seconds"] is None for x in r["fgd_experiment"]):
        missing.append("FGD experiment time")
    e = r["e2e"]
    if not e["max"]["placements_per_s"]:
        missing.append("e2e placements/s")
    if any(e["half_load"]["latency_ms"][k] != e["half_load"]["latency_ms"][k] for k in ("p50", "p95", "p99")):
        missing.append("e2e latency percentiles")
    missing += missing_stage_figures(e)
    if "p95_ms_by_task" not in r["audit"]:
        missing.append("audit query latency")
    if not e["max"]["workers"]:
        missing.append("worker CPU/RSS")
    return missing


def write(r: dict[str, Any], json_path: Path | None, md_path: Path | None) -> None:
    if json_path:
        json_path.write_text(json.dumps(r, indent=2) + "\n")
    if md_path:
        md_path.write_text(markdown(r))
