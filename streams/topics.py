"""Topic names and which events travel on which topic.

Producers (any language) write to the *raw* topics. Intake validates and forwards to the
*cell log*, the one ordered input of each scheduler cell (DESIGN.md invariant 3). The
scheduler writes *decisions*; the dispatcher routes placements to one *dispatch* topic per
connector; connectors report back on ``raw.status``. Bad input goes to *dead letters*.
"""
from __future__ import annotations

from dataclasses import dataclass

from suanli.config import settings

# Every topic (and Faust app id) starts with the namespace, so several control planes
# (or test runs) can share one Kafka cluster without seeing each other's records.
PREFIX = settings().namespace
RAW_TASKS = f"{PREFIX}.raw.tasks"      # TaskSubmitted, TaskCancelled, ReservationBid; key: task_id / bid_id
RAW_NODES = f"{PREFIX}.raw.nodes"      # NodeRegistered, NodeHeartbeat, NodeMetrics, NodeStatusChanged; key: node_id
RAW_STATUS = f"{PREFIX}.raw.status"    # TaskStatusChanged, DispatchAck from connectors; key: task_id
RAW_POLICY = f"{PREFIX}.raw.policy"    # PolicyChanged; key: cell
CELL_LOG = f"{PREFIX}.cells"           # every scheduler input, key: cell (one partition per cell)
DECISIONS = f"{PREFIX}.decisions"      # TaskPlaced, TaskPending, ...; key: cell
DEAD_LETTERS = f"{PREFIX}.deadletter"  # DeadLetter; key: the bad record's key
RAW_TOPICS = (RAW_TASKS, RAW_NODES, RAW_STATUS, RAW_POLICY)


def dispatch_topic(connector: str, namespace: str = PREFIX) -> str:
    """The topic a connector consumes its DispatchCommands from."""
    return f"{namespace}.dispatch.{connector}"


@dataclass(frozen=True)
class TopicNames:
    """The topic names of one namespace (for tools that look at another namespace)."""

    namespace: str

    @property
    def raw_tasks(self) -> str:
        return f"{self.namespace}.raw.tasks"

    @property
    def raw_nodes(self) -> str:
        return f"{self.namespace}.raw.nodes"

    @property
    def raw_status(self) -> str:
        return f"{self.namespace}.raw.status"

    @property
    def raw_policy(self) -> str:
        return f"{self.namespace}.raw.policy"

    @property
    def cell_log(self) -> str:
        return f"{self.namespace}.cells"

    @property
    def decisions(self) -> str:
        return f"{self.namespace}.decisions"

    @property
    def dead_letters(self) -> str:
        return f"{self.namespace}.deadletter"

    def dispatch(self, connector: str) -> str:
        return dispatch_topic(connector, self.namespace)


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
    "PolicyChanged": ("raw_policy", "cell"),
}


def raw_route(kind: str, payload: dict, namespace: str = PREFIX) -> tuple[str, str]:
    """``(topic, key)`` a producer uses for an event of ``kind``."""
    attribute, key_field = RAW_ROUTES[kind]
    return getattr(TopicNames(namespace), attribute), str(payload[key_field])


# Kinds the scheduler cell consumes from its log (everything else stops at intake).
CELL_INPUTS = frozenset({
    "TaskSubmitted", "TaskCancelled", "TaskStatusChanged", "NodeRegistered",
    "NodeStatusChanged", "PolicyChanged",
})


@dataclass(frozen=True)
class TopicSpec:
    name: str
    partitions: int
    compact: bool = False


def core_topics(partitions: int, namespace: str = PREFIX, connectors: tuple[str, ...] = ("sim", "local")) -> list[TopicSpec]:
    """Topics the control plane needs before its workers start."""
    n = TopicNames(namespace)
    names = (n.raw_tasks, n.raw_nodes, n.raw_status, n.raw_policy, n.cell_log, n.decisions,
             *(n.dispatch(c) for c in connectors))
    return [TopicSpec(t, partitions) for t in names] + [TopicSpec(n.dead_letters, 1)]
