"""A node's model cache: which model weights sit on its disk, within a capacity (pure).

Each node that registered a ``model_cache_mib`` > 0 has one, kept in the cell state
(``CellState.model_caches``, in its snapshot). An entry is keyed by ``model_arch`` (the
model and version, e.g. ``llama@2``) and records:

* ``size_mib``: what it takes on disk;
* ``last_used``: cell-clock ms of its last insert or use (the LRU order);
* ``ready_at``: cell-clock ms at which its load completes (a prewarm or a task's load
  still in flight; a task dispatched before then waits for the rest);
* ``via``: how it got there, ``task`` (a placed task loaded it) or ``prewarm`` (the
  planner, ``prewarm.py``);
* ``used``: whether a task has used it since it arrived (a prewarm nobody used is waste);
* ``hits``: uses by tasks since it arrived.

**Eviction: LRU on the cell clock** (least ``last_used`` first, ties by ``model_arch``;
while the prewarm planner runs, superseded versions of a family go first and prefetched
entries not used yet last, :func:`task_order`), with a veto: :meth:`ModelCache.insert` takes a ``keep`` predicate and never evicts what it
protects (the planner protects what it expects to be used more than what it brings in).
Why not cost-aware (GreedyDual-Size-Frequency)? GDSF's priority is ``L + freq x cost /
size``; the cost of a miss here is a load time, which is almost exactly proportional to
the size (``processors/model_loading.py``: latency is < 1 % of a 1 GiB origin load), so
``cost / size`` is a constant and GDSF collapses to LFU with ageing. LFU keeps yesterday's
favourites through a drift of popularity (a new model version), which is exactly what edge
inference sees; recency follows it at once. Frequency is where it helps (a model used
every hour vs one used once just now), and the prewarm planner already brings that in,
with decayed per-site demand, through ``keep``. LRU is also the one a reader of a decision
can check by hand.

Deterministic: no clock (times are passed in), iteration in sorted key order, and
:meth:`to_json` / :meth:`from_json` round-trip exactly (ints and bools only).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from suanli.errors import ModelError

from .model_loading import load_ms

TASK, PREWARM = "task", "prewarm"


@dataclass(slots=True)
class Entry:
    """One model on a node's disk (see the module docstring)."""
    size_mib: int
    last_used: int
    ready_at: int
    via: str = TASK
    used: bool = False
    hits: int = 0

    def to_json(self) -> list[Any]:
        return [self.size_mib, self.last_used, self.ready_at, self.via, self.used, self.hits]

    @classmethod
    def from_json(cls, d: list[Any]) -> "Entry":
        size, last, ready, via, used, hits = d
        return cls(int(size), int(last), int(ready), str(via), bool(used), int(hits))


@dataclass(slots=True)
class Evicted:
    """What an insert pushed out: the model, its entry as it was."""
    model_arch: str
    entry: Entry


