"""What does the API's read model hold per task?

    python -m suanli.bench.read_model_memory [--levels 5000,20000] [--nodes 1000] [--json out.json]

The API folds every record its topics still hold (``api/readmodel.py``), so its memory is
so many bytes a task times the history. This bench makes a real history: the production
core (``processors/core.decide``) decides the synthetic tasks on ``--nodes``
synthetic nodes, each placed task completes at once (its TaskStatusChanged goes through the
core too, which releases it), and every record is encoded as on the wire by the
:class:`~suanli.schemas.codec.Codec` (over an in-memory registry). The records are then
folded into a :class:`~suanli.api.readmodel.ReadModel` as the API's log follower folds
them (``ReadModel.apply``, no Kafka), two ways:

- ``decoded``: the decision payloads kept as decoded dicts (the read model before the
  decisions were kept as their bytes; a model without ``decode`` still does this);
- ``wire``: each decision kept as its record's bytes and decoded when the audit reads it
  (what the API's follower does), every task kept;
- ``forgets``: as ``wire``, keeping only the newest finished tasks, as many as the first
  level has (``ReadModel.keep_finished``; the API's default keeps 100,000), with the
  default 200,000 tombstones. It also reports the most the fold held on the way (its peak),
  for the records in log order and read topic by topic (the whole cell log first, then the
  decisions: how the API's catch-up read them before it read all topics at once).

At each level (so many tasks of the same history) it prints the bytes the fold allocated
and still holds (``tracemalloc``), then what a task more costs between the first level and
the last, and checks that the first two ways answer every task's decisions alike.
"""
from __future__ import annotations

import argparse
import gc
import json
import tracemalloc
from typing import Any, Callable

from suanli.bench.read_model_growth import levels_arg, write_json

CELL = "bench"
MODES = ("decoded", "wire", "forgets")
LOG = "bench.cells"


def history(task_count: int, node_count: int, codec: Any) -> list[tuple[str, str, bytes]]:
    """(role, kind, wire bytes) of the cell log and the decisions, in log order, encoded by
    ``codec``."""
    from suanli.bench import synthetic
    from suanli.processors.core import decide
    from suanli.processors.model import (NodeRegistered, TaskPlaced, TaskStatusChanged, TaskSubmitted, from_avro,
                                         kind_of, to_avro)
    from suanli.processors.state import CellState

    state, offset, out = CellState(CELL), 0, []

    def feed(event: Any) -> None:
        nonlocal offset
        out.append(("cell_log", kind_of(event), codec.encode(kind_of(event), to_avro(event))))
        _, decisions = decide(state, event, (LOG, 0, offset))
        offset += 1
        for d in decisions:
            out.append(("decisions", kind_of(d), codec.encode(kind_of(d), to_avro(d))))
            if isinstance(d, TaskPlaced):
                feed(TaskStatusChanged(event_id=f"done-{d.task_id}", task_id=d.task_id, cell=d.cell,
                                       node_id=d.node_id, status="COMPLETED", at=offset, exit_code=0))

    for node in synthetic.nodes(node_count):
        feed(from_avro(NodeRegistered, node))
    for task in synthetic.tasks(task_count):
        feed(from_avro(TaskSubmitted, task))
    return out


def codec() -> Any:
    """A codec over an in-memory registry (``register`` hands out local ids)."""
    from suanli.replay.dir_registry import DirRegistry
    from suanli.schemas.codec import Codec

    return Codec(DirRegistry({}))


def fold(records: list[tuple[str, str, bytes]], codec: Any, keep_wire: bool,
         keep_finished: int | None = None) -> tuple[Any, int, int]:
    """A read model folded from ``records``, the bytes it holds at the end and the most it
    held on the way (tracemalloc)."""
    from suanli.api.readmodel import ReadModel

    for wire in {w[:5]: w for _role, _kind, w in records}.values():
        codec.decode(wire)               # its schema cache is the codec's memory, not the model's
    gc.collect()
    tracemalloc.start()
    model = ReadModel(decode=codec.decode if keep_wire else None, keep_finished=keep_finished)
    for offset, (role, _kind, stored) in enumerate(records):   # as the follower: decode, then fold
        wire = bytes(bytearray(stored))  # a record's own bytes, as each fetched record has them
        kind, payload = codec.decode(wire)
        model.apply(role, kind, payload, f"bench.{role}", 0, offset, wire if keep_wire else None)
    del kind, payload, wire
    gc.collect()
    held, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return model, held, peak


