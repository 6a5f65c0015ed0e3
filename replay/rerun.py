"""Replay a log directory through the production path (``CellRunner``), without Kafka.

Order of a replay:

1. a fresh :class:`CellRunner` with the directory's offline codec, producing (in memory)
   to the topic names of the namespace the log was exported from;
2. if the range starts mid-log, the cell's earlier records (``prefix.avro``) are
   re-applied silently (``CellRunner.catch_up``, as a recovering worker does), which
   rebuilds the state, caches included, exactly as the live worker had it;
3. the initial policy (``strategy_config.initial_policy``: ``strategy.json``, or the
   recorded policy literally when ``strategy.json`` means the same) is injected as the
   cell's first input: a PolicyChanged decided at :data:`POLICY_POSITION`, a position of
   its own, so it shifts no offset of the recorded log;
4. every recorded input, in log order, through ``CellRunner.apply``: decode, core
   ``decide``, encode. PolicyChanged records in the log apply as recorded unless
   ``drop_policy_changes`` (what-if runs: the policy under test holds throughout).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable

from suanli.errors import RejectedInput, ReplayError
from suanli.processors.core import decide
from suanli.processors.model import PolicyChanged
from suanli.processors.state import CellState
from suanli.schemas.codec import Codec
from suanli.streams.cell_runner import CellRunner
from suanli.streams.records import RawRecord
from suanli.streams.topics import TopicNames

from .log_replay import regenerate
from .logdir import LogDir
from .progress import Progress
from .strategy_config import initial_policy

POLICY_POSITION = ("replay:strategy.json", 0, 0)
DEFAULT_POLICY = {"strategy": "default", "config": {}}


@dataclass
class Replayed:
    """What a replay produced."""

    regenerated: list[bytes]
    codec: Codec
    state: CellState
    policy: dict[str, Any]
    inputs: int
    seconds: float
    dropped_policy_changes: int = 0
    local_schemas: dict[str, int] = field(default_factory=dict)
    prefix: int = 0                   # records re-applied silently before the range
    prefix_seconds: float = 0.0

    @property
    def events_per_s(self) -> float:
        return self.inputs / self.seconds if self.seconds > 0 else 0.0


def replay_logdir(log: LogDir, *, policy: dict[str, Any] | None = None, drop_policy_changes: bool = False,
                  progress: bool = False, observer: Callable[[RawRecord, list[bytes], CellState], None] | None = None,
                  label: str | None = None) -> Replayed:
    """Re-run ``log``'s inputs; ``policy`` overrides ``strategy.json`` (what-if). ``progress``:
    a bar on a terminal (``replay/progress.py``), labelled ``label`` (default ``replay CELL``)."""
    codec = log.codec()
    runner = CellRunner(codec, TopicNames(log.namespace))
    tp = time.perf_counter()
    n_prefix = runner.catch_up(log.prefix())
    prefix_seconds = time.perf_counter() - tp
    part = runner.partition(log.partition)
    state = part.cells.get(log.cell)
    if state is None:
        state = part.cells[log.cell] = CellState(log.cell)
    recorded = log.meta.get("initial_policy") or DEFAULT_POLICY
    chosen = policy if policy is not None else initial_policy(log.strategy, recorded)
    try:
        decide(state, PolicyChanged.of(log.cell, chosen["strategy"], chosen.get("config") or {}), POLICY_POSITION)
    except RejectedInput as exc:
        raise ReplayError(f"the policy to replay with is refused: {exc}") from None

    total = int((log.meta.get("counts") or {}).get("inputs") or 0) or None
    bar = Progress(total, label or f"replay {log.cell}", enabled=progress)
    dropped = 0

    def records():
        nonlocal dropped
        for record in log.inputs():
            if drop_policy_changes and _is_policy_change(codec, record):
                dropped += 1
                continue
            yield record

    def observe(record: RawRecord, produced: list[bytes]) -> None:
        bar.update()
        if observer is not None:
            observer(record, produced, state)

    t0 = time.perf_counter()
    with bar:
        out = regenerate(codec, records(), runner=runner, observer=observe)
    seconds = time.perf_counter() - t0
    registry = codec.registry
    return Replayed(out, codec, state, chosen, bar.n, seconds, dropped,
                    dict(getattr(registry, "local", {}) or {}), n_prefix, prefix_seconds)


def _is_policy_change(codec: Codec, record: RawRecord) -> bool:
    try:
        return codec.decode(record.value)[0] == "PolicyChanged"
    except Exception:  # noqa: BLE001 - undecodable: let the runner dead-letter it
        return False
