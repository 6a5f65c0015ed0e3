"""``suanli stack up --secure``: SASL/SCRAM-SHA-512 over TLS on the embedded brokers, with the
StandardAuthorizer's ACLs, and the tenants' own principals.

What it makes, once, in ``<home>/secure`` (mode 0700; keys and passwords 0600):

- ``ca.crt``/``ca.key``: a local CA; ``broker.pem``: the brokers' key and certificate (for
  127.0.0.1 and localhost, serverAuth and clientAuth) in the PEM form Kafka reads;
- ``users.toml``: the SCRAM users and their random passwords. ``suanli-broker`` is the brokers'
  own principal between themselves; ``suanli`` is the control plane's (workers, API, CLI,
  Connect, the registry); both are super users. Each tenant added with :func:`add_tenant` gets
  its own user, which may only write its own raw topics.

Listeners: clients reach the brokers only over ``SASL_SSL``; the controllers listen on
``SSL`` with client certificates required (SCRAM cannot authenticate to a KRaft controller,
and a controller reachable in plaintext would let anyone in as a super user). A plaintext
client gets no further than the TLS handshake on either port.

SCRAM users exist from the first start: storage is formatted with them (``--add-scram``,
KIP-900), so brokers can authenticate to each other before any admin request is possible.
Tenants are added later through the Admin API (``kafka.admin.ConfigCommand`` and Kafka's
``AclCommand``), with the control plane's credentials in a 0600 client config file.
"""
from __future__ import annotations

import os
import re
import secrets
import subprocess
import tomllib
from pathlib import Path
from typing import Callable

from suanli.deploy.pki import ensure_ca, ensure_leaf
from suanli.errors import ConfigError, StackError
from suanli.streams.kafka_security import jaas

BROKER_USER = "suanli-broker"
PLANE_USER = "suanli"
BROKER_DN = f"CN={BROKER_USER}"
TENANT_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")


def secure_dir(home: Path) -> Path:
    return home / "secure"


def _users_file(home: Path) -> Path:
    return secure_dir(home) / "users.toml"


def stored_users(home: Path) -> dict[str, str]:
    """Every SCRAM user of the secure embedded stack in ``home``, with its password."""
    path = _users_file(home)
    if not path.exists():
        return {}
    return dict(tomllib.loads(path.read_text()).get("users", {}))


def _write_users(home: Path, users: dict[str, str]) -> None:
    path = _users_file(home)
    tmp = path.with_suffix(".tmp")
    tmp.touch(mode=0o600)
    tmp.write_text("# SCRAM users of the secure embedded stack (suanli stack up --secure). Keep private.\n[users]\n"
                   + "".join(f'"{name}" = "{password}"\n' for name, password in sorted(users.items())))
    tmp.chmod(0o600)
    tmp.rename(path)


def stored_password(home: Path, user: str) -> str:
    """``user``'s password on the secure embedded stack; ConfigError when there is none."""
    password = stored_users(home).get(user)
    if password is None:
        raise ConfigError(f"no SCRAM user {user!r} in {_users_file(home)}: run `suanli stack up --secure`"
                          + ("" if user in (PLANE_USER, BROKER_USER) else f" and `suanli tenant add {user}`"))
    return password


def ensure_material(home: Path, log: Callable[[str], None] = print) -> Path:
    """The CA, the brokers' PEM key store and the two built-in users, made if absent.
    Returns the directory."""
    directory = secure_dir(home)
    fresh = not directory.exists()
    directory.mkdir(parents=True, exist_ok=True)
    directory.chmod(0o700)
    ca = ensure_ca(directory, "suanli-kafka-ca")
    cert, key = ensure_leaf(directory, "broker", BROKER_USER, ca, usages="serverAuth,clientAuth")
    store = directory / "broker.pem"
    if not store.exists():
        tmp = directory / "broker.pem.tmp"
        tmp.touch(mode=0o600)
        tmp.write_text(key.read_text() + cert.read_text())
        tmp.rename(store)
    users = stored_users(home)
    missing = [u for u in (BROKER_USER, PLANE_USER) if u not in users]
    if missing:
        users.update({u: secrets.token_urlsafe(24) for u in missing})
        _write_users(home, users)
    if fresh:
        log(f"secure: made a CA, the brokers' certificate and SCRAM users in {directory}")
    return directory


def scram_format_args(home: Path) -> list[str]:
    """``kafka-storage format`` arguments that create every stored SCRAM user (KIP-900)."""
    args: list[str] = []
    for user, password in sorted(stored_users(home).items()):
        args += ["--add-scram", f"SCRAM-SHA-512=[name={user},password={password}]"]
    return args


