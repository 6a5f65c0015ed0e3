"""Reservation tokens through the core: clearing on the cell clock, holds, lending to
bronze, claims without queueing, release of unused GPUs, purge, window end, replay."""
from __future__ import annotations

import json

from core_helpers import Feed, typed

from suanli.processors import CellState, decide, reservations

MIN = 60_000


def kinds(out):
    return [k for k, _ in out]


def of(out, kind):
    return [p for k, p in out if k == kind]


def bid(f: Feed, bid_id, gpus=8, start=10 * MIN, latest=None, duration=30 * MIN, price=2.0, at=0, gang=True,
        tenant="t"):
    return f.send("ReservationBid", {"event_id": f"b/{bid_id}", "bid_id": bid_id, "tenant": tenant, "cell": "test",
                                     "resources": {"cpu_milli": 1000, "memory_mib": 1024, "gpu_count": gpus,
                                                   "gpu_milli": 1000},
                                     "start_at": start, "duration_ms": duration, "price": price, "at": at,
                                     "latest_start_at": latest, "gang": gang})


def tick(f: Feed, at):
    return f.send("CellTick", {"at": at})


def cell(config=None, nodes=2):
    cfg = {"seed": 1, "retry_every_ms": 0, **(config or {})}
    f = Feed(config=cfg)
    for i in range(nodes):
        f.node(f"n{i}", cpu=64000, mem=262144, gpus=8)
    return f


def test_a_bid_is_cleared_on_the_period_and_granted_with_provenance():
    f = cell()
    assert bid(f, "b1", gpus=4, at=1000) == []                # bids wait for the clearing
    assert tick(f, 30_000) == []                                # not yet: clears at 60 s
    out = tick(f, MIN)
    [g] = of(out, "ReservationGranted")
    assert g["reservation_id"] == "rsv-b1" and g["start_at"] == 10 * MIN and len(g["gpu_devices"]) == 4
    assert g["clearing_price"] == 0.0                           # uncontested: pays the reserve price
    assert any("auction" in p for p in g["provenance"]["path"])
    tok = reservations.tokens(f.state)[0]
    assert tok["status"] == "HELD" and len(tok["held"]) == 4     # holds at once (hold_ahead 6 h)
    f.state.check()


def test_held_gpus_are_invisible_to_silver_but_lent_to_bronze_and_the_owner_preempts_the_borrower():
    f = cell(nodes=1)
    bid(f, "b1", gpus=8, at=0)
    tick(f, MIN)
    out = f.task("s1", gpus=1, milli=1000, at=MIN + 1, qos="SILVER")
    assert kinds(out) == ["TaskPending"]
    out = f.task("z1", gpus=2, milli=1000, at=MIN + 2, qos="BRONZE")
    [p] = of(out, "TaskPlaced")
    assert any("lent" in s for s in p["provenance"]["path"])
    tok = reservations.tokens(f.state)[0]
    assert len(tok["held"]) == 6 and sum(len(v) for v in tok["lent"].values()) == 2
    f.state.check()
    tick(f, 10 * MIN)                                            # the window opens
    out = f.task("own", gpus=8, milli=1000, at=10 * MIN + 1, labels={"reservation": "rsv-b1"})
    assert kinds(out)[:2] == ["TaskPreempted", "TaskPreempted"] or "TaskPreempted" in kinds(out)
    [pre] = of(out, "TaskPreempted")[:1]
    assert pre["task_id"] == "z1" and pre["preempted_by"] == "own"
    [placed] = of(out, "TaskPlaced")
    assert placed["task_id"] == "own" and sorted(placed["gpu_devices"]) == list(range(8))
    assert any("reservation rsv-b1: claimed" in s for s in placed["provenance"]["path"])
    assert reservations.tokens(f.state)[0]["status"] == "CLAIMED"
    f.state.check()


def test_a_claimant_before_its_window_waits_and_starts_on_the_tick_the_window_opens():
    f = cell(nodes=1)
    bid(f, "b1", gpus=4, at=0)
    tick(f, MIN)
    out = f.task("own", gpus=4, milli=1000, at=5 * MIN, labels={"reservation": "b1"})   # the bid id works too
    [pend] = of(out, "TaskPending")
    assert "window opens" in pend["reasons"][0]["reason"]
    assert reservations.next_due(f.state) <= 10 * MIN
    out = tick(f, 10 * MIN)
    [placed] = of(out, "TaskPlaced")
    assert placed["task_id"] == "own"


def test_unused_gpus_of_a_claim_go_back_at_once():
    f = cell(nodes=1)
    bid(f, "b1", gpus=8, at=0)
    tick(f, MIN)
    tick(f, 10 * MIN)
    out = f.task("own", gpus=4, milli=1000, at=10 * MIN, labels={"reservation": "rsv-b1"})
    [rel] = of(out, "ReservationReleased")
    assert len(rel["gpu_devices"]) == 4 and rel["claimed_by"] == "own"
    out = f.task("s1", gpus=4, milli=1000, at=10 * MIN + 1)
    assert kinds(out) == ["TaskPlaced"]                          # the returned half is usable by anyone
    f.state.check()


