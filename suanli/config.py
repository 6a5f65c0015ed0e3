"""Settings: where Kafka and the registry are, and where local state lives.

Sources, highest priority first: environment variables (``SUANLI_KAFKA``,
``SUANLI_REGISTRY``, ``SUANLI_HOME``, ``SUANLI_KAFKA_PORT`` ...), then a TOML config file
named by ``SUANLI_CONFIG`` (keys as the field names below), then the defaults.

With neither ``kafka`` nor ``registry`` set, Suanli uses the *embedded* stack that
``suanli stack up`` starts on loopback. Set both to use an external Kafka cluster and any
Confluent-compatible registry; nothing else changes.
"""
from __future__ import annotations

import os
import tomllib
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from pydantic import Field, SecretStr, ValidationError, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from suanli.errors import ConfigError

if TYPE_CHECKING:
    from suanli.streams.kafka_security import KafkaSecurity

REPO_ROOT = Path(__file__).resolve().parent.parent


class Settings(BaseSettings):
    """Typed configuration. ``kafka``/``registry`` of None mean "the embedded stack"."""

    model_config = SettingsConfigDict(env_prefix="SUANLI_", extra="forbid")

    kafka: str | None = Field(None, description="External Kafka bootstrap servers, e.g. 'broker1:9092,broker2:9092'.")
    registry: str | None = Field(None, description="External Confluent-compatible registry URL.")
    home: Path = Field(REPO_ROOT / ".suanli", description="Directory for local state: broker data, logs, pids, caches.")
    openb_dir: Path = Field(REPO_ROOT.parent / "shared" / "data" / "openb",
                            description="The Alibaba openb trace (node and pod lists) used by `suanli up` and tests.")
    kafka_port: int = Field(19092, ge=1, le=65535, description="Embedded broker client port (loopback).")
    controller_port: int = Field(19093, ge=1, le=65535, description="Embedded KRaft controller port (loopback).")
    registry_port: int = Field(18081, ge=1, le=65535, description="Embedded schema registry port (loopback).")
    brokers: int = Field(1, description="Embedded Kafka brokers: 1 (the default) or 3 (a KRaft quorum of three "
                                        "on loopback; topics replicated 3 times, min.insync.replicas 2). Broker "
                                        "N listens on kafka_port + 2(N-1), its controller on controller_port + 2(N-1).")
    kafka_heap: str = Field("512m", description="Max heap of the embedded broker JVM.")
    kafka_gc: Literal["zgc", "g1"] = Field(
        "zgc", description="Garbage collector of the embedded broker JVM: zgc (stops the broker for well under a "
                           "millisecond a cycle) or g1 (Kafka's own default: 10-25 ms pauses every few seconds "
                           "under load, which every record passing through the broker meanwhile waits out).")
    registry_heap: str = Field("384m", description="Max heap of the embedded registry JVM.")
    namespace: str = Field("suanli", pattern=r"^[A-Za-z0-9][A-Za-z0-9_-]*$",
                           description="Prefix of every topic and worker group: one control plane per namespace.")
    api_finished_tasks: int = Field(100_000, ge=0, description="Finished tasks the API's read model keeps whole; the "
                                    "oldest finished beyond them are forgotten (their decisions stay in the log "
                                    "and the audit index). Each costs about 3.4 KB (bench/read_model_memory.py).")
    api_forgotten_ids: int = Field(200_000, ge=0, description="Ids of tasks the API's read model forgot, kept so that "
                                   "a duplicate or a stale report of one is ignored and a lookup says it was "
                                   "forgotten.")
    partitions: int = Field(4, ge=1, description="Partitions of the cell log and raw topics when Suanli creates them.")
    tick_ms: int = Field(1000, ge=10, description="Period of the CellTick the intake worker writes into each cell log "
                                                  "it has seen: the scheduler's clock advances at least this often while intake "
                                                  "keeps up; behind on a raw partition, a tick claims no later a time than "
                                                  "the newest record intake has read from it.")
    fetch_max_wait_ms: int = Field(20, ge=1, le=10_000,
                                   description="How long a worker's fetch may wait at the broker for new records, ms "
                                               "(Faust's own fixed value is 1500). Records of a busy partition can "
                                               "wait this long behind a fetch for idle ones (streams/fetch_wait.py); "
                                               "an idle worker asks the broker once per this.")
    fetch_busy_min_bytes: int = Field(16_384, ge=1, le=1_048_576,
                                      description="While a busy consumer (intake, after a micro-batch of at least 8 "
                                                  "records; the API's read model and a plane driver's fold, after a "
                                                  "fetch of as many) fetches, how many bytes it asks the broker to hold "
                                                  "each fetch for (or until the fetch wait): fewer, fuller fetches "
                                                  "(streams/busy_fetch.py). 1 turns it off: every fetch returns at its "
                                                  "first record.")
    batch_gap_ms: float = Field(2.0, ge=0, le=20,
                                description="While the scheduler's input is busy (its last micro-batch had at least 8 "
                                            "records), its next batch starts once no record has come for this many ms, "
                                            "at most 20 ms after the batch's first record (streams/batch_wait.py). 0 "
                                            "turns it off: a busy batch waits the whole 20 ms.")
    scheduler_loop: Literal["plain", "faust"] = Field(
        "plain", description="What runs the scheduler worker: `plain`, an aiokafka loop "
                             "(streams/scheduler_worker.py), or `faust`, the Faust agent it replaced "
                             "(streams/app.py build_scheduler), kept for one release as a fallback. Both "
                             "keep their snapshots in the same topic; stop one kind of worker before "
                             "starting the other.")
    prometheus_port: int = Field(19090, ge=1, le=65535,
                                 description="Port of the Prometheus that `suanli prometheus up` runs (loopback).")
    node_exporter_port: int = Field(19100, ge=1, le=65535,
                                    description="Port of the node_exporter that `suanli prometheus up` runs (loopback).")
    prometheus_scrape_s: int = Field(5, ge=1, le=60, description="Scrape interval of that Prometheus, seconds.")
    secure: bool = Field(False, description="The embedded brokers take only SASL_SSL: SCRAM-SHA-512 over TLS, "
                                            "with the StandardAuthorizer's ACLs. `suanli stack up --secure` makes the "
                                            "CA, the broker's certificate and the credentials in <home>/secure.")
    kafka_security_protocol: Literal["PLAINTEXT", "SASL_SSL"] | None = Field(
        None, description="How clients reach Kafka; unset: SASL_SSL when `secure`, else PLAINTEXT.")
    kafka_sasl_mechanism: Literal["SCRAM-SHA-512", "SCRAM-SHA-256"] = Field("SCRAM-SHA-512",
                                                                            description="SASL mechanism of SASL_SSL.")
    kafka_username: str | None = Field(None, description="SCRAM user of this process; unset on the secure embedded "
                                                         "stack: the control plane's own principal, 'suanli'.")
    kafka_password: SecretStr | None = Field(None, description="Its password; unset on the secure embedded stack: "
                                                               "read from <home>/secure/users.toml.")
    kafka_ca: Path | None = Field(None, description="PEM file of the CA that signed the brokers' certificates; unset "
                                                    "on the secure embedded stack: <home>/secure/ca.crt.")
    local_prometheus: str | None = Field(None, description="Prometheus URL the local-process connector reads its node's "
                                                           "NodeMetrics from (node_exporter/DCGM series of 127.0.0.1); "
                                                           "unset: /proc.")

    @field_validator("kafka", "registry")
    @classmethod
    def _blank_is_none(cls, value: str | None) -> str | None:
        return value or None

    @field_validator("brokers")
    @classmethod
    def _one_or_three(cls, value: int) -> int:
        if value not in (1, 3):
            raise ValueError("the embedded stack runs 1 broker or 3 (a quorum of three), not " + str(value))
        return value

    @property
    def broker_ports(self) -> list[tuple[int, int]]:
        """``(client port, controller port)`` of each embedded broker, node 1 first."""
        return [(self.kafka_port + 2 * i, self.controller_port + 2 * i) for i in range(self.brokers)]

    @property
    def replication(self) -> int:
        """Replicas of every topic Suanli creates: 3 on the three-broker stack, else 1."""
        return 3 if self.brokers == 3 and self.embedded_kafka else 1

    @property
    def embedded_kafka(self) -> bool:
        return self.kafka is None

    @property
    def embedded_registry(self) -> bool:
        return self.registry is None

    @property
    def bootstrap_servers(self) -> str:
        return self.kafka or ",".join(f"127.0.0.1:{port}" for port, _ in self.broker_ports)

    @property
    def kafka_security(self) -> "KafkaSecurity | None":
        """How this process's Kafka clients authenticate: None for PLAINTEXT. On the secure
        embedded stack the user defaults to the control plane's principal and its password and
        CA come from ``<home>/secure`` (ConfigError if ``suanli stack up --secure`` never made them)."""
        from suanli.streams.kafka_security import KafkaSecurity
        protocol = self.kafka_security_protocol or ("SASL_SSL" if self.secure else "PLAINTEXT")
        if protocol == "PLAINTEXT":
            return None
        embedded = self.secure and self.embedded_kafka
        username = self.kafka_username or ("suanli" if embedded else None)
        password = self.kafka_password.get_secret_value() if self.kafka_password else None
        if password is None and embedded and username:
            from suanli.deploy.kafka_secure import stored_password
            password = stored_password(self.home, username)
        ca = self.kafka_ca or (self.home / "secure" / "ca.crt" if embedded else None)
        missing = [name for name, value in (("kafka_username", username), ("kafka_password", password),
                                            ("kafka_ca", ca)) if not value]
        if missing:
            raise ConfigError(f"SASL_SSL needs {', '.join(f'SUANLI_{m.upper()}' for m in missing)}; on the embedded "
                              f"stack, `suanli stack up --secure` makes the credentials")
        return KafkaSecurity(username=username, password=password, ca=Path(ca), mechanism=self.kafka_sasl_mechanism)

    @property
    def registry_url(self) -> str:
        if self.registry:
            return self.registry.rstrip("/")
        from suanli.deploy.registry import ccompat_url
        return ccompat_url(self.registry_port)


