"""How a client's security renders for each library, and the by-address lookup (no broker)."""
from __future__ import annotations

import ssl

import pytest

from suanli.deploy.pki import ensure_ca
from suanli.streams import kafka_security
from suanli.streams.kafka_security import KafkaSecurity, client_options, jaas, register, security_for


@pytest.fixture()
def security(tmp_path) -> KafkaSecurity:
    ca, _key = ensure_ca(tmp_path, "test-ca")
    return KafkaSecurity(username="alpha", password='pa"ss\\word', ca=ca)


def test_the_password_never_shows_in_a_repr(security):
    assert "pa\"ss" not in repr(security) and "alpha" in repr(security)


def test_aiokafka_gets_scram_over_tls_that_trusts_only_the_ca(security):
    options = security.aiokafka()
    assert {k: options[k] for k in ("security_protocol", "sasl_mechanism", "sasl_plain_username")} == \
        {"security_protocol": "SASL_SSL", "sasl_mechanism": "SCRAM-SHA-512", "sasl_plain_username": "alpha"}
    context = options["ssl_context"]
    assert isinstance(context, ssl.SSLContext) and context.check_hostname
    assert context.verify_mode == ssl.CERT_REQUIRED and len(context.get_ca_certs()) == 1


def test_java_properties_escape_the_jaas_values(security):
    props = security.java()
    assert props["sasl.jaas.config"] == ('org.apache.kafka.common.security.scram.ScramLoginModule required '
                                         'username="alpha" password="pa\\"ss\\\\word";')
    assert props["ssl.truststore.type"] == "PEM" and props["ssl.truststore.location"] == str(security.ca)
    assert jaas("a", "b").endswith('password="b";')


def test_the_other_languages_get_the_suanli_kafka_environment(security):
    assert security.env() == {"SUANLI_KAFKA_SECURITY_PROTOCOL": "SASL_SSL", "SUANLI_KAFKA_SASL_MECHANISM": "SCRAM-SHA-512",
                              "SUANLI_KAFKA_USERNAME": "alpha", "SUANLI_KAFKA_PASSWORD": 'pa"ss\\word',
                              "SUANLI_KAFKA_CA": str(security.ca)}


def test_clients_find_the_security_of_any_host_of_their_bootstrap(security, monkeypatch):
    monkeypatch.setattr(kafka_security, "_BY_HOST", {})
    assert client_options("127.0.0.1:1") == {}                       # nothing registered: PLAINTEXT
    register("127.0.0.1:1,127.0.0.1:3", security)
    assert security_for("127.0.0.1:3") is security and security_for("kafka://127.0.0.1:1") is security
    assert client_options("127.0.0.1:2") == {}
    register("127.0.0.1:1,127.0.0.1:3", None)
    assert security_for("127.0.0.1:1") is None