def test_an_unclaimed_token_expires_after_the_idle_purge_and_its_gpus_go_back():
    f = cell(nodes=1)
    bid(f, "b1", gpus=8, at=0)
    tick(f, MIN)
    f.task("s1", gpus=1, milli=1000, at=MIN + 1)                 # waits: everything is held
    assert tick(f, 10 * MIN + 299_000) == []
    out = tick(f, 15 * MIN)
    [exp] = of(out, "ReservationExpired")
    assert "unclaimed 300 s" in exp["reason"]
    assert "TaskPlaced" in kinds(out)                             # the queue gets the GPUs at once
    assert reservations.tokens(f.state) == []
    f.state.check()


def test_losers_are_told_the_price_they_needed_or_that_there_was_no_capacity():
    f = cell(nodes=1)
    bid(f, "hi", gpus=8, price=5.0, at=0)
    bid(f, "lo", gpus=8, price=1.0, at=1)
    bid(f, "huge", gpus=16, price=9.0, at=2)
    out = tick(f, MIN)
    [g] = of(out, "ReservationGranted")
    assert g["bid_id"] == "hi" and g["clearing_price"] == 1.0      # pays the loser's bid: its critical price
    lost = {p["bid_id"]: p for p in of(out, "ReservationRejected")}
    assert lost["lo"]["needed_price"] == 5.0 and "needed a price above 5" in lost["lo"]["reason"]
    assert lost["huge"]["needed_price"] is None and "no capacity" in lost["huge"]["reason"]


def test_a_flexible_window_takes_the_earliest_start_where_capacity_appears():
    f = cell(nodes=1)
    bid(f, "a", gpus=8, start=10 * MIN, duration=20 * MIN, price=3.0, at=0)
    bid(f, "b", gpus=8, start=15 * MIN, latest=60 * MIN, duration=10 * MIN, price=1.0, at=1)
    out = tick(f, MIN)
    grants = {g["bid_id"]: g for g in of(out, "ReservationGranted")}
    assert grants["b"]["start_at"] == 30 * MIN                   # right after a's window


def test_a_bad_bid_is_rejected_as_input_with_a_clear_reason():
    import pytest

    from suanli.errors import RejectedInput
    f = cell(nodes=1)
    with pytest.raises(RejectedInput, match="latest_start_at"):
        bid(f, "bad", start=10 * MIN, latest=5 * MIN)
    f.offset += 1                       # the refused input's offset counts as applied
    with pytest.raises(RejectedInput, match="gpu_count"):
        bid(f, "cpu", gpus=0)


def test_hard_reservations_hold_from_the_grant_lend_nothing_and_last_their_window():
    f = cell({"reservations": {"mechanism": "fcfs", "packing": "first_fit", "lend_bronze": False,
                               "purge_idle_ms": 0, "release_unused": False}}, nodes=1)
    bid(f, "b1", gpus=8, at=0)
    out = tick(f, MIN)
    [g] = of(out, "ReservationGranted")
    assert g["clearing_price"] == 2.0 and g["purge_at"] is None
    assert kinds(f.task("z1", gpus=1, milli=1000, at=MIN + 1, qos="BRONZE")) == ["TaskPending"]
    assert tick(f, 16 * MIN) == []                                  # no purge
    out = tick(f, 40 * MIN)
    assert kinds(out)[0] == "ReservationExpired" and "window ended" in of(out, "ReservationExpired")[0]["reason"]


def test_replay_and_snapshot_restore_are_identical():
    def run(snapshot_at=None):
        f = cell(nodes=2)
        script = [lambda: bid(f, "b1", gpus=6, at=0), lambda: bid(f, "b2", gpus=4, price=3.0, at=1),
                  lambda: tick(f, MIN),
                  lambda: f.task("z1", gpus=4, milli=1000, at=MIN + 5, qos="BRONZE"),
                  lambda: f.task("z2", gpus=4, milli=1000, at=MIN + 6, qos="BRONZE"),
                  lambda: tick(f, 10 * MIN),
                  lambda: f.task("o1", gpus=6, milli=1000, at=10 * MIN + 1, labels={"reservation": "rsv-b1"}),
                  lambda: tick(f, 16 * MIN)]
        for i, step in enumerate(script):
            if i == snapshot_at:
                f.state = CellState.from_snapshot(json.loads(json.dumps(f.state.to_snapshot())))
            step()
            f.state.check()
        return f.outputs
    a = run()
    assert a == run() == run(snapshot_at=4) == run(snapshot_at=6)
    assert {"ReservationGranted", "ReservationExpired"} <= set(kinds(a))
    assert any("lent" in step for p in of(a, "TaskPlaced") for step in p["provenance"]["path"])


