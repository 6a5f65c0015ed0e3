"""Shared fixtures.

Tests marked ``stack`` talk to the real embedded Kafka broker and schema registry that
``suanli test`` starts (or an external pair named by SUANLI_KAFKA / SUANLI_REGISTRY).
If those are not reachable the tests FAIL with a clear message; they are never skipped.
"""
from __future__ import annotations

import contextlib
import os
import uuid

# Tests never write into a real control plane's topics: the settings every test, worker and
# connector reads (at run time; topic names are TopicNames(settings.namespace)) name this
# namespace, subprocesses included since they inherit the environment. Set before any
# suanli import so that the cached settings() sees it too. Tests that run a plane use a
# fresh namespace of their own.
os.environ["SUANLI_NAMESPACE"] = os.environ.get("SUANLI_TEST_NAMESPACE", "suanlitest")

import pytest

from suanli.config import Settings, load_settings


@pytest.fixture(scope="session")
def settings() -> Settings:
    return load_settings()


@pytest.fixture(scope="session")
def stack(settings: Settings) -> Settings:
    """The running stack; fails the test if it is not up."""
    from suanli.deploy import kafka_broker
    from suanli.errors import RegistryError
    from suanli.schemas.registry import RegistryClient

    if not kafka_broker.is_ready(settings.bootstrap_servers, timeout=10):
        pytest.fail(f"Kafka at {settings.bootstrap_servers} is not reachable: run the tests with "
                    "`./bin/suanli test` (it starts the embedded stack) or `suanli stack up` first")
    try:
        with RegistryClient(settings.registry_url, timeout=5) as client:
            client.subjects()
    except RegistryError as exc:
        pytest.fail(f"schema registry not reachable: {exc}")
    return settings


SECURE_PORTS = {"kafka_port": 29192, "controller_port": 29193}


@pytest.fixture(scope="session")
def side_stack(stack: Settings, tmp_path_factory):
    """``side_stack(name, **settings)``: a context manager giving the settings of a second
    embedded stack beside the suite's (its own home, sharing the jars the suite's stack
    resolved already), started for the ``with`` block and stopped after."""
    from suanli.deploy import stack as stack_mod

    @contextlib.contextmanager
    def started(name: str, **overrides):
        home = tmp_path_factory.mktemp(name)
        if (stack.home / "cache").is_dir():
            (home / "cache").symlink_to(stack.home / "cache")
        settings = load_settings(home=home, **overrides)
        try:
            report = stack_mod.up(settings, log=lambda _m: None)
            print(f"{name} stack ready in {report['ready_seconds']} s")
            yield settings
        finally:
            stack_mod.down(settings, log=lambda _m: None)

    return started


@pytest.fixture(scope="session")
def secure_stack(stack: Settings, side_stack):
    """A secure broker (``suanli stack up --secure``: SASL/SCRAM-SHA-512 over TLS, ACLs) on
    loopback ports of its own, in a home of its own, beside the suite's plaintext stack, whose
    registry it shares (the registry only hands out schema ids). Its settings authenticate as
    the control plane's principal. Started once for the session, stopped after it."""
    with side_stack("secure", secure=True, registry=stack.registry_url,
                    **SECURE_PORTS) as secure:
        yield secure


@pytest.fixture()
def registry(stack: Settings):
    from suanli.schemas.registry import RegistryClient

    with RegistryClient(stack.registry_url) as client:
        yield client


@pytest.fixture()
def codec(registry):
    from suanli.schemas.codec import Codec

    return Codec(registry)


@pytest.fixture()
def topic_name() -> str:
    """A fresh topic name, so tests never see each other's records."""
    return f"test.{uuid.uuid4().hex[:12]}"