@dataclass(slots=True)
class ModelCache:
    """A node's cache of ``capacity_mib``. ``entries``: model_arch -> :class:`Entry`.
    ``wasted_mib``: prewarmed MiB evicted before any task used them (a running total:
    the waste the prewarm planner caused on this node)."""
    capacity_mib: int
    entries: dict[str, Entry] = field(default_factory=dict)
    wasted_mib: int = 0

    @property
    def used_mib(self) -> int:
        return sum(e.size_mib for e in self.entries.values())

    @property
    def free_mib(self) -> int:
        return self.capacity_mib - self.used_mib

    def holds(self, model_arch: str) -> bool:
        return model_arch in self.entries

    def get(self, model_arch: str) -> Optional[Entry]:
        return self.entries.get(model_arch)

    def prewarmed_unused_mib(self) -> int:
        """MiB the planner brought here that no task has used yet."""
        return sum(e.size_mib for e in self.entries.values() if e.via == PREWARM and not e.used)

    def touch(self, model_arch: str, now: int) -> bool:
        """A task uses the model (a hit): it becomes the most recent. False if absent."""
        e = self.entries.get(model_arch)
        if e is None:
            return False
        e.last_used = max(e.last_used, now)
        e.used = True
        e.hits += 1
        return True

    def victims(self, size_mib: int, keep: Callable[[str, Entry], bool] | None = None,
                order: Callable[[str, Entry], Any] | None = None) -> Optional[list[str]]:
        """The entries an insert of ``size_mib`` would evict, least recently used first
        (ties by name; ``order``: a sort key of ``(model_arch, entry)`` instead), skipping
        those ``keep`` protects; None when it cannot fit (larger than the capacity, or the
        protected entries leave too little room)."""
        if size_mib > self.capacity_mib:
            return None
        need = size_mib - self.free_mib
        out: list[str] = []
        if need <= 0:
            return out
        key = (lambda a: (self.entries[a].last_used, a)) if order is None else \
            (lambda a: order(a, self.entries[a]))
        for arch in sorted(self.entries, key=key):
            e = self.entries[arch]
            if keep is not None and keep(arch, e):
                continue
            out.append(arch)
            need -= e.size_mib
            if need <= 0:
                return out
        return None

    def insert(self, model_arch: str, size_mib: int, now: int, ready_at: int, via: str = TASK,
               keep: Callable[[str, Entry], bool] | None = None,
               order: Callable[[str, Entry], Any] | None = None) -> Optional[list[Evicted]]:
        """Put a model in (a miss: a task loaded it, or a prewarm); evict LRU entries (or in
        ``order``, see :meth:`victims`) not protected by ``keep`` until it fits. Returns what was evicted, or None (nothing
        changes) when it cannot fit. Already present: a touch by a task (``via`` task), or
        nothing for a prewarm; returns []."""
        if size_mib < 0:
            raise ModelError(f"model {model_arch!r}: size {size_mib} MiB is negative")
        if model_arch in self.entries:
            if via == TASK:
                self.touch(model_arch, now)
            return []
        names = self.victims(size_mib, keep, order)
        if names is None:
            return None
        out = []
        for arch in names:
            e = self.entries.pop(arch)
            if e.via == PREWARM and not e.used:
                self.wasted_mib += e.size_mib
            out.append(Evicted(arch, e))
        used = via == TASK
        self.entries[model_arch] = Entry(size_mib, now, ready_at, via, used, 1 if used else 0)
        return out

    def clear(self) -> list[Evicted]:
        """The node went DOWN or re-registered: its disk is not to be trusted; all go."""
        out = [Evicted(a, self.entries[a]) for a in sorted(self.entries)]
        for ev in out:
            if ev.entry.via == PREWARM and not ev.entry.used:
                self.wasted_mib += ev.entry.size_mib
        self.entries.clear()
        return out

    # ------------------------------------------------------------------ snapshot
    def to_json(self) -> dict[str, Any]:
        return {"capacity_mib": self.capacity_mib, "wasted_mib": self.wasted_mib,
                "entries": {a: self.entries[a].to_json() for a in sorted(self.entries)}}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "ModelCache":
        return cls(int(d["capacity_mib"]), {a: Entry.from_json(v) for a, v in d["entries"].items()},
                   int(d.get("wasted_mib", 0)))


# ============================================================================ the cell's caches
# Functions over a CellState (``s``; typed Any: state.py imports this module). The core
# calls them as it folds placements and node news; the model-locality score and the
# prewarm planner read through them.
def model_of(task: Any) -> Any:
    """The weights a :class:`~.model.Task` loads (its profile's model), or None. Cheap for
    the common case of a task without a profile or a model."""
    prof = task.profile
    return prof.model if prof is not None and prof.model_arch else None


def cache_of(s: Any, node_id: str) -> Optional[ModelCache]:
    """The node's cache, made empty on first use; None when the node registered no
    ``model_cache_mib`` (or is unknown)."""
    c = s.model_caches.get(node_id)
    if c is None:
        node = s.nodes.get(node_id)
        cap = getattr(node, "model_cache_mib", 0) if node is not None else 0
        if cap <= 0:
            return None
        c = s.model_caches[node_id] = ModelCache(int(cap))
    return c


