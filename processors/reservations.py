"""Reservation tokens in the cell state (C4): bids waiting for the clearing, tokens, their
holds on GPUs, lending to bronze work, claims, purge and release. Pure functions over a
:class:`~suanli.processors.state.CellState`; the decisions that drive them are made in
``core.py`` and the clearing itself is ``auction.py``.

``state.reservations`` (JSON, in every snapshot) holds::

    {"bids": [bid, ...],            # received, not yet cleared (arrival order)
     "next_clear": ms,              # cell-clock time of the next clearing (0 = none due)
     "tokens": {rid: token, ...},   # live tokens (ended ones are dropped)
     "by_node": {node: [rid, ...]}} # index of live tokens per node

A token: ``rid, bid_id, tenant, node, devices`` (its GPUs), ``start, end`` (its window),
``occupied_until`` (``end`` on the slot grid), ``hold_from``, ``purge_at`` (None = lasts
its window), ``price, cpu, mem`` (what its bid asked besides GPUs), ``status`` GRANTED (not
holding yet) | HELD (holding, unclaimed) | CLAIMED, ``held`` (GPUs it holds now: taken out of
``gpu_free`` as if a task held them whole), ``held_cpu, held_mem`` (CPU milli and memory MiB it
holds now, taken out of ``cpu_free`` and ``mem_free``; absent in older snapshots: 0),
``lent`` (``{device: [bronze task ids]}`` running on its GPUs until the owner comes),
``claimed_by`` (task ids), ``waiting`` (claimants that came before the window), ``queued``
(claimants that tried in the window and could not claim yet: while one of them is still
pending the idle purge spares the token; absent in older snapshots).

**Holds.** From ``hold_from`` the token holds each of its GPUs that is free, and takes the
others as they free (before the queue sees them). A GPU busy with bronze work at that
moment is *lent* (the work goes on and is preempted at the claim). A held GPU is invisible
to every task except bronze work that finds no other place (``lend_bronze``) and the
token's claimants. The token holds the CPU and memory its bid asked the same way: what is
free now, the rest as it frees. Without that, work that cannot be preempted (silver, gold)
could take the node's last CPU before the window opens and the owner would find its GPUs
but no CPU to run on. Bronze work may borrow held CPU and memory like held GPUs; the owner
preempts it at the claim.

How a placement meets the holds: just before any task's allocation on a node with tokens
(:func:`on_arrival`), every token there gives back the CPU and memory it holds, and
:func:`fill` takes again what is left right after. A task planned with the holds counted
(anything but lent bronze work and a claimant) leaves them all; lent bronze work and a
claimant take what they need from them.
"""
from __future__ import annotations

from typing import Any, Iterable, Optional

import numpy as np

from suanli.errors import RejectedInput

from . import auction
from . import model as m
from .model import GPU_MILLI
from .reservation_args import ReservationArgs

GRANTED, HELD, CLAIMED = "GRANTED", "HELD", "CLAIMED"
LABEL = "reservation"
BRONZE = "BRONZE"


def book(s: Any) -> dict[str, Any]:
    """``state.reservations`` with its keys present."""
    r = s.reservations
    if "tokens" not in r:
        r.update(bids=[], next_clear=0, tokens={}, by_node={})
    return r


def rid_of(bid_id: str) -> str:
    """The token id of a bid (one token per bid)."""
    return f"rsv-{bid_id}"


