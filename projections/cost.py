"""Cost accounting (C10): what each task's run cost, folded from the log.

A pure fold (no I/O, no clock) over node registrations, task submissions and the
scheduler's decisions, into *run intervals* and their cost. The Kafka edge is
``suanli/cli_cost.py``; the timed what-if (``replay/qos_whatif.py``) feeds the same fold
the core's decisions directly.

**Intervals.** A task runs on a node from a ``TaskPlaced`` on it (or a ``TaskMigrated``
whose ``to_node`` it is) until the first of ``TaskReleased`` (from that node),
``TaskLost``, ``TaskPreempted`` or ``TaskMigrated`` (``from_node``). Every time is the
decision's ``provenance.decided_at`` (the cell clock, ms). An interval still open when the
fold is read is closed at ``until`` (default: the latest ``decided_at`` the fold has seen)
and flagged ``open``. A second placement while an interval is open closes the first one at
the new placement's time and is counted in :attr:`CostLedger.anomalies` (the core never does
this). A reserve-first migration (``reserve_first``) holds both places for a moment; it is
billed from the migration on the new node only.

**Share of a node.** The *dominant share* of what the task holds, over GPU and CPU::

    gpu_share = len(gpu_devices) * gpu_milli / 1000 / node GPUs     (0 on a CPU-only node)
    cpu_share = cpu_milli / node cpu_milli
    share     = max(gpu_share, cpu_share)

CPU counts on every node, GPU nodes included: a CPU-only task that takes most of a GPU
node's cores keeps its GPUs from being used, so it pays for that (the DRF rule). Memory is
not counted.

**Rate.** GOLD and SILVER pay the node's ``price_per_hour``; BRONZE, which runs on idle
capacity and can be preempted, pays ``idle_price_per_hour``, or ``price_per_hour`` when
that is 0 (the node names no idle price). A task whose submission the fold has not seen
has tier ``UNKNOWN`` and pays ``price_per_hour``; a gold standby copy (``<id>~standby``,
``processors/qos.py``), which has no submission of its own, has its task's tier. A node
the fold has never seen has no price: its intervals cost 0 and are listed in
:attr:`CostLedger.unpriced_nodes`. Prices
are the node's *latest* registration (a price change re-prices the node's whole history).

``cost = hours x share x rate``; ``gpu_hours = hours x len(gpu_devices) x gpu_milli / 1000``.

**Idempotent.** An event id seen before is ignored, so redelivered duplicates (at-least-once
workers) never count twice.

Entry points: :class:`CostLedger` (``apply`` events, ``intervals``), :func:`report` (rows by
tier, tenant or pricing), :func:`reprice` and :func:`bronze_vs_silver` (the same intervals
at another tier's rate: "bronze against the same work as silver" is one call).
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Iterable, Literal, Mapping, Optional

from suanli.errors import SuanliError
from suanli.processors import model as m
from suanli.processors.qos import primary_of

MS_PER_HOUR = 3_600_000
TIERS = ("GOLD", "SILVER", "BRONZE")
UNKNOWN = "UNKNOWN"
GroupBy = Literal["tier", "tenant", "pricing"]
GROUPS: tuple[str, ...] = ("tier", "tenant", "pricing")


@dataclass(frozen=True, slots=True)
class NodePrice:
    """What the fold needs of a node: its size (for the share) and its prices."""
    cell: str
    node_id: str
    cpu_milli: int
    gpus: int
    pricing: str = "ON_DEMAND"
    price_per_hour: float = 0.0
    idle_price_per_hour: float = 0.0
    known: bool = True

    @classmethod
    def of(cls, e: m.NodeRegistered) -> "NodePrice":
        return cls(cell=e.cell, node_id=e.node_id, cpu_milli=e.cpu_milli, gpus=e.gpus[0], pricing=e.pricing,
                   price_per_hour=e.price_per_hour, idle_price_per_hour=e.idle_price_per_hour)

    def rate(self, tier: str) -> float:
        """Price per hour of the whole node for work of ``tier`` (see the module docstring)."""
        if tier == "BRONZE" and self.idle_price_per_hour > 0:
            return self.idle_price_per_hour
        return self.price_per_hour

    def share(self, n_devices: int, gpu_milli: int, cpu_milli: int) -> float:
        """The dominant share (GPU or CPU) of this node that the holding takes."""
        gpu = n_devices * gpu_milli / 1000.0 / self.gpus if self.gpus > 0 else 0.0
        cpu = cpu_milli / self.cpu_milli if self.cpu_milli > 0 else 0.0
        return max(gpu, cpu)


@dataclass(frozen=True, slots=True)
class Interval:
    """One stretch of a task on one node, priced at ``tier``'s rate."""
    task_id: str
    tenant: str
    cell: str
    tier: str
    node: NodePrice
    start: int                    # ms, decided_at of the placement / migration
    end: int                      # ms, decided_at of what ended it (``until`` when open)
    n_devices: int
    gpu_milli: int                # per device
    cpu_milli: int
    ended_by: str                 # COMPLETED | FAILED | CANCELLED | LOST | PREEMPTED | MIGRATED | OPEN | REPLACED
    work_lost_ms: int = 0         # TaskPreempted.work_lost_ms when ended by a preemption
    open: bool = False
    rated_as: str = ""            # the tier whose rate prices it ("" = its own tier)

    @property
    def ms(self) -> int:
        return max(0, self.end - self.start)

    @property
    def hours(self) -> float:
        return self.ms / MS_PER_HOUR

    @property
    def gpu_hours(self) -> float:
        return self.hours * self.n_devices * self.gpu_milli / 1000.0

    @property
    def share(self) -> float:
        return self.node.share(self.n_devices, self.gpu_milli, self.cpu_milli)

    @property
    def rate(self) -> float:
        return self.node.rate(self.rated_as or self.tier)

    @property
    def cost(self) -> float:
        return self.hours * self.share * self.rate


