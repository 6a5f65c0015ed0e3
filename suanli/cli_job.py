"""``suanli job run | plan JOB.yaml``: mixed classical-quantum jobs, step by step (``suanli/jobs.py``);
``suanli job show JOB``: the member tasks of a job (tasks submitted with ``job: JOB``), their
nodes and sites, and a federated job's rounds (accuracy, loss, bytes, bytes per site pair).
``suanli job fed run | plan FED.yaml``: federated training jobs (``suanli/cli_fed.py``).

``run`` submits each step once the one before it has COMPLETED, prints progress as the steps
go and exits 0 when every step completed, 1 when a step failed (the reason printed), 2 for an
invalid job file. ``plan`` validates the file and prints the steps with their task ids, files
and env wiring, without services. ``show`` folds the log (``projections/lifecycle.py``, which
indexes tasks by their ``job_id``) and prints each member's status and node, in submission order;
exit 1 when the job has no member.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from suanli.config import settings


def _job_and_dir(args: argparse.Namespace):
    from suanli.jobs import new_run_id, read_job_file

    overrides = {k: v for k, v in (("cell", args.cell), ("tenant", args.tenant)) if v}
    job = read_job_file(Path(args.file), overrides)
    run_id = args.run_id or new_run_id()
    job_id = f"{job.name}-{run_id}"
    base = Path(args.file).resolve().parent if args.file != "-" else Path.cwd()
    job_dir = (Path(args.dir) if args.dir else base / job.dir if job.dir else settings().home / "jobs" / job_id)
    return job, run_id, job_dir.resolve(), base


def _plan(args: argparse.Namespace) -> int:
    from suanli.jobs import plan

    job, run_id, job_dir, base = _job_and_dir(args)
    steps = plan(job, run_id=run_id, job_dir=job_dir, base_dir=base)
    if args.json:
        print(json.dumps([{"index": s.index, "name": s.name, "task_id": s.task_id, "qpu": s.qpu,
                           "output": str(s.output), "input": str(s.input) if s.input else None,
                           "timeout_s": s.timeout_s, "task": s.spec.model_dump(exclude_none=True)} for s in steps],
                         indent=2))
        return 0
    print(f"job {job.name}-{run_id}: {len(steps)} steps in cell {job.cell} (tenant {job.tenant}), directory {job_dir}")
    for s in steps:
        kind = "quantum" if s.qpu else "classical"
        print(f"  {s.index}. {s.name} ({kind}) task {s.task_id}: {s.spec.command}")
        print(f"     input {s.input or '-'} -> output {s.output}" + (f"; timeout {s.timeout_s:g} s" if s.timeout_s else ""))
    return 0


def _run(args: argparse.Namespace) -> int:
    from suanli.jobs import run_job

    job, run_id, job_dir, base = _job_and_dir(args)
    result = run_job(job, settings=settings(), base_dir=base, job_dir=job_dir, run_id=run_id)
    if args.json:
        Path(args.json).write_text(json.dumps(result.to_json(), indent=1))
    return 0 if result.ok else 1


def job_lines(job_id: str, tasks: list, rounds: list | None = None, sites: dict | None = None,
              resizes: list | None = None) -> list[str]:
    """``suanli job show`` as text lines (pure): the member task views, then the job's rounds
    (JobRound payloads: accuracy, loss, clients, bytes), its traffic per site pair and the
    elastic policy's resizes (JobResized payloads). ``sites``: node id -> site, for the
    placement column."""
    counts: dict[str, int] = {}
    for t in tasks:
        counts[t.status] = counts.get(t.status, 0) + 1
    sites = sites or {}
    out = [f"job {job_id}: {len(tasks)} task(s), " + ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))]
    out.append(f"  {'task':<32} {'status':<14} {'node':<20} {'site':<12} {'tenant':<12} cell")
    for t in tasks:
        out.append(f"  {t.task_id[:32]:<32} {t.status:<14} {(t.node_id or '-')[:20]:<20} "
                   f"{sites.get(t.node_id, '-')[:12]:<12} {t.tenant[:12]:<12} {t.cell}")
    if rounds:
        from suanli.federated_jobs import cross_site_bytes

        out.append(f"  {'round':>5} {'accuracy':>8} {'loss':>8} {'clients':>7} {'KiB up':>9} {'KiB down':>9} "
                   f"{'KiB x-site':>10} {'secs':>6}")
        pairs: dict[tuple[str, str], int] = {}
        for e in rounds:
            acc = "-" if e.get("accuracy") is None else f"{e['accuracy']:.3f}"
            loss = "-" if e.get("loss") is None else f"{e['loss']:.3f}"
            out.append(f"  {e['round']:>5} {acc:>8} {loss:>8} {len(e['clients']):>7} "
                       f"{sum(e['bytes_up'].values()) / 1024:>9.1f} {sum(e['bytes_down'].values()) / 1024:>9.1f} "
                       f"{cross_site_bytes(e['links']) / 1024:>10.1f} {e['wall_ms'] / 1000:>6.1f}")
            for ln in e["links"]:
                pairs[(ln["src_site"], ln["dst_site"])] = pairs.get((ln["src_site"], ln["dst_site"]), 0) + ln["bytes"]
        flags = {("secagg" if rounds[-1].get("secagg") else "plain"), f"quantise {rounds[-1].get('quantise', 'none')}"}
        out.append(f"  bytes per site pair over {len(rounds)} round(s) ({', '.join(sorted(flags))}):")
        for (a, b), n in sorted(pairs.items()):
            out.append(f"    {a} -> {b}: {n / 1024:.1f} KiB" + ("" if a != b else " (inside the site)"))
    if resizes:
        out.append(f"  resized {len(resizes)} time(s) by the elastic policy:")
        for r in resizes:
            out.append(f"    after round {r['round']}: {r['action']} {r['clients_from']} -> {r['clients_to']} clients, "
                       f"batch {r['batch_size_from']} -> {r['batch_size_to']}: {r['reason']}")
    return out


def _show(args: argparse.Namespace) -> int:
    import sys

    from suanli.cli_tasks import _view

    view = _view()
    tasks = view.job_tasks(args.job, tenant=args.tenant)
    rounds = view.rounds_of(args.job, tenant=args.tenant)
    resizes = view.resizes_of(args.job, tenant=args.tenant)
    if not tasks:
        print(f"suanli: no task of job {args.job!r} in the log of namespace {settings().namespace!r}", file=sys.stderr)
        return 1
    cells = {t.cell for t in tasks}
    sites = {n.node_id: n.site for (cell, _), n in view.nodes.items() if cell in cells}
    if args.json:
        print(json.dumps({"job_id": args.job, "tasks": [
            {"task_id": t.task_id, "tenant": t.tenant, "cell": t.cell, "status": t.status, "node_id": t.node_id,
             "site": sites.get(t.node_id, ""), "submitted_at": t.submitted_at, "decision_id": t.decision_id}
            for t in tasks], "rounds": rounds, "resizes": resizes}, indent=2))
        return 0
    print("\n".join(job_lines(args.job, tasks, rounds, sites, resizes)))
    return 0


def add_commands(sub: argparse._SubParsersAction) -> None:
    """Register ``suanli job``."""
    from suanli.cli_services import NOTHING, STACK

    p = sub.add_parser("job", help="run a job of dependent steps (classical and quantum), one after the other")
    jsub = p.add_subparsers(dest="job_action", required=True)
    for name, func, needs, what in (("run", _run, STACK, "submit the steps one by one, each once the one before "
                                                          "it has completed"),
                                    ("plan", _plan, NOTHING, "check the job file and print its steps (no services)")):
        c = jsub.add_parser(name, help=what, description=__doc__)
        c.add_argument("file", help="the job file (YAML; - for stdin); see suanli/jobs.py or docs/quantum.md")
        c.add_argument("--cell", help="run in this cell instead of the file's")
        c.add_argument("--tenant", help="run as this tenant instead of the file's")
        c.add_argument("--dir", help="the job directory (default: the file's `dir`, relative to the file, else "
                                         "<home>/jobs/<name>-<run id>)")
        c.add_argument("--run-id", help="the run id in task ids (default: random)")
        if name == "plan":
            c.add_argument("--json", action="store_true", help="print the plan as JSON")
        else:
            c.add_argument("--json", metavar="FILE", help="write the job's result (steps, nodes, statuses, seconds) "
                                                          "to FILE")
        c.set_defaults(func=func, needs=needs)
    show = jsub.add_parser("show", help="the member tasks of a job (submitted with `job: JOB`): status and node",
                           description=__doc__)
    show.add_argument("job", help="the job id")
    show.add_argument("--tenant", help="only this tenant's member tasks")
    show.add_argument("--json", action="store_true", help="print JSON")
    show.set_defaults(func=_show, needs=STACK)
    from suanli.cli_fed import add_commands as add_fed
    add_fed(jsub)
