"""``bench/kafka_requests.py`` on the real broker: the hook counts the requests of a child
process and of its child, by API."""
from __future__ import annotations

import sys

import pytest

from suanli.bench import kafka_requests

PRODUCE = """
import asyncio, sys
from aiokafka import AIOKafkaProducer
async def main():
    producer = AIOKafkaProducer(bootstrap_servers=sys.argv[1])
    await producer.start()
    try:
        for i in range(int(sys.argv[2])):
            await producer.send_and_wait(sys.argv[3], b"x")   # one produce request each
    finally:
        await producer.stop()
asyncio.run(main())
"""


@pytest.mark.stack
@pytest.mark.timeout(120)
def test_a_process_and_its_child_count_their_requests(stack):
    topic = f"{stack.namespace}.kafka-requests-test"
    child = (f"import subprocess, sys; subprocess.check_call([sys.executable, '-c', {PRODUCE!r}, "
             f"{stack.bootstrap_servers!r}, '3', {topic!r}])")
    out = kafka_requests.run([sys.executable, "-c", PRODUCE + child, stack.bootstrap_servers, "5", topic])
    assert out["exit_code"] == 0
    by_sends = {p["argv"][2]: p for p in out["processes"]}
    assert set(by_sends) == {"5", "3"}
    for sends, p in by_sends.items():
        assert p["apis"]["ProduceRequest"]["total"] == int(sends)
        assert p["apis"]["MetadataRequest"]["total"] >= 1
        assert p["active_seconds"] >= 1 and p["cpu_seconds"] > 0


def test_a_failing_command_reports_its_exit_code():
    assert kafka_requests.run([sys.executable, "-c", "raise SystemExit(3)"])["exit_code"] == 3