@dataclass(slots=True)
class _Open:
    tenant: str
    cell: str
    node_id: str
    start: int
    n_devices: int
    gpu_milli: int
    cpu_milli: int


@dataclass(slots=True)
class _Closed:
    task_id: str
    open: _Open
    end: int
    ended_by: str
    work_lost_ms: int = 0


class CostLedger:
    """The fold. Feed it typed events (``processors.model`` values) with :meth:`apply`, or
    Avro dicts with :meth:`apply_avro`; other kinds are ignored."""

    def __init__(self) -> None:
        self.nodes: dict[tuple[str, str], NodePrice] = {}
        self.tiers: dict[str, str] = {}
        self.tenants: dict[str, str] = {}
        self.clock = 0                                     # latest decided_at of any decision seen
        self.anomalies: list[str] = []
        self._open: dict[str, _Open] = {}
        self._closed: list[_Closed] = []
        self._seen: set[str] = set()
        self._request: dict[str, tuple[int, int]] = {}     # task -> (cpu milli, GPU milli per device) it asks

    # ------------------------------------------------------------------ feeding
    def apply_all(self, events: Iterable[Any]) -> "CostLedger":
        for e in events:
            self.apply(e)
        return self

    def apply_avro(self, kind: str, payload: Mapping[str, Any]) -> None:
        """An event as the codec decodes it (``kind``, Avro dict). Kinds the fold neither
        reads nor takes its clock from are skipped without conversion."""
        if hasattr(self, f"_on_{kind}") or kind in m.DECISION_KINDS:
            self.apply(m.from_avro(kind, payload))

    def apply(self, e: Any) -> None:
        event_id = getattr(e, "event_id", None)
        if event_id:
            if event_id in self._seen:
                return
            self._seen.add(event_id)
        prov = getattr(e, "provenance", None)
        if prov is not None and prov.decided_at > self.clock:
            self.clock = prov.decided_at          # every decision moves the clock, not only these kinds
        handler = getattr(self, f"_on_{type(e).__name__}", None)
        if handler is not None:
            handler(e)

    @staticmethod
    def _tick(e: Any) -> int:
        return e.provenance.decided_at

    def _on_NodeRegistered(self, e: m.NodeRegistered) -> None:
        self.nodes[(e.cell, e.node_id)] = NodePrice.of(e)

    def _on_TaskSubmitted(self, e: m.TaskSubmitted) -> None:
        self.tiers.setdefault(e.task_id, e.qos_tier or "SILVER")
        self.tenants.setdefault(e.task_id, e.tenant)
        r = m.Request.of(e.resources)
        self._request.setdefault(e.task_id, (r.cpu, r.gpu_milli))

    def _start(self, task_id: str, tenant: str, cell: str, node_id: str, at: int, devices: tuple[int, ...],
               gpu_milli: int, cpu_milli: int) -> None:
        if task_id in self._open:
            self.anomalies.append(f"{task_id}: placed on {node_id} at {at} while running on "
                                  f"{self._open[task_id].node_id}")
            self._close(task_id, at, "REPLACED")
        self.tenants.setdefault(task_id, tenant)
        self._open[task_id] = _Open(tenant, cell, node_id, at, len(devices), gpu_milli if devices else 0, cpu_milli)

    def _close(self, task_id: str, at: int, ended_by: str, work_lost_ms: int = 0,
               node_id: Optional[str] = None) -> None:
        o = self._open.get(task_id)
        if o is None or (node_id and o.node_id != node_id):
            return
        del self._open[task_id]
        self._closed.append(_Closed(task_id, o, at, ended_by, work_lost_ms))

    def _on_TaskPlaced(self, e: m.TaskPlaced) -> None:
        at = self._tick(e)
        self._start(e.task_id, e.tenant, e.cell, e.node_id, at, e.gpu_devices, e.gpu_milli, e.cpu_milli)

    def _on_TaskMigrated(self, e: m.TaskMigrated) -> None:
        at = self._tick(e)
        o = self._open.get(e.task_id)
        cpu, milli = (o.cpu_milli, o.gpu_milli) if o is not None else \
            self._request.get(e.task_id) or self._request.get(primary_of(e.task_id) or "", (0, 0))
        self._close(e.task_id, at, "MIGRATED")
        self._start(e.task_id, e.tenant, e.cell, e.to_node, at, e.gpu_devices, milli, cpu)

    def _on_TaskReleased(self, e: m.TaskReleased) -> None:
        at = self._tick(e)
        if e.node_id:
            self._close(e.task_id, at, e.cause or "RELEASED", node_id=e.node_id)

    def _on_TaskLost(self, e: m.TaskLost) -> None:
        self._close(e.task_id, self._tick(e), "LOST", node_id=e.node_id)

    def _on_TaskPreempted(self, e: m.TaskPreempted) -> None:
        self._close(e.task_id, self._tick(e), "PREEMPTED", e.work_lost_ms, node_id=e.node_id)

    # ------------------------------------------------------------------ reading
    def tier_of(self, task_id: str) -> str:
        """The task's tier from its submission; a standby copy's is its task's."""
        tier = self.tiers.get(task_id)
        if tier is None:
            tier = self.tiers.get(primary_of(task_id) or "", UNKNOWN)
        return tier

    def node(self, cell: str, node_id: str) -> NodePrice:
        n = self.nodes.get((cell, node_id))
        return n if n is not None else NodePrice(cell, node_id, 0, 0, pricing=UNKNOWN, known=False)

    @property
    def unpriced_nodes(self) -> list[str]:
        """Nodes holding intervals that the fold has no registration of (priced 0)."""
        seen = {(c.open.cell, c.open.node_id) for c in self._closed} | {(o.cell, o.node_id)
                                                                       for o in self._open.values()}
        return sorted(f"{c}/{n}" for c, n in seen if (c, n) not in self.nodes)

    def intervals(self, until: Optional[int] = None, *, cell: Optional[str] = None,
                  tenant: Optional[str] = None) -> list[Interval]:
        """Every interval, closed ones in the order they closed, then the open ones (closed
        at ``until``, default :attr:`clock`), optionally of one cell and/or tenant."""
        end = self.clock if until is None else until
        rows = [(c.task_id, c.open, c.end, c.ended_by, c.work_lost_ms, False) for c in self._closed]
        rows += [(tid, o, max(o.start, end), "OPEN", 0, True) for tid, o in sorted(self._open.items())]
        out = []
        for tid, o, stop, ended_by, lost, is_open in rows:
            if (cell is not None and o.cell != cell) or (tenant is not None and o.tenant != tenant):
                continue
            out.append(Interval(task_id=tid, tenant=o.tenant, cell=o.cell, tier=self.tier_of(tid),
                                node=self.node(o.cell, o.node_id), start=o.start, end=stop, n_devices=o.n_devices,
                                gpu_milli=o.gpu_milli, cpu_milli=o.cpu_milli, ended_by=ended_by,
                                work_lost_ms=lost, open=is_open))
        return out


