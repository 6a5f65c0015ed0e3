"""The telemetry worker on the real broker: started as the plane starts it, in a fresh
namespace; a node whose metrics cross the HOT threshold gets a NodeConditionChanged HOT on the
raw nodes topic, and NORMAL when they drop back, also across a restart of the worker (its
state comes back from the RocksDB table's changelog)."""
from __future__ import annotations

import asyncio
import json
import time
import uuid

import pytest

from suanli.config import load_settings, to_env
from suanli.connectors.sim_telemetry import Fault, TelemetryGenerator
from suanli.deploy.plane import worker_processes
from suanli.schemas.codec import Codec
from suanli.schemas.registry import RegistryClient
from suanli.streams.kafka_io import EventConsumer, EventProducer, ensure_topics
from suanli.streams.telemetry_app import STATS_SECONDS, stats_path, unpack_row
from suanli.streams.topics import TopicNames, core_topics

pytestmark = [pytest.mark.stack, pytest.mark.timeout(300)]

HOT_NODE = {"node_id": "hot-1", "cpu_milli": 96000, "memory_mib": 786432,
            "accelerators": [{"kind": "GPU", "model": "V100M32", "count": 8, "memory_mib": 32768}]}
COOL_NODE = {"node_id": "cool-1", "cpu_milli": 32000, "memory_mib": 262144, "accelerators": []}



async def _stats_written(settings, records: int, timeout: float) -> None:
    """Wait until the worker's stats file counts at least ``records`` NodeMetrics."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if json.loads(stats_path(settings).read_text()).get("records", 0) >= records:
                return
        except (OSError, ValueError):
            pass                                   # not written yet, or being replaced
        await asyncio.sleep(0.2)
    raise AssertionError(f"the telemetry stats file never counted {records} records in {timeout:.0f}s")

def _telemetry_worker(partitions: int):
    """A fresh namespace with its topics, and the telemetry worker as the plane starts it
    (not started yet): (settings, topics, service, argv)."""
    settings = load_settings(namespace=f"t{uuid.uuid4().hex[:10]}", partitions=partitions)
    asyncio.run(ensure_topics(settings.bootstrap_servers, core_topics(settings.partitions, settings.namespace)))
    service, argv = worker_processes(settings)["telemetry"]
    return settings, TopicNames(settings.namespace), service, argv


async def _collect(consumer: EventConsumer, kind: str, want: int, timeout: float) -> list:
    """Records of ``kind`` the consumer reads until ``want`` of them came or ``timeout`` s passed."""
    out: list = []
    deadline = time.monotonic() + timeout
    async for batch in consumer.batches(timeout_ms=500):
        out += [r for r in batch if r.kind == kind]
        if len(out) >= want or time.monotonic() > deadline:
            return out
    return out


def test_hot_metrics_make_a_hot_condition_and_normal_ones_clear_it(stack):
    settings, topics, service, argv = _telemetry_worker(partitions=2)
    gen = TelemetryGenerator(seed=1)
    seq = 0

    async def publish(rounds: int, fault: Fault | None) -> None:
        nonlocal seq
        gen.set_fault("hot-1", fault)
        async with EventProducer(settings.bootstrap_servers, codec, namespace=settings.namespace) as producer:
            for _ in range(rounds):
                seq += 1
                at = int(time.time() * 1000)
                for node in (HOT_NODE, COOL_NODE):
                    payload = gen.node_metrics(node, [], at, seq, f"sim/{node['node_id']}/metrics/{seq}", "c1")
                    await (await producer.publish("NodeMetrics", payload))
                await asyncio.sleep(0.2)

    async def changes(consumer: EventConsumer, want: int, timeout: float) -> list:
        return await _collect(consumer, "NodeConditionChanged", want, timeout)

    async def scenario() -> tuple[list, list]:
        async with EventConsumer(settings.bootstrap_servers, codec, [topics.raw_nodes]) as consumer:
            await publish(2, None)
            await publish(2, Fault(temp_c=91))
            hot = await changes(consumer, 1, 120)
            assert hot, service.log_tail()
            # The worker restarts: the HOT state must come back from its table for NORMAL to follow.
            service.stop()
            service.start(argv, env=to_env(settings))
            await publish(3, None)
            normal = await changes(consumer, 1, 120)
            await _stats_written(settings, records=6, timeout=STATS_SECONDS * 10)
            return hot, normal

    async def table_rows() -> dict:
        """The worker's table as its changelog holds it (keys as JSON strings): node id -> latest row."""
        changelog = f"{settings.namespace}-telemetry-node-telemetry-changelog"
        async with EventConsumer(settings.bootstrap_servers, codec, [changelog]) as consumer:
            return {json.loads(r.key): r.value for r in await consumer.read_until_end()}

    with RegistryClient(settings.registry_url) as registry:
        codec = Codec(registry)
        service.start(argv, env=to_env(settings))
        try:
            hot, normal = asyncio.run(scenario())
        finally:
            service.stop()
        rows = asyncio.run(table_rows())
    assert [(c.payload["node_id"], c.payload["previous"], c.payload["condition"]) for c in hot] == \
        [("hot-1", "NORMAL", "HOT")]
    change = hot[0].payload
    assert change["cell"] == "c1" and "gpu_temp_enter_c" in change["reason"], change
    assert any(k.startswith("DCGM_FI_DEV_GPU_TEMP{") and v >= 85 for k, v in change["metrics"].items())
    assert hot[0].key == b"hot-1"                        # keyed by node, like every node fact on raw.nodes
    assert change["event_id"] == f"telemetry/c1/hot-1/{change['at']}/HOT"
    assert [(c.payload["node_id"], c.payload["previous"], c.payload["condition"]) for c in normal] == \
        [("hot-1", "HOT", "NORMAL")], "the restarted worker lost the HOT state"
    assert "gpu_temp_exit_c" in normal[0].payload["reason"]
    # The table keeps each node's latest metrics (its producer's bytes) with the evaluator's state.
    state, latest = unpack_row(rows["hot-1"])
    kind, payload = codec.decode(latest)
    assert state.condition == "NORMAL" and kind == "NodeMetrics"
    assert payload["event_id"] == f"sim/hot-1/metrics/{seq}" and len(payload["extended"]) >= 200
    assert unpack_row(rows["cool-1"])[0].condition == "NORMAL"
    stats = json.loads(stats_path(settings).read_text())      # the restarted worker's own figures
    assert stats["records"] >= 6 and stats["samples"] >= 6 * 200 and sum(stats["lag_ms"].values()) == stats["records"]


