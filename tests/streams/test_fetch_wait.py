"""``streams/fetch_wait.py``: every worker's consumer asks the broker to hold a fetch for at
most ``Settings.fetch_max_wait_ms``, not Faust's fixed 1.5 s (figures:
``python -m suanli.bench.fetch_wait``)."""
from __future__ import annotations

import asyncio
import uuid

import faust
import pytest

from suanli.config import load_settings
from suanli.streams.app import make_app
from suanli.streams.fetch_wait import FAUST_FETCH_MAX_WAIT_MS, FetchWaitTransport, set_fetch_wait


@pytest.mark.parametrize("role", ["scheduler", "telemetry"])    # intake: tests/streams/test_intake_worker.py
def test_every_worker_app_gets_the_settings_fetch_wait(role, tmp_path):
    settings = load_settings(namespace=f"t{uuid.uuid4().hex[:8]}", home=tmp_path)
    assert settings.fetch_max_wait_ms == 20                      # the default
    app = make_app(role, settings)
    assert isinstance(app.transport, FetchWaitTransport) and app.transport.fetch_max_wait_ms == 20
    app = make_app(role, settings.model_copy(update={"fetch_max_wait_ms": 250}))
    assert app.transport.fetch_max_wait_ms == 250


def _bare_app() -> faust.App:
    return faust.App(f"t{uuid.uuid4().hex[:8]}", broker="kafka://127.0.0.1:9092", web_enabled=False)


def test_it_refuses_an_app_whose_transport_is_already_made_and_a_wait_below_1_ms():
    app = _bare_app()
    app.transport                                   # made on first use, as agents and topics do
    with pytest.raises(RuntimeError, match="already has its transport"):
        set_fetch_wait(app, 20)
    with pytest.raises(ValueError, match="must be >= 1"):
        set_fetch_wait(_bare_app(), 0)


def test_the_setting_is_bounded():
    from suanli.errors import ConfigError

    for bad in (0, 10_001):
        with pytest.raises(ConfigError, match="fetch_max_wait_ms"):
            load_settings(fetch_max_wait_ms=bad)


async def _started_fetch_wait(stack, home, wait_ms: int | None) -> int:
    """The fetch wait of the started consumer Faust builds for a worker, as aiokafka's fetcher
    puts it in its fetch requests (``None``: Faust's own transport)."""
    if wait_ms is None:
        app = faust.App(f"t{uuid.uuid4().hex[:8]}", broker=f"kafka://{stack.bootstrap_servers}", web_enabled=False,
                        datadir=str(home))
    else:
        app = make_app("scheduler", stack.model_copy(update={"namespace": f"t{uuid.uuid4().hex[:8]}", "home": home,
                                                             "fetch_max_wait_ms": wait_ms}))
    consumer = app.consumer._thread._create_worker_consumer(app.transport)
    await consumer.start()
    try:
        return consumer._fetcher._fetch_max_wait_ms
    finally:
        await consumer.stop()


@pytest.mark.stack
def test_the_started_worker_consumer_fetches_with_the_settings_wait(stack, tmp_path):
    assert asyncio.run(_started_fetch_wait(stack, tmp_path / "a", 20)) == 20
    assert asyncio.run(_started_fetch_wait(stack, tmp_path / "b", 35)) == 35
    # without it, Faust's fixed wait: what the module replaces
    assert asyncio.run(_started_fetch_wait(stack, tmp_path / "c", None)) == FAUST_FETCH_MAX_WAIT_MS