# ------------------------------------------------------------------------------ bids
def bid_of(e: m.ReservationBid) -> auction.Bid:
    """The bid, normalised; :class:`RejectedInput` says what is wrong with a malformed one."""
    r = e.resources
    where = f"ReservationBid {e.bid_id!r}"
    if not e.bid_id:
        raise RejectedInput("ReservationBid without a bid_id")
    if r.gpu_count < 1:
        raise RejectedInput(f"{where}: gpu_count must be >= 1 (a token reserves whole GPUs), not {r.gpu_count}")
    if e.duration_ms <= 0:
        raise RejectedInput(f"{where}: duration_ms must be > 0, not {e.duration_ms}")
    if e.price < 0:
        raise RejectedInput(f"{where}: price must be >= 0, not {e.price}")
    latest = e.start_at if e.latest_start_at is None else e.latest_start_at
    if latest < e.start_at:
        raise RejectedInput(f"{where}: latest_start_at {latest} is before start_at {e.start_at}")
    return auction.Bid(bid_id=e.bid_id, tenant=e.tenant, gpus=r.gpu_count, models=tuple(sorted(set(r.gpu_models))),
                       gpu_memory_mib=r.gpu_memory_mib, cpu=r.cpu_milli, mem=r.memory_mib, earliest=e.start_at,
                       latest=latest, duration_ms=e.duration_ms, price=e.price, at=e.at, gang=e.gang)


