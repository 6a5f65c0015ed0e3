"""The reservations fold (projections/reservations.py), fed typed events (processors/model)."""
from __future__ import annotations

import pytest

from suanli.processors import model as m
from suanli.projections.reservations import ReservationsView, reservation_id_of

H = 3_600_000
T0 = 1_900_000_000_000


def prov(at: int, path: tuple[str, ...] = ()) -> m.Provenance:
    return m.Provenance(input=m.LogPosition(topic="x.cells", partition=0, offset=at % 1000),
                        strategy=m.StrategyRef(name="auction", version="1", config_digest="d"),
                        candidates=(), filtered=(), path=path, decided_at=at)


def bid(bid_id: str, tenant: str = "alpha", gpus: int = 2, price: float = 3.0, latest: int | None = None,
        gang: bool = True) -> m.ReservationBid:
    return m.ReservationBid(event_id=f"bid/{bid_id}", bid_id=bid_id, tenant=tenant, cell="c",
                            resources=m.TaskResources(cpu_milli=4000, memory_mib=8192, gpu_count=gpus,
                                                      gpu_milli=1000),
                            start_at=T0, duration_ms=4 * H, price=price, at=T0 - H, latest_start_at=latest,
                            gang=gang)


def granted(bid_id: str, tenant: str = "alpha", devices: tuple[int, ...] = (0, 1), node: str = "n1",
            price: float = 1.5) -> m.ReservationGranted:
    return m.ReservationGranted(event_id=f"grant/{bid_id}", reservation_id=reservation_id_of(bid_id), bid_id=bid_id,
                                tenant=tenant, cell="c", node_id=node, gpu_devices=devices, start_at=T0,
                                end_at=T0 + 4 * H, clearing_price=price, provenance=prov(T0 - 30_000),
                                bid_price=3.0, wanted_gpus=len(devices), cpu_milli=4000, memory_mib=8192,
                                purge_at=T0 + 300_000, hold_from=T0 - 6 * H)


def rejected(bid_id: str, needed: float | None, tenant: str = "alpha") -> m.ReservationRejected:
    return m.ReservationRejected(event_id=f"reject/{bid_id}", bid_id=bid_id, tenant=tenant, cell="c",
                                 reason="outbid" if needed is not None else "no capacity in the window",
                                 needed_price=needed, at=T0 - 20_000, provenance=prov(T0 - 20_000))


def submitted(task_id: str, reservation: str | None, tenant: str = "alpha") -> m.TaskSubmitted:
    return m.TaskSubmitted(event_id=f"sub/{task_id}", task_id=task_id, tenant=tenant, cell="c", submitted_at=T0,
                           resources=m.TaskResources(cpu_milli=1000, memory_mib=1024, gpu_count=1, gpu_milli=1000),
                           labels={"reservation": reservation} if reservation else {})


def placed(task_id: str, devices: tuple[int, ...], node: str = "n1", tenant: str = "alpha",
           path: tuple[str, ...] = ()) -> m.TaskPlaced:
    return m.TaskPlaced(event_id=f"place/{task_id}/{node}", decision_id=f"c/x/0/{task_id}", task_id=task_id,
                        tenant=tenant, cell="c", node_id=node, gpu_devices=devices, gpu_milli=1000, cpu_milli=1000,
                        memory_mib=1024, provenance=prov(T0 + 1000, path))


def fold(*events) -> ReservationsView:
    view = ReservationsView()
    for event in events:
        view.apply_event(event)
    return view


def test_a_bid_is_submitted_then_granted_with_the_tokens_terms():
    view = fold(bid("b1", latest=T0 + H, gang=False))
    b = view.bid("b1")
    assert (b.status, b.tenant, b.gpus, b.latest_start_at, b.gang, b.price) == ("SUBMITTED", "alpha", 2, T0 + H,
                                                                                  False, 3.0)
    view.apply_event(granted("b1"))
    assert (b.status, b.reservation_id, b.decided_at) == ("GRANTED", "rsv-b1", T0 - 30_000)
    t = view.token("rsv-b1")
    assert view.token("b1") is t                       # the bid's id names the token too
    assert (t.status, t.node_id, t.gpu_devices, t.start_at, t.end_at, t.clearing_price) == \
        ("GRANTED", "n1", [0, 1], T0, T0 + 4 * H, 1.5)
    assert (t.purge_at, t.hold_from, t.wanted_gpus, t.use) == (T0 + 300_000, T0 - 6 * H, 2, 0.0)


@pytest.mark.parametrize("needed", [2.25, None])
def test_a_refused_bid_is_lost_with_the_reason_and_the_price_that_would_have_won(needed):
    view = fold(bid("b2"), rejected("b2", needed))
    b = view.bid("b2")
    assert (b.status, b.needed_price, b.reservation_id) == ("LOST", needed, "")
    assert b.reason == ("outbid" if needed is not None else "no capacity in the window")
    assert view.tokens == {}


