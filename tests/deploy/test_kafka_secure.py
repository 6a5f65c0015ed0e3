"""The secure broker's material and configuration (deploy/kafka_secure.py), and the settings
that choose it (suanli/config.py): real openssl, no broker."""
from __future__ import annotations

import stat
import subprocess

import pytest

from suanli.config import load_settings, to_env
from suanli.deploy import kafka_secure
from suanli.deploy.kafka_broker import server_properties
from suanli.errors import ConfigError


@pytest.fixture(autouse=True)
def own_registry(monkeypatch):
    """Settings loaded here register their clusters' security (by address) in a registry of
    this test's own: the suite's secure broker, which other tests use from this same process,
    keeps its registration."""
    from suanli.streams import kafka_security

    monkeypatch.setattr(kafka_security, "_BY_HOST", {})


def _props(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines() if line and not line.startswith("#"))


def _mode(path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_the_material_is_made_once_private_and_verifiable(tmp_path):
    directory = kafka_secure.ensure_material(tmp_path, log=lambda _m: None)
    users = kafka_secure.stored_users(tmp_path)
    assert set(users) == {"suanli", "suanli-broker"} and all(len(p) >= 24 for p in users.values())
    assert _mode(directory) == 0o700
    for private in ("ca.key", "broker.key", "broker.pem", "users.toml"):
        assert _mode(directory / private) == 0o600, private
    check = subprocess.run(["openssl", "verify", "-CAfile", directory / "ca.crt", directory / "broker.crt"],
                           capture_output=True, text=True)
    assert check.returncode == 0, check.stderr
    text = subprocess.run(["openssl", "x509", "-in", directory / "broker.crt", "-noout", "-text"],
                          capture_output=True, text=True).stdout
    assert "IP Address:127.0.0.1" in text and "TLS Web Client Authentication" in text
    before = (directory / "broker.pem").read_bytes()
    kafka_secure.ensure_material(tmp_path, log=lambda _m: None)                      # kept, not remade
    assert (directory / "broker.pem").read_bytes() == before and kafka_secure.stored_users(tmp_path) == users
    assert kafka_secure.scram_format_args(tmp_path)[:2] == ["--add-scram",
                                                           f"SCRAM-SHA-512=[name=suanli,password={users['suanli']}]"]


def test_a_secure_broker_takes_only_sasl_ssl_and_enforces_acls(tmp_path):
    kafka_secure.ensure_material(tmp_path, log=lambda _m: None)
    props = _props(server_properties(data_dir=tmp_path / "data", port=29192, controller_port=29193,
                                     secure_home=tmp_path))
    assert props["listeners"] == "SASL_SSL://127.0.0.1:29192,CONTROLLER://127.0.0.1:29193"
    assert props["listener.security.protocol.map"] == "CONTROLLER:SSL,SASL_SSL:SASL_SSL"
    assert "PLAINTEXT" not in props["listeners"] + props["advertised.listeners"]
    assert props["listener.name.controller.ssl.client.auth"] == "required"
    assert props["authorizer.class.name"] == "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
    assert props["allow.everyone.if.no.acl.found"] == "false"
    assert set(props["super.users"].split(";")) == {"User:CN=suanli-broker", "User:suanli-broker", "User:suanli"}


def test_settings_of_the_secure_stack_authenticate_as_the_plane(tmp_path):
    kafka_secure.ensure_material(tmp_path, log=lambda _m: None)
    settings = load_settings(home=tmp_path, secure=True, kafka_port=39192)
    security = settings.kafka_security
    assert (security.username, security.password, security.ca) == \
        ("suanli", kafka_secure.stored_password(tmp_path, "suanli"), tmp_path / "secure" / "ca.crt")
    env = to_env(settings)                                # a worker started from these settings
    assert env["SUANLI_SECURE"] == "True" and "SUANLI_KAFKA_PASSWORD" not in env   # read from the home, not passed
    assert load_settings(home=tmp_path, kafka_port=39192).kafka_security is None    # PLAINTEXT by default


def test_an_incomplete_sasl_ssl_configuration_names_what_is_missing(tmp_path):
    settings = load_settings(home=tmp_path, kafka="broker:9093", kafka_security_protocol="SASL_SSL",
                             kafka_username="alpha")
    with pytest.raises(ConfigError, match="SASL_SSL needs SUANLI_KAFKA_PASSWORD, SUANLI_KAFKA_CA"):
        settings.kafka_security
    with pytest.raises(ConfigError, match="no SCRAM user 'alpha'.*suanli tenant add alpha"):
        kafka_secure.stored_password(tmp_path, "alpha")
    env = to_env(load_settings(home=tmp_path, kafka="b:1", kafka_security_protocol="SASL_SSL", kafka_username="a",
                               kafka_password="s3cret", kafka_ca=tmp_path / "ca.crt"))
    assert env["SUANLI_KAFKA_PASSWORD"] == "s3cret"       # a child process gets the secret itself, not '****'


def test_a_tenant_name_must_be_a_principal_and_a_topic_suffix(tmp_path):
    settings = load_settings(home=tmp_path)
    for bad in ("视觉", "a b", "", "suanli"):
        with pytest.raises(ConfigError):
            kafka_secure.add_tenant(settings, bad, log=lambda _m: None)
