"""Real telemetry from a real Prometheus (issue 13, item 4).

deploy/prometheus.py starts Debian's node_exporter and Prometheus on loopback (module
fixture; it stops them at the end when it started them). The Prometheus source samples this
machine's node; its NodeMetrics must carry ``node_memory_MemAvailable_bytes`` within 5 % of
``/proc/meminfo``'s MemAvailable read right after the query. Both are live values and the
Prometheus one is as old as the last scrape, so a sampler thread also reads /proc every
50 ms and the test reports the difference to the /proc reading nearest the scrape time.
Then the NodeMetrics go through Kafka (a namespace of the test's own) and are read back decoded.
"""
from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import httpx
import pytest

from suanli.config import REPO_ROOT, load_settings
from suanli.connectors.prometheus_source import PrometheusSource, PromNode, SourceStats, run_source
from suanli.deploy import prometheus as deploy
from suanli.schemas.models import validate_event
from suanli.streams.kafka_io import EventConsumer
from suanli.streams.topics import TopicNames


@pytest.fixture(scope="module")
def prom(settings):
    before = {row["service"]: row["pid"] for row in deploy.status(settings)}
    report = deploy.up(settings, log=lambda _m: None, timeout=90)
    assert report["started"] == {name: before[name] is None for name in ("node_exporter", "prometheus")}
    yield settings
    if any(report["started"].values()):
        stopped = deploy.down(settings, log=lambda _m: None)
        assert stopped == {"prometheus": True, "node_exporter": True}
        assert [row["pid"] for row in deploy.status(settings)] == [None, None]
        assert not deploy._port_open(settings.prometheus_port)
        assert not deploy._port_open(settings.node_exporter_port)


def _listeners(port: int) -> set[str]:
    """Local addresses listening on ``port`` (IPv4 and IPv6), from /proc/net/tcp*."""
    out = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            address, port_hex = fields[1].rsplit(":", 1)
            if fields[3] == "0A" and int(port_hex, 16) == port:  # 0A: LISTEN
                out.add(address)
    return out


def _mem_available_bytes() -> int:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no MemAvailable in /proc/meminfo")


class ProcSampler(threading.Thread):
    """Reads MemAvailable from /proc every ``period`` s: (epoch ms, bytes) pairs."""

    def __init__(self, period: float = 0.05):
        super().__init__(daemon=True)
        self.period, self.samples, self.halt = period, [], threading.Event()

    def run(self) -> None:
        while not self.halt.is_set():
            self.samples.append((time.time() * 1000, _mem_available_bytes()))
            self.halt.wait(self.period)

    def nearest(self, at_ms: float) -> tuple[float, int]:
        return min(self.samples, key=lambda s: abs(s[0] - at_ms))


def _node_scrape_s(settings) -> float:
    r = httpx.get(f"{deploy.url(settings)}/api/v1/query", params={"query": 'timestamp(up{job="node"})'}, timeout=5)
    return max(float(s["value"][1]) for s in r.json()["data"]["result"])


def test_both_run_on_loopback_only_and_are_ready(prom):
    rows = {row["service"]: row for row in deploy.status(prom)}
    assert all(row["ready"] and row["pid"] for row in rows.values()), rows
    for port in (prom.prometheus_port, prom.node_exporter_port):
        assert _listeners(port) == {"0100007F"}, (port, _listeners(port))  # 127.0.0.1, nothing else
    config = Path(prom.home, "prometheus", "prometheus.yml").read_text()
    assert f'scrape_interval: "{prom.prometheus_scrape_s}s"' in config and prom.prometheus_scrape_s <= 5
    assert f'"{deploy.node_exporter_target(prom)}"' in config
    assert httpx.get(f"{deploy.url(prom)}/-/ready", timeout=5).status_code == 200
    # a second `up` finds both running and starts nothing
    assert deploy.up(prom, log=lambda _m: None)["started"] == {"node_exporter": False, "prometheus": False}