def test_a_claim_by_label_marks_the_token_claimed_with_its_use_and_the_gpus_given_back():
    view = fold(bid("b1"), granted("b1", devices=(2, 3)), submitted("job", "rsv-b1"), placed("job", (3,)))
    t = view.token("rsv-b1")
    assert (t.status, t.claimed_by, t.claimed_at, t.used_devices, t.use) == ("CLAIMED", ["job"], T0 + 1000, [3], 0.5)
    view.apply_event(m.ReservationReleased(event_id="rel/rsv-b1", reservation_id="rsv-b1", cell="c",
                                           reason="unused at the claim", at=T0 + 1000, gpu_devices=(2,),
                                           node_id="n1", claimed_by="job"))
    assert (t.status, t.released_devices, t.gpus_released, t.claimed_by) == ("CLAIMED", [2], 1, ["job"])
    view.apply_event(m.ReservationExpired(event_id="exp/rsv-b1", reservation_id="rsv-b1", cell="c", at=T0 + 4 * H,
                                          reason="window ended", gpu_devices=(3,), node_id="n1"))
    assert (t.status, t.ended_at) == ("ENDED", T0 + 4 * H)


def test_the_label_may_name_the_bid_and_other_placements_are_not_claims():
    view = fold(bid("b1"), granted("b1"),
                submitted("elsewhere", "b1"), placed("elsewhere", (0,), node="n2"),      # not the token's node
                submitted("thief", "rsv-b1", tenant="beta"), placed("thief", (0,), tenant="beta"),
                submitted("plain", None), placed("plain", (1,)))
    t = view.token("rsv-b1")
    assert (t.status, t.claimed_by) == ("GRANTED", [])
    view.apply_event(submitted("mine", "b1"))
    view.apply_event(placed("mine", (0, 1)))
    assert (t.status, t.claimed_by, t.use) == ("CLAIMED", ["mine"], 1.0)


def test_an_unclaimed_token_expires():
    view = fold(bid("b1"), granted("b1"),
                m.ReservationExpired(event_id="exp", reservation_id="rsv-b1", cell="c", at=T0 + 300_000,
                                     reason="unclaimed for 300 s", gpu_devices=(0, 1), node_id="n1"))
    t = view.token("rsv-b1")
    assert (t.status, t.reason, t.ended_at) == ("EXPIRED", "unclaimed for 300 s", T0 + 300_000)
    view.apply_event(submitted("late", "rsv-b1"))
    view.apply_event(placed("late", (0,)))
    assert (t.status, t.claimed_by) == ("EXPIRED", [])


def test_order_between_topics_does_not_matter():
    """A decision before its bid, a placement before the claimant's label or the grant."""
    view = fold(placed("job", (1,)), granted("b1"), submitted("job", "rsv-b1"), bid("b1"))
    t, b = view.token("rsv-b1"), view.bid("b1")
    assert (b.status, b.gpus, b.at, b.price) == ("GRANTED", 2, T0 - H, 3.0)
    assert (t.status, t.claimed_by, t.used_devices) == ("CLAIMED", ["job"], [1])
    # the decision path names the token: a claim even with the label never read
    view2 = fold(granted("b9"), placed("x", (0,), path=("reservation rsv-b9: claimed", "place on n1")))
    assert view2.token("rsv-b9").claimed_by == ["x"]
    view3 = fold(placed("y", (0,), path=("reservation rsv-b8: claimed",)), granted("b8"))
    assert view3.token("rsv-b8").claimed_by == ["y"]


def test_redelivered_events_count_once_and_a_bid_read_twice_is_one_bid():
    events = [bid("b1"), granted("b1"), submitted("job", "rsv-b1"), placed("job", (0,))]
    view = fold(*events, *events)
    assert len(view.bids) == 1 and view.token("rsv-b1").claimed_by == ["job"]
    # the raw copy and the cell log's copy of a bid have the same event id; a second bid id is a second bid
    view.apply(*_raw(bid("b1")))
    assert len(view.bids) == 1


def test_listing_orders_and_filters():
    view = fold(bid("b1", tenant="alpha"), bid("b2", tenant="beta"), granted("b1"), granted("b2", tenant="beta",
                                                                                             node="n2"),
                m.ReservationExpired(event_id="e2", reservation_id="rsv-b2", cell="c", at=T0))
    assert [t.reservation_id for t in view.tokens_of()] == ["rsv-b1", "rsv-b2"]
    assert [t.reservation_id for t in view.tokens_of(tenant="beta")] == ["rsv-b2"]
    assert [t.reservation_id for t in view.tokens_of(status="EXPIRED")] == ["rsv-b2"]
    assert [b.bid_id for b in view.bids_of("alpha")] == ["b1"]


def _raw(value):
    return value.KIND, m.to_avro(value)
