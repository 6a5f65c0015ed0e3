"""The telemetry evaluator: hysteresis per condition, the worst condition wins, only changes
are emitted, redelivery is idempotent, thresholds are typed (no broker)."""
from __future__ import annotations

import pytest

from suanli.connectors.sim_telemetry import Fault, TelemetryGenerator
from suanli.errors import StrategyConfigError
from suanli.processors import model as m
from suanli.processors.telemetry import NodeTelemetry, TelemetryArgs, observe, thresholds_of

GPU0, GPU1 = 'DCGM_FI_DEV_GPU_TEMP{gpu="0"}', 'DCGM_FI_DEV_GPU_TEMP{gpu="1"}'
MEM0 = 'DCGM_FI_DEV_MEMORY_TEMP{gpu="0"}'
CPU0 = 'node_hwmon_temp_celsius{chip="platform_coretemp_0",sensor="temp1"}'
RX, SPEED = 'node_network_receive_bytes_total{device="eth0"}', 'node_network_speed_bytes{device="eth0"}'
DISK = 'node_disk_io_time_seconds_total{device="nvme1n1"}'
XID0 = 'DCGM_FI_DEV_XID_ERRORS{gpu="0"}'


def sample(at_s: float, **extended: float) -> m.NodeMetrics:
    return m.NodeMetrics(event_id=f"e{at_s}", node_id="n1", cell="c", at=int(at_s * 1000), cpu_util=0.1,
                         memory_used_mib=1, extended=dict(extended))


def run(samples: list[m.NodeMetrics], args: TelemetryArgs = TelemetryArgs()):
    state, out = None, []
    for s in samples:
        state, change = observe(state, s, args)
        out.append((state.condition, change))
    return state, out


# Each row: a sequence of readings of one kind and the condition after each sample.
HYSTERESIS = [
    ("gpu temperature: enter at 85, exit below 80",
     [{GPU0: t} for t in (70, 84.9, 85, 82, 80, 79.9, 84, 86)],
     ["NORMAL", "NORMAL", "HOT", "HOT", "HOT", "NORMAL", "NORMAL", "HOT"]),
    ("the hottest GPU counts; HOT holds while any GPU is at or above the exit threshold",
     [{GPU0: 60, GPU1: t} for t in (70, 88, 81)] + [{GPU0: 82, GPU1: 60}, {GPU0: 79, GPU1: 60}],
     ["NORMAL", "HOT", "HOT", "HOT", "NORMAL"]),
    ("GPU memory temperature: 95 / 90",
     [{MEM0: t} for t in (90, 95, 91, 89)], ["NORMAL", "HOT", "HOT", "NORMAL"]),
    ("CPU package (CPU-only nodes too): 95 / 88",
     [{CPU0: t} for t in (80, 96, 90, 87)], ["NORMAL", "HOT", "HOT", "NORMAL"]),
    ("a sample without any temperature keeps HOT as it is",
     [{GPU0: 90}, {}, {GPU0: 70}], ["HOT", "HOT", "NORMAL"]),
]


@pytest.mark.parametrize("what, readings_, expected", HYSTERESIS, ids=[r[0] for r in HYSTERESIS])
def test_temperature_hysteresis(what, readings_, expected):
    _, out = run([sample(15 * i, **r) for i, r in enumerate(readings_)])
    assert [c for c, _ in out] == expected
    changes = [ch for _, ch in out if ch is not None]
    # only changes are emitted, and each names the threshold it crossed
    assert len(changes) == sum(1 for a, b in zip(["NORMAL"] + expected, expected) if a != b)
    for ch in changes:
        assert ch.previous != ch.condition
        assert ("_enter_c" in ch.reason) == (ch.condition == "HOT")
        assert ch.event_id == f"telemetry/c/n1/{ch.at}/{ch.condition}"


def _link(shares: list[float], speed: float = 1e9, dt: float = 15.0) -> list[dict[str, float]]:
    """Counter samples whose receive rate is each share of the link speed in turn."""
    total, out = 1e12, [{RX: 1e12, SPEED: speed}]
    for share in shares:
        total += share * speed * dt
        out.append({RX: total, SPEED: speed})
    return out


@pytest.mark.parametrize("shares, expected", [
    ([0.5, 0.89, 0.9, 0.8, 0.7, 0.69], ["NORMAL", "NORMAL", "CONGESTED", "CONGESTED", "CONGESTED", "NORMAL"]),
    ([0.95, 0.1], ["CONGESTED", "NORMAL"]),
])
def test_network_congestion_from_counter_rates(shares, expected):
    _, out = run([sample(15 * i, **r) for i, r in enumerate(_link(shares))])
    assert [c for c, _ in out] == ["NORMAL"] + expected       # the first sample has no rate yet
    first = next(ch for _, ch in out if ch is not None)
    assert first.condition == "CONGESTED" and "net_enter" in first.reason
    assert any(k.startswith(f"rate({RX})") for k in first.metrics)


def test_counter_reset_gives_no_rate_and_keeps_the_flag():
    samples = [sample(0, **{RX: 1e12, SPEED: 1e9}), sample(15, **{RX: 1e12 + 14e9, SPEED: 1e9}),
               sample(30, **{RX: 5.0, SPEED: 1e9}),                        # rebooted: counter back near 0
               sample(45, **{RX: 5.0 + 1e9, SPEED: 1e9})]
    _, out = run(samples)
    assert [c for c, _ in out] == ["NORMAL", "CONGESTED", "CONGESTED", "NORMAL"]


