"""``streams/busy_fetch.py``: while intake's last micro-batch was busy, its consumer asks the
broker to hold each fetch for ``Settings.fetch_busy_min_bytes``; a quiet batch puts it back
to 1 byte (figures: BENCHMARKS.md, "Fuller fetches while intake is busy")."""
from __future__ import annotations

import asyncio
import uuid
from types import SimpleNamespace

import pytest
from aiokafka.structs import TopicPartition

from suanli.config import load_settings
from suanli.streams.app import make_app
from suanli.streams.batch_wait import BatchWait
from suanli.streams.busy_fetch import BUSY_MAX_WAIT_MS, BUSY_RECORDS, QUIET_MIN_BYTES, BusyFetch, set_consumer_fetch
from suanli.streams.fetch_wait import set_fetch_min_bytes
from suanli.streams.kafka_io import ensure_topics
from suanli.streams.topics import TopicSpec


def _transport(consumers: int = 1) -> SimpleNamespace:
    """A transport's shape as set_fetch_min_bytes reads it: started and not-yet-started consumers."""
    made = [SimpleNamespace(_fetch_min_bytes=1, _fetcher=SimpleNamespace(_fetch_min_bytes=1))
            for _ in range(consumers)] + [SimpleNamespace(_fetch_min_bytes=1)]
    return SimpleNamespace(fetch_min_bytes=1, worker_consumers=made)


def test_a_busy_batch_asks_for_fuller_fetches_and_a_quiet_one_puts_it_back():
    t = _transport(2)
    f = BusyFetch.of_transport(t, 16_384)
    assert f.current == QUIET_MIN_BYTES == 1
    assert f.after("intake", False) == 1 and f.switches == 0       # nothing to change
    assert f.after("intake", True) == 16_384
    assert t.fetch_min_bytes == 16_384                             # for consumers made later
    assert [c._fetch_min_bytes for c in t.worker_consumers] == [16_384] * 3
    assert [c._fetcher._fetch_min_bytes for c in t.worker_consumers[:2]] == [16_384] * 2
    assert f.after("intake", True) == 16_384 and f.switches == 1   # no change while it stays busy
    assert f.after("intake", False) == 1 and f.switches == 2
    assert [c._fetcher._fetch_min_bytes for c in t.worker_consumers[:2]] == [1, 1]


def test_the_app_is_busy_while_any_of_its_streams_is():
    t = _transport()
    f = BusyFetch.of_transport(t, 4096)
    f.after("intake", True)
    assert f.after("intake-tenants", False) == 4096      # the other stream is still busy
    assert f.after("intake", False) == 1
    assert f.after("intake-tenants", True) == 4096


def test_one_byte_turns_it_off_and_below_one_is_refused():
    t = _transport()
    f = BusyFetch.of_transport(t, 1)
    assert f.after("intake", True) == 1 and f.switches == 0
    with pytest.raises(ValueError, match="busy_min_bytes must be >= 1"):
        BusyFetch.of_transport(t, 0)
    with pytest.raises(ValueError, match="min_bytes must be >= 1"):
        set_fetch_min_bytes(t, 0)


def test_a_plain_consumer_also_waits_less_while_busy_and_gets_its_idle_poll_back():
    started = SimpleNamespace(_fetch_min_bytes=1, _fetch_max_wait_ms=500,
                              _fetcher=SimpleNamespace(_fetch_min_bytes=1, _fetch_max_wait_ms=500))
    f = BusyFetch.of_consumer(started, 16_384)
    assert f.after("follow", True) == 16_384
    assert (started._fetcher._fetch_min_bytes, started._fetcher._fetch_max_wait_ms) == (16_384, BUSY_MAX_WAIT_MS)
    assert (started._fetch_min_bytes, started._fetch_max_wait_ms) == (16_384, BUSY_MAX_WAIT_MS)
    f.after("follow", False)
    assert (started._fetcher._fetch_min_bytes, started._fetcher._fetch_max_wait_ms) == (1, 500)
    unstarted = SimpleNamespace(_fetch_min_bytes=1, _fetch_max_wait_ms=250)     # no fetcher yet
    set_consumer_fetch(unstarted, 4096, 20)
    assert (unstarted._fetch_min_bytes, unstarted._fetch_max_wait_ms) == (4096, 20)
    with pytest.raises(ValueError, match="min_bytes >= 1"):
        set_consumer_fetch(unstarted, 0, 20)
    assert BUSY_RECORDS == BatchWait().busy_batch          # busy means the same for a batch and a fetch


