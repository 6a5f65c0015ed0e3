"""The simulator's exporter-named metrics: 200+ per node under node_exporter's and DCGM's
names, values that follow the node's work, real counters, seeded noise (no broker)."""
from __future__ import annotations

import math
import re

import fastavro
import pytest

from suanli.connectors.sim_telemetry import DCGM_FIELDS, Fault, TelemetryGenerator, series_count
from suanli.connectors.simulated import DEFAULT_NODES, SimulatedCluster
from suanli.schemas.catalog import catalog
from suanli.schemas.codec import parse_plain

T0 = 1_700_000_000_000
SERIES = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{([a-zA-Z_][a-zA-Z0-9_]*="[^"]*")(,[a-zA-Z_][a-zA-Z0-9_]*="[^"]*")*\})?$')
GPU_NODE = {"node_id": "gpu-8", "cpu_milli": 96000, "memory_mib": 786432,
            "accelerators": [{"kind": "GPU", "model": "V100M32", "count": 8, "memory_mib": 32768}]}
CPU_NODE = {"node_id": "cpu-32", "cpu_milli": 32000, "memory_mib": 262144, "accelerators": []}


def task(cpu: int, mem: int, devices: tuple[int, ...] = (), milli: int = 0) -> dict:
    return {"cpu_milli": cpu, "memory_mib": mem, "gpu_devices": list(devices), "gpu_milli": milli}


@pytest.fixture(scope="module")
def cluster() -> SimulatedCluster:
    return SimulatedCluster(DEFAULT_NODES, cell="openb")


def test_every_openb_node_reports_at_least_200_series_under_exporter_names(cluster):
    events = [p for kind, p in cluster.monitor(T0, 1) if kind == "NodeMetrics"]
    assert len(events) == 1523
    counts = [len(p["extended"]) for p in events]
    assert min(counts) >= 200
    assert sum(counts) / 15 >= 20_000          # samples per second at one NodeMetrics per node per 15 s
    assert counts == [series_count(n) for n in cluster.nodes.values()]
    schema = parse_plain(catalog()["NodeMetrics"].schema)
    for p in events[:50]:
        fastavro.validation.validate(p, schema, raise_errors=True)
        for key, value in p["extended"].items():
            match = SERIES.match(key)
            assert match, key                  # a Prometheus series as it prints: name{a="x",b="y"}
            name = match.group(1)
            assert name.startswith("node_") or name in DCGM_FIELDS, key
            labels = re.findall(r'([a-zA-Z_]+)="', key)
            assert labels == sorted(labels), key
            assert math.isfinite(value), key
    big = next(p for p in events if len(p["gpu_util"]) == 8)
    for key in ['DCGM_FI_DEV_GPU_UTIL{gpu="3"}', 'DCGM_FI_DEV_FB_USED{gpu="7"}', 'DCGM_FI_DEV_POWER_USAGE{gpu="0"}',
                'DCGM_FI_DEV_GPU_TEMP{gpu="0"}', 'DCGM_FI_DEV_XID_ERRORS{gpu="0"}', 'DCGM_FI_DEV_SM_CLOCK{gpu="1"}',
                'DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{gpu="2"}', 'DCGM_FI_DEV_PCIE_REPLAY_COUNTER{gpu="2"}',
                'node_load1', 'node_load5', 'node_load15', 'node_memory_MemAvailable_bytes',
                'node_memory_MemTotal_bytes', 'node_cpu_seconds_total{cpu="0",mode="idle"}',
                'node_network_receive_bytes_total{device="eth0"}', 'node_disk_io_time_seconds_total{device="nvme0n1"}']:
        assert key in big["extended"], key
    assert sum(1 for k in big["extended"] if k.startswith("DCGM_")) == 8 * len(DCGM_FIELDS)


def test_cpu_only_and_small_nodes_reach_200_with_per_cpu_series():
    gen = TelemetryGenerator()
    ext = gen.node_metrics(CPU_NODE, [], T0, 1, "e", "c")["extended"]
    assert len(ext) >= 200 and not any(k.startswith("DCGM") for k in ext)
    assert sum(1 for k in ext if k.startswith("node_cpu_seconds_total{")) == 16 * 8
    small = {"node_id": "s", "cpu_milli": 8000, "memory_mib": 65536,
             "accelerators": [{"kind": "GPU", "model": "V100M16", "count": 1, "memory_mib": 16384}]}
    assert series_count(small) >= 200
    assert series_count(GPU_NODE, per_cpu=4) == series_count(GPU_NODE) - 12 * 9


