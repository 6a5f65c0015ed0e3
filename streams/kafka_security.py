"""How every Suanli Kafka client authenticates: PLAINTEXT (the embedded default), or
SASL/SCRAM over TLS (``SASL_SSL``), the mode of ``suanli stack up --secure``.

One :class:`KafkaSecurity` describes a client's side of it, and renders it for each library
that speaks to Kafka: aiokafka's keyword arguments, Faust's credentials, Java client properties
(Connect, the registry, the Java producer) and the ``SUANLI_KAFKA_*`` environment of the
other-language producers under ``clients/``.

Clients are built in many places from a bootstrap address alone, so security is looked up by
that address: :func:`load_settings` registers the security of the cluster it points at
(:func:`register`), and every client passes ``**client_options(bootstrap)``, like a client
configuration file keyed by cluster. A process that never registers a cluster gets PLAINTEXT.

The password is never rendered in a ``repr`` or a log line: only the environment of a child
process, a JAAS string handed to a JVM in a 0600 file, and the live client objects carry it.
"""
from __future__ import annotations

import ssl
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

PROTOCOLS = ("PLAINTEXT", "SASL_SSL")
MECHANISMS = ("SCRAM-SHA-512", "SCRAM-SHA-256")


@dataclass(frozen=True)
class KafkaSecurity:
    """SASL/SCRAM over TLS: who the client is, and the CA that signed the brokers' certificates."""

    username: str
    password: str = field(repr=False)
    ca: Path
    mechanism: str = "SCRAM-SHA-512"

    protocol = "SASL_SSL"

    def ssl_context(self) -> ssl.SSLContext:
        """A client context that trusts only ``ca`` and checks the broker's host name."""
        return _context(str(self.ca))

    def aiokafka(self) -> dict[str, Any]:
        """Keyword arguments for AIOKafkaProducer, AIOKafkaConsumer and AIOKafkaAdminClient."""
        return {"security_protocol": "SASL_SSL", "sasl_mechanism": self.mechanism,
                "sasl_plain_username": self.username, "sasl_plain_password": self.password,
                "ssl_context": self.ssl_context()}

    def faust(self) -> Any:
        """Faust's ``broker_credentials``."""
        from faust import SASLCredentials
        return SASLCredentials(username=self.username, password=self.password, mechanism=self.mechanism,
                               ssl_context=self.ssl_context())

    def java(self) -> dict[str, str]:
        """Java client properties (kafka-clients >= 2.7 reads a PEM truststore)."""
        return {"security.protocol": "SASL_SSL", "sasl.mechanism": self.mechanism,
                "sasl.jaas.config": jaas(self.username, self.password),
                "ssl.truststore.type": "PEM", "ssl.truststore.location": str(self.ca)}

    def env(self) -> dict[str, str]:
        """The ``SUANLI_KAFKA_*`` variables the producers under ``clients/`` read."""
        return {"SUANLI_KAFKA_SECURITY_PROTOCOL": "SASL_SSL", "SUANLI_KAFKA_SASL_MECHANISM": self.mechanism,
                "SUANLI_KAFKA_USERNAME": self.username, "SUANLI_KAFKA_PASSWORD": self.password,
                "SUANLI_KAFKA_CA": str(self.ca)}


def jaas(username: str, password: str) -> str:
    """The ``sasl.jaas.config`` of a SCRAM login (quotes and backslashes escaped)."""
    def quoted(value: str) -> str:
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return f"org.apache.kafka.common.security.scram.ScramLoginModule required username={quoted(username)} " \
           f"password={quoted(password)};"


@lru_cache(maxsize=None)
def _context(cafile: str) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=cafile)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    return context


_BY_HOST: dict[str, KafkaSecurity] = {}


def _hosts(bootstrap: str) -> list[str]:
    return [host.strip().removeprefix("kafka://") for host in bootstrap.replace(";", ",").split(",") if host.strip()]


def register(bootstrap: str, security: KafkaSecurity | None) -> None:
    """Clients of ``bootstrap`` in this process use ``security`` (None: PLAINTEXT again)."""
    for host in _hosts(bootstrap):
        if security is None:
            _BY_HOST.pop(host, None)
        else:
            _BY_HOST[host] = security


def security_for(bootstrap: str) -> KafkaSecurity | None:
    """The security registered for any host of ``bootstrap``, or None (PLAINTEXT)."""
    for host in _hosts(bootstrap):
        if host in _BY_HOST:
            return _BY_HOST[host]
    return None


def client_options(bootstrap: str) -> dict[str, Any]:
    """aiokafka keyword arguments for a client of ``bootstrap``: empty for PLAINTEXT."""
    security = security_for(bootstrap)
    return security.aiokafka() if security else {}