def holders(s: Any, model_arch: str) -> list[tuple[str, Entry]]:
    """``(node, entry)`` of every node whose cache holds the model, by node id."""
    return [(n, c.entries[model_arch]) for n, c in sorted(s.model_caches.items()) if model_arch in c.entries]


def locate(s: Any, node_id: str, model_arch: str, size_mib: int,
           held: Optional[list[tuple[str, Entry]]] = None) -> tuple[str, int, str]:
    """Where ``node_id`` would get the model now, and how long until it is in memory:
    ``(source, wait_ms, holder)``. Local: what is left of its load (``ready_at``) plus a
    disk read; peer: the soonest-ready holder at the node's site, what is left of its
    load plus the LAN copy; else the origin. ``held``: :func:`holders`, when the caller
    has it already."""
    now = s.now
    held = holders(s, model_arch) if held is None else held
    for n, e in held:
        if n == node_id:
            return "local", max(0, e.ready_at - now) + load_ms(size_mib, "local"), n
    node = s.nodes.get(node_id)
    site = node.site if node is not None else ""
    if site:
        peers = [(max(0, e.ready_at - now), n) for n, e in held if s.nodes[n].site == site]
        if peers:
            left, n = min(peers)
            return "peer", left + load_ms(size_mib, "peer"), n
    return "origin", load_ms(size_mib, "origin"), ""


def on_placed(s: Any, node_id: str, task: Any) -> None:
    """A task took its place on ``node_id`` (TaskPlaced, or a move's new node): its model
    is in that node's cache from now on — a hit is a touch; a miss an insert (from a
    site peer if one holds it, else the origin; ready when that load ends), evicting LRU
    entries as needed. No model or no cache: nothing."""
    model = model_of(task)
    if model is None:
        return
    c = cache_of(s, node_id)
    if c is None:
        return
    if c.touch(model.model_arch, s.now):
        return
    source, wait, _ = locate(s, node_id, model.model_arch, model.size_mib)
    c.insert(model.model_arch, model.size_mib, s.now, s.now + wait, TASK, None, task_order(s))


def task_order(s: Any) -> Optional[Callable[[str, Entry], Any]]:
    """The eviction order of a task's load. Plain LRU, unless the prewarm planner's book
    (kept only while it is enabled) knows the newest version of each family: then first the
    superseded versions (tasks ask for the newest: an older one is dead weight), then LRU,
    with prefetched entries no task used yet after those (the planner fetched them for a
    task expected soon; evicting them first would waste the fetch)."""
    latest = s.prewarm.get("latest") if s.prewarm else None
    if not latest:
        return None
    newest = set(latest.values())
    return lambda a, e: (a in newest, e.via == PREWARM and not e.used, e.last_used, a)


def node_gone(s: Any, node_id: str) -> None:
    """The node went DOWN or registered again: its cache is emptied."""
    c = s.model_caches.get(node_id)
    if c is not None:
        c.clear()


def placement_note(s: Any, task: Any, node_id: str) -> Optional[str]:
    """The provenance note of a placement of ``task`` on ``node_id``, made before the
    placement is folded: where its model comes from and the load time that saves (or
    costs) against the origin. None for a task without a model or a cell without caches."""
    model = model_of(task)
    if model is None or (not s.model_caches and getattr(s.nodes.get(node_id), "model_cache_mib", 0) <= 0):
        return None
    arch, size = model.model_arch, model.size_mib
    source, wait, holder = locate(s, node_id, arch, size)
    origin = load_ms(size, "origin")
    if source == "local":
        return f"model {arch} cached on {node_id}: saves ~{(origin - wait) / 1000:.0f} s of load from origin"
    if source == "peer":
        return (f"model {arch} cached on {holder}, a peer at the site of {node_id}: loads over the LAN in "
                f"~{wait / 1000:.0f} s, saves ~{(origin - wait) / 1000:.0f} s of load from origin")
    return f"model {arch} not cached at the site of {node_id}: loads from origin (~{origin / 1000:.0f} s)"
