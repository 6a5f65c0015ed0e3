"""A Faust schema for topics whose records the workers read as bytes.

Faust hands every record a stream reads to its topic's schema, which decodes the key and the
value through the app's serializer registry (``faust/serializers/schemas.py``,
``Schema.compile``): a lookup of the codec by name, a type check and a call per record, even
for the ``raw`` codec, which returns the bytes as they came. The workers never read an
event's key or value: they read the Kafka message itself (``streams/app.py``, ``_raw``), and
decode it with their own codec. In the E2E max phase's profiles those two decodes were
about 5 % of the scheduler's and the intake worker's busy samples.

:class:`RawSchema` makes the event straight from the message: its key and value are the
message's bytes (None stays None), exactly what ``key_type=bytes, value_type=bytes`` with the
``raw`` serializers gave.
"""
from __future__ import annotations

from typing import Any

import faust
from faust.types import AppT


class RawSchema(faust.Schema):
    """Keys and values as the message's bytes, without the serializer registry."""

    def __init__(self) -> None:
        super().__init__(key_type=bytes, value_type=bytes, key_serializer="raw", value_serializer="raw")

    def compile(self, app: AppT, **_kwargs: Any) -> Any:
        create_event = app.create_event

        async def decode(message: Any, *, propagate: bool = False) -> Any:
            return create_event(message.key, message.value, message.headers, message)

        return decode
