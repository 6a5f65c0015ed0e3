"""What each CLI command needs running, checked before it runs; "the stack is not running"
instead of a client's traceback.

Every leaf subcommand declares ``needs`` on its parser (``set_defaults(needs=...)``): a tuple
of :data:`KAFKA` and :data:`REGISTRY`, or a function of the parsed arguments returning one
(``topology`` needs nothing with ``--logdir``). ``suanli.cli.main`` calls :func:`require`
before the command; a service that does not answer raises :class:`StackNotRunningError`
naming it and saying how to start it (exit 2). The checks are the stack's own readiness
probes (``deploy.kafka_broker.is_ready``, ``deploy.registry.is_ready``): a refused
connection fails in milliseconds, so no command waits for a client's retries.

:func:`unreachable` is the safety net for a service that stops between the check and the
command: it recognises a refused or failed connection in an exception chain, and
``main`` then prints the same advice.
"""
from __future__ import annotations

import argparse
from typing import Any, Callable, Iterable, Union

from suanli.errors import RegistryError, StackNotRunningError

KAFKA = "kafka"
REGISTRY = "registry"
STACK = (KAFKA, REGISTRY)
NOTHING: tuple[str, ...] = ()

Needs = Union[tuple[str, ...], Callable[[argparse.Namespace], Iterable[str]]]

START_HINT = ("Start it with `./bin/suanli stack up` (Kafka and the schema registry) or `./bin/suanli up` "
              "(the whole control plane); `./bin/suanli stack status` shows what runs.")


def needs_of(args: argparse.Namespace) -> tuple[str, ...]:
    """The services the parsed command declared (none when it declared nothing)."""
    needs = getattr(args, "needs", NOTHING)
    if callable(needs):
        needs = needs(args)
    return tuple(needs or ())


def unless(option: str, needs: tuple[str, ...] = STACK) -> Callable[[argparse.Namespace], tuple[str, ...]]:
    """``needs`` unless the command was given ``option`` (e.g. ``--logdir``: no broker)."""
    def pick(args: argparse.Namespace) -> tuple[str, ...]:
        return NOTHING if getattr(args, option, None) else needs
    pick.__doc__ = f"{', '.join(needs)} unless --{option.replace('_', '-')} is given"
    return pick


PATIENT_PROBE_S = 15.0


def kafka_ready(settings: Any, timeout: float = 3.0) -> bool:
    from suanli.deploy import kafka_broker

    return kafka_broker.is_ready(settings.bootstrap_servers, timeout=timeout)


def registry_ready(settings: Any, timeout: float = 3.0) -> bool:
    if settings.embedded_registry:
        from suanli.deploy import registry

        return registry.is_ready(settings.registry_port, timeout=timeout)
    from suanli.schemas.registry import RegistryClient

    try:
        with RegistryClient(settings.registry_url, timeout=timeout) as client:
            client.subjects()
        return True
    except RegistryError:
        return False


def advice(settings: Any, down: Iterable[str]) -> str:
    """The message for services that do not answer: which, where, and how to start them."""
    down = list(down) or [KAFKA, REGISTRY]
    external = {KAFKA: not settings.embedded_kafka, REGISTRY: not settings.embedded_registry}
    where = {KAFKA: f"Kafka at {settings.bootstrap_servers}",
             REGISTRY: f"the schema registry at {settings.registry_url}"}
    what = " and ".join(where[s] + (f" (SUANLI_{s.upper()})" if external[s] else "") for s in down)
    verb = "are not reachable" if len(down) > 1 else "is not reachable"
    if not any(external[s] for s in down):
        return f"the stack is not running ({what} {verb}).\n{START_HINT}"
    if all(external[s] for s in down):
        them = "those services" if len(down) > 1 else "that service"
        return (f"{what} {verb}.\nCheck {them}, or unset SUANLI_KAFKA and SUANLI_REGISTRY to use the "
                f"embedded stack: {START_HINT}")
    return (f"{what} {verb}.\nCheck the service named by SUANLI_*; the embedded one starts with "
            "`./bin/suanli stack up`.")


def require(settings: Any, needs: Iterable[str]) -> None:
    """Raise :class:`StackNotRunningError` when a service in ``needs`` does not answer."""
    checks = {KAFKA: kafka_ready, REGISTRY: registry_ready}
    # A second, patient probe: a service on a busy machine can take over 3 s to answer (CI saw
    # one such "not running" between two calls that worked), while a refused connection fails
    # again in milliseconds, so a stopped stack is still reported at once.
    down = [s for s in dict.fromkeys(needs)
            if not (checks[s](settings) or checks[s](settings, timeout=PATIENT_PROBE_S))]
    if down:
        raise StackNotRunningError(advice(settings, down))


def unreachable(exc: BaseException) -> bool:
    """True when ``exc`` (or an exception it was raised from) is a failed connection to a
    service: Kafka's bootstrap or connection errors, a refused TCP connection, an HTTP
    client that could not connect."""
    seen: set[int] = set()
    todo: list[BaseException | None] = [exc]
    while todo:
        e = todo.pop()
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        if isinstance(e, (ConnectionRefusedError, ConnectionResetError)):
            return True
        name = type(e).__name__
        module = type(e).__module__ or ""
        if module.startswith("aiokafka") and name in ("KafkaConnectionError", "NodeNotReadyError"):
            return True
        if module.startswith("httpx") and name in ("ConnectError", "ConnectTimeout"):
            return True
        if isinstance(e, OSError) and "Connect call failed" in str(e):
            return True
        todo += [e.__cause__, e.__context__]
    return False
