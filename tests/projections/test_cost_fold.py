"""The cost fold (projections/cost.py) on hand-made decision streams; figures computed by hand."""
from __future__ import annotations

import pytest

from suanli.errors import SuanliError
from suanli.processors import model as m
from suanli.projections import cost

H = cost.MS_PER_HOUR


def prov(at: int) -> m.Provenance:
    return m.Provenance(input=m.LogPosition(topic="t", partition=0, offset=at),
                        strategy=m.StrategyRef(name="s", version="1", config_digest="d"),
                        candidates=(), filtered=(), path=(), decided_at=at)


def node(nid: str, *, gpus: int, cpu: int, price: float, idle: float = 0.0, pricing: str = "ON_DEMAND",
         cell: str = "c") -> m.NodeRegistered:
    acc = (m.Accelerator(kind="GPU", model="V100", count=gpus),) if gpus else ()
    return m.NodeRegistered(event_id=f"reg/{cell}/{nid}", node_id=nid, cell=cell, site="s", region="r", zone="z",
                            tier="cloud", arch="x86_64", cpu_milli=cpu, memory_mib=1 << 20, accelerators=acc,
                            pricing=pricing, price_per_hour=price, idle_price_per_hour=idle, registered_at=0)


def submit(tid: str, tier: str, *, tenant: str = "acme", cpu: int = 1000, gpus: int = 0, milli: int = 0,
           cell: str = "c") -> m.TaskSubmitted:
    return m.TaskSubmitted(event_id=f"sub/{tid}", task_id=tid, tenant=tenant, cell=cell, submitted_at=0,
                           resources=m.TaskResources(cpu_milli=cpu, memory_mib=1, gpu_count=gpus, gpu_milli=milli),
                           qos_tier=tier)


def placed(tid: str, nid: str, at: int, *, devices=(), milli: int = 0, cpu: int = 1000, tenant: str = "acme",
           n: int = 0, cell: str = "c") -> m.TaskPlaced:
    return m.TaskPlaced(event_id=f"pl/{tid}/{at}/{n}", decision_id=f"d{at}", task_id=tid, tenant=tenant, cell=cell,
                        node_id=nid, gpu_devices=tuple(devices), gpu_milli=milli, cpu_milli=cpu, memory_mib=1,
                        provenance=prov(at))


def released(tid: str, nid: str, at: int, cause: str = "COMPLETED", tenant: str = "acme") -> m.TaskReleased:
    return m.TaskReleased(event_id=f"rel/{tid}/{at}", decision_id=f"d{at}", task_id=tid, tenant=tenant, cell="c",
                          node_id=nid, cause=cause, provenance=prov(at))


def lost(tid: str, nid: str, at: int) -> m.TaskLost:
    return m.TaskLost(event_id=f"lost/{tid}/{at}", decision_id=f"d{at}", task_id=tid, tenant="acme", cell="c",
                      node_id=nid, reason="node DOWN", provenance=prov(at))


def preempted(tid: str, nid: str, at: int, work_lost_ms: int, by: str = "g") -> m.TaskPreempted:
    return m.TaskPreempted(event_id=f"pre/{tid}/{at}", decision_id=f"d{at}", task_id=tid, tenant="acme", cell="c",
                           node_id=nid, preempted_by=by, reason="gold needs room", provenance=prov(at),
                           grace_ms=5000, work_lost_ms=work_lost_ms, victims=(tid,))


def migrated(tid: str, frm: str, to: str, at: int, devices=()) -> m.TaskMigrated:
    return m.TaskMigrated(event_id=f"mig/{tid}/{at}", decision_id=f"d{at}", task_id=tid, tenant="acme", cell="c",
                          from_node=frm, to_node=to, gpu_devices=tuple(devices), reason="node DOWN",
                          provenance=prov(at), cause="NODE_DOWN")


# gpu8: 8 GPUs, 64 cores, 16/h (idle 4/h). cpu32: no GPU, 32 cores, 1.6/h, no idle price. spot4: 4 GPUs, 2/h.
NODES = [node("gpu8", gpus=8, cpu=64000, price=16.0, idle=4.0),
         node("cpu32", gpus=0, cpu=32000, price=1.6),
         node("spot4", gpus=4, cpu=32000, price=2.0, idle=0.5, pricing="SPOT")]