def add_bid(s: Any, e: m.ReservationBid, args: ReservationArgs) -> bool:
    """Keep a valid bid for the next clearing (False: a duplicate id). Sets the clearing time
    to the next multiple of ``clear_every_ms`` after now."""
    b = book(s)
    bid = bid_of(e)
    if any(x["bid_id"] == bid.bid_id for x in b["bids"]) or rid_of(bid.bid_id) in b["tokens"]:
        return False
    b["bids"].append({f: getattr(bid, f) for f in bid.__slots__} | {"models": list(bid.models)})
    if not b["next_clear"]:
        p = args.clear_every_ms
        b["next_clear"] = (s.now // p + 1) * p
    return True


def take_bids(s: Any, args: ReservationArgs) -> list[auction.Bid]:
    """The bids of this clearing (at most ``max_bids``, in arrival order); the rest stay."""
    b = book(s)
    now_bids, b["bids"] = b["bids"][:args.max_bids], b["bids"][args.max_bids:]
    p = args.clear_every_ms
    b["next_clear"] = (s.now // p + 1) * p if b["bids"] else 0
    return [auction.Bid(**(d | {"models": tuple(d["models"])})) for d in now_bids]


# ------------------------------------------------------------------------------ the plan
def plan_of(s: Any) -> auction.Plan:
    """The capacity plan: every node, the windows of live tokens, and the GPUs non-bronze
    work holds now, until its expected end (placed + ``duration_estimate_ms``; none: for ever)."""
    nodes = []
    for r, nid in enumerate(s.node_ids):
        n = s.nodes[nid]
        nodes.append(auction.NodeCap(nid, int(s.gpu_count[r]), n.gpu_model, n.gpu_memory_mib, int(s.cpu_cap[r]),
                                     int(s.mem_cap[r]), bool(s.ready[r]) and s.health[r] == "READY"))
    plan = auction.Plan(nodes)
    for tok in book(s)["tokens"].values():
        plan.add(s.node_index[tok["node"]], tuple(tok["devices"]), tok["start"], tok["occupied_until"])
    forever = 2 ** 62
    busy: dict[int, dict[int, int]] = {}
    for t in s.holding_records():            # any order: the plan keeps the latest end per GPU
        if t.node is not None and t.devices and t.task.qos_tier != BRONZE:
            est = t.task.duration_estimate_ms
            until = t.placed_at + est if est else forever
            row = busy.setdefault(s.node_index[t.node], {})
            for d in t.devices:
                row[d] = max(row.get(d, 0), until)
    plan.busy_now = busy
    return plan


# ------------------------------------------------------------------------------ holds
# ``held`` maps a device (str, for JSON) to the milli the token holds on it: all of a free
# GPU, or the free part of one that work still uses (so nothing new lands beside that work).
def _hold(s: Any, row: int, d: int, milli: int) -> None:
    s.gpu_free[row, d] -= milli
    s._refresh_gpu_row(row)
    s._tag_delta(row, 1, milli, +1)
    s.touch(row)


def _unhold(s: Any, row: int, d: int, milli: int) -> None:
    s._tag_delta(row, 1, milli, -1)
    s.gpu_free[row, d] += milli
    s._refresh_gpu_row(row)
    s.touch(row)


def _on_node(s: Any, node: str) -> list[dict[str, Any]]:
    b = book(s)
    rids = b["by_node"].get(node)
    return [b["tokens"][rid] for rid in rids] if rids else []


def _free_cpu_mem(s: Any, row: int, cpu: int, mem: int) -> None:
    """Add ``cpu`` and ``mem`` (negative: take them) to the node's free CPU and memory."""
    if cpu or mem:
        s.cpu_free[row] += cpu
        s.mem_free[row] += mem
        s.touch(row)


def _hold_cpu_mem(s: Any, row: int, tok: dict[str, Any]) -> None:
    """The token takes free CPU and memory up to what its bid asked."""
    cpu = min(max(0, int(tok.get("cpu") or 0) - tok.get("held_cpu", 0)), int(s.cpu_free[row]))
    mem = min(max(0, int(tok.get("mem") or 0) - tok.get("held_mem", 0)), int(s.mem_free[row]))
    if cpu > 0 or mem > 0:
        _free_cpu_mem(s, row, -cpu, -mem)
        tok["held_cpu"] = tok.get("held_cpu", 0) + cpu
        tok["held_mem"] = tok.get("held_mem", 0) + mem


def _unhold_cpu_mem(s: Any, row: int, tok: dict[str, Any]) -> None:
    """The token gives back all the CPU and memory it holds."""
    _free_cpu_mem(s, row, tok.pop("held_cpu", 0), tok.pop("held_mem", 0))


def fill(s: Any, node: str) -> None:
    """Held tokens on ``node`` (earliest window first) take whatever is free on their GPUs
    and the free CPU and memory up to their bids' asks, and count GPUs that only bronze work
    uses as lent (if the token lends)."""
    toks = [t for t in _on_node(s, node) if t["status"] == HELD]
    if not toks:
        return
    row = s.node_index[node]
    users_of: dict[int, list[str]] = {}

    def users(d: int) -> list[str]:          # the node's tasks in arrival order, once per call, only if needed
        if not users_of:
            for tid in s.holding(node):
                for x in s.tasks[tid].devices:
                    users_of.setdefault(x, []).append(tid)
            users_of.setdefault(-1, [])
        return users_of.get(d, [])

    taken: set[int] = set()
    for tok in sorted(toks, key=lambda t: (t["start"], t["rid"])):
        for d in tok["devices"]:
            if d in taken:
                continue                  # an earlier window on this GPU holds it first
            taken.add(d)
            free = int(s.gpu_free[row, d])
            if free > 0:
                _hold(s, row, d, free)
                tok["held"][str(d)] = tok["held"].get(str(d), 0) + free
            if tok["held"].get(str(d), 0) >= GPU_MILLI:
                tok["lent"].pop(str(d), None)
                continue
            on = users(d)
            if tok.get("lend") and on and all(s.tasks[u].task.qos_tier == BRONZE for u in on):
                tok["lent"][str(d)] = list(on)
            else:
                tok["lent"].pop(str(d), None)
    for tok in sorted(toks, key=lambda t: (t["start"], t["rid"])):
        _hold_cpu_mem(s, row, tok)


def begin_hold(s: Any, rid: str, lend: bool) -> None:
    """The token starts to hold: free GPUs now, GPUs busy with bronze work only are lent
    (when ``lend``: the work runs on until the claim), the others as they free."""
    tok = book(s)["tokens"][rid]
    tok["status"] = HELD
    tok["lend"] = lend
    fill(s, tok["node"])


def granted(s: Any, e: m.ReservationGranted, args: ReservationArgs) -> None:
    """Evolve: a new token (holding at once if its hold time has come)."""
    b = book(s)
    rid = e.reservation_id
    if rid in b["tokens"]:
        return
    b["tokens"][rid] = {
        "rid": rid, "bid_id": e.bid_id, "tenant": e.tenant, "node": e.node_id, "devices": list(e.gpu_devices),
        "start": e.start_at, "end": e.end_at, "occupied_until": auction._round_up(e.end_at, args.slot_ms),
        "hold_from": e.hold_from if e.hold_from is not None else e.start_at, "purge_at": e.purge_at,
        "price": e.clearing_price, "cpu": e.cpu_milli, "mem": e.memory_mib, "status": GRANTED,
        "held": {}, "lent": {}, "claimed_by": [], "waiting": []}
    b["by_node"].setdefault(e.node_id, []).append(rid)
    if b["tokens"][rid]["hold_from"] <= s.now:
        begin_hold(s, rid, args.lend_bronze)


def _drop(s: Any, rid: str, devices: Optional[Iterable[int]] = None) -> None:
    """Give back what the token holds on ``devices`` (all when None) and forget them; with
    None the token ends."""
    b = book(s)
    tok = b["tokens"].get(rid)
    if tok is None:
        return
    row = s.node_index[tok["node"]]
    give = set(tok["devices"] if devices is None else devices)
    for key in [k for k in tok["held"] if int(k) in give]:
        _unhold(s, row, int(key), tok["held"].pop(key))
    if devices is None:
        _unhold_cpu_mem(s, row, tok)
        del b["tokens"][rid]
        b["by_node"][tok["node"]].remove(rid)
        if not b["by_node"][tok["node"]]:
            del b["by_node"][tok["node"]]
    else:
        tok["devices"] = [d for d in tok["devices"] if d not in give]
        for d in give:
            tok["lent"].pop(str(d), None)
    fill(s, tok["node"])              # another token may want what this one gave back


def released(s: Any, e: m.ReservationReleased) -> None:
    """Evolve: the GPUs named go back to the pool (held ones are unheld) and leave the token."""
    _drop(s, e.reservation_id, e.gpu_devices)


def close(s: Any, rid: str) -> None:
    """A claimed token's window is over: it is forgotten (its claimants run on as tasks)."""
    _drop(s, rid)


def expired(s: Any, e: m.ReservationExpired) -> None:
    """Evolve: the token ends; its GPUs go back; borrowers keep running as ordinary work."""
    _drop(s, e.reservation_id)


def find(s: Any, label: Optional[str]) -> Optional[dict[str, Any]]:
    """The live token a task's ``reservation`` label names (its id or its bid's id)."""
    if not label:
        return None
    toks = book(s)["tokens"]
    return toks.get(label) or toks.get(rid_of(label))


def on_placed(s: Any, e: m.TaskPlaced) -> None:
    """Evolve hook for a placement, before its allocation (see :func:`on_arrival`)."""
    on_arrival(s, e.task_id, e.node_id, e.gpu_devices)


def on_arrival(s: Any, task_id: str, node: str, devices: Iterable[int]) -> None:
    """Evolve hook, before a task's allocation on ``node`` (placed there, or moved there):
    what a token holds on its GPUs is given back for it, and every token there gives back the
    CPU and memory it holds (the caller runs ``fill`` after the allocation, which takes again
    what is left). A claimant marks its token CLAIMED; a bronze task there is lent the GPUs."""
    toks = _on_node(s, node)
    if not toks:
        return
    t = s.tasks[task_id]
    row = s.node_index[node]
    mine = find(s, t.task.labels.get(LABEL))
    for tok in toks:
        _unhold_cpu_mem(s, row, tok)
        for d in devices:
            milli = tok["held"].pop(str(d), 0)
            if milli:
                _unhold(s, row, d, milli)
                if tok is not mine and t.task.qos_tier == BRONZE:
                    tok["lent"].setdefault(str(d), []).append(task_id)
        if tok is mine:
            tok["status"] = CLAIMED
            if task_id not in tok["claimed_by"]:
                tok["claimed_by"].append(task_id)
            if task_id in tok["waiting"]:
                tok["waiting"].remove(task_id)
            if task_id in tok.get("queued", ()):
                tok["queued"].remove(task_id)


Undone = list[tuple[int, int, int, int, int]]


def unhold_all(s: Any) -> Undone:
    """Give back everything unclaimed tokens hold, for one lending cycle; returns what to
    :func:`rehold` after it: ``(row, device, milli, 0, 0)`` per held GPU and
    ``(row, -1, 0, cpu, mem)`` per token's CPU and memory."""
    out: Undone = []
    for tok in book(s)["tokens"].values():
        if tok["status"] == HELD:
            row = s.node_index[tok["node"]]
            for key, milli in tok["held"].items():
                _unhold(s, row, int(key), milli)
                out.append((row, int(key), milli, 0, 0))
            cpu, mem = tok.get("held_cpu", 0), tok.get("held_mem", 0)
            if cpu or mem:
                _free_cpu_mem(s, row, cpu, mem)       # the token keeps its record for rehold
                out.append((row, -1, 0, cpu, mem))
    return out


def rehold(s: Any, undone: Undone) -> None:
    """Undo :func:`unhold_all` (the lending cycle only planned: nothing was allocated)."""
    for row, d, milli, cpu, mem in undone:
        if d >= 0:
            _hold(s, row, d, milli)
        else:
            _free_cpu_mem(s, row, -cpu, -mem)


# ------------------------------------------------------------------------------ readings
def tokens(s: Any) -> list[dict[str, Any]]:
    """Live tokens (copies), by window start then id."""
    return sorted((dict(t) for t in book(s)["tokens"].values()), key=lambda t: (t["start"], t["rid"]))


def held_devices(s: Any) -> float:
    """GPUs held by tokens now and used by nobody (reserved but idle), in GPUs (milli / 1000)."""
    return sum(sum(t["held"].values()) for t in book(s)["tokens"].values()) / GPU_MILLI


def lent_devices(s: Any) -> int:
    """Held GPUs lent to bronze work now."""
    return sum(len(t["lent"]) for t in book(s)["tokens"].values())


def free_view(s: Any) -> np.ndarray:
    """``gpu_free`` with what tokens hold counted free: what the cluster would look like
    without the holds (for honest fragmentation figures: a held idle GPU is idle)."""
    g = s.gpu_free.copy()
    for t in book(s)["tokens"].values():
        row = s.node_index[t["node"]]
        for key, milli in t["held"].items():
            g[row, int(key)] += milli
    return g


def promised_devices(s: Any) -> dict[str, set[int]]:
    """Per node, the GPUs of tokens that hold and are not claimed yet: work on them is lent,
    and a GPU freed there goes to the token (so evicting that work frees nothing for others)."""
    out: dict[str, set[int]] = {}
    for t in book(s)["tokens"].values() if s.reservations else ():
        if t["status"] == HELD:
            out.setdefault(t["node"], set()).update(t["devices"])
    return out


def held_cpu_mem(s: Any) -> list[tuple[int, int, int]]:
    """(row, cpu milli, memory MiB) each token holds (``CellState.check`` counts them as used)."""
    return [(s.node_index[t["node"]], t.get("held_cpu", 0), t.get("held_mem", 0))
            for t in book(s)["tokens"].values() if t.get("held_cpu") or t.get("held_mem")]


def held_pairs(s: Any) -> list[tuple[int, int, int]]:
    """(row, device, milli) of every hold (``CellState.check`` counts them as used)."""
    return [(s.node_index[t["node"]], int(k), v) for t in book(s)["tokens"].values() for k, v in t["held"].items()]


def next_due(s: Any) -> Optional[int]:
    """The next cell-clock time a reservation rule falls due: the clearing, a hold, a window
    opening for waiting claimants, a purge, a window end."""
    b = s.reservations
    if not b:
        return None
    due = [b["next_clear"]] if b.get("next_clear") else []
    for t in b.get("tokens", {}).values():
        if t["status"] == GRANTED:
            due.append(t["hold_from"])
        if t["waiting"]:
            due.append(t["start"])
        if t["status"] != CLAIMED and t["purge_at"] is not None:
            due.append(t["purge_at"])
        due.append(t["end"])
    return min(due) if due else None