def test_batch_wait_says_whether_the_last_batch_was_busy():
    w = BatchWait(busy_batch=8)
    assert w.busy is False
    w.after(8)
    assert w.busy is True
    w.after(7)
    assert w.busy is False


def test_the_setting_defaults_to_16_kib_and_is_bounded(tmp_path):
    from suanli.errors import ConfigError

    assert load_settings(home=tmp_path).fetch_busy_min_bytes == 16_384
    for bad in (0, 1_048_577):
        with pytest.raises(ConfigError, match="fetch_busy_min_bytes"):
            load_settings(fetch_busy_min_bytes=bad)


def _record_fetches(client) -> list[int]:
    """Wrap a started aiokafka client's ``send`` (it still sends): the list it returns gets the
    min bytes of every fetch request the client sends from now on, as the request carries it."""
    sent: list[int] = []
    client_send = client.send

    async def recording(node_id, request, *args, **kwargs):
        if type(request).__name__ == "FetchRequest":
            sent.append(request._min_bytes)
        return await client_send(node_id, request, *args, **kwargs)

    client.send = recording
    return sent


async def _fetch_min_bytes_sent(stack, home) -> list[int]:
    """The min bytes of the fetch requests a started worker consumer sends to the broker while
    the app is quiet, then busy, then quiet again."""
    settings = stack.model_copy(update={"namespace": f"t{uuid.uuid4().hex[:8]}", "home": home})
    app = make_app("intake", settings)
    busy = BusyFetch.of_transport(app.transport, 16_384)
    consumer = app.consumer._thread._create_worker_consumer(app.transport)
    await consumer.start()
    sent = _record_fetches(consumer._client)
    try:
        topic = f"{settings.namespace}.busy-fetch"
        await ensure_topics(settings.bootstrap_servers, [TopicSpec(topic, partitions=1)])
        consumer.assign([TopicPartition(topic, 0)])
        await consumer.seek_to_beginning()

        async def fetches_after(mark: int) -> None:
            while len(sent) - mark < 2:                  # the one in flight at the change, and one built after
                await asyncio.sleep(0.01)

        await asyncio.wait_for(fetches_after(0), 30)
        quiet = list(sent)
        busy.after("intake", True)
        mark = len(sent)
        await asyncio.wait_for(fetches_after(mark), 30)
        busy_sent = sent[mark + 1:]                      # the one in flight at the change may be old
        busy.after("intake", False)
        mark = len(sent)
        await asyncio.wait_for(fetches_after(mark), 30)
        return [quiet[-1], busy_sent[-1], sent[-1]]
    finally:
        await consumer.stop()


@pytest.mark.stack
def test_the_started_consumer_sends_the_min_bytes_the_batches_call_for(stack, tmp_path):
    assert asyncio.run(_fetch_min_bytes_sent(stack, tmp_path)) == [1, 16_384, 1]


async def _batches_fetch_min_bytes(stack, home) -> list[int]:
    """The min bytes of the fetch requests ``EventConsumer.batches(busy_min_bytes=...)`` sends:
    on a quiet topic, then after a busy batch (20 records written at once)."""
    from suanli.schemas.codec import Codec
    from suanli.schemas.registry import RegistryClient
    from suanli.streams.kafka_io import EventConsumer, EventProducer

    topic = f"t{uuid.uuid4().hex[:8]}.busy-batches"
    await ensure_topics(stack.bootstrap_servers, [TopicSpec(topic, partitions=1)])
    with RegistryClient(stack.registry_url) as registry:
        codec = Codec(registry)
        async with EventConsumer(stack.bootstrap_servers, codec, [topic]) as consumer, \
                EventProducer(stack.bootstrap_servers, codec) as producer:
            sent = _record_fetches(consumer.raw._client)
            batches = consumer.batches(timeout_ms=100, busy_min_bytes=16_384)
            assert await anext(batches) == []                 # quiet: nothing yet
            await asyncio.wait_for(_until(lambda: sent), 30)  # a fetch the quiet consumer sent
            for i in range(20):
                await producer.send_raw(topic, f"v{i}".encode(), key=b"k")
            await producer.flush()
            got = 0
            while got < 20:
                got += len(await anext(batches))
            mark = len(sent)
            await asyncio.wait_for(_until(lambda: len(sent) - mark >= 2), 30)
            return [sent[0], sent[-1]]


async def _until(ready) -> None:
    while not ready():
        await asyncio.sleep(0.01)


@pytest.mark.stack
def test_event_consumer_batches_ask_for_fuller_fetches_after_a_busy_batch(stack, tmp_path):
    assert asyncio.run(_batches_fetch_min_bytes(stack, tmp_path)) == [1, 16_384]