def test_the_owner_preempts_every_bronze_task_sharing_a_gpu_of_its_token():
    f = cell(nodes=1)
    f.task("z1", gpus=1, milli=500, at=1, qos="BRONZE")            # before the bid: shares of one GPU
    f.task("z2", gpus=1, milli=500, at=2, qos="BRONZE")
    bid(f, "b1", gpus=8, at=3)
    tick(f, MIN)
    f.task("z3", gpus=1, milli=300, at=MIN + 1, qos="BRONZE")       # lent a held GPU
    tick(f, 10 * MIN)
    out = f.task("own", gpus=8, milli=1000, at=10 * MIN + 1, labels={"reservation": "rsv-b1"})
    assert {p["task_id"] for p in of(out, "TaskPreempted")} == {"z1", "z2", "z3"}
    [placed] = of(out, "TaskPlaced")
    assert placed["task_id"] == "own" and len(placed["gpu_devices"]) == 8
    f.state.check()


def test_gpus_silver_work_may_still_hold_are_never_promised():
    f = cell(nodes=1)
    f.task("s1", gpus=1, milli=1000, at=1, qos="SILVER")          # no estimate: it may run for ever
    bid(f, "b1", gpus=8, at=3)
    [lost] = of(tick(f, MIN), "ReservationRejected")
    assert "no capacity" in lost["reason"]


def test_a_silver_task_on_a_gpu_of_the_token_is_waited_for_not_preempted():
    f = cell(nodes=1)
    f.send("TaskSubmitted", {"task_id": "s1", "tenant": "t", "cell": "test", "submitted_at": 1,
                             "resources": {"cpu_milli": 1000, "memory_mib": 1024, "gpu_count": 1, "gpu_milli": 1000},
                             "qos_tier": "SILVER", "priority": 0, "labels": {},
                             "duration_estimate_ms": 5 * MIN})       # expected to end before the window
    bid(f, "b1", gpus=8, at=3)
    [g] = of(tick(f, MIN), "ReservationGranted")
    assert g["gpu_devices"] == list(range(8))
    tick(f, 10 * MIN)
    out = f.task("own", gpus=8, milli=1000, at=10 * MIN + 1, labels={"reservation": "rsv-b1"})
    assert of(out, "TaskPreempted") == [] and kinds(out) == ["TaskPending"]
    out = f.status("s1", "COMPLETED", at=10 * MIN + 2)
    assert "TaskPlaced" in kinds(out) and of(out, "TaskPlaced")[0]["task_id"] == "own"
    f.state.check()


def test_silver_does_not_preempt_bronze_lent_a_token_s_gpus_it_could_never_use():
    f = cell(nodes=1)
    bid(f, "b1", gpus=8, at=0)
    tick(f, MIN)
    f.task("z1", gpus=2, milli=1000, at=MIN + 1, qos="BRONZE")       # lent two held GPUs
    out = f.task("s1", gpus=1, milli=1000, at=MIN + 2, qos="SILVER")
    assert of(out, "TaskPreempted") == [] and kinds(out) == ["TaskPending"]
    f.state.check()


def test_the_free_part_of_a_token_gpu_shared_with_bronze_is_held_too():
    f = cell(nodes=1)
    f.task("z1", gpus=1, milli=500, at=1, qos="BRONZE")            # half of gpu0
    bid(f, "b1", gpus=8, at=3)
    tick(f, MIN)
    tok = reservations.tokens(f.state)[0]
    assert tok["held"]["0"] == 500 and tok["lent"] == {"0": ["z1"]}
    assert kinds(f.task("s1", gpus=1, milli=300, at=MIN + 1, qos="SILVER")) == ["TaskPending"]
    assert reservations.held_devices(f.state) == 7.5
    f.state.check()


def test_a_token_holds_the_cpu_and_memory_its_bid_asked_so_silver_work_cannot_starve_the_owner():
    f = cell(nodes=1)                              # one node: 64 cores, 256 GiB, 8 GPUs
    bid(f, "b1", gpus=4, at=0)                     # the bid asks 1 core and 1 GiB besides its GPUs
    tick(f, MIN)
    tok = reservations.tokens(f.state)[0]
    assert (tok["held_cpu"], tok["held_mem"]) == (1000, 1024)
    assert int(f.state.cpu_free[0]) == 63_000
    f.state.check()
    # silver CPU-only work takes every core it can see: the token's core is not among them
    out = f.task("s-big", cpu=63_000, mem=1024, at=MIN + 1)
    assert kinds(out) == ["TaskPlaced"]
    assert kinds(f.task("s-more", cpu=1000, mem=1024, at=MIN + 2)) == ["TaskPending"]
    f.state.check()
    tick(f, 10 * MIN)                              # the window opens: the owner runs on its core
    out = f.task("own", cpu=1000, mem=1024, gpus=4, milli=1000, at=10 * MIN + 1, labels={"reservation": "rsv-b1"})
    [placed] = of(out, "TaskPlaced")
    assert placed["task_id"] == "own" and "TaskPreempted" not in kinds(out)
    assert any("reservation rsv-b1: claimed" in s for s in placed["provenance"]["path"])
    assert int(f.state.cpu_free[0]) == 0 and "held_cpu" not in reservations.tokens(f.state)[0]
    f.state.check()


