"""``suanli job run | plan JOB.yaml``: mixed classical-quantum jobs, step by step (``suanli/jobs.py``).

``run`` submits each step once the one before it has COMPLETED, prints progress as the steps
go and exits 0 when every step completed, 1 when a step failed (the reason printed), 2 for an
invalid job file. ``plan`` validates the file and prints the steps with their task ids, files
and env wiring, without services.
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
