"""Replay speed: events/s through the production replay path, and one FGD experiment.

``replay_events_per_second`` encodes a synthetic cell log (node registrations, then task
submissions) to wire-format records and re-runs it with ``replay.log_replay.regenerate``:
decode, core ``decide`` with provenance, encode — the path ``suanli replay`` takes. The
headline ``events_per_s`` is that run, unchanged since the first benchmark (same events,
same entry point). The same run also reports:

- ``cpu_seconds`` / ``events_per_cpu_s``: the same run in process CPU time, the figure to
  compare on a machine shared with other work (wall time there counts other processes);
- ``core_seconds`` / ``core_share``: the time inside ``processors.core.decide`` (timed
  around each call), and what is left around it (decode, model conversion, encode);
- ``by_kind``: events/s per input kind, wall time between consecutive inputs (a batch's
  decode is charged to the input that triggered it), with the core's part: the task
  submissions are the expensive inputs, and their ``decide`` bounds the headline;
- ``verify_events_per_s``: the same inputs when the decisions are also checked the way
  ``suanli replay --verify`` does (redelivery filter, byte comparison), with the run's own
  decisions standing in for the recorded ones;
- ``heartbeats``: ``heartbeat_rounds`` NodeHeartbeat per node afterwards on the loaded
  cell, a heartbeat-like input whose decide is cheap: what the path costs around the core.
"""
from __future__ import annotations

import time
from typing import Any

from suanli.bench import synthetic
from suanli.processors.core import decide
from suanli.replay.log_replay import drop_redeliveries, first_divergence, regenerate
from suanli.schemas.codec import Codec
from suanli.streams.cell_runner import CellRunner
from suanli.streams.records import RawRecord
from suanli.streams.topics import TopicNames


class _TimedCore:
    """``decide``, with the seconds spent in it per input kind."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    def __call__(self, state: Any, event: Any, position: tuple[str, int, int]) -> Any:
        started = time.perf_counter()
        try:
            return decide(state, event, position)
        finally:
            kind = type(event).__name__
            self.seconds[kind] = self.seconds.get(kind, 0.0) + time.perf_counter() - started


def _figures(events: int, seconds: float, core: float) -> dict[str, Any]:
    return {"events": events, "seconds": round(seconds, 3), "events_per_s": round(events / seconds, 1) if seconds else 0.0,
            "core_seconds": round(core, 3), "core_us_per_event": round(core / events * 1e6, 1) if events else 0.0,
            "around_core_us_per_event": round((seconds - core) / events * 1e6, 1) if events else 0.0}


def replay_events_per_second(codec: Codec, node_count: int, task_count: int,
                             heartbeat_rounds: int = 2) -> dict[str, Any]:
    events = [("NodeRegistered", n) for n in synthetic.nodes(node_count)] + \
             [("TaskSubmitted", t) for t in synthetic.tasks(task_count)]
    records = [RawRecord("bench.cells", 0, i, 0, b"bench", codec.encode(kind, payload))
               for i, (kind, payload) in enumerate(events)]
    runner = CellRunner(codec, TopicNames("replay"))
    core = _TimedCore()
    per_kind: dict[str, list[float]] = {}
    last = [time.perf_counter()]

    def observe(record: RawRecord, _produced: list[bytes]) -> None:
        now = time.perf_counter()
        kind = events[record.offset][0]
        slot = per_kind.setdefault(kind, [0, 0.0])
        slot[0] += 1
        slot[1] += now - last[0]
        last[0] = now

    cpu = time.process_time()
    started = last[0] = time.perf_counter()
    decisions = regenerate(codec, records, runner=runner, observer=observe, core=core)
    seconds = time.perf_counter() - started
    cpu = time.process_time() - cpu

    # The verify path's extra work: the redelivery filter and the comparison.
    recorded = [bytes(v) for v in decisions]             # equal values, not the same objects
    t0 = time.perf_counter()
    kept, _ = drop_redeliveries(codec, recorded)
    same = first_divergence(kept, decisions) is None
    compare = time.perf_counter() - t0

    out = {"events": len(records), "decisions": len(decisions), "seconds": round(seconds, 3),
           "events_per_s": round(len(records) / seconds, 1),
           "cpu_seconds": round(cpu, 3), "events_per_cpu_s": round(len(records) / cpu, 1) if cpu else 0.0,
           "core_seconds": round(sum(core.seconds.values()), 3),
           "core_share": round(sum(core.seconds.values()) / seconds, 3),
           "by_kind": {k: _figures(int(n), s, core.seconds.get(k, 0.0)) for k, (n, s) in per_kind.items()},
           "verify_events_per_s": round(len(records) / (seconds + compare), 1), "verify_compare_seconds":
           round(compare, 3), "verify_identical": same}
    if heartbeat_rounds > 0:
        out["heartbeats"] = _heartbeats(codec, runner, node_count, heartbeat_rounds, len(records))
    return out


def _heartbeats(codec: Codec, runner: CellRunner, node_count: int, rounds: int, first_offset: int) -> dict[str, Any]:
    """NodeHeartbeat of every node, ``rounds`` times, through the same runner (loaded cell)."""
    beats = [RawRecord("bench.cells", 0, first_offset + i, 0, b"bench", codec.encode("NodeHeartbeat", {
        "event_id": f"bench/hb/{i}", "node_id": f"node-{i % node_count:05d}", "cell": "bench",
        "seq": i // node_count, "at": 2_000_000 + i})) for i in range(node_count * rounds)]
    core = _TimedCore()
    started = time.perf_counter()
    regenerate(codec, beats, runner=runner, core=core)
    return _figures(len(beats), time.perf_counter() - started, sum(core.seconds.values()))


def fgd_experiment(nodes_csv: str, pods_csv: str, policy: str, seed: int = 42) -> dict[str, Any]:
    from suanli.replay.fgd_protocol import run_experiment

    started = time.perf_counter()
    result = run_experiment(nodes_csv, pods_csv, policy, seed)
    return {"policy": policy, "seed": seed, "seconds": round(time.perf_counter() - started, 3),
            "unallocated_gpu_pct": result.get("unallocated_gpu_pct")}