def test_bronze_may_borrow_held_cpu_and_the_owner_takes_it_back():
    f = cell(nodes=1)
    bid(f, "b1", gpus=4, at=0)
    tick(f, MIN)
    f.task("s-big", cpu=63_000, mem=1024, at=MIN + 1)             # silver: every core but the held one
    out = f.task("z1", cpu=1000, mem=1024, at=MIN + 2, qos="BRONZE")
    [p] = of(out, "TaskPlaced")                                     # bronze borrows the held core
    assert any("lent" in s for s in p["provenance"]["path"])
    assert reservations.tokens(f.state)[0].get("held_cpu", 0) == 0
    f.state.check()
    tick(f, 10 * MIN)
    out = f.task("own", cpu=1000, mem=1024, gpus=4, milli=1000, at=10 * MIN + 1, labels={"reservation": "rsv-b1"})
    [pre] = of(out, "TaskPreempted")
    assert pre["task_id"] == "z1" and pre["preempted_by"] == "own"
    assert [p["task_id"] for p in of(out, "TaskPlaced")] == ["own"]
    f.state.check()


def test_held_cpu_goes_back_when_an_unclaimed_token_expires():
    f = cell(nodes=1)
    bid(f, "b1", gpus=4, at=0)
    tick(f, MIN)
    f.task("s-big", cpu=63_000, mem=1024, at=MIN + 1)
    assert kinds(f.task("s-more", cpu=1000, mem=1024, at=MIN + 2)) == ["TaskPending"]
    out = tick(f, 15 * MIN)                                          # purged 300 s after its window opened
    assert "ReservationExpired" in kinds(out)
    assert [p["task_id"] for p in of(out, "TaskPlaced")] == ["s-more"]   # the queue gets the core
    f.state.check()


def test_a_claimant_waiting_in_its_window_keeps_its_token_past_the_idle_purge():
    f = cell(nodes=1)
    # silver work takes every core before the bid is even granted, and runs long
    assert kinds(f.task("s-big", cpu=64_000, mem=1024, at=1)) == ["TaskPlaced"]
    bid(f, "b1", gpus=4, at=0)
    tick(f, MIN)
    tok = reservations.tokens(f.state)[0]
    assert tok["status"] == "HELD" and tok.get("held_cpu", 0) == 0        # nothing free to hold yet
    tick(f, 10 * MIN)
    out = f.task("own", cpu=1000, mem=1024, gpus=4, milli=1000, at=10 * MIN + 1, labels={"reservation": "rsv-b1"})
    assert kinds(out) == ["TaskPending"]                                     # no core on its node
    out = tick(f, 16 * MIN)                                                  # past the 300 s idle purge
    assert "ReservationExpired" not in kinds(out)
    assert reservations.tokens(f.state)[0]["rid"] == "rsv-b1"
    out = f.status("s-big", "COMPLETED", at=17 * MIN)                        # the core frees: the queue runs
    [placed] = of(out, "TaskPlaced")
    assert placed["task_id"] == "own" and any("reservation rsv-b1: claimed" in p for p in placed["provenance"]["path"])
    f.state.check()


def test_a_token_whose_in_window_claimant_went_elsewhere_is_purged_as_idle():
    f = cell(nodes=2)
    f.task("s-big", cpu=64_000, mem=1024, at=1)                              # fills one node's CPU
    bid(f, "b1", gpus=4, at=0)
    tick(f, MIN)
    rid = reservations.tokens(f.state)[0]["rid"]
    node = reservations.tokens(f.state)[0]["node"]
    tick(f, 10 * MIN)
    out = f.task("own", cpu=1000, mem=1024, gpus=4, milli=1000, at=10 * MIN + 1, labels={"reservation": rid})
    assert node == f.state.tasks["s-big"].node                               # the token is on the full node
    [placed] = of(out, "TaskPlaced")
    assert placed["node_id"] != node                                         # so it ran elsewhere, as any task
    out = tick(f, 16 * MIN)                                                  # runs elsewhere: the token is idle
    assert [e["reservation_id"] for e in of(out, "ReservationExpired")] == [rid]
    f.state.check()