def fold(events: Iterable[Any]) -> CostLedger:
    """A :class:`CostLedger` over typed events in log order."""
    return CostLedger().apply_all(events)


# ============================================================================ reports
@dataclass(slots=True)
class CostRow:
    """The figures of one group of intervals."""
    key: str
    tasks: int = 0
    intervals: int = 0
    open_intervals: int = 0
    hours: float = 0.0            # task-hours on nodes
    gpu_hours: float = 0.0
    cost: float = 0.0
    preemptions: int = 0          # intervals ended by TaskPreempted
    work_lost_hours: float = 0.0  # their work_lost_ms
    lost: int = 0                 # intervals ended by TaskLost (node DOWN)
    migrations: int = 0           # intervals ended by TaskMigrated
    _task_ids: set[str] = field(default_factory=set, repr=False)

    def add(self, iv: Interval) -> None:
        self._task_ids.add(iv.task_id)
        self.tasks = len(self._task_ids)
        self.intervals += 1
        self.open_intervals += iv.open
        self.hours += iv.hours
        self.gpu_hours += iv.gpu_hours
        self.cost += iv.cost
        if iv.ended_by == "PREEMPTED":
            self.preemptions += 1
            self.work_lost_hours += iv.work_lost_ms / MS_PER_HOUR
        self.lost += iv.ended_by == "LOST"
        self.migrations += iv.ended_by == "MIGRATED"

    def as_dict(self, digits: int = 6) -> dict[str, Any]:
        return {"key": self.key, "tasks": self.tasks, "intervals": self.intervals,
                "open_intervals": self.open_intervals, "hours": round(self.hours, digits),
                "gpu_hours": round(self.gpu_hours, digits), "cost": round(self.cost, digits),
                "cost_per_gpu_hour": round(self.cost / self.gpu_hours, digits) if self.gpu_hours else None,
                "preemptions": self.preemptions, "work_lost_hours": round(self.work_lost_hours, digits),
                "lost": self.lost, "migrations": self.migrations}


