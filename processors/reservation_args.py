"""The ``reservations`` key of a cell's policy: how the cell clears bids and keeps tokens
(advance reservations, C4). The rules live in ``auction.py`` (clearing, pure) and
``reservations.py`` (tokens in the cell state); this module only holds their arguments,
so the strategy arguments can name them without importing the core."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from .args import arg

Mechanism = Literal["auction", "fcfs"]
Packing = Literal["frag", "first_fit"]


@dataclass(frozen=True, slots=True)
class ReservationArgs:
    """Defaults are the product's (the auction); the ``hard`` and ``flexible`` arms of the
    reservations experiment set ``mechanism: fcfs`` and turn lending, purge and release off
    or on (``replay/reservations_whatif.py``)."""
    mechanism: Mechanism = arg("auction", "auction: sealed bids cleared by price, each winner pays its "
                               "critical price (truthful for all-or-nothing bids); fcfs: bids granted in "
                               "arrival order at their own price")
    clear_every_ms: int = arg(60_000, "the auction clears on the cell clock at every multiple of this period "
                              "(bids that arrived since the last clearing)", ge=1)
    packing: Packing = arg("frag", "where a token goes: frag = the node whose free GPUs in the window stay "
                           "least fragmented (fewest free GPUs left, FGD-style); first_fit = the first node "
                           "in node order that fits")
    reserve_price: float = arg(0.0, "lowest price per GPU-hour a winner pays", ge=0)
    hold_ahead_ms: int = arg(21_600_000, "a token starts to hold its GPUs this long before its window "
                             "(or at the grant if later); GPUs busy then are taken as they free", ge=0)
    lend_bronze: bool = arg(True, "held GPUs that are not yet claimed are lent to bronze work, preempted "
                            "when the owner claims them")
    purge_idle_ms: int = arg(300_000, "a token no task has claimed this long after its window opened "
                             "expires and its GPUs go back to the pool (Slurm's PURGE_COMP); 0 = it lasts "
                             "its whole window", ge=0)
    release_unused: bool = arg(True, "GPUs a claimant does not use (asking 8, running on 4) go back to the "
                               "pool at the claim")
    slot_ms: int = arg(60_000, "the time grid of the capacity plan: window starts and ends are rounded to "
                       "it (starts down, ends up)", ge=1)
    max_bids: int = arg(64, "bids considered per clearing, in arrival order; the rest wait for the next "
                        "(exact critical prices cost O(n^2) placements per clearing)",
                        ge=1)