def load_settings(**overrides: object) -> Settings:
    """Build :class:`Settings` from the environment and the optional config file.

    Raises :class:`ConfigError` with every invalid key named.
    """
    file_values: dict[str, object] = {}
    config_path = os.environ.get("SUANLI_CONFIG")
    if config_path:
        try:
            file_values = tomllib.loads(Path(config_path).read_text())
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise ConfigError(f"cannot read config file {config_path}: {exc}") from exc
    env_names = {name for name in Settings.model_fields if f"SUANLI_{name.upper()}" in os.environ}
    values = {k: v for k, v in file_values.items() if k not in env_names}
    values.update(overrides)
    try:
        loaded = Settings(**values)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        raise ConfigError(f"invalid configuration: {problems}") from exc
    # Every Kafka client of this process finds its credentials by the cluster's address; the
    # settings loaded last for a cluster win. Credentials that `stack up --secure` has not made
    # yet leave the cluster PLAINTEXT here: clients then fail to authenticate, and say so.
    from suanli.streams.kafka_security import register
    try:
        register(loaded.bootstrap_servers, loaded.kafka_security)
    except ConfigError:
        register(loaded.bootstrap_servers, None)
    return loaded


@cache
def settings() -> Settings:
    """Process-wide settings (read once)."""
    return load_settings()


def to_env(s: Settings) -> dict[str, str]:
    """``SUANLI_*`` variables that reproduce ``s`` in a child process."""
    env: dict[str, str] = {}
    for name, value in s.model_dump().items():
        if isinstance(value, SecretStr):
            value = value.get_secret_value()
        if value is not None:
            env[f"SUANLI_{name.upper()}"] = str(value)
    return env