def test_bad_node_metrics_are_dead_lettered_by_the_telemetry_worker_not_dropped(stack):
    """Intake skips NodeMetrics undecoded; the telemetry worker owns their dead letters."""
    settings, topics, service, argv = _telemetry_worker(partitions=1)
    gen = TelemetryGenerator(seed=1)

    async def scenario() -> list:
        good = gen.node_metrics(COOL_NODE, [], int(time.time() * 1000), 1, "sim/cool-1/metrics/1", "c1")
        async with EventProducer(settings.bootstrap_servers, codec, namespace=settings.namespace) as producer:
            frame = codec.encode("NodeMetrics", good)
            await (await producer.send_raw(topics.raw_nodes, frame[:5] + b"\x02 broken body", key="cool-1"))
            bad = {**good, "event_id": "sim/cool-1/metrics/2", "cell": ""}
            await (await producer.publish("NodeMetrics", bad))
        async with EventConsumer(settings.bootstrap_servers, codec, [topics.dead_letters]) as consumer:
            return await _collect(consumer, "DeadLetter", 2, 120)

    with RegistryClient(settings.registry_url) as registry:
        codec = Codec(registry)
        service.start(argv, env=to_env(settings))
        try:
            letters = asyncio.run(scenario())
        finally:
            service.stop()
    kinds = sorted(r.payload["error_kind"] for r in letters)
    assert kinds == ["INVALID", "UNDECODABLE"], (kinds, service.log_tail())
    invalid = next(r.payload for r in letters if r.payload["error_kind"] == "INVALID")
    assert "cell" in invalid["reason"] and invalid["source_topic"] == topics.raw_nodes
