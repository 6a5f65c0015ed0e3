"""``suanli job fed run | plan FED.yaml``: federated training jobs (``suanli/federated_jobs.py``).

``run`` sets up the Flower venv if needed (``deploy/flower.py``), submits the aggregator and
the clients, prints each round (accuracy, loss, bytes, bytes across sites) and, for an
elastic job, each resize as it comes, and exits 0 when every round completed, 1 when the job
failed (the reason printed), 2 for an invalid job file. ``plan`` validates the file and
prints the tasks, their sites and labels (an elastic job: the clients it starts with and the
order growth adds the others in), without services.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from suanli.config import settings


def _overrides(args: argparse.Namespace) -> dict:
    return {k: v for k, v in (("cell", args.cell), ("tenant", args.tenant)) if v}


def _plan(args: argparse.Namespace) -> int:
    from suanli.federated_jobs import Ports, plan, read_spec_file

    job = read_spec_file(Path(args.file), _overrides(args))
    job_id = f"{job.name}-{args.run_id or 'RUN'}"
    n = job.num_clients
    ports = Ports(1, tuple(range(10, 10 + n)))       # placeholders: a run picks free ones
    planned = plan(job, job_id=job_id, job_dir=Path(args.dir or f"<home>/jobs/{job_id}"), ports=ports,
                   python="<flower venv>/bin/python")
    tasks = [*planned.clients, planned.aggregator]
    later = planned.order[len(planned.clients):]          # elastic: the partitions growth adds, in order
    if args.json:
        print(json.dumps([{"role": t.role, "task_id": t.task_id, "site": t.site, "partition": t.partition,
                           "task": t.spec.model_dump(exclude_none=True)} for t in tasks], indent=2))
        return 0
    e = job.elastic
    if e is None:
        secagg = f"on (threshold {job.secagg_threshold})" if job.secagg else "off"
        print(f"federated job {job_id}: {n} clients in {len(job.clouds)} clouds, {job.rounds} rounds, secagg "
              f"{secagg}, quantise {job.quantise}; cell {job.cell}, tenant {job.tenant}")
    else:
        a = e.policy
        secagg = "on (shares: every client of the round, threshold: 3/5 of them, >= 2)" if job.secagg else "off"
        print(f"federated job {job_id}: elastic, {e.start_clients} clients at the start, {a.min_clients}..{a.max_clients} "
              f"of {n} data partitions in {len(job.clouds)} clouds, batch size {e.batch_size} "
              f"({a.min_batch}..{a.max_batch}), {job.rounds} rounds, secagg {secagg}, quantise {job.quantise}; "
              f"cell {job.cell}, tenant {job.tenant}")
    for t in planned.clients:
        print(f"  client {t.task_id}: partition {t.partition}, pinned to site {t.site}")
    if later:
        print("  growth adds, in this order: " + ", ".join(f"partition {pt} ({site})" for pt, site in later))
    where = (f"pinned to the home cloud {job.home_site}" if job.aggregator == "home" else
             f"placed by the scheduler where the clients' traffic costs least (home cloud {job.home_site})")
    print(f"  aggregator {planned.aggregator.task_id}: {where}")
    print(f"  (the cell places these by their labels with the `federated` strategy: "
          f"suanli policy set --cell {job.cell} --strategy federated)")
    return 0


def _run(args: argparse.Namespace) -> int:
    from suanli.federated_jobs import read_spec_file, run_federated

    job = read_spec_file(Path(args.file), _overrides(args))
    result = run_federated(job, settings=settings(), job_dir=Path(args.dir) if args.dir else None,
                           run_id=args.run_id, python=args.python)
    if args.json:
        Path(args.json).write_text(json.dumps(result.to_json(), indent=1))
    return 0 if result.ok else 1


def add_commands(jsub: argparse._SubParsersAction) -> None:
    """Register ``suanli job fed`` under ``suanli job``."""
    from suanli.cli_services import NOTHING, STACK

    p = jsub.add_parser("fed", help="federated training across clouds (Flower, SecAgg+), one aggregator and "
                                    "N clients", description=__doc__)
    fsub = p.add_subparsers(dest="fed_action", required=True)
    for name, func, needs, what in (("run", _run, STACK, "run the federated job, round by round"),
                                    ("plan", _plan, NOTHING, "check the file and print the tasks (no services)")):
        c = fsub.add_parser(name, help=what, description=__doc__)
        c.add_argument("file", help="the federated job file (YAML; - for stdin); see suanli/federated_jobs.py")
        c.add_argument("--cell", help="run in this cell instead of the file's")
        c.add_argument("--tenant", help="run as this tenant instead of the file's")
        c.add_argument("--dir", help="the job directory (default <home>/jobs/<name>-<run id>)")
        c.add_argument("--run-id", help="the run id in task ids (default: random)")
        if name == "plan":
            c.add_argument("--json", action="store_true", help="print the tasks as JSON")
        else:
            c.add_argument("--json", metavar="FILE", help="write the result (rounds, placement, losses) to FILE")
            c.add_argument("--python", help="the Flower venv's python (default: set up by deploy/flower.py)")
        c.set_defaults(func=func, needs=needs)
