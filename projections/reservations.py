"""Reservations read model (#15): bids, what became of them, and the tokens they won.

A pure fold (no I/O, no clock) of the reservation events of a namespace, in the style of
``projections/lifecycle.py``. Feed it ``(kind, payload)`` pairs (decoded Avro dicts) from the
raw tasks topic or the cell log (``ReservationBid``, ``TaskSubmitted``) and the decisions
(``ReservationGranted``, ``ReservationRejected``, ``ReservationExpired``,
``ReservationReleased``, ``TaskPlaced``), or typed values with :meth:`ReservationsView.apply_event`.

**Bids.** SUBMITTED (the ``ReservationBid`` was seen) -> GRANTED (``ReservationGranted``:
token id, node, devices, window, clearing price) or LOST (``ReservationRejected``: reason
and ``needed_price``, the lowest price that would have won; null when no price would have:
no capacity in the window).

**Tokens** (``reservation_id`` = ``"rsv-" + bid_id``): GRANTED -> CLAIMED (a ``TaskPlaced``
of a task whose label ``reservation`` names the token, by its id or its bid's id, on the
token's node; or whose decision path says the token was claimed) -> the GPUs the claimant
did not use come back with ``ReservationReleased`` (``released_devices``). A token nobody
claimed ends EXPIRED (``ReservationExpired``); a claimed one that gets a
``ReservationExpired`` (its window closed) is ENDED; one whose GPUs were all given back
unclaimed is RELEASED.

``use`` is the fraction of the token's GPUs its claimants were placed on (0 until claimed).

The fold is idempotent on event ids, and tolerant of order between topics: a decision about
a bid not seen yet creates the bid from the decision's fields (the bid fills in the rest
when it arrives), a placement whose decision path names a token is taken as that token's
claim even before the claimant's submission (and its label) has been read, and the latest
:data:`RECENT` other placements are kept for a label read after them.
"""
from __future__ import annotations

import re
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Optional

KINDS = frozenset({"ReservationBid", "TaskSubmitted", "TaskPlaced", "ReservationGranted", "ReservationRejected",
                   "ReservationExpired", "ReservationReleased"})
"""The kinds the fold reads (others are ignored)."""
BID_STATUSES = ("SUBMITTED", "GRANTED", "LOST")
TOKEN_STATUSES = ("GRANTED", "CLAIMED", "EXPIRED", "ENDED", "RELEASED")
LABEL = "reservation"
PREFIX = "rsv-"
_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:@+-]*")
_IDEMPOTENT = frozenset({"TaskSubmitted", "TaskPlaced"})
RECENT = 4096       # unlabelled placements kept, in case the claimant's label is read after its placement


def reservation_id_of(bid_id: str) -> str:
    """The token id of a bid's token (deterministic: one token per bid)."""
    return PREFIX + bid_id


@dataclass
class BidState:
    bid_id: str
    tenant: str = ""
    cell: str = ""
    at: int = 0                          # when it was bid (the submitter's clock)
    start_at: int = 0                    # earliest start
    latest_start_at: Optional[int] = None   # None: start_at
    duration_ms: int = 0
    price: float = 0.0                   # maximum per GPU-hour
    gang: bool = True
    resources: dict[str, Any] = field(default_factory=dict)
    seen: bool = False                   # the ReservationBid itself was folded
    status: str = "SUBMITTED"            # SUBMITTED | GRANTED | LOST
    reservation_id: str = ""
    reason: str = ""                     # LOST: why
    needed_price: Optional[float] = None  # LOST: the lowest price that would have won (None: no capacity)
    decided_at: int = 0                  # the grant's or rejection's decision time (cell clock)

    @property
    def gpus(self) -> int:
        return int(self.resources.get("gpu_count", 0) or 0)


@dataclass
class TokenState:
    reservation_id: str
    bid_id: str
    tenant: str
    cell: str
    node_id: str
    gpu_devices: list[int]
    start_at: int
    end_at: int
    clearing_price: float
    bid_price: float = 0.0
    wanted_gpus: int = 0
    cpu_milli: int = 0
    memory_mib: int = 0
    purge_at: Optional[int] = None
    hold_from: Optional[int] = None
    granted_at: int = 0
    status: str = "GRANTED"              # GRANTED | CLAIMED | EXPIRED | ENDED | RELEASED
    claimed_by: list[str] = field(default_factory=list)
    claimed_at: int = 0
    used_devices: list[int] = field(default_factory=list)
    released_devices: list[int] = field(default_factory=list)
    ended_at: int = 0                    # EXPIRED / ENDED / RELEASED: when
    reason: str = ""                     # the expiry's or the release's reason

    @property
    def gpus(self) -> int:
        return len(self.gpu_devices)

    @property
    def gpus_released(self) -> int:
        return len(self.released_devices)

    @property
    def use(self) -> float:
        """The fraction of the token's GPUs its claimants were placed on."""
        return len(self.used_devices) / len(self.gpu_devices) if self.gpu_devices else 0.0


