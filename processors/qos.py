"""Quality of service (C10) and scheduling tiers (C5): the rules, as pure functions.

**QoS tiers** (``TaskSubmitted.qos_tier``):

- **GOLD** gets a dedicated pool: the nodes labelled ``pool: gold`` (:attr:`QosArgs.pool_label`),
  or, when no node carries the label, a share of each GPU model's nodes set aside by the
  policy (:attr:`QosArgs.gold_share`). Gold is placed in its pool first and overflows into
  the shared pool when the pool is full; when a node holding gold work goes DOWN, DEGRADED
  or is drained, the core moves the gold tasks first (``TaskMigrated``), preempting bronze
  if it must.
- **SILVER** shares the shared pool with priority over bronze; it never enters the gold pool.
- **BRONZE** runs on idle capacity anywhere, the gold pool included, and is preemptible: a
  gold or silver task that cannot be placed may evict bronze work (``preemption.py``).

**Gold standby** (:attr:`QosArgs.gold_standby`, off by default). Moving a gold task after its
node fails costs the time until the failure is known (the heartbeat DOWN timeout, 15 s by
default) plus the restart; at 99.995 % availability a task may be out about 26 min a year,
which a few failures spend. With a standby, each gold task also runs a second copy of
itself, ``<task id>~standby`` (:func:`standby_id`), with the same request, tier, command and
labels, on another node: the two copies never share a node (each one's placement and moves
exclude the other's node), so one node's failure leaves one copy running while the core
moves the other. The standby is placed right after the task's first placement, queued like
any gold task when no place exists, released (and stopped) when the task ends, and is
itself moved when its node fails. Only plain gold tasks get one: not gang members, members
of a job, or claimants of a reservation. It doubles what gold tasks hold, which is the
price of the availability (the QoS what-if reports its GPU-hours). A gold task out of
service (its node failed and its copy is not running) may evict another task's copy, after
bronze (``preemption.py``). Task ids ending in ``~standby`` are reserved: a submission of
one is refused.

**Queue order.** The pending queue is sorted by :func:`queue_key`: the scheduling tier
(urgent first), then the QoS tier (gold, silver, bronze), then *aged priority*, then lost
work first (a task whose node went down or that was preempted keeps its first arrival time,
and goes ahead of the others of its aged priority), then arrival. Aging bounds starvation: a task's
effective priority grows by one for every ``aging_ms`` it has waited, so
``priority + (now - queued_at) / aging_ms`` orders the queue at any time ``now`` — and
since ``now`` is the same for everyone, that is the order of ``queued_at - priority x
aging_ms``, a key that never changes while the task waits (no re-sorting on the clock). A
task of priority ``p`` is passed by a later arrival of priority ``q > p`` only if it
arrives within ``(q - p) x aging_ms``; after that it goes first. ``aging_ms = 0`` disables
aging (priority, then arrival).

**Scheduling tiers** (label ``scheduling``):

- ``urgent``: ahead of everything queued, decided by :attr:`QosArgs.urgent_strategy` (a
  bounded plugin set; default ``bestfit``: basic filters and one vectorised score).
- ``normal`` (default): the cell's strategy, at once on arrival.
- ``batch``: collected over ``batch_window_ms`` of cell clock, then placed jointly by the
  CP-SAT ``batch`` strategy, ``batch_chunk`` tasks per solve and at most
  ``batch_solves_per_tick`` solves per CellTick, so the other tiers never wait behind a
  long solve. Batch tasks are never retried from the queue head (that is for the others).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from .args import arg

GOLD, SILVER, BRONZE = "GOLD", "SILVER", "BRONZE"
TIER_RANK = {GOLD: 0, SILVER: 1, BRONZE: 2}           # queue order and "higher tier" comparisons

URGENT, NORMAL, BATCH = "urgent", "normal", "batch"
LANE_RANK = {URGENT: 0, NORMAL: 1, BATCH: 2}
LANE_LABEL = "scheduling"

Tier = Literal["GOLD", "SILVER", "BRONZE"]


@dataclass(frozen=True, slots=True)
class QosArgs:
    """The ``qos`` key of a cell's policy (defaults here)."""
    pool_label: str = arg("pool", "node label whose value 'gold' puts the node in the gold pool", nonempty=True)
    gold_share: float = arg(0.0, "when no node carries the pool label: the share of each GPU model's nodes "
                            "set aside for gold (the nodes first in a fixed hash order of their ids)", ge=0, le=1)
    preempt: bool = arg(True, "a gold or silver task that cannot be placed may preempt lower-tier work")
    preemptible: tuple[Tier, ...] = arg(("BRONZE",), "tiers whose tasks may be preempted (always only by a "
                                        "higher tier)")
    max_victim_search: int = arg(12, "on one node, an exact search over at most this many candidate victims; "
                                 "beyond it victims are chosen greedily (the Kubernetes reprieve)", ge=1, le=20)
    grace_ms: int = arg(5_000, "a victim's process gets this long to stop (SIGTERM, then SIGKILL); the victim "
                        "is queued again when it ends on the cell clock", ge=0)
    aging_ms: int = arg(60_000, "every this long a task waits adds one to its priority in the queue (bounded "
                        "starvation); 0 = no aging", ge=0)
    migrate_gold: bool = arg(True, "gold tasks on a node that goes DOWN or DEGRADED, or is drained, move at "
                             "once (TaskMigrated), preempting bronze if needed")
    urgent_strategy: str = arg("bestfit", "strategy deciding urgent tasks (label scheduling=urgent): a bounded "
                               "plugin set", nonempty=True)
    batch_strategy: str = arg("batch", "strategy placing the batch window jointly (label scheduling=batch)",
                              nonempty=True)
    batch_window_ms: int = arg(30_000, "batch tasks are collected this long (cell clock) before they are "
                               "placed together", ge=0)
    batch_chunk: int = arg(8, "batch tasks per joint solve", ge=1)
    batch_solves_per_tick: int = arg(4, "joint solves per CellTick at most (the rest wait for the next tick)",
                                     ge=1)
    gold_standby: bool = arg(False, "each plain gold task also runs a hot standby copy (task id "
                             "'<id>~standby') on another node, so a node failure leaves one copy running; "
                             "doubles what gold tasks hold")

    def validate(self) -> None:
        from .args import Invalid
        from .strategies import names
        known = names()
        for key in ("urgent_strategy", "batch_strategy"):
            if getattr(self, key) not in known:
                raise Invalid(key, getattr(self, key), f"a known strategy ({', '.join(known)})")


