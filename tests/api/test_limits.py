"""The REST API's request limits (api/limits.py): body cap and per-caller rate limit, on the
real app (create_app) with an in-memory read model; the rate limiter's clock is injected."""
from __future__ import annotations

from api_helpers import TOKENS, ListSink, make_service, write_tokens
from fastapi.testclient import TestClient

from suanli.api.auth import TokenStore
from suanli.api.limits import Limits, RateLimiter
from suanli.api.readmodel import ReadModel
from suanli.api.rest import create_app


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _client(tmp_path, limits: Limits, clock: Clock | None = None, raise_server_exceptions: bool = False) -> TestClient:
    tokens = TokenStore.from_file(write_tokens(tmp_path / "t.toml"))
    app = create_app(make_service(ListSink(), ReadModel()), tokens, limits)
    if clock is not None and app.gate.limiter is not None:
        app.gate.limiter.clock = clock
    return TestClient(app, raise_server_exceptions=raise_server_exceptions)


def _auth(tenant: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {TOKENS[tenant]}"}


def test_a_body_over_the_cap_is_a_413_that_names_the_limit_and_never_reaches_the_handler(tmp_path):
    sink_client = _client(tmp_path, Limits(max_body=2048, rate=0))
    r = sink_client.post("/v1/tasks", content=b"x" * 5000, headers={**_auth("alpha"), "content-type": "application/json"})
    assert r.status_code == 413
    assert "5000 bytes is over the limit of 2048 bytes" in r.json()["detail"]
    # a body without a length (chunked) is counted as it arrives
    r = sink_client.post("/v1/tasks", content=iter([b"{" * 1000] * 5), headers={**_auth("alpha"),
                                                                              "content-type": "application/json"})
    assert r.status_code == 413 and "over the limit of 2048 bytes" in r.json()["detail"]
    # under the cap the request goes through to validation as before
    r = sink_client.post("/v1/tasks", json={"resources": {"cpu": "lots"}}, headers=_auth("alpha"))
    assert r.status_code == 422


def test_refusals_are_answered_before_the_app_and_counted_under_the_limits_route(tmp_path):
    # an exception escaping the app would be raised here: a chunked body over the cap must end
    # with the 413 alone, not with a second answer from FastAPI's error handler
    client = _client(tmp_path, Limits(max_body=2048, rate=10, burst=2), raise_server_exceptions=True)
    r = client.post("/v1/tasks", content=iter([b"{" * 1000] * 5), headers={**_auth("alpha"),
                                                                         "content-type": "application/json"})
    assert r.status_code == 413
    r = client.post("/v1/tasks", content=b"x" * 5000, headers=_auth("alpha"))
    assert r.status_code == 413
    assert client.get("/v1/tasks", headers=_auth("alpha")).status_code == 429   # the bucket of 2 is empty
    metrics = client.get("/metrics").text
    assert 'suanli_api_requests_total{method="POST",route="(limits)",status="413"} 2.0' in metrics
    assert 'suanli_api_requests_total{method="GET",route="(limits)",status="429"} 1.0' in metrics
    assert '/v1/tasks",status="413"' not in metrics          # no inner layer saw them


def test_a_caller_over_its_rate_gets_429_with_retry_after_and_other_tokens_are_not_slowed(tmp_path):
    clock = Clock()
    client = _client(tmp_path, Limits(rate=10, burst=5), clock)
    codes = [client.get("/v1/tasks", headers=_auth("alpha")).status_code for _ in range(7)]
    assert codes == [200] * 5 + [429] * 2
    r = client.get("/v1/tasks", headers=_auth("alpha"))
    assert r.status_code == 429 and r.headers["retry-after"] == "1"
    assert "at most 10 a second (bursts of 5) per tenant" in r.json()["detail"]
    # another tenant's token has a bucket of its own; probes are never limited
    assert client.get("/v1/tasks", headers=_auth("beta")).status_code == 200
    assert all(client.get("/healthz").status_code == 200 for _ in range(20))
    # garbage without a token, or with tokens made up, shares its address's bucket, not the tenants'
    codes = [client.post("/v1/tasks", content=b"\xff").status_code for _ in range(3)]
    codes += [client.post("/v1/tasks", headers={"Authorization": f"Bearer made-up-{i:04d}"}).status_code
              for i in range(3)]
    assert codes == [401] * 5 + [429], codes
    assert client.get("/v1/tasks", headers=_auth("beta")).status_code == 200
    # 0.1 s later one request's worth has come back
    clock.now += 0.1
    assert client.get("/v1/tasks", headers=_auth("alpha")).status_code == 200
    assert client.get("/v1/tasks", headers=_auth("alpha")).status_code == 429


def test_the_rate_limiter_forgets_full_buckets_and_keeps_at_most_max_callers():
    clock = Clock()
    limiter = RateLimiter(rate=100, burst=10, max_callers=50, clock=clock)
    for i in range(200):
        assert limiter.take(f"k{i}".encode()) == 0.0
    assert len(limiter) == 50                       # the oldest went first
    clock.now += 0.1                                # 10 / 100 s: every bucket is full again
    limiter.take(b"new")
    assert len(limiter) == 1
    waits = [limiter.take(b"new") for _ in range(10)]
    assert waits[:9] == [0.0] * 9 and abs(waits[9] - 0.01) < 1e-9   # one request comes back every 10 ms


def test_the_dashboards_cookie_counts_for_its_tenant_not_for_the_address(tmp_path):
    from suanli.api.ui.routes import COOKIE

    clock = Clock()
    client = _client(tmp_path, Limits(rate=10, burst=3), clock)
    assert [client.get("/v1/tasks").status_code for _ in range(4)] == [401, 401, 401, 429]   # the address's bucket
    signed_in = {"Cookie": f"{COOKIE}={TOKENS['alpha']}"}
    assert client.get("/ui", headers=signed_in).status_code != 429                         # alpha's bucket
    unknown = {"Cookie": f"{COOKIE}=not-a-token-at-all"}
    assert client.get("/ui", headers=unknown).status_code == 429                            # back to the address