def test_values_follow_what_runs_on_the_node():
    idle, busy = TelemetryGenerator(seed=1), TelemetryGenerator(seed=1)
    work = [task(16000, 200_000, (0, 1), 1000), task(8000, 100_000, (2,), 500)]
    for seq in range(3):          # three samples 15 s apart, same noise for both
        a = idle.node_metrics(GPU_NODE, [], T0 + 15_000 * seq, seq, "e", "c")
        b = busy.node_metrics(GPU_NODE, work, T0 + 15_000 * seq, seq, "e", "c")
    ea, eb = a["extended"], b["extended"]
    for gpu in (0, 1, 2):
        g = f'{{gpu="{gpu}"}}'
        assert eb[f"DCGM_FI_DEV_GPU_UTIL{g}"] > ea[f"DCGM_FI_DEV_GPU_UTIL{g}"] + 30
        assert eb[f"DCGM_FI_DEV_FB_USED{g}"] > ea[f"DCGM_FI_DEV_FB_USED{g}"] + 5000
        assert eb[f"DCGM_FI_DEV_POWER_USAGE{g}"] > ea[f"DCGM_FI_DEV_POWER_USAGE{g}"] + 80
        assert eb[f"DCGM_FI_DEV_GPU_TEMP{g}"] > ea[f"DCGM_FI_DEV_GPU_TEMP{g}"] + 10
        assert eb[f"DCGM_FI_DEV_FB_USED{g}"] + eb[f"DCGM_FI_DEV_FB_FREE{g}"] == pytest.approx(32768, abs=1)
    assert eb['DCGM_FI_DEV_GPU_UTIL{gpu="0"}'] > eb['DCGM_FI_DEV_GPU_UTIL{gpu="2"}'] > eb['DCGM_FI_DEV_GPU_UTIL{gpu="5"}']
    g5 = 'DCGM_FI_DEV_GPU_UTIL{gpu="5"}'
    assert ea[g5] == eb[g5] == 0                     # nothing on GPU 5 in either
    assert eb["node_memory_MemAvailable_bytes"] < ea["node_memory_MemAvailable_bytes"] - 250e9
    assert eb["node_load1"] > ea["node_load1"] + 15
    for counter in ('node_cpu_seconds_total{cpu="0",mode="user"}', 'node_network_receive_bytes_total{device="eth0"}',
                    'DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{gpu="0"}'):
        assert eb[counter] > ea[counter], counter
    # the typed fields keep their plain meaning
    assert b["gpu_util"][:3] == [1.0, 1.0, 0.5] and b["gpu_memory_used_mib"][2] == 16384
    assert b["net_rx_mbps"] > a["net_rx_mbps"] and b["power_w"] > a["power_w"] + 500


def test_counters_only_grow_and_their_rate_is_the_current_one():
    gen = TelemetryGenerator(seed=5)
    samples = [gen.node_metrics(GPU_NODE, [task(96000, 1000, tuple(range(8)), 1000)] if 3 <= s < 6 else [],
                                T0 + 15_000 * s, s, "e", "c")["extended"] for s in range(8)]
    energy = 'DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{gpu="4"}'
    user = 'node_cpu_seconds_total{cpu="7",mode="user"}'
    for key in (energy, user, 'node_disk_io_time_seconds_total{device="nvme1n1"}', "node_context_switches_total"):
        values = [s[key] for s in samples]
        assert values == sorted(values), key
    watts = [(samples[s + 1][energy] - samples[s][energy]) / 15_000 for s in range(7)]   # mJ per ms = W
    assert all(w > 200 for w in watts[2:5]) and all(w < 100 for w in watts[:2] + watts[5:])
    cpu_busy = [(samples[s + 1][user] - samples[s][user]) / 15 for s in range(7)]
    assert all(b > 0.5 for b in cpu_busy[2:5]) and all(b < 0.1 for b in cpu_busy[:2])
    assert samples[0]["node_boot_time_seconds"] == samples[7]["node_boot_time_seconds"] < T0 / 1000 - 86_400


def test_seeded_and_deterministic_per_node_and_sequence():
    def run(seed: int) -> list[dict]:
        gen = TelemetryGenerator(seed=seed)
        return [gen.node_metrics(n, [task(4000, 8000, (0,), 300)], T0 + 15_000 * s, s, f"e{s}", "c")
                for s in range(3) for n in (GPU_NODE, CPU_NODE)]
    first, again, other = run(7), run(7), run(8)
    assert first == again
    assert first != other
    gen = TelemetryGenerator(seed=7)
    once = gen.node_metrics(GPU_NODE, [], T0, 4, "e", "c")
    assert gen.node_metrics(GPU_NODE, [], T0, 4, "e", "c") == once      # a repeated sample adds nothing
    gauge = 'DCGM_FI_DEV_GPU_TEMP{gpu="0"}'
    temps = {TelemetryGenerator(seed=7).node_metrics(GPU_NODE, [], T0, s, "e", "c")["extended"][gauge] for s in range(8)}
    assert len(temps) > 1                          # noise differs from one sample sequence number to the next


def test_faults_say_hot_congested_and_degraded_in_the_metrics():
    gen = TelemetryGenerator()
    rx, busy = 'node_network_receive_bytes_total{device="eth0"}', 'node_disk_io_time_seconds_total{device="nvme1n1"}'
    e0 = gen.node_metrics(GPU_NODE, [], T0, 0, "e", "c")["extended"]
    gen.set_fault("gpu-8", Fault(temp_c=92, net_util=0.95, disk_util=0.97, xid=79))
    e1 = gen.node_metrics(GPU_NODE, [], T0 + 15_000, 1, "e", "c")["extended"]
    assert all(e1[f'DCGM_FI_DEV_GPU_TEMP{{gpu="{g}"}}'] >= 89 for g in range(8))
    assert e1['node_hwmon_temp_celsius{chip="platform_coretemp_0",sensor="temp1"}'] >= 89
    assert e1['DCGM_FI_DEV_XID_ERRORS{gpu="0"}'] == 79 and e1['DCGM_FI_DEV_XID_ERRORS{gpu="1"}'] == 0
    assert (e1[rx] - e0[rx]) / 15 / e1['node_network_speed_bytes{device="eth0"}'] == pytest.approx(0.95, rel=0.06)
    assert (e1[busy] - e0[busy]) / 15 == pytest.approx(0.97, abs=0.001)
    gen.set_fault("gpu-8", None)
    e2 = gen.node_metrics(GPU_NODE, [], T0 + 30_000, 2, "e", "c")["extended"]
    assert max(e2[f'DCGM_FI_DEV_GPU_TEMP{{gpu="{g}"}}'] for g in range(8)) < 50
    assert (e2[rx] - e1[rx]) / 15 / e2['node_network_speed_bytes{device="eth0"}'] < 0.05
    assert "gpu-8" not in gen.faults
