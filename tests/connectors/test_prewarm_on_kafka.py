"""Prewarming on the real broker and registry (C11, issue 20): a PrewarmCommand on the local
connector's dispatch topic makes its runner copy the weights into the node's cache, and a
DispatchCommand of that model then starts as a cache hit on the copied file."""
from __future__ import annotations

import asyncio
import hashlib
import os
import sys
import time
import uuid

import pytest

from connector_helpers import Tail, assert_no_tasks_left, command, running, snapshot, status_trail
from suanli.connectors.kit import ConnectorRunner
from suanli.connectors.local_process import LocalProcesses
from suanli.streams.kafka_io import EventProducer, ensure_topics
from suanli.streams.topics import TopicNames, TopicSpec

pytestmark = [pytest.mark.stack, pytest.mark.timeout(60)]


async def _until(condition, timeout: float = 15.0, what: str = "") -> None:
    """Wait until ``condition()`` holds (checked every 20 ms); AssertionError after ``timeout``."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out after {timeout}s waiting for {what}"
        await asyncio.sleep(0.02)


def test_a_prewarm_on_the_dispatch_topic_copies_the_model_and_the_task_then_hits(stack, codec, tmp_path):
    name = f"t{uuid.uuid4().hex[:10]}"
    node = f"{name}-host"
    topics = TopicNames(stack.namespace)
    origin = tmp_path / "origin" / "weights.bin"
    origin.parent.mkdir()
    origin.write_bytes(os.urandom(3 * 2**20))
    digest = hashlib.sha256(origin.read_bytes()).hexdigest()
    arch = f"{name}-llama@1"
    local = LocalProcesses(cell=name, name=name, node_id=node, model_cache=tmp_path / "cache")
    runner = ConnectorRunner(local, codec=codec, bootstrap=stack.bootstrap_servers, monitor_interval_s=0,
                             heartbeat_interval_s=1.0, partitions=1)
    prewarm = {"event_id": f"{name}-pw", "node_id": node, "cell": name, "model_arch": arch,
               "artifact_uri": origin.as_uri(), "size_mib": 3, "at": int(time.time() * 1000),
               "reason": "test: expected demand"}
    seen = tmp_path / "seen.txt"
    show = ("import hashlib, os, sys\np = os.environ['SUANLI_MODEL_PATH']\n"
            "open(sys.argv[1], 'w').write(p + ' ' + hashlib.sha256(open(p, 'rb').read()).hexdigest())")
    task = command(name, "m", node, command=[sys.executable, "-c", show, str(seen)],
                   model={"model_arch": arch, "artifact_uri": origin.as_uri(), "size_mib": 3})

    async def scenario():
        await ensure_topics(stack.bootstrap_servers, [TopicSpec(topics.raw_status, stack.partitions)])
        start = await snapshot(stack.bootstrap_servers, topics.raw_status)
        keep = lambda r: (r.payload or {}).get("task_id") == task["task_id"]  # noqa: E731
        async with Tail(stack.bootstrap_servers, codec, start, keep=keep) as tail, running(runner):
            async with EventProducer(stack.bootstrap_servers, codec) as producer:
                await (await producer.send(topics.dispatch(name), "PrewarmCommand", prewarm, key=node))
                await _until(lambda: local.model_store().path_of(arch) is not None, what="the prewarm's copy")
                cached = local.model_store().path_of(arch)
                await (await producer.send(topics.dispatch(name), "DispatchCommand", task, key=task["task_id"]))
            await tail.until(lambda rs: status_trail(rs, task["task_id"])[-1:] == ["COMPLETED"])
        assert_no_tasks_left()
        return tail.records, cached

    records, cached = asyncio.run(scenario())
    assert status_trail(records, task["task_id"]) == ["ack", "RUNNING", "COMPLETED"]
    running_msg = next(r.payload["message"] for r in records if r.kind == "TaskStatusChanged"
                       and r.payload["status"] == "RUNNING")
    assert running_msg.startswith(f"model {arch}: cache hit (")
    assert cached == tmp_path / "cache" / f"{arch}.weights" and cached.read_bytes() == origin.read_bytes()
    assert seen.read_text() == f"{cached} {digest}"          # the process read the prewarmed copy
    assert (runner.stats.prewarms, runner.stats.prewarm_failures, runner.stats.bad_records) == (1, 0, 0)
