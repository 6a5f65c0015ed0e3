"""The one exception hierarchy of Suanli.

Every error that Suanli raises on purpose derives from :class:`SuanliError`, so callers
(the CLI, the API, the stream agents) can tell "we refused this, with a reason" from a bug.
"""
from __future__ import annotations


class SuanliError(Exception):
    """Base class of every deliberate Suanli error. ``str(err)`` is meant for people."""


class ConfigError(SuanliError):
    """The configuration (environment, config file, command line) is invalid."""


class StackError(SuanliError):
    """A local service (broker, registry, Connect, database) failed to prepare, start or stop."""


class RegistryError(SuanliError):
    """The schema registry refused a request or could not be reached."""

    def __init__(self, message: str, *, status: int | None = None, error_code: int | None = None):
        super().__init__(message)
        self.status = status
        self.error_code = error_code


class IncompatibleSchemaError(RegistryError):
    """The registry (or the local checker) found a schema change that breaks compatibility."""


class SchemaError(SuanliError):
    """A schema file in ``schemas/`` is invalid or missing."""


class DecodeError(SuanliError):
    """A record could not be decoded from the Confluent wire format.

    Carries the record's coordinates so a dead letter (or a person) can find it again.
    """

    def __init__(self, reason: str, *, topic: str | None = None, partition: int | None = None,
                 offset: int | None = None, schema_id: int | None = None):
        where = ""
        if topic is not None:
            where = f" at {topic}[{partition}]@{offset}"
        super().__init__(f"cannot decode record{where}: {reason}")
        self.reason = reason
        self.topic = topic
        self.partition = partition
        self.offset = offset
        self.schema_id = schema_id


class EncodeError(SuanliError):
    """A value does not fit its Avro schema."""


class ValidationError(SuanliError):
    """An event or request is well-formed on the wire but its values are invalid."""


class ConnectorError(SuanliError):
    """A hardware connector cannot start or run: bad node list, bad options, its log unreadable."""


class ReplayError(SuanliError):
    """A log directory, trace or replay/what-if request is unusable (missing, malformed, refused)."""


class AuthError(SuanliError):
    """A request carried no API token, or one no tenant owns (HTTP 401, gRPC UNAUTHENTICATED)."""


class ForbiddenError(SuanliError):
    """The caller is known but may not do this, e.g. a tenant that is not an operator
    draining a node (HTTP 403, gRPC PERMISSION_DENIED)."""


class NotFoundError(SuanliError):
    """The thing asked for does not exist *for this caller* (HTTP 404, gRPC NOT_FOUND).

    Another tenant's task, bid or audit is reported exactly like a missing one, so a caller
    learns nothing about other tenants' ids.
    """


class ConflictError(SuanliError):
    """The request is valid but the current state refuses it, e.g. cancelling a finished
    task (HTTP 409, gRPC FAILED_PRECONDITION)."""


class UnavailableError(SuanliError):
    """A dependency (Kafka, the read model) is not ready; retry later (HTTP 503, gRPC UNAVAILABLE)."""


class AuditError(SuanliError):
    """An audit query cannot be answered: no such task (for that tenant), a bad filter, or an
    audit index that cannot be opened."""


class StrategyError(SuanliError):
    """A scheduling strategy or plugin is misconfigured, unknown or failed (processors/)."""


class ModelError(ValidationError):
    """A value does not fit the cell's typed vocabulary (``processors/model.py``): a required
    field is missing or has the wrong shape."""


class RejectedInput(ValidationError):
    """The scheduler refused a cell input that decoded fine, e.g. a PolicyChanged whose
    strategy or arguments are unknown or out of range. The scheduler dead-letters it with
    ``str(err)`` as the reason; nothing about the cell changes."""


class StrategyConfigError(StrategyError):
    """A strategy's or plugin's configuration has an unknown key or a bad value
    (``processors/args.py``). ``str(err)`` names the strategy or plugin, the key, the value
    and what is allowed."""


class StackNotRunningError(UnavailableError):
    """Kafka or the schema registry a command needs does not answer: the embedded stack is
    not running (or the external services named by ``SUANLI_KAFKA``/``SUANLI_REGISTRY`` are
    down). ``str(err)`` says which service and how to start it; the CLI exits 2 with it."""


class JobError(SuanliError):
    """A client-side job (``suanli/jobs.py``) cannot go on: a step failed, timed out or cannot
    be submitted; ``str(err)`` says which step and why."""