def test_disk_busy_congests():
    busy = [0.0, 0.95, 0.75, 0.6]
    t, samples = 1000.0, []
    for i, b in enumerate(busy):
        t += b * 15
        samples.append(sample(15 * i, **{DISK: t}))
    _, out = run(samples)
    assert [c for c, _ in out] == ["NORMAL", "CONGESTED", "CONGESTED", "NORMAL"]
    assert "disk_enter" in next(ch for _, ch in out if ch).reason


def test_new_xid_degrades_then_clears_after_quiet_period():
    args = TelemetryArgs(degraded_clear_ms=60_000)
    seq = [(0, 0), (15, 79), (30, 79), (60, 79), (75, 79), (90, 79), (105, 48), (120, 48), (180, 48)]
    _, out = run([sample(t, **{XID0: x}) for t, x in seq], args)
    assert [c for c, _ in out] == ["NORMAL", "DEGRADED", "DEGRADED", "DEGRADED", "NORMAL", "NORMAL",
                                   "DEGRADED", "DEGRADED", "NORMAL"]
    first = out[1][1]
    assert first.reason.startswith("DEGRADED on: ") and "79" in first.reason and first.metrics == {XID0: 79.0}
    assert "degraded_clear_ms" in out[4][1].reason


def test_a_nonzero_xid_at_first_sight_is_new_and_the_worst_condition_wins():
    _, out = run([sample(0, **{XID0: 13, GPU0: 90}), sample(15, **{XID0: 13, GPU0: 90})],
                 TelemetryArgs(degraded_clear_ms=10_000))
    assert [c for c, _ in out] == ["DEGRADED", "HOT"]            # DEGRADED over HOT, then HOT remains
    assert out[1][1].previous == "DEGRADED" and "DEGRADED off" in out[1][1].reason
    _, off = run([sample(0, **{XID0: 13})], TelemetryArgs(degraded_on_xid=False))
    assert off[0][0] == "NORMAL"


def test_row_remap_failure_degrades():
    _, out = run([sample(0, **{'DCGM_FI_DEV_ROW_REMAP_FAILURE{gpu="2"}': 1.0})])
    assert out[0][0] == "DEGRADED" and "row remap failed" in out[0][1].reason


def test_redelivered_samples_change_nothing_but_repeat_the_change_they_made():
    state, change = observe(None, sample(15, **{GPU0: 90}))
    assert change is not None and change.condition == "HOT"
    again, repeat = observe(state, sample(15, **{GPU0: 90}))
    assert again == state and repeat == change                 # same event id: consumers drop it
    older, nothing = observe(state, sample(5, **{GPU0: 20}))
    assert older == state and nothing is None
    assert NodeTelemetry.from_json(state.to_json()) == state


def test_thresholds_are_typed_and_come_from_policies_the_core_accepts():
    assert TelemetryArgs.parse({"gpu_temp_enter_c": 90, "gpu_temp_exit_c": 85}).gpu_temp_enter_c == 90.0
    for bad, named in [({"gpu_temp_enter_c": 80, "gpu_temp_exit_c": 85}, "gpu_temp_exit_c"),
                       ({"net_enter": 1.5}, "net_enter"), ({"hot_at": 3}, "hot_at")]:
        with pytest.raises(StrategyConfigError, match=named):
            TelemetryArgs.parse(bad)
    args = TelemetryArgs(gpu_temp_enter_c=70, gpu_temp_exit_c=65)
    _, out = run([sample(0, **{GPU0: 72})], args)
    assert out[0][0] == "HOT"
    assert thresholds_of(m.PolicyChanged.of("c", "default", {})) == TelemetryArgs()
    assert thresholds_of(m.PolicyChanged.of("c", "no-such-strategy", {})) is None
    assert thresholds_of(m.PolicyChanged.of("c", "default", {"bestfit_wieght": 1})) is None
    assert TelemetryArgs.parse(TelemetryArgs().to_json()) == TelemetryArgs()


def test_simulated_faults_cross_the_thresholds_and_recover():
    """The generator and the evaluator agree: a node made hot, congested or broken through its
    metrics gets that condition, and NORMAL again once the fault is gone."""
    node = {"node_id": "g1", "cpu_milli": 96000, "memory_mib": 786432,
            "accelerators": [{"kind": "GPU", "model": "V100M32", "count": 8, "memory_mib": 32768}]}
    gen = TelemetryGenerator(seed=3)
    args = TelemetryArgs(degraded_clear_ms=45_000)     # the XID at 135 s: DEGRADED until 180 s
    state, seen = None, []
    plan = [None, None, Fault(temp_c=90), Fault(temp_c=90), None, Fault(net_util=0.97), None,
            Fault(disk_util=0.99), None, Fault(xid=79), Fault(xid=79), None, None, None]
    for seq, fault in enumerate(plan):
        gen.set_fault("g1", fault)
        payload = gen.node_metrics(node, [], 1_000_000 + 15_000 * seq, seq, f"e{seq}", "c")
        state, change = observe(state, m.from_avro("NodeMetrics", payload), args)
        seen.append(state.condition)
    assert seen == ["NORMAL", "NORMAL", "HOT", "HOT", "NORMAL", "CONGESTED", "NORMAL", "CONGESTED", "NORMAL",
                    "DEGRADED", "DEGRADED", "DEGRADED", "NORMAL", "NORMAL"]
