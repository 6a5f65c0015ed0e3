"""The API's writes: events onto the raw topics, exactly as a direct producer writes them.

:class:`KafkaSink` encodes with the shared :class:`~suanli.schemas.codec.Codec` *before*
producing (a value that does not fit the Avro schema is a ValidationError and nothing is
sent), routes with ``streams/topics.raw_route`` (topic and key by event kind, in the
namespace) and waits for the broker's acknowledgement (acks=all, idempotent producer).
"""
from __future__ import annotations

from typing import Any

from aiokafka.errors import KafkaError

from suanli.api.models import LogPosition
from suanli.errors import EncodeError, RegistryError, UnavailableError, ValidationError
from suanli.streams.intake import lane_headers
from suanli.streams.kafka_io import EventProducer
from suanli.streams.topics import raw_route


class KafkaSink:
    """An ``EventSink`` over an started :class:`EventProducer`."""

    def __init__(self, producer: EventProducer, namespace: str):
        self.producer = producer
        self.namespace = namespace

    async def publish(self, kind: str, payload: dict[str, Any]) -> LogPosition:
        topic, key = raw_route(kind, payload, self.namespace)
        try:
            value = self.producer.codec.encode(kind, payload)
        except EncodeError as exc:
            raise ValidationError(str(exc)) from None
        except RegistryError as exc:
            raise UnavailableError(f"schema registry: {exc}") from None
        try:
            metadata = await (await self.producer.send_raw(topic, value, key, lane_headers(kind, payload)))
        except KafkaError as exc:
            raise UnavailableError(f"Kafka refused the write: {exc}") from None
        return LogPosition(topic=topic, partition=metadata.partition, offset=metadata.offset)
