"""Topic names, a pure function of a namespace, and which events travel on which topic.

Producers (any language) write to the *raw* topics. Intake validates and forwards to the
*cell log*, the one ordered input of each scheduler cell (DESIGN.md invariant 3). The
scheduler writes *decisions*; the dispatcher routes placements to one *dispatch* topic per
connector; connectors report back on ``raw.status``. Bad input goes to *dead letters*.

Every topic (and Faust app id) starts with the namespace, so several control planes (or
test runs) can share one Kafka cluster without seeing each other's records. This module
reads no settings: callers build ``TopicNames(settings.namespace)`` at run time from the
settings they already hold. :class:`TopicNames` is the one definition of the names.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["RAW_ROUTES", "TopicNames", "TopicSpec", "core_topics", "raw_route"]


@dataclass(frozen=True)
class TopicNames:
    """The topic names of one namespace."""

    namespace: str

    def worker_group(self, role: str) -> str:
        """The Faust app id of a worker role ('intake', 'scheduler', 'telemetry'), which is also
        its consumer group: every instance of the role shares it."""
        return f"{self.namespace}-{role}"

    @property
    def raw_tasks(self) -> str:
        """TaskSubmitted, TaskCancelled, ReservationBid; key: task_id / bid_id."""
        return f"{self.namespace}.raw.tasks"

    @property
    def raw_nodes(self) -> str:
        """NodeRegistered, NodeHeartbeat, NodeMetrics, NodeStatusChanged; key: node_id."""
        return f"{self.namespace}.raw.nodes"

    @property
    def raw_status(self) -> str:
        """TaskStatusChanged, DispatchAck from connectors; key: task_id."""
        return f"{self.namespace}.raw.status"

    @property
    def raw_policy(self) -> str:
        """PolicyChanged; key: cell."""
        return f"{self.namespace}.raw.policy"

    def tenant_raw(self, tenant: str) -> str:
        """TaskSubmitted, TaskCancelled, ReservationBid of one tenant, on the secure stack: only
        that tenant's principal may write it, and intake takes the tenant from the topic."""
        return f"{self.raw_tasks}.tenant.{tenant}"

    @property
    def tenant_raw_pattern(self) -> str:
        """A regular expression matching every tenant's raw topic (intake subscribes by it)."""
        return re.escape(f"{self.raw_tasks}.tenant.") + r"[A-Za-z0-9][A-Za-z0-9_-]*"

    def tenant_of(self, topic: str) -> str | None:
        """The tenant whose raw topic ``topic`` is, or None for any other topic."""
        prefix = f"{self.raw_tasks}.tenant."
        return topic[len(prefix):] if topic.startswith(prefix) else None

    @property
    def raw(self) -> tuple[str, str, str, str]:
        """The four raw topics intake consumes."""
        return (self.raw_tasks, self.raw_nodes, self.raw_status, self.raw_policy)

    @property
    def cell_log(self) -> str:
        """Every scheduler input; key: cell (a cell lives on one partition)."""
        return f"{self.namespace}.cells"

    @property
    def decisions(self) -> str:
        """TaskPlaced, TaskPending, ...; key: cell."""
        return f"{self.namespace}.decisions"

    @property
    def dead_letters(self) -> str:
        """DeadLetter; key: the bad record's key."""
        return f"{self.namespace}.deadletter"

    def dispatch(self, connector: str) -> str:
        """The topic a connector consumes its DispatchCommands from."""
        return f"{self.namespace}.dispatch.{connector}"

    def control(self, connector: str) -> str:
        """Out-of-band requests to a connector and its replies (JSON, no schema): the
        simulator's fault injection (``suanli sim fault``). Not an event log: nothing in the
        plane folds it, and a connector reads only what arrives while it runs."""
        return f"{self.namespace}.control.{connector}"


# Which raw topic (a TopicNames attribute) each event kind is produced to, and the
# payload field used as its key.
RAW_ROUTES: dict[str, tuple[str, str]] = {
    "TaskSubmitted": ("raw_tasks", "task_id"),
    "TaskCancelled": ("raw_tasks", "task_id"),
    "ReservationBid": ("raw_tasks", "bid_id"),
    "NodeRegistered": ("raw_nodes", "node_id"),
    "NodeHeartbeat": ("raw_nodes", "node_id"),
    "NodeMetrics": ("raw_nodes", "node_id"),
    "NodeStatusChanged": ("raw_nodes", "node_id"),
    "TaskStatusChanged": ("raw_status", "task_id"),
    "DispatchAck": ("raw_status", "task_id"),
    "JobRound": ("raw_status", "job_id"),
    "PolicyChanged": ("raw_policy", "cell"),
}


def raw_route(kind: str, payload: dict, namespace: str) -> tuple[str, str]:
    """``(topic, key)`` a producer in ``namespace`` uses for an event of ``kind``."""
    attribute, key_field = RAW_ROUTES[kind]
    return getattr(TopicNames(namespace), attribute), str(payload[key_field])


@dataclass(frozen=True)
class TopicSpec:
    """A topic to create. ``log_append_time``: the broker stamps each record with its own
    clock when it appends it (``message.timestamp.type=LogAppendTime``) instead of keeping
    the producer's CreateTime. ``segment_ms``: a compacted topic's segments roll at least
    this often (the broker compacts only closed segments; its default is 7 days)."""

    name: str
    partitions: int
    compact: bool = False
    log_append_time: bool = False
    segment_ms: int | None = None


def core_topics(partitions: int, namespace: str, connectors: tuple[str, ...] = ("sim", "local")) -> list[TopicSpec]:
    """Topics the control plane of ``namespace`` needs before its workers start."""
    n = TopicNames(namespace)
    names = (*n.raw, n.cell_log, n.decisions, *(n.dispatch(c) for c in connectors))
    # The cell log's record timestamps are the broker's append time: when an input arrived
    # in the log (what the urgent tier's latency and the worker's DecisionLatency count
    # from), on the clock of the partition's leader whichever process wrote it (each intake
    # worker forwards and ticks on its own clock), so a time lookup on it does not depend
    # on the writers' clocks. No processor reads them: a decision's time comes from its
    # inputs' payloads.
    return ([TopicSpec(t, partitions, log_append_time=t == n.cell_log) for t in names]
            + [TopicSpec(n.dead_letters, 1)])


def partition_of(key: str, partitions: int) -> int:
    """The partition Kafka's default partitioner gives ``key`` (murmur2, as the producers of
    intake and the clients key the cell log by cell name)."""
    from aiokafka.partitioner import murmur2

    return (murmur2(key.encode()) & 0x7FFFFFFF) % partitions


def cells_on_partitions(prefix: str, count: int, partitions: int) -> list[str]:
    """``count`` cell names ``{prefix}-c{i}``, spread over the cell log's ``partitions``: the
    first ``min(count, partitions)`` land on distinct partitions (so that scheduler workers
    can share them out), in partition order; any further ones reuse partitions in turn."""
    names: dict[int, str] = {}
    i = 0
    while len(names) < min(count, partitions):
        name = f"{prefix}-c{i}"
        names.setdefault(partition_of(name, partitions), name)
        i += 1
    spread = [names[p] for p in sorted(names)]
    extra = []
    while len(spread) + len(extra) < count:
        name = f"{prefix}-c{i}"
        if partition_of(name, partitions) == sorted(names)[len(extra) % len(names)]:
            extra.append(name)
        i += 1
    return spread + extra
