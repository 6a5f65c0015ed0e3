"""The Prometheus source: NodeMetrics from instant-query responses (pure, on recorded and
hand-written JSON), node selectors, and the source itself against the real Prometheus and
node_exporter that deploy/prometheus.py runs on loopback (module fixture; stopped at the end
if this module started them), through the local-process connector's monitor().
"""
from __future__ import annotations

import asyncio
import json
import math
import time
from pathlib import Path

import pytest

from suanli.connectors.prometheus_source import (DEFAULT_EXCLUDE, DEFAULT_INCLUDE, Matcher, NodeIndex,
                                                 PrometheusFeed, PrometheusSource, PromNode, build_node_metrics,
                                                 nodes_from_mapping, parse_matchers, queries, series_key)
from suanli.errors import ConnectorError
from suanli.schemas.models import validate_event

DATA = Path(__file__).parent / "prometheus"


def _load(name: str) -> dict:
    return json.loads((DATA / name).read_text())


# ---- pure: recorded node_exporter responses -------------------------------------------------------
def test_recorded_node_exporter_sample_becomes_one_node_metrics():
    doc = _load("node_exporter_1.5.json")
    series = doc["responses"]["series"]["data"]["result"]
    by_name = {s["metric"]["__name__"]: float(s["value"][1]) for s in series if len(s["metric"]) == 3}
    scraped = {s["metric"]["job"]: float(s["value"][1]) for s in doc["responses"]["scraped"]["data"]["result"]}

    [m] = build_node_metrics(doc["responses"], [PromNode("here", "c1", "127.0.0.1:19100")], name="prom")

    assert validate_event("NodeMetrics", m) is None
    ext = m["extended"]
    assert ext["node_memory_MemAvailable_bytes"] == by_name["node_memory_MemAvailable_bytes"]
    assert m["memory_used_mib"] == int((by_name["node_memory_MemTotal_bytes"]
                                        - by_name["node_memory_MemAvailable_bytes"]) // (1 << 20))
    assert m["load1"] == by_name["node_load1"]
    # the sample time is node_exporter's scrape, not the query time nor Prometheus's self-scrape
    assert m["at"] == round(scraped["node"] * 1000)
    assert m["event_id"] == f"prom/here/prom/{m['at']}"
    # exporters' names, labels as Prometheus prints them, instance/job dropped
    assert 'node_cpu_seconds_total{cpu="0",mode="idle"}' in ext
    assert any(k.startswith("node_network_receive_bytes_total{device=") for k in ext)
    assert any(k.startswith("node_disk_io_time_seconds_total{device=") for k in ext)
    assert not any("instance=" in k or "job=" in k for k in ext)
    assert not any(k.startswith("node_scrape_collector_") or k.endswith("_info") for k in ext)
    assert len(ext) >= 200, len(ext)
    assert 0.0 <= m["cpu_util"] <= 1.0 and m["cpu_util"] > 0  # the rate was there in the recording
    assert m["gpu_util"] == [] and m["power_w"] == 0.0


def test_host_selector_and_unknown_node():
    doc = _load("node_exporter_1.5.json")
    out = build_node_metrics(doc["responses"], [PromNode("host", "c", "127.0.0.1"),
                                                PromNode("absent", "c", "10.9.9.9:9100")])
    assert [m["node_id"] for m in out] == ["host"]  # a node without series gets no NodeMetrics


# ---- pure: a site with the DCGM exporter (hand-written in dcgm-exporter's label shape) ---------------
def test_site_with_dcgm_exporter():
    doc = _load("site_with_dcgm.json")
    nodes = nodes_from_mapping({"gpu-a": "10.0.0.11", "cpu-b": "10.0.0.12:9100"}, cell="site")
    a, b = build_node_metrics(doc["responses"], nodes, name="prom")

    assert (a["node_id"], b["node_id"]) == ("gpu-a", "cpu-b")
    for m in (a, b):
        assert validate_event("NodeMetrics", m) is None, validate_event("NodeMetrics", m)
    # gpu-a: node_exporter on :9100 and DCGM on :9400 of one host
    assert a["gpu_util"] == [0.87, 0.12]
    assert a["gpu_memory_used_mib"] == [61440, 2048]
    assert a["power_w"] == pytest.approx(312.5 + 95.25)
    assert a["extended"]['DCGM_FI_DEV_GPU_UTIL{gpu="0"}'] == 87.0
    assert a["extended"]['DCGM_FI_DEV_FB_USED{gpu="1"}'] == 2048.0
    assert a["extended"]['DCGM_FI_DEV_XID_ERRORS{gpu="0"}'] == 0.0
    assert not any("UUID" in k or "modelName" in k or "Hostname" in k for k in a["extended"])
    assert a["extended"]["node_memory_MemAvailable_bytes"] == 412316860416.0
    assert a["memory_used_mib"] == (1081649664000 - 412316860416) // (1 << 20)
    assert a["cpu_util"] == 0.9375 and a["load1"] == 31.5
    assert a["net_rx_mbps"] == 1000.0 and a["net_tx_mbps"] == 2.0 and a["disk_iops"] == 1500.0
    assert a["at"] == round((1796000000.0 - 0.5) * 1000)  # the newer of its two targets' scrapes
    # cpu-b: exact instance, no GPUs; the NaN temperature is dropped
    assert b["gpu_util"] == [] and b["gpu_memory_used_mib"] == [] and b["power_w"] == 0.0
    assert not any(k.startswith("node_hwmon_temp_celsius") for k in b["extended"])
    assert b["at"] == round((1796000000.0 - 3.0) * 1000)
    assert b["extended"]['node_network_receive_bytes_total{device="eth0"}'] == 9.8765e11


def test_label_selector_for_dcgm_series():
    """A node found by a label matcher (dcgm-exporter's Hostname) rather than by its instance."""
    doc = _load("site_with_dcgm.json")
    [m] = build_node_metrics(doc["responses"], [PromNode("gpu-a", "site", '{Hostname="gpu-a", job=~"dc.*"}')])
    assert m["gpu_util"] == [0.87, 0.12]
    assert not any(k.startswith("node_") for k in m["extended"])
    assert m["at"] == round((1796000000.0 - 0.5) * 1000)  # dcgm's own target is in timestamp(up)


# ---- pure: selectors, keys, queries --------------------------------------------------------------
def test_parse_matchers():
    assert parse_matchers('{a="x", b!="y",c=~"z.*" , d!~"w|v"}') == (
        Matcher("a", "=", "x"), Matcher("b", "!=", "y"), Matcher("c", "=~", "z.*"), Matcher("d", "!~", "w|v"))
    assert parse_matchers(r'{a="q\"uote\\d"}') == (Matcher("a", "=", 'q"uote\\d'),)
    assert Matcher("c", "=~", "z.*").matches({"c": "zed"}) and not Matcher("c", "=~", "z").matches({"c": "zed"})
    assert Matcher("m", "=", "").matches({})  # a missing label is the empty string, as in PromQL
    for bad in ("a=x", "{}", '{a=x}', '{a=~"("}'):
        with pytest.raises(ConnectorError):
            parse_matchers(bad)


def test_node_index_order_and_kinds():
    index = NodeIndex([PromNode("by-label", "c", '{instance=~"10.0.0.1:.*"}'), PromNode("by-host", "c", "10.0.0.1"),
                       PromNode("by-instance", "c", "10.0.0.1:9100"), PromNode("v6", "c", "[::1]:9100")])
    assert index.node_of({"instance": "10.0.0.1:9100"}).node_id == "by-instance"
    assert index.node_of({"instance": "10.0.0.1:9400"}).node_id == "by-host"
    assert index.node_of({"instance": "[::1]:9100"}).node_id == "v6"
    assert index.node_of({"instance": "10.0.0.2:9100"}) is None
    with pytest.raises(ConnectorError):
        NodeIndex([PromNode("x", "c", "a"), PromNode("x", "c", "b")])


def test_series_key():
    assert series_key({"__name__": "node_load1", "instance": "h:1", "job": "node"}) == "node_load1"
    assert series_key({"__name__": "node_x", "b": "2", "a": 'q"'}) == 'node_x{a="q\\"",b="2"}'
    assert series_key({"__name__": "DCGM_FI_DEV_GPU_UTIL", "gpu": "3", "UUID": "GPU-1", "GPU_I_ID": "2"}) == \
        'DCGM_FI_DEV_GPU_UTIL{GPU_I_ID="2",gpu="3"}'
    assert series_key({"__name__": "node_x", "nodename": "n1", "instance": "i"}, drop={"nodename"}) == "node_x"


def test_queries_quote_regexes():
    q = queries("30s", include='node_(a|b)', exclude='x"y')
    assert q["series"] == '{__name__=~"node_(a|b)", __name__!~"x\\"y"}'
    assert "[30s]" in q["cpu_util"] and "[30s]" in q["disk_iops"]
    assert queries()["series"].startswith(f'{{__name__=~"{DEFAULT_INCLUDE}"') and DEFAULT_EXCLUDE


def test_failed_query_is_an_error():
    with pytest.raises(ConnectorError, match="bad_data"):
        build_node_metrics({"series": {"status": "error", "errorType": "bad_data", "error": "parse error"}},
                           [PromNode("n", "c", "h")])


# ---- the real Prometheus -------------------------------------------------------------------------
@pytest.fixture(scope="module")
def prometheus(settings):
    from suanli.deploy import prometheus as deploy

    report = deploy.up(settings, log=lambda _m: None, timeout=90)
    yield deploy.url(settings)
    if report["started"]["prometheus"] or report["started"]["node_exporter"]:
        deploy.down(settings, log=lambda _m: None)


def _mem_available_bytes() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no MemAvailable in /proc/meminfo")


def test_source_against_real_prometheus(prometheus, settings):
    from suanli.deploy.prometheus import node_exporter_target

    source = PrometheusSource(prometheus, [PromNode("here", "c1", node_exporter_target(settings))])
    [m] = source.sample_blocking()
    proc = _mem_available_bytes()
    assert validate_event("NodeMetrics", m) is None
    prom = m["extended"]["node_memory_MemAvailable_bytes"]
    assert abs(prom - proc) / proc < 0.05, (prom, proc)
    assert time.time() * 1000 - m["at"] < (settings.prometheus_scrape_s + 5) * 1000
    assert len(m["extended"]) >= 200

    with pytest.raises(ConnectorError, match="unreachable"):
        PrometheusSource("http://127.0.0.1:9", [PromNode("x", "c", "h")], timeout_s=1).sample_blocking()


def test_feed_refreshes_in_the_background(prometheus, settings):
    from suanli.deploy.prometheus import node_exporter_target

    source = PrometheusSource(prometheus, [PromNode("here", "c1", node_exporter_target(settings))])

    async def main():
        feed = PrometheusFeed(source, refresh_s=0.5, idle_s=2.0)
        assert feed.take("here") is None  # the first take starts the refresher; nothing yet
        deadline = time.monotonic() + 15
        while (sample := feed.take("here")) is None:
            assert time.monotonic() < deadline, feed.last_error
            await asyncio.sleep(0.05)
        task = feed._task
        await asyncio.wait_for(task, 10)  # nobody takes any more: it ends by itself after idle_s
        return sample

    sample = asyncio.run(main())
    assert sample["node_id"] == "here" and "node_memory_MemAvailable_bytes" in sample["extended"]


def test_local_connector_reads_its_node_from_prometheus(prometheus, settings):
    """The local-process connector with a Prometheus URL: NodeMetrics from node_exporter's series
    (plus its running_processes), /proc when Prometheus cannot be reached."""
    from suanli.connectors.local_process import LocalProcesses

    async def first_metrics(adapter) -> dict:
        deadline = time.monotonic() + 15
        seq = 0
        while True:
            seq += 1
            events = dict(adapter.monitor(int(time.time() * 1000), seq))
            if "node_memory_MemAvailable_bytes" in events["NodeMetrics"]["extended"] or time.monotonic() > deadline:
                return events
            await asyncio.sleep(0.1)

    adapter = LocalProcesses(node_id="here", prometheus=prometheus)
    events = asyncio.run(first_metrics(adapter))
    metrics = events["NodeMetrics"]
    proc = _mem_available_bytes()
    assert abs(metrics["extended"]["node_memory_MemAvailable_bytes"] - proc) / proc < 0.05
    assert metrics["extended"]["running_processes"] == 0.0
    assert metrics["node_id"] == "here" and "/prom/" in metrics["event_id"]
    assert validate_event("NodeMetrics", metrics) is None
    assert events["NodeHeartbeat"]["node_id"] == "here"

    fallback = LocalProcesses(node_id="here", prometheus="http://127.0.0.1:9")
    metrics = dict(fallback.monitor(int(time.time() * 1000), 1))["NodeMetrics"]
    assert metrics["extended"] == {"running_processes": 0.0} and "/metrics/" in metrics["event_id"]
    assert not math.isnan(metrics["cpu_util"])


@pytest.mark.stack
def test_local_connector_runner_sends_prometheus_metrics_through_kafka(prometheus, stack, codec):
    """The kit's runner calls the local adapter's monitor() on its loop: NodeMetrics from Prometheus
    reach raw.nodes, and stopping the runner leaves no sampler task behind."""
    import uuid

    from connector_helpers import Tail, assert_no_tasks_left, running, snapshot

    from suanli.connectors.kit import ConnectorRunner
    from suanli.connectors.local_process import LocalProcesses
    from suanli.streams.kafka_io import ensure_topics
    from suanli.streams.topics import TopicNames, TopicSpec

    namespace = f"tpl{uuid.uuid4().hex[:10]}"
    topics = TopicNames(namespace)
    local = LocalProcesses(node_id="prom-local", name="promlocal", prometheus=prometheus)
    runner = ConnectorRunner(local, codec=codec, bootstrap=stack.bootstrap_servers, namespace=namespace,
                             monitor_interval_s=0.5, partitions=1, recover=False)

    def prometheus_metrics(records) -> list:
        return [r for r in records if r.kind == "NodeMetrics"
                and "node_memory_MemAvailable_bytes" in r.payload["extended"]]

    async def scenario() -> list:
        await ensure_topics(stack.bootstrap_servers, [TopicSpec(topics.raw_nodes, 1)])
        start = await snapshot(stack.bootstrap_servers, topics.raw_nodes)
        async with Tail(stack.bootstrap_servers, codec, start) as tail, running(runner):
            await tail.until(lambda rs: prometheus_metrics(rs), timeout=30)
        assert_no_tasks_left()
        return tail.records

    records = asyncio.run(scenario())
    [first, *_] = prometheus_metrics(records)
    assert first.payload["node_id"] == "prom-local" and first.payload["event_id"].startswith("promlocal/prom-local/prom/")
    assert first.payload["extended"]["running_processes"] == 0.0
    assert any(r.kind == "NodeHeartbeat" for r in records)