def _key(iv: Interval, by: str) -> str:
    if by == "tier":
        return iv.tier
    if by == "tenant":
        return iv.tenant
    if by == "pricing":
        return iv.node.pricing
    raise SuanliError(f"cannot group costs by {by!r}: use one of {', '.join(GROUPS)}")


def report(intervals: Iterable[Interval], by: str = "tier") -> list[CostRow]:
    """One row per group (tiers in GOLD, SILVER, BRONZE order, others sorted by name)
    followed by a ``total`` row."""
    if by not in GROUPS:
        raise SuanliError(f"cannot group costs by {by!r}: use one of {', '.join(GROUPS)}")
    rows: dict[str, CostRow] = {}
    total = CostRow("total")
    for iv in intervals:
        k = _key(iv, by)
        rows.setdefault(k, CostRow(k)).add(iv)
        total.add(iv)
    order = {t: i for i, t in enumerate(TIERS)} if by == "tier" else {}
    return sorted(rows.values(), key=lambda r: (order.get(r.key, len(order)), r.key)) + [total]


def reprice(intervals: Iterable[Interval], as_tier: Mapping[str, str]) -> list[Interval]:
    """The same intervals, those of a tier in ``as_tier`` priced at the mapped tier's rate
    (e.g. ``{"BRONZE": "SILVER"}``); the others unchanged."""
    return [replace(iv, rated_as=as_tier[iv.tier]) if iv.tier in as_tier else iv for iv in intervals]


@dataclass(frozen=True, slots=True)
class BronzeVsSilver:
    """Bronze work at its own (idle) rate against the same intervals at the silver rate.

    ``useful_*`` leaves out the work that preemptions threw away (``work_lost_ms``): paid
    for, but redone later; ``effective_saving_pct`` compares what bronze paid in total with
    the silver price of the useful part only."""
    intervals: int
    hours: float
    gpu_hours: float
    bronze_cost: float
    as_silver_cost: float
    saving_pct: Optional[float]
    work_lost_hours: float
    useful_as_silver_cost: float
    effective_saving_pct: Optional[float]

    def as_dict(self, digits: int = 6) -> dict[str, Any]:
        return {k: (round(v, digits) if isinstance(v, float) else v)
                for k, v in ((f, getattr(self, f)) for f in self.__slots__)}


def bronze_vs_silver(intervals: Iterable[Interval]) -> BronzeVsSilver:
    """Price the BRONZE intervals at their own rate and at the SILVER rate (see the class)."""
    bronze = [iv for iv in intervals if iv.tier == "BRONZE"]
    own = sum(iv.cost for iv in bronze)
    as_silver = reprice(bronze, {"BRONZE": "SILVER"})
    silver = sum(iv.cost for iv in as_silver)
    # the silver price of the useful part: each preempted interval minus the work it lost
    useful = sum(iv.cost * (max(0, iv.ms - iv.work_lost_ms) / iv.ms if iv.ms else 0.0) for iv in as_silver)
    pct = lambda paid, ref: round(100.0 * (1.0 - paid / ref), 6) if ref > 0 else None  # noqa: E731
    return BronzeVsSilver(intervals=len(bronze), hours=sum(iv.hours for iv in bronze),
                          gpu_hours=sum(iv.gpu_hours for iv in bronze), bronze_cost=own, as_silver_cost=silver,
                          saving_pct=pct(own, silver), work_lost_hours=sum(iv.work_lost_ms for iv in bronze) / MS_PER_HOUR,
                          useful_as_silver_cost=useful, effective_saving_pct=pct(own, useful))
