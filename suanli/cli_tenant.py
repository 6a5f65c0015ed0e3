"""``suanli tenant add NAME``: a tenant's own principal on the secure stack (see
:mod:`suanli.deploy.kafka_secure`): a SCRAM user, and the right to write its raw topic only."""
from __future__ import annotations

import argparse
import shlex

from suanli.config import settings
from suanli.errors import ConfigError


def _tenant_add(args: argparse.Namespace) -> int:
    from suanli.deploy import kafka_secure
    from suanli.streams.kafka_security import KafkaSecurity

    current = settings()
    if not (current.secure and current.embedded_kafka):
        raise ConfigError("tenants have principals of their own on the secure embedded stack only: "
                          "`suanli stack up --secure`, and SUANLI_SECURE=1 for every command")
    topic = kafka_secure.add_tenant(current, args.name)
    if args.env:
        security = KafkaSecurity(username=args.name, password=kafka_secure.stored_password(current.home, args.name),
                                 ca=current.home / "secure" / "ca.crt")
        for name, value in security.env().items():
            print(f"export {name}={shlex.quote(value)}")
        print(f"# then produce to {topic}")
    else:
        print(f"tenant {args.name}: writes {topic} only (credentials in {current.home / 'secure' / 'users.toml'}; "
              f"`suanli tenant add {args.name} --env` prints a producer's environment). Restart intake (or the "
              f"plane) if it runs, so that it reads the new topic.")
    return 0


def add_commands(sub: argparse._SubParsersAction) -> None:
    """Register ``tenant add``."""
    from suanli.cli_services import KAFKA

    tenant = sub.add_parser("tenant", help="tenants' own Kafka principals on the secure stack")
    tenant_sub = tenant.add_subparsers(dest="tenant_command", required=True, metavar="ACTION")
    p = tenant_sub.add_parser("add", help="a SCRAM user for a tenant, allowed to write only its own raw topic of "
                                          "this namespace (made here); idempotent")
    p.add_argument("name", help="the tenant: letters, digits, '_' and '-'")
    p.add_argument("--env", action="store_true",
                   help="print the SUANLI_KAFKA_* variables (password included) its producers need, as shell exports")
    p.set_defaults(func=_tenant_add, needs=(KAFKA,))