def story() -> list:
    """gold g: 2 GPUs on gpu8 for 1 h, migrated to spot4 for 0.5 h more.
    bronze b: 1 GPU x 500 on gpu8, preempted by g2 after 0.5 h (all 0.5 h lost), back for 0.25 h.
    silver s: 8 cores on cpu32, lost after 0.25 h, back on gpu8 (CPU only) for 1 h.
    gold g2: 4 GPUs on gpu8 from 0.5 h, still running at 2 h (open)."""
    return [*NODES,
            submit("g", "GOLD", gpus=2, milli=1000), submit("b", "BRONZE", gpus=1, milli=500, cpu=2000),
            submit("s", "SILVER", cpu=8000, tenant="other"), submit("g2", "GOLD", gpus=4, milli=1000),
            placed("g", "gpu8", 0, devices=(0, 1), milli=1000),
            placed("b", "gpu8", 0, devices=(2,), milli=500, cpu=2000),
            placed("s", "cpu32", 0, cpu=8000, tenant="other"),
            lost("s", "cpu32", H // 4),
            preempted("b", "gpu8", H // 2, work_lost_ms=H // 2, by="g2"),
            placed("g2", "gpu8", H // 2, devices=(2, 3, 4, 5), milli=1000),
            placed("s", "gpu8", H // 2, cpu=8000, tenant="other", n=1),
            placed("b", "gpu8", 3 * H // 4, devices=(6,), milli=500, cpu=2000, n=1),
            migrated("g", "gpu8", "spot4", H, devices=(0, 1)),
            released("b", "gpu8", H, tenant="acme"),
            released("g", "spot4", 3 * H // 2),
            released("s", "gpu8", 3 * H // 2, tenant="other"),
            released("s", "gpu8", 3 * H // 2, tenant="other"),   # a redelivered duplicate: same event id
            m.TaskPending(event_id="pend/x", decision_id="dx", task_id="x", tenant="acme", cell="c", reasons=(),
                          queue_position=1, provenance=prov(2 * H)),    # moves the clock to 2 h
            ]


def test_intervals_follow_placements_and_their_ends():
    ledger = cost.fold(story())
    got = [(iv.task_id, iv.node.node_id, iv.start, iv.end, iv.ended_by, iv.open) for iv in ledger.intervals()]
    assert got == [
        ("s", "cpu32", 0, H // 4, "LOST", False),
        ("b", "gpu8", 0, H // 2, "PREEMPTED", False),
        ("g", "gpu8", 0, H, "MIGRATED", False),
        ("b", "gpu8", 3 * H // 4, H, "COMPLETED", False),
        ("g", "spot4", H, 3 * H // 2, "COMPLETED", False),
        ("s", "gpu8", H // 2, 3 * H // 2, "COMPLETED", False),
        ("g2", "gpu8", H // 2, 2 * H, "OPEN", True),
    ]
    assert ledger.clock == 2 * H and not ledger.anomalies and not ledger.unpriced_nodes
    # an explicit "until" closes the open interval there instead
    assert ledger.intervals(until=3 * H)[-1].end == 3 * H


def test_shares_rates_and_costs_by_hand():
    ivs = {(iv.task_id, iv.start): iv for iv in cost.fold(story()).intervals()}
    g = ivs[("g", 0)]
    assert g.share == pytest.approx(2 / 8) and g.rate == 16.0 and g.cost == pytest.approx(1.0 * 0.25 * 16)
    assert g.gpu_hours == pytest.approx(2.0)
    b = ivs[("b", 0)]          # 500 milli of 1 of 8 GPUs = 1/16; 2 of 64 cores = 1/32: the GPU share dominates
    assert b.share == pytest.approx(1 / 16) and b.rate == 4.0     # bronze pays the idle price
    assert b.cost == pytest.approx(0.5 * (1 / 16) * 4.0) and b.gpu_hours == pytest.approx(0.25)
    s_cpu = ivs[("s", 0)]      # CPU-only node: 8 of 32 cores; no idle price needed for silver
    assert s_cpu.share == pytest.approx(0.25) and s_cpu.cost == pytest.approx(0.25 * 0.25 * 1.6)
    s_gpu = ivs[("s", H // 2)]  # CPU-only task on a GPU node pays its CPU share (8 of 64 cores) of the whole node
    assert s_gpu.share == pytest.approx(1 / 8) and s_gpu.cost == pytest.approx(1.0 * (1 / 8) * 16)
    g_spot = ivs[("g", H)]
    assert g_spot.node.pricing == "SPOT" and g_spot.cost == pytest.approx(0.5 * (2 / 4) * 2.0)


def test_bronze_pays_the_full_price_when_the_node_names_no_idle_price():
    events = [NODES[1], submit("b", "BRONZE", cpu=16000), placed("b", "cpu32", 0, cpu=16000),
              released("b", "cpu32", H)]
    (iv,) = cost.fold(events).intervals()
    assert iv.rate == 1.6 and iv.cost == pytest.approx(0.5 * 1.6)


def test_report_by_tier_with_preemptions_and_lost_work():
    rows = {r.key: r.as_dict() for r in cost.report(cost.fold(story()).intervals(), by="tier")}
    assert list(rows) == ["GOLD", "SILVER", "BRONZE", "total"]
    gold_cost = 1.0 * 0.25 * 16 + 0.5 * 0.5 * 2.0 + 1.5 * 0.5 * 16
    assert rows["GOLD"]["cost"] == pytest.approx(gold_cost, abs=1e-6)
    assert rows["GOLD"]["tasks"] == 2 and rows["GOLD"]["migrations"] == 1 and rows["GOLD"]["open_intervals"] == 1
    bronze = rows["BRONZE"]
    assert bronze["tasks"] == 1 and bronze["intervals"] == 2 and bronze["preemptions"] == 1
    assert bronze["work_lost_hours"] == pytest.approx(0.5)
    assert bronze["hours"] == pytest.approx(0.75) and bronze["gpu_hours"] == pytest.approx(0.375)
    assert bronze["cost"] == pytest.approx(0.75 * (1 / 16) * 4.0, abs=1e-6)
    assert rows["SILVER"]["lost"] == 1
    assert rows["total"]["cost"] == pytest.approx(sum(r["cost"] for k, r in rows.items() if k != "total"), abs=1e-5)


def test_report_by_tenant_and_by_pricing():
    ivs = cost.fold(story()).intervals()
    tenants = {r.key: r for r in cost.report(ivs, by="tenant")}
    assert set(tenants) == {"acme", "other", "total"} and tenants["other"].tasks == 1
    pricing = {r.key: r for r in cost.report(ivs, by="pricing")}
    assert set(pricing) == {"ON_DEMAND", "SPOT", "total"}
    assert pricing["SPOT"].cost == pytest.approx(0.5 * 0.5 * 2.0)
    only = cost.fold(story()).intervals(tenant="other")
    assert {iv.task_id for iv in only} == {"s"}
    with pytest.raises(SuanliError, match="cannot group costs by 'zone'"):
        cost.report(ivs, by="zone")


def test_bronze_against_the_same_work_as_silver():
    cmp = cost.bronze_vs_silver(cost.fold(story()).intervals())
    share = 1 / 16
    assert cmp.intervals == 2
    assert cmp.bronze_cost == pytest.approx(0.75 * share * 4.0)
    assert cmp.as_silver_cost == pytest.approx(0.75 * share * 16.0)
    assert cmp.saving_pct == pytest.approx(75.0)          # idle 4/h against 16/h on the same node
    # the first 0.5 h was thrown away by the preemption: only 0.25 h of useful work at the silver rate
    assert cmp.useful_as_silver_cost == pytest.approx(0.25 * share * 16.0)
    assert cmp.effective_saving_pct == pytest.approx(100 * (1 - 0.75 / 0.25 * 4 / 16))
    assert cmp.work_lost_hours == pytest.approx(0.5)
    # repricing leaves other tiers alone
    again = cost.reprice(cost.fold(story()).intervals(), {"BRONZE": "SILVER"})
    assert [iv.cost for iv in again if iv.tier == "GOLD"] == \
        [iv.cost for iv in cost.fold(story()).intervals() if iv.tier == "GOLD"]


def test_unknown_nodes_and_tasks_are_reported_not_guessed():
    events = [placed("t", "ghost", 0), released("t", "ghost", H)]
    ledger = cost.fold(events)
    (iv,) = ledger.intervals()
    assert iv.tier == cost.UNKNOWN and iv.cost == 0.0 and iv.node.pricing == cost.UNKNOWN
    assert ledger.unpriced_nodes == ["c/ghost"]


def test_node_ids_are_per_cell_and_avro_dicts_fold_alike():
    other = node("gpu8", gpus=8, cpu=64000, price=32.0, cell="c2")
    events = [NODES[0], other, submit("a", "GOLD", gpus=1, milli=1000), submit("z", "GOLD", gpus=1, milli=1000, cell="c2"),
              placed("a", "gpu8", 0, devices=(0,), milli=1000), placed("z", "gpu8", 0, devices=(0,), milli=1000, cell="c2"),
              released("a", "gpu8", H)]
    typed = cost.fold(events)
    ledger = cost.CostLedger()
    for e in events:
        ledger.apply_avro(type(e).KIND, m.to_avro(e))
    for led in (typed, ledger):
        ivs = {iv.task_id: iv for iv in led.intervals(until=H)}
        assert ivs["a"].cost == pytest.approx(16.0 / 8) and ivs["z"].cost == pytest.approx(32.0 / 8)
        assert [iv.task_id for iv in led.intervals(until=H, cell="c2")] == ["z"]


def test_the_avro_edge_folds_the_whole_story_like_the_typed_values():
    ledger = cost.CostLedger()
    for e in story():
        ledger.apply_avro(type(e).KIND, m.to_avro(e))
    typed = cost.fold(story())
    assert ledger.clock == typed.clock == 2 * H          # TaskPending moves the clock on both paths
    assert [(iv.task_id, iv.start, iv.end, round(iv.cost, 9)) for iv in ledger.intervals()] == \
        [(iv.task_id, iv.start, iv.end, round(iv.cost, 9)) for iv in typed.intervals()]