def test_node_metrics_mem_available_matches_proc(prom):
    source = PrometheusSource(deploy.url(prom), [PromNode("this-machine", "local", deploy.node_exporter_target(prom))])
    sampler = ProcSampler()
    sampler.start()
    try:
        # Wait for a scrape that happened while the sampler was running, so /proc was read around it.
        began = time.time()
        deadline = time.monotonic() + 3 * prom.prometheus_scrape_s + 10
        while _node_scrape_s(prom) < began + 0.2:
            assert time.monotonic() < deadline, "no new node_exporter scrape"
            time.sleep(0.1)
        [metrics] = source.sample_blocking()
        after_query = _mem_available_bytes()
        queried_at = time.time() * 1000
    finally:
        sampler.halt.set()
        sampler.join()

    assert validate_event("NodeMetrics", metrics) is None
    prom_value = metrics["extended"]["node_memory_MemAvailable_bytes"]
    diff_after = (prom_value - after_query) / after_query
    near_ms, near_value = sampler.nearest(metrics["at"])
    diff_near = (prom_value - near_value) / near_value
    age_s = (queried_at - metrics["at"]) / 1000
    print(f"\nMemAvailable: Prometheus {prom_value / 2**20:.1f} MiB (scraped {age_s:.2f}s before the query); "
          f"/proc right after the query {after_query / 2**20:.1f} MiB: {diff_after:+.4%}; /proc "
          f"{abs(near_ms - metrics['at']):.0f} ms from the scrape {near_value / 2**20:.1f} MiB: {diff_near:+.4%}")
    assert abs(diff_after) < 0.05
    assert abs(diff_near) < 0.05
    assert 0 <= age_s < prom.prometheus_scrape_s + 5
    assert metrics["memory_used_mib"] > 0 and len(metrics["extended"]) >= 200


@pytest.mark.stack
def test_node_metrics_through_kafka(prom, stack, codec):
    """The source's own loop produces to <ns>.raw.nodes; a consumer reads the records back decoded."""
    settings = load_settings(namespace=f"tprom{uuid.uuid4().hex[:10]}", partitions=1)
    source = PrometheusSource(deploy.url(prom), [PromNode("this-machine", "local", "127.0.0.1")], name="promtest")
    sent: list[dict] = []
    stats = SourceStats()

    async def main() -> list:
        await run_source(source, codec=codec, bootstrap=settings.bootstrap_servers, namespace=settings.namespace,
                         interval_s=0.5, partitions=1, max_samples=1, stats=stats, on_sent=sent.extend)
        async with EventConsumer(settings.bootstrap_servers, codec, [TopicNames(settings.namespace).raw_nodes]) as c:
            deadline = time.monotonic() + 30
            records: list = []
            while len(records) < len(sent):
                assert time.monotonic() < deadline, f"read {len(records)} of {len(sent)} records back"
                records += await c.read_until_end()
            return records

    records = asyncio.run(main())
    assert stats.produced == 1 and len(sent) == 1 and stats.errors == 0
    [record] = records
    assert record.error is None and record.kind == "NodeMetrics" and record.key == b"this-machine"
    assert record.payload["event_id"] == sent[0]["event_id"]
    assert record.payload["extended"] == sent[0]["extended"]
    assert record.payload["extended"]["node_memory_MemAvailable_bytes"] > 0
    assert {k: record.payload[k] for k in ("node_id", "cell", "at", "memory_used_mib")} == \
        {k: sent[0][k] for k in ("node_id", "cell", "at", "memory_used_mib")}


def test_cli_status_and_one_sample(prom):
    env_cmd = [sys.executable, "-m", "suanli"]
    status = subprocess.run([*env_cmd, "prometheus", "status", "--json"], capture_output=True, text=True,
                            cwd=REPO_ROOT, timeout=120)
    assert status.returncode == 0, status.stderr
    assert {row["service"] for row in json.loads(status.stdout)} == {"node_exporter", "prometheus"}
    once = subprocess.run([*env_cmd, "prometheus", "source", "--node", f"me={deploy.node_exporter_target(prom)}",
                           "--once"], capture_output=True, text=True, cwd=REPO_ROOT, timeout=120)
    assert once.returncode == 0, once.stderr
    [metrics] = json.loads(once.stdout)
    assert metrics["node_id"] == "me" and "node_memory_MemAvailable_bytes" in metrics["extended"]
