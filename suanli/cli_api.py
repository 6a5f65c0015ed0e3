"""``suanli api serve``: the public API, REST and gRPC (see ``api/server.py``)."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from suanli.config import settings
from suanli.errors import ConfigError


def _serve(args: argparse.Namespace) -> int:
    from suanli.api.auth import TokenStore
    from suanli.api.server import ServeOptions, run

    from suanli.api.limits import Limits

    if bool(args.tls_cert) != bool(args.tls_key):
        raise ConfigError("--tls-cert and --tls-key go together: give both (PEM files) or neither")
    for path in (args.tls_cert, args.tls_key):
        if path and not Path(path).is_file():
            raise ConfigError(f"TLS file {path} does not exist")
    if args.max_body < 0 or args.rate_limit < 0:
        raise ConfigError("--max-body and --rate-limit must be 0 (off) or more")
    burst = args.burst if args.burst is not None else max(1, int(args.rate_limit * 2))
    tokens = TokenStore.from_env(args.tokens)
    limits = Limits(max_body=args.max_body, rate=args.rate_limit, burst=burst)
    return run(settings(), tokens, ServeOptions(host=args.host, port=args.port, grpc_port=args.grpc_port,
                                                log_level=args.log_level, limits=limits,
                                                tls_cert=Path(args.tls_cert) if args.tls_cert else None,
                                                tls_key=Path(args.tls_key) if args.tls_key else None))


def _hash_token(args: argparse.Namespace) -> int:
    from suanli.api.auth import hash_token

    token = sys.stdin.readline().strip()
    if len(token) < 8:
        raise ConfigError("give the token on standard input (at least 8 characters), e.g. "
                          "`printf %s \"$TOKEN\" | suanli api hash-token --tenant team-a`")
    print(f'"{hash_token(token)}" = "{args.tenant}"' if args.tenant else hash_token(token))
    return 0


def add_commands(sub: argparse._SubParsersAction) -> None:
    """Register ``api serve``."""
    from suanli.cli_services import NOTHING, STACK

    api = sub.add_parser("api", help="the public API (REST with OpenAPI, and gRPC)")
    api_sub = api.add_subparsers(dest="api_command", required=True, metavar="ACTION")
    p = api_sub.add_parser("serve", help="serve REST (/docs, /openapi.json) and gRPC until interrupted",
                           description="Serve the REST and gRPC APIs over the namespace's log. Tokens: a TOML or "
                                       "JSON file mapping token -> tenant, named by --tokens or SUANLI_API_TOKENS.")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=18090, help="REST port (default 18090; 0 = any free port)")
    p.add_argument("--grpc-port", type=int, default=18091, help="gRPC port (default 18091; 0 = any free port)")
    p.add_argument("--tokens", help="API token file (default: $SUANLI_API_TOKENS)")
    p.add_argument("--log-level", default="warning", choices=["debug", "info", "warning", "error"])
    p.add_argument("--tls-cert", metavar="PEM", help="serve REST and gRPC over TLS only, with this certificate chain")
    p.add_argument("--tls-key", metavar="PEM", help="the private key of --tls-cert")
    p.add_argument("--max-body", type=int, default=1 << 20, metavar="BYTES",
                   help="answer 413 to a request body over this size (default 1 MiB; 0 = no cap)")
    p.add_argument("--rate-limit", type=float, default=200.0, metavar="N",
                   help="requests a second per token (per client address without one); over it: 429 with "
                        "Retry-After (default 200; 0 = off; /healthz and /metrics are never limited)")
    p.add_argument("--burst", type=int, metavar="N", help="requests a token may send at once (default 2 x the rate)")
    p.set_defaults(func=_serve, needs=STACK)
    h = api_sub.add_parser("hash-token", help="print the stored form of an API token (read from standard input)",
                           description="Token files may hold a token's SHA-256 digest instead of the token: "
                                       "'\"sha256:<hex>\" = \"tenant\"'. This prints that key for the token given "
                                       "on standard input (so it stays out of the shell's history).")
    h.add_argument("--tenant", help="print the whole TOML line for this tenant")
    h.set_defaults(func=_hash_token, needs=NOTHING)