def broker_properties(home: Path, port: int, controller_port: int) -> str:
    """The listener, TLS, SASL and authorizer lines of a secure broker (the rest of its
    configuration is the plaintext one's)."""
    directory = secure_dir(home)
    return f"""\
listeners=SASL_SSL://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}
advertised.listeners=SASL_SSL://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}
controller.listener.names=CONTROLLER
inter.broker.listener.name=SASL_SSL
listener.security.protocol.map=CONTROLLER:SSL,SASL_SSL:SASL_SSL
sasl.enabled.mechanisms=SCRAM-SHA-512
sasl.mechanism.inter.broker.protocol=SCRAM-SHA-512
listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config={jaas(BROKER_USER, stored_password(home, BROKER_USER))}
ssl.keystore.type=PEM
ssl.keystore.location={directory / 'broker.pem'}
ssl.truststore.type=PEM
ssl.truststore.location={directory / 'ca.crt'}
listener.name.controller.ssl.client.auth=required
authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer
allow.everyone.if.no.acl.found=false
super.users=User:{BROKER_DN};User:{BROKER_USER};User:{PLANE_USER}
"""


def admin_config_file(home: Path) -> Path:
    """A 0600 Java client config with the control plane's credentials (for Kafka's admin tools)."""
    from suanli.streams.kafka_security import KafkaSecurity
    security = KafkaSecurity(username=PLANE_USER, password=stored_password(home, PLANE_USER),
                             ca=secure_dir(home) / "ca.crt")
    path = secure_dir(home) / "admin.properties"
    tmp = path.with_suffix(".tmp")
    tmp.touch(mode=0o600)
    tmp.write_text("".join(f"{k}={v}\n" for k, v in security.java().items()))
    tmp.rename(path)
    return path


def _admin_tool(classpath: str, main: str, args: list[str], what: str) -> None:
    result = subprocess.run(["java", "-Xmx256m", "-cp", classpath, main, *args], capture_output=True, text=True,
                            timeout=120, env={**os.environ, "KAFKA_LOG4J_OPTS": ""})
    if result.returncode != 0:
        raise StackError(f"{what} failed (exit {result.returncode}): {(result.stdout + result.stderr)[-1500:]}")


def tenant_raw_topic(namespace: str, tenant: str) -> str:
    """The raw topic only ``tenant``'s principal may write: intake takes the tenant from it."""
    from suanli.streams.topics import TopicNames
    return TopicNames(namespace).tenant_raw(tenant)


def add_tenant(settings, tenant: str, log: Callable[[str], None] = print) -> str:
    """Give ``tenant`` a SCRAM user (a new random password, kept in ``users.toml``, unless it
    has one) and the right to write, and only write, its raw topic of ``settings.namespace``
    (created here). Returns the topic. Needs the secure stack running."""
    from suanli.deploy import kafka_broker
    from suanli.deploy.stack import StackPaths

    if not TENANT_NAME.match(tenant):
        raise ConfigError(f"tenant {tenant!r}: a Kafka principal and topic suffix must match {TENANT_NAME.pattern}")
    if tenant in (PLANE_USER, BROKER_USER):
        raise ConfigError(f"{tenant!r} is a built-in principal, not a tenant")
    home = settings.home
    users = stored_users(home)
    classpath = kafka_broker.classpath_of(StackPaths(home).cache, log)
    config = admin_config_file(home)
    bootstrap = settings.bootstrap_servers
    if tenant not in users:
        users[tenant] = secrets.token_urlsafe(24)
        _write_users(home, users)
    _admin_tool(classpath, "kafka.admin.ConfigCommand",
                ["--bootstrap-server", bootstrap, "--command-config", str(config), "--alter", "--entity-type", "users",
                 "--entity-name", tenant, "--add-config", f"SCRAM-SHA-512=[password={users[tenant]}]"],
                f"SCRAM user for tenant {tenant}")
    topic = tenant_raw_topic(settings.namespace, tenant)
    import asyncio

    from suanli.streams.kafka_io import ensure_topics
    from suanli.streams.topics import TopicSpec
    asyncio.run(ensure_topics(bootstrap, [TopicSpec(topic, settings.partitions)]))
    _admin_tool(classpath, "org.apache.kafka.tools.AclCommand",
                ["--bootstrap-server", bootstrap, "--command-config", str(config), "--add",
                 "--allow-principal", f"User:{tenant}", "--operation", "Write", "--operation", "Describe",
                 "--topic", topic], f"ACL for tenant {tenant} on {topic}")
    log(f"tenant {tenant}: SCRAM user, and Write on {topic} only")
    return topic