def run(levels: list[int], node_count: int, out: Callable[[str], None] = print) -> dict[str, Any]:
    wire_codec = codec()
    records = history(levels[-1], node_count, wire_codec)
    result: dict[str, Any] = {"levels": [], "nodes": node_count}
    for tasks in levels:
        upto = _records_of(records, tasks)
        decisions = [w for role, _, w in upto if role == "decisions"]
        row: dict[str, Any] = {"tasks": tasks, "records": len(upto), "decisions": len(decisions),
                               "decision_wire_bytes_mean": round(sum(map(len, decisions)) / max(len(decisions), 1), 1)}
        models = {}
        for mode in MODES:
            models[mode], row[f"{mode}_held_bytes"], peak = fold(upto, wire_codec, keep_wire=mode != "decoded",
                                                                 keep_finished=levels[0] if mode == "forgets" else None)
            if mode == "forgets":
                row["forgets_peak_bytes"] = peak
        row["forgets_tasks_held"] = len(models["forgets"].lifecycle.tasks)
        row["same_answers"] = all(models["wire"].task_decisions(t) == models["decoded"].task_decisions(t)
                                  for t in models["decoded"].decisions)
        # Read topic by topic (the whole cell log, then the decisions), as a catch-up that
        # finishes one topic before the next: nothing finishes before the decisions come, so
        # the fold holds every task and stashed status on the way, whatever it forgets later.
        by_topic = sorted(upto, key=lambda r: r[0] != "cell_log")
        model, _held, row["forgets_by_topic_peak_bytes"] = fold(by_topic, wire_codec, keep_wire=True,
                                                                keep_finished=levels[0])
        row["by_topic_same_tasks"] = (model.lifecycle.counts() == models["forgets"].lifecycle.counts()
                                      and model.lifecycle.tasks == models["forgets"].lifecycle.tasks)
        out(json.dumps(row))
        result["levels"].append(row)
    first, last = result["levels"][0], result["levels"][-1]
    grown = last["tasks"] - first["tasks"]
    if grown:
        # The model holds some bounded things too (the reservation fold's last 4,096 unlabelled
        # placements); what a task more costs is the growth between the levels.
        more = {mode: round((last[f"{mode}_held_bytes"] - first[f"{mode}_held_bytes"]) / grown, 1) for mode in MODES}
        result["bytes_per_task_more"] = more
        out(f"bytes a task more, from {first['tasks']} to {last['tasks']} tasks: {json.dumps(more)}")
    result["same_answers"] = all(row["same_answers"] for row in result["levels"])
    return result


def _records_of(records: list[tuple[str, str, bytes]], tasks: int) -> list[tuple[str, str, bytes]]:
    """The prefix of ``records`` up to the ``tasks``-th TaskSubmitted (exclusive) on the cell log."""
    seen = 0
    for i, (role, kind, _wire) in enumerate(records):
        if role == "cell_log" and kind == "TaskSubmitted":
            if seen == tasks:
                return records[:i]
            seen += 1
    return records


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m suanli.bench.read_model_memory",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--levels", default="5000,20000", help="tasks in the history at each level (ascending)")
    parser.add_argument("--nodes", type=int, default=1000, help="nodes of the synthetic cluster")
    parser.add_argument("--json", help="write the figures to this file")
    args = parser.parse_args(argv)
    if args.nodes < 1:
        parser.error("--nodes: at least 1")
    result = run(levels_arg(parser, args.levels, least=1), args.nodes)
    write_json(args.json, result)
    return 0 if result["same_answers"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
