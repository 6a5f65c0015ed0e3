"""Request limits for the REST API: a cap on body size and a rate limit per caller.

Both act in a plain ASGI middleware, before routing, parsing or authentication, so that a
flood of garbage costs the server as little as possible and never reaches a handler:

- **Body size.** A request whose ``Content-Length`` is over ``max_body`` bytes is answered
  413 at once; a body sent without a length (chunked) is counted as it arrives and answered
  413 as soon as it passes the cap. The handler never sees it.
- **Rate.** Each caller has a token bucket of ``burst`` requests refilled at ``rate`` per
  second; a request that finds it empty is answered 429 with ``Retry-After`` (whole
  seconds). The caller is the tenant of a known token, from the ``Authorization`` header
  or the dashboard's cookie (so one tenant's flood does not throttle another), else the
  client address: requests without a token or with an unknown
  one share their address's bucket, so inventing tokens buys no extra rate. Buckets idle
  long enough to be full again are dropped, so memory is bounded by the callers of the
  last ``burst / rate`` seconds, and at most ``max_callers`` of them (the oldest go first).

Answers are the API's JSON error bodies (``{"detail": ...}``). ``/healthz`` and
``/metrics`` are not rate limited (probes and scrapes must always get through).

The middleware belongs outside everything else of the app (:class:`suanli.api.rest.LimitedApp`
puts it there): a request it refuses then costs the HTTP parse and this check, and nothing
of the framework's own middleware stack. Refusals are reported to ``on_reject`` (the API's
request metrics count them), since no inner layer sees them.
"""
from __future__ import annotations

import json
import math
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Awaitable, Callable

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

UNLIMITED_PATHS = ("/healthz", "/metrics")


@dataclass(frozen=True)
class Limits:
    """``max_body``: bytes (0: no cap). ``rate``: requests per second per caller (0: no rate
    limit); ``burst``: the bucket's size. ``max_callers``: buckets kept at most."""

    max_body: int = 1 << 20
    rate: float = 200.0
    burst: int = 400
    max_callers: int = 100_000


class RateLimiter:
    """Token buckets by caller key. ``clock`` is injectable for tests (seconds, monotonic)."""

    def __init__(self, rate: float, burst: int, max_callers: int = 100_000,
                 clock: Callable[[], float] = time.monotonic):
        if rate <= 0 or burst < 1:
            raise ValueError("a rate limit needs rate > 0 and burst >= 1")
        self.rate, self.burst, self.max_callers, self.clock = rate, float(burst), max_callers, clock
        self._buckets: OrderedDict[bytes, tuple[float, float]] = OrderedDict()   # key -> (tokens, at)

    def __len__(self) -> int:
        return len(self._buckets)

    def take(self, key: bytes) -> float:
        """Take one request from ``key``'s bucket: 0.0 if allowed, else the seconds until it
        would be."""
        now = self.clock()
        tokens, at = self._buckets.pop(key, (self.burst, now))
        tokens = min(self.burst, tokens + (now - at) * self.rate)
        wait = 0.0
        if tokens >= 1.0:
            tokens -= 1.0
        else:
            wait = (1.0 - tokens) / self.rate
        self._buckets[key] = (tokens, now)            # most recent last
        self._forget(now)
        return wait

    def _forget(self, now: float) -> None:
        full_after = self.burst / self.rate
        while self._buckets:
            key, (tokens, at) = next(iter(self._buckets.items()))
            if len(self._buckets) > self.max_callers or now - at >= full_after:
                del self._buckets[key]
            else:
                break


def caller_key(scope: Scope, tenant_of: Callable[[Scope], str | None] | None = None) -> bytes:
    """The rate limit's key of a request: the tenant ``tenant_of`` finds for it (a known
    token), else the client address."""
    tenant = tenant_of(scope) if tenant_of is not None else None
    if tenant is not None:
        return b"t:" + tenant.encode()
    client = scope.get("client") or ("?", 0)
    return b"c:" + str(client[0]).encode()


def header(scope: Scope, name: bytes) -> str | None:
    """A request header's value (the first of that name), or None."""
    for key, value in scope.get("headers") or ():
        if key == name:
            return value.decode("latin-1")
    return None


class LimitsMiddleware:
    """The ASGI middleware (see the module docstring)."""

    def __init__(self, app: ASGIApp, limits: Limits, tenant_of: Callable[[Scope], str | None] | None = None,
                 clock: Callable[[], float] = time.monotonic,
                 on_reject: Callable[[Scope, int], None] | None = None):
        """``tenant_of``: the tenant a request's token (header or cookie) belongs to, or None
        when it has none or an unknown one (the rate limit's key; see :func:`caller_key`).
        ``on_reject(scope, status)``: called for each request answered here (429 or 413)."""
        self.app, self.limits, self.tenant_of, self.on_reject = app, limits, tenant_of, on_reject
        self.limiter = (RateLimiter(limits.rate, limits.burst, limits.max_callers, clock)
                        if limits.rate > 0 else None)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if self.limiter is not None and not scope.get("path", "").startswith(UNLIMITED_PATHS):
            wait = self.limiter.take(caller_key(scope, self.tenant_of))
            if wait > 0:
                self._rejected(scope, 429)
                await _answer(send, 429, f"too many requests: at most {self.limits.rate:g} a second "
                                         f"(bursts of {self.limits.burst}) per tenant; retry in {wait:.2f} s",
                              [(b"retry-after", str(max(1, math.ceil(wait))).encode())])
                return
        cap = self.limits.max_body
        if cap:
            length = _content_length(scope)
            if length is not None and length > cap:
                self._rejected(scope, 413)
                await _answer(send, 413, f"request body of {length} bytes is over the limit of {cap} bytes")
                return
            receive, send = _capped(receive, send, cap, lambda: self._rejected(scope, 413))
        try:
            await self.app(scope, receive, send)
        except BodyTooLarge:
            pass                                   # answered 413 already

    def _rejected(self, scope: Scope, status: int) -> None:
        if self.on_reject is not None:
            self.on_reject(scope, status)


class BodyTooLarge(Exception):
    """Raised into the app when a body without a length passes the cap (after the 413 went out)."""


def _capped(receive: Receive, send: Send, cap: int, rejected: Callable[[], None]) -> tuple[Receive, Send]:
    """``receive`` that answers 413 and raises :class:`BodyTooLarge` once the body passes
    ``cap``, and ``send`` for the app that drops what the app sends after that 413 (an error
    handler on the way out would otherwise try to answer a second time)."""
    seen = 0
    answered = False

    async def capped_receive() -> dict[str, Any]:
        nonlocal seen, answered
        message = await receive()
        if message["type"] == "http.request":
            seen += len(message.get("body", b""))
            if seen > cap and not answered:
                answered = True
                rejected()
                await _answer(send, 413, f"request body is over the limit of {cap} bytes")
                raise BodyTooLarge()
        return message

    async def guarded_send(message: dict[str, Any]) -> None:
        if not answered:
            await send(message)

    return capped_receive, guarded_send


def _content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers") or ():
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


async def _answer(send: Send, status: int, detail: str, headers: list[tuple[bytes, bytes]] | None = None) -> None:
    body = json.dumps({"detail": detail}).encode()
    head = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()), *(headers or [])]
    if status == 413:
        head.append((b"connection", b"close"))     # the rest of the body is not read
    await send({"type": "http.response.start", "status": status, "headers": head})
    await send({"type": "http.response.body", "body": body})
