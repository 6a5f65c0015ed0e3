"""``suanli api serve``: REST (uvicorn) and gRPC on one asyncio loop, over one read model.

Start-up: create the namespace's topics if missing (idempotent, as ``suanli up`` does),
start the log follower (:mod:`suanli.api.readmodel`), the producer, the gRPC server and
uvicorn (the REST API and the dashboard at ``/ui``, :mod:`suanli.api.ui`). The process
prints one line ``suanli api: REST http://HOST:PORT, gRPC HOST:PORT`` once both ports listen
(``https`` and a trailing ``(TLS)`` when it serves TLS: both ports then speak only TLS);
``/healthz`` (or gRPC ``GetHealth``) says when reads are ready.
SIGINT/SIGTERM stop uvicorn, then gRPC (2 s grace), the producer and the follower.
"""
from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import sys
from dataclasses import dataclass, field
from pathlib import Path

from suanli.api.auth import TokenStore
from suanli.api.limits import Limits
from suanli.config import Settings

log = logging.getLogger(__name__)


@dataclass
class ServeOptions:
    host: str = "127.0.0.1"
    port: int = 18090
    grpc_port: int = 18091
    log_level: str = "warning"
    limits: Limits = field(default_factory=Limits)
    # TLS for REST and gRPC: a PEM certificate chain and its key (both or neither).
    tls_cert: Path | None = None
    tls_key: Path | None = None

    @property
    def scheme(self) -> str:
        return "https" if self.tls_cert else "http"


async def serve(settings: Settings, tokens: TokenStore, options: ServeOptions) -> None:
    """Run until interrupted (see the module docstring)."""
    import uvicorn

    from suanli.api.audit import FollowerAuditSource, IndexedAuditArchive
    from suanli.api.grpc_server import build_server
    from suanli.api.readmodel import LogFollower
    from suanli.api.rest import create_app
    from suanli.api.service import ApiService
    from suanli.api.sink import KafkaSink
    from suanli.api.ui import Dashboard
    from suanli.deploy.prometheus import announce_api
    from suanli.schemas.codec import Codec
    from suanli.schemas.registry import RegistryClient
    from suanli.streams.kafka_io import EventProducer, ensure_topics
    from suanli.streams.topics import core_topics

    await ensure_topics(settings.bootstrap_servers, core_topics(settings.partitions, settings.namespace))
    with RegistryClient(settings.registry_url) as registry:
        codec = Codec(registry)
        codec.schema_id("TaskSubmitted")      # fail fast if the registry is unusable
        follower = LogFollower(settings, codec)
        dashboard = Dashboard(follower.model)     # /ui: listens to the fold from its first record
        await follower.start()
        try:
            async with EventProducer(settings.bootstrap_servers, codec, linger_ms=0,
                                     namespace=settings.namespace) as producer:
                service = ApiService(follower.model, KafkaSink(producer, settings.namespace),
                                     FollowerAuditSource(follower.model), namespace=settings.namespace,
                                     follower=follower, operators=tokens.operators,
                                     archive=IndexedAuditArchive(settings))
                grpc_server, grpc_port = build_server(service, tokens, f"{options.host}:{options.grpc_port}",
                                                      tls=_tls_pair(options))
                await grpc_server.start()
                try:
                    app = create_app(service, tokens, options.limits)
                    dashboard.mount(app)
                    tls = ({"ssl_certfile": str(options.tls_cert), "ssl_keyfile": str(options.tls_key)}
                           if options.tls_cert else {})
                    config = uvicorn.Config(app, host=options.host, port=options.port,
                                            log_level=options.log_level, access_log=False, lifespan="off",
                                            # the rate limit keys unknown callers by their address:
                                            # no header may name another one
                                            proxy_headers=False, **tls)
                    server = _Server(config)
                    loop = asyncio.get_running_loop()

                    def stop() -> None:
                        dashboard.close()             # ends the open event streams, which uvicorn waits for
                        server.request_exit()

                    for sig in (signal.SIGINT, signal.SIGTERM):
                        loop.add_signal_handler(sig, stop)
                    announce = asyncio.create_task(_announce(server, options, grpc_port))
                    # the REST port's /metrics, announced to Prometheus (deploy/prometheus.py) while it serves
                    scrape = asyncio.create_task(announce_api(settings, server, options.host))
                    try:
                        await server.serve()
                    finally:
                        announce.cancel()
                        scrape.cancel()
                finally:
                    await grpc_server.stop(grace=2)
        finally:
            await follower.stop()


class _Server:
    """uvicorn's server without its signal capture: uvicorn re-raises a captured SIGTERM once
    it has stopped, which would kill the process before gRPC and the follower are stopped.
    ``serve`` installs its own handlers instead."""

    def __new__(cls, config):
        import uvicorn

        class Server(uvicorn.Server):
            @contextlib.contextmanager
            def capture_signals(self):
                yield

            def request_exit(self) -> None:
                self.should_exit = True

        return Server(config)


async def _announce(server, options: ServeOptions, grpc_port: int) -> None:
    while not server.started:
        await asyncio.sleep(0.05)
    port = options.port
    if server.servers and server.servers[0].sockets:
        port = server.servers[0].sockets[0].getsockname()[1]
    tls = " (TLS)" if options.tls_cert else ""
    print(f"suanli api: REST {options.scheme}://{options.host}:{port}, gRPC {options.host}:{grpc_port}{tls}",
          flush=True)


def _tls_pair(options: ServeOptions) -> tuple[bytes, bytes] | None:
    """The PEM key and certificate chain for gRPC, or None without TLS."""
    if not options.tls_cert:
        return None
    return options.tls_key.read_bytes(), options.tls_cert.read_bytes()


def run(settings: Settings, tokens: TokenStore, options: ServeOptions) -> int:
    logging.basicConfig(level=options.log_level.upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if tokens.plaintext_tenants:
        log.warning("the token file holds the tokens of %s in plain text: store their digests instead "
                    "(suanli api hash-token)", ", ".join(tokens.plaintext_tenants))
    asyncio.run(serve(settings, tokens, options))
    return 0