class ReservationsView:
    """The fold (see the module docstring)."""

    def __init__(self) -> None:
        self.bids: dict[str, BidState] = {}
        self.tokens: dict[str, TokenState] = {}
        self._seen: set[str] = set()
        self._labels: dict[str, str] = {}       # task id -> its label ``reservation`` (token or bid id)
        self._tenants: dict[str, str] = {}      # task id -> tenant (of the labelled tasks)
        self._placements: dict[str, dict[str, Any]] = {}   # labelled task -> latest TaskPlaced not yet a claim
        self._recent: OrderedDict[str, dict[str, Any]] = OrderedDict()   # the latest unlabelled placements

    # ------------------------------------------------------------------ input
    def apply(self, kind: str, p: dict[str, Any]) -> None:
        """Fold one decoded event; kinds without a handler are ignored."""
        handler = getattr(self, f"_on_{kind}", None)
        if handler is None:
            return
        event_id = p.get("event_id")
        # Submissions and placements are every task's, and their handlers are idempotent (a
        # label is taken once, a claim adds nothing twice): remembering their event ids would
        # only grow with the history (bench/read_model_memory.py).
        if event_id is not None and kind not in _IDEMPOTENT:
            key = f"{kind}:{event_id}"
            if key in self._seen:
                return
            self._seen.add(key)
        handler(p)

    def apply_event(self, value: Any) -> None:
        """Fold one typed event (a ``processors/model`` dataclass)."""
        from suanli.processors.model import kind_of, to_avro

        self.apply(kind_of(value), to_avro(value))

    # ------------------------------------------------------------------ lookups
    def token(self, ref: str) -> TokenState | None:
        """The token named by ``ref``: its id, or its bid's id."""
        if not ref:
            return None
        return self.tokens.get(ref) or self.tokens.get(reservation_id_of(ref)) or \
            self.tokens.get(self.bids[ref].reservation_id if ref in self.bids else "")

    def labelled(self, task_id: str) -> bool:
        """Whether the task's form named a reservation (its placements may be claims)."""
        return task_id in self._labels

    def bid(self, bid_id: str) -> BidState | None:
        return self.bids.get(bid_id)

    def _bid(self, bid_id: str) -> BidState:
        bid = self.bids.get(bid_id)
        if bid is None:
            bid = self.bids[bid_id] = BidState(bid_id)
        return bid

    # ------------------------------------------------------------------ bids
    def _on_ReservationBid(self, p: dict[str, Any]) -> None:
        bid_id = p.get("bid_id")
        if not bid_id:
            return
        bid = self._bid(bid_id)
        if bid.seen:
            return                       # the raw copy and the cell log's copy are one bid
        bid.seen = True
        bid.tenant = p.get("tenant", bid.tenant)
        bid.cell = p.get("cell", bid.cell)
        bid.at = p.get("at", 0)
        bid.start_at = p.get("start_at", 0)
        bid.latest_start_at = p.get("latest_start_at")
        bid.duration_ms = p.get("duration_ms", 0)
        bid.price = p.get("price", 0.0)
        bid.gang = p.get("gang", True)
        bid.resources = dict(p.get("resources") or {})

    def _on_ReservationGranted(self, p: dict[str, Any]) -> None:
        bid = self._bid(p["bid_id"])
        if not bid.seen:
            bid.tenant, bid.cell = p.get("tenant", ""), p.get("cell", "")
            bid.price = p.get("bid_price", 0.0)
        decided = (p.get("provenance") or {}).get("decided_at", 0)
        bid.status, bid.reservation_id, bid.decided_at = "GRANTED", p["reservation_id"], decided
        bid.reason, bid.needed_price = "", None
        token = self.tokens.get(p["reservation_id"])
        if token is None:
            token = self.tokens[p["reservation_id"]] = TokenState(
                p["reservation_id"], p["bid_id"], p.get("tenant", ""), p.get("cell", ""), p.get("node_id", ""),
                list(p.get("gpu_devices") or []), p.get("start_at", 0), p.get("end_at", 0),
                p.get("clearing_price", 0.0))
        else:                            # granted again (a re-clear): the newest grant's terms
            token.node_id, token.gpu_devices = p.get("node_id", ""), list(p.get("gpu_devices") or [])
            token.start_at, token.end_at = p.get("start_at", 0), p.get("end_at", 0)
            token.clearing_price = p.get("clearing_price", 0.0)
        token.bid_price, token.wanted_gpus = p.get("bid_price", 0.0), p.get("wanted_gpus", 0)
        token.cpu_milli, token.memory_mib = p.get("cpu_milli", 0), p.get("memory_mib", 0)
        token.purge_at, token.hold_from, token.granted_at = p.get("purge_at"), p.get("hold_from"), decided
        for task_id, placed in list(self._placements.items()):   # placements read before the grant
            if self.token(self._labels.get(task_id, "")) is token or self._named_in_path(placed) is token:
                self._claim(token, placed)

    def _on_ReservationRejected(self, p: dict[str, Any]) -> None:
        bid = self._bid(p["bid_id"])
        if not bid.seen:
            bid.tenant, bid.cell = p.get("tenant", ""), p.get("cell", "")
        if bid.status == "GRANTED":
            return                       # a token stands; a later refusal does not take it back
        bid.status, bid.reason, bid.needed_price = "LOST", p.get("reason", ""), p.get("needed_price")
        bid.decided_at = (p.get("provenance") or {}).get("decided_at", 0) or p.get("at", 0)

    # ------------------------------------------------------------------ tokens
    def _on_ReservationExpired(self, p: dict[str, Any]) -> None:
        token = self.tokens.get(p.get("reservation_id", ""))
        if token is None:
            return
        token.status = "ENDED" if token.claimed_by else "EXPIRED"
        token.ended_at, token.reason = p.get("at", 0), p.get("reason", "") or token.reason

    def _on_ReservationReleased(self, p: dict[str, Any]) -> None:
        token = self.tokens.get(p.get("reservation_id", ""))
        if token is None:
            return
        for d in p.get("gpu_devices") or []:
            if d not in token.released_devices:
                token.released_devices.append(d)
        claimant = p.get("claimed_by") or ""
        if claimant and claimant not in token.claimed_by:
            token.claimed_by.append(claimant)
            if token.status == "GRANTED":
                token.status = "CLAIMED"
        token.reason = p.get("reason", "") or token.reason
        if (not token.claimed_by and token.status == "GRANTED" and token.gpu_devices
                and set(token.gpu_devices) <= set(token.released_devices)):
            token.status, token.ended_at = "RELEASED", p.get("at", 0)

    # ------------------------------------------------------------------ claims
    def _on_TaskSubmitted(self, p: dict[str, Any]) -> None:
        ref = (p.get("labels") or {}).get(LABEL)
        task_id = p.get("task_id")
        if not ref or not task_id or task_id in self._labels:
            return
        self._labels[task_id] = ref
        self._tenants[task_id] = p.get("tenant", "")
        early = self._recent.pop(task_id, None)
        if early is not None and task_id not in self._placements:
            self._placements[task_id] = early
        placed = self._placements.get(task_id)
        token = self.token(ref)
        if placed is not None and token is not None:
            self._claim(token, placed)

    def _on_TaskPlaced(self, p: dict[str, Any]) -> None:
        task_id = p.get("task_id", "")
        token = self.token(self._labels.get(task_id, "")) or self._named_in_path(p)
        if token is None:
            if task_id in self._labels or self._says_claimed(p):
                self._placements[task_id] = p        # its token (or its label) is not read yet
            elif task_id:
                self._recent[task_id] = p            # its label may still come (topics are read apart)
                self._recent.move_to_end(task_id)
                if len(self._recent) > RECENT:
                    self._recent.popitem(last=False)
            return
        self._claim(token, p)

    @staticmethod
    def _says_claimed(p: dict[str, Any]) -> bool:
        path = (p.get("provenance") or {}).get("path") or []
        return any(LABEL in step and "claim" in step for step in path)

    def _named_in_path(self, p: dict[str, Any]) -> TokenState | None:
        """The token a placement's decision path says it claimed ("reservation rsv-b: claimed")."""
        for step in (p.get("provenance") or {}).get("path") or []:
            if LABEL in step and "claim" in step:
                for word in _ID.findall(step):
                    token = self.tokens.get(word.rstrip(".:"))
                    if token is not None:
                        return token
        return None

    def _claim(self, token: TokenState, p: dict[str, Any]) -> None:
        task_id = p.get("task_id", "")
        tenant = p.get("tenant") or self._tenants.get(task_id, "")
        if tenant and token.tenant and tenant != token.tenant:
            return                       # another tenant's task cannot use this token
        if p.get("node_id") != token.node_id or token.status not in ("GRANTED", "CLAIMED"):
            self._placements.pop(task_id, None)
            return                       # placed elsewhere, or the token is over: not a claim
        self._placements.pop(task_id, None)
        if task_id not in token.claimed_by:
            token.claimed_by.append(task_id)
        token.status = "CLAIMED"
        token.claimed_at = token.claimed_at or (p.get("provenance") or {}).get("decided_at", 0)
        for d in p.get("gpu_devices") or []:
            if d in token.gpu_devices and d not in token.used_devices:
                token.used_devices.append(d)

    # ------------------------------------------------------------------ reading
    def bids_of(self, tenant: str | None = None, cell: str | None = None) -> list[BidState]:
        """Bids (of ``tenant``, in ``cell``), oldest first."""
        rows = [b for b in self.bids.values() if tenant in (None, b.tenant) and cell in (None, b.cell)]
        return sorted(rows, key=lambda b: (b.at, b.bid_id))

    def tokens_of(self, tenant: str | None = None, cell: str | None = None,
                  status: str | None = None) -> list[TokenState]:
        """Tokens, by window start."""
        rows = [t for t in self.tokens.values() if tenant in (None, t.tenant) and cell in (None, t.cell)
                and status in (None, t.status)]
        return sorted(rows, key=lambda t: (t.start_at, t.reservation_id))