STANDBY_SUFFIX = "~standby"


def standby_id(task_id: str) -> str:
    """The task id of ``task_id``'s gold standby copy."""
    return task_id + STANDBY_SUFFIX


def is_standby(task_id: str) -> bool:
    """True when ``task_id`` names a gold standby copy (the one place the suffix is tested)."""
    return task_id.endswith(STANDBY_SUFFIX)


def primary_of(task_id: str) -> str | None:
    """The task a standby copy stands by for, or None when ``task_id`` is not a standby's id."""
    return task_id[:-len(STANDBY_SUFFIX)] if is_standby(task_id) else None


def lane_of(labels: Any) -> str:
    """The scheduling tier of a task from its labels: ``urgent``, ``batch`` or ``normal``."""
    v = labels.get(LANE_LABEL, NORMAL) if labels else NORMAL
    return v if v in LANE_RANK else NORMAL


def queue_key(lane: str, tier: str, priority: int, queued_at: int, seq: int, task_id: str,
              aging_ms: int, lost: bool) -> list:
    """The task's place in the pending queue (see the module docstring); compared as a list."""
    rank = queued_at - priority * aging_ms if aging_ms else -priority
    return [LANE_RANK.get(lane, 1), TIER_RANK.get(tier, 1), rank, 0 if lost else 1, seq, task_id]


def outranks(preemptor_tier: str, victim_tier: str) -> bool:
    """True when a task of ``preemptor_tier`` is a higher tier than ``victim_tier``."""
    return TIER_RANK.get(preemptor_tier, 1) < TIER_RANK.get(victim_tier, 1)


def _stable_hash(node_id: str) -> int:
    import zlib
    return zlib.crc32(node_id.encode())


def gold_pool(node_ids: list[str], labels: list[Any], model_idx: np.ndarray, args: QosArgs) -> np.ndarray:
    """Row mask of the gold pool: the nodes labelled ``<pool_label>: gold``; if there are none,
    ``ceil(gold_share x n)`` of each GPU model's ``n`` nodes (CPU-only nodes count as one model),
    those first in CRC-32 order of their ids — an order that depends only on the ids, so any
    replica and any replay picks the same nodes."""
    n = len(node_ids)
    mask = np.array([(lab or {}).get(args.pool_label) == "gold" for lab in labels], dtype=bool) \
        if n else np.zeros(0, dtype=bool)
    if mask.any() or args.gold_share <= 0 or n == 0:
        return mask
    import math
    for model in sorted(set(model_idx.tolist())):
        rows = [r for r in range(n) if model_idx[r] == model]
        k = math.ceil(args.gold_share * len(rows))
        rows.sort(key=lambda r: (_stable_hash(node_ids[r]), node_ids[r]))
        mask[rows[:k]] = True
    return mask
