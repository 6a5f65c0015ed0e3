"""``streams/raw_schema.py``: events straight from the message's bytes, the same key, value
and message as Faust's own schema with ``raw`` serializers gave, and every worker topic
that the workers read uses it."""
from __future__ import annotations

import asyncio

import faust
import pytest
from faust.types import TP, Message

from suanli.config import settings
from suanli.streams.app import make_app
from suanli.streams.raw_schema import RawSchema


def _message(key, value, offset=0):
    return Message("t", 0, offset, 1.0, 0, [("h", b"1")], key, value, None, tp=TP("t", 0))


@pytest.mark.parametrize("key,value", [(b"cell-1", b"\x00\x00\x00\x00\x07avro"), (None, b"v"), (b"k", None),
                                       (None, None), (b"", b"")])
def test_the_same_event_as_fausts_raw_schema(key, value):
    app = make_app("intake", settings())
    ours = RawSchema().compile(app)
    fausts = faust.Schema(key_type=bytes, value_type=bytes, key_serializer="raw",
                          value_serializer="raw").compile(app, default_propagate=True)
    message = _message(key, value)

    async def both():
        return await ours(message), await fausts(message)

    mine, theirs = asyncio.run(both())
    assert (mine.key, mine.value, mine.headers) == (theirs.key, theirs.value, theirs.headers)
    assert (mine.key, mine.value) == (key, value)
    assert mine.message is message


def test_the_workers_read_their_topics_through_it():
    from suanli.streams.app import build_scheduler
    from suanli.streams.telemetry_app import build_telemetry

    for build in (build_scheduler, build_telemetry):      # intake is no Faust app (streams/intake_worker.py)
        app = build(settings())
        schemas = [type(agent.channel.schema) for agent in app.agents.values()]
        assert schemas and all(s is RawSchema for s in schemas), (build.__name__, schemas)
