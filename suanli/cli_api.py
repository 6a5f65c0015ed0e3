"""``suanli api serve``: the public API, REST and gRPC (see ``api/server.py``)."""
from __future__ import annotations

import argparse

from suanli.config import settings


def _serve(args: argparse.Namespace) -> int:
    from suanli.api.auth import TokenStore
    from suanli.api.server import ServeOptions, run

    tokens = TokenStore.from_env(args.tokens)
    return run(settings(), tokens, ServeOptions(host=args.host, port=args.port, grpc_port=args.grpc_port,
                                                log_level=args.log_level))


def add_commands(sub: argparse._SubParsersAction) -> None:
    """Register ``api serve``."""
    from suanli.cli_services import STACK

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
    p.set_defaults(func=_serve, needs=STACK)
