"""Record a cell's log with the code as it is, to verify a later change against it.

``python -m suanli.bench.recorded_log DIR [--nodes 1000] [--tasks 5000]`` plays the
scheduler worker (the production ``CellRunner``, from the default policy, as a live cell
starts) over a synthetic partition: ``bench.synthetic``'s nodes, then its tasks, with one
earlier task completing after every second submission so that nodes free up and change
state. It writes a log directory as ``suanli export`` does. Run it on the commit before a
change, then ``suanli replay DIR --verify`` on the change: IDENTICAL means the change
decides every input as the code before it did, byte for byte.

No broker: the schemas get ids from an offline registry (``replay.dir_registry``).
"""
from __future__ import annotations

import argparse
from pathlib import Path

from suanli.bench import synthetic
from suanli.replay.dir_registry import DirRegistry
from suanli.replay.export import build_logdir
from suanli.schemas.catalog import catalog
from suanli.schemas.codec import Codec
from suanli.streams.cell_runner import CellRunner
from suanli.streams.records import RawRecord
from suanli.streams.topics import TopicNames

TOPICS = TopicNames("rec")
CELL = "bench"


def offline_codec() -> tuple[Codec, DirRegistry]:
    """A codec over every schema of the catalog, with ids from an offline registry."""
    schemas = {100 + i: ev.schema for i, (_k, ev) in enumerate(sorted(catalog().items()))}
    registry = DirRegistry(schemas)
    return Codec(registry), registry


def inputs(nodes: int, tasks: int) -> list[tuple[str, dict]]:
    """(kind, payload) in log order."""
    out: list[tuple[str, dict]] = [("NodeRegistered", n) for n in synthetic.nodes(nodes, cell=CELL)]
    submitted = synthetic.tasks(tasks, cell=CELL)
    for i, t in enumerate(submitted):
        out.append(("TaskSubmitted", t))
        if i % 2 == 1:
            done = submitted[i // 2]
            out.append(("TaskStatusChanged", {
                "event_id": f"{done['task_id']}/done", "task_id": done["task_id"], "cell": CELL, "node_id": "",
                "status": "COMPLETED", "at": t["submitted_at"], "exit_code": 0, "message": "", "usage": None}))
    return out


def record(out: Path, nodes: int = 1000, tasks: int = 5000) -> dict:
    """Write the log directory; returns its counts."""
    codec, registry = offline_codec()
    records = [RawRecord(TOPICS.cell_log, 0, off, 1_700_000_000_000 + off, CELL.encode(), codec.encode(kind, payload))
               for off, (kind, payload) in enumerate(inputs(nodes, tasks))]
    runner = CellRunner(codec, TOPICS)
    decisions: list[RawRecord] = []
    for rec in records:
        for r in runner.apply(rec):
            if r.topic == TOPICS.decisions:
                decisions.append(RawRecord(TOPICS.decisions, 0, len(decisions), rec.timestamp, r.key, r.value))
    build_logdir(out, codec, registry, cell=CELL, namespace=TOPICS.namespace, cell_log_topic=TOPICS.cell_log,
                 partition=0, lo=0, hi=len(records), prefix=[], inputs=records, decision_candidates=decisions,
                 log=lambda _m: None)
    return {"log": str(out), "inputs": len(records), "decisions": len(decisions)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path, help="the log directory to write (must not exist)")
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--tasks", type=int, default=5000)
    a = ap.parse_args(argv)
    if a.out.exists():
        ap.error(f"{a.out} exists: name a new directory")
    print(record(a.out, a.nodes, a.tasks))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
