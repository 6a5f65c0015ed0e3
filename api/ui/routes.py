"""The dashboard's routes under ``/ui`` (left out of the OpenAPI document).

Sign-in: ``POST /ui/login`` with a tenant's API token sets an HttpOnly, SameSite=Strict
cookie (path ``/ui``) holding that token; every later request is checked against the token
store again, exactly like ``Authorization: Bearer`` (which the routes accept too). A page
without a valid token redirects to the sign-in form; the stream and the fragments answer 401.

Live updates: ``GET /ui/events`` is a server-sent event stream. Every ``TICK`` seconds it
sends what changed since its previous message: ``counts`` (the tenant's tasks by status),
``cluster`` (the cell's figures), ``cell`` (the cell a cluster page drawn before any node
registered now shows), ``nodes`` (the changed nodes of the cell shown: allocation
per GPU, health, status, condition) and ``changed`` (the page's part must be read again:
``/ui/...?fragment=1``). The stream ends when the server stops (:meth:`Dashboard.close`).
"""
from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import time
from pathlib import Path
from typing import Any, AsyncIterator
from urllib.parse import parse_qs, quote

from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse, RedirectResponse, Response, StreamingResponse
from fastapi.staticfiles import StaticFiles

from suanli.api.ui import views
from suanli.api.ui import whatif as ui_whatif
from suanli.api.ui.state import DashboardState
from suanli.errors import AuthError, NotFoundError

log = logging.getLogger(__name__)

COOKIE = "suanli_ui_token"
TICK = 0.2                   # seconds between two messages of a stream (when something changed)
KEEPALIVE = 15.0             # a comment line at least this often, so proxies keep the stream open
CSP = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
       "frame-ancestors 'none'; base-uri 'none'; form-action 'self'")
STATIC = Path(__file__).parent / "static"
# Said alike for another tenant's task and a missing one (and without echoing the id).
NO_TASK = "None of your tasks has that id."


class Dashboard:
    """The dashboard of one API process: its state (a listener on the read model) and routes.

    ``Dashboard(model)`` before the model is fed, then :meth:`mount` on the REST app, and
    :meth:`close` when the server stops (it ends the open event streams).
    """

    def __init__(self, model: Any):
        self.state = DashboardState(model)
        self.closing = asyncio.Event()
        self._stats: dict[str, tuple[int, dict[str, Any]]] = {}    # cell -> (node log end, figures)
        self.whatif = ui_whatif.Runner()

    def close(self) -> None:
        self.closing.set()
        self.whatif.close()

    def stats(self, cell: str) -> dict[str, Any]:
        """The cell's figures, computed at most once per change of any node."""
        end = self.state.node_log_end()
        cached = self._stats.get(cell)
        if cached is None or cached[0] != end:
            cached = self._stats[cell] = (end, views.cluster_stats(self.state, cell))
        return cached[1]

    def mount(self, app: FastAPI) -> None:
        app.include_router(_router(self))
        app.mount("/ui/static", StaticFiles(directory=STATIC), name="ui-static")


def _tenant(request: Request) -> str | None:
    """The caller's tenant from the bearer header or the cookie; None without a valid token.
    A malformed or unknown bearer header raises :class:`AuthError` (401 JSON)."""
    tokens = request.app.state.tokens
    header = request.headers.get("authorization")
    if header:
        return tokens.tenant_from_header(header)
    token = request.cookies.get(COOKIE)
    if not token:
        return None
    try:
        return tokens.tenant(token)
    except AuthError:
        return None


def _html(body: str, status: int = 200) -> HTMLResponse:
    return HTMLResponse(body, status_code=status, headers={"Content-Security-Policy": CSP,
                                                           "Cache-Control": "no-store",
                                                           "X-Content-Type-Options": "nosniff",
                                                           "Referrer-Policy": "same-origin"})


def _to_login(request: Request) -> RedirectResponse:
    target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    return RedirectResponse(f"/ui/login?next={quote(target, safe='')}", status_code=303)


def _unauthorized() -> JSONResponse:
    return JSONResponse({"detail": "sign in at /ui/login (or send Authorization: Bearer <token>)"}, status_code=401)


def _safe_next(value: str) -> str:
    return value if value.startswith("/ui/") and not value.startswith("//") and "\\" not in value else "/ui/"


def _router(ui: Dashboard) -> APIRouter:
    router = APIRouter(prefix="/ui", include_in_schema=False)
    state = ui.state

    async def ready(request: Request) -> None:
        service = request.app.state.service
        await service._ready()   # noqa: SLF001 - the same wait every read of the API makes

    # ------------------------------------------------------------------ sign-in
    @router.get("/login")
    async def login_form(next: str = "/ui/") -> HTMLResponse:   # noqa: A002 - the query name
        return _html(views.login(_safe_next(next)))

    @router.post("/login")
    async def login(request: Request) -> Response:
        form = parse_qs((await request.body()).decode("utf-8", "replace"))
        token = (form.get("token") or [""])[0].strip()
        target = _safe_next((form.get("next") or ["/ui/"])[0])
        try:
            request.app.state.tokens.tenant(token)
        except AuthError:
            return _html(views.login(target, "That token is not known here. Check SUANLI_API_TOKENS."), 401)
        response = RedirectResponse(target, status_code=303)
        response.set_cookie(COOKIE, token, httponly=True, samesite="strict", path="/ui")
        return response

    @router.post("/logout")
    async def logout() -> Response:
        response = RedirectResponse("/ui/login", status_code=303)
        response.delete_cookie(COOKIE, path="/ui")
        return response

    # ------------------------------------------------------------------ pages
    @router.get("")
    async def root_redirect() -> Response:
        return RedirectResponse("/ui/", status_code=307)

    @router.get("/")
    async def cluster_page(request: Request, cell: str | None = None) -> Response:
        tenant = _tenant(request)
        if tenant is None:
            return _to_login(request)
        await ready(request)
        body, shown = views.cluster(state, tenant, cell)
        return _html(views.page("Cluster", "cluster", tenant, body,
                                stream=f"/ui/events?page=cluster&cell={quote(shown)}"))

    @router.get("/nodes/{index}")
    async def node_json(request: Request, index: int) -> Response:
        if _tenant(request) is None:
            return _unauthorized()
        key = state.keys[index] if 0 <= index < len(state.keys) else None
        if key in state.model.lifecycle.nodes:
            return JSONResponse(views.node_detail(state, key, state.model.lifecycle.nodes[key]))
        return JSONResponse({"detail": "no such node"}, status_code=404)

    @router.get("/queues")
    async def queues_page(request: Request, fragment: int = 0) -> Response:
        tenant = _tenant(request)
        if tenant is None:
            return _unauthorized() if fragment else _to_login(request)
        await ready(request)
        body = views.queues(state, tenant)
        if fragment:
            return _html(body)
        return _html(views.page("Queues", "queues", tenant, body, stream="/ui/events?page=queues",
                                fragment="/ui/queues?fragment=1"))

    @router.get("/tasks")
    async def tasks_page(request: Request, status: str | None = None, q: str = "", fragment: int = 0,
                         job: str = "") -> Response:
        tenant = _tenant(request)
        if tenant is None:
            return _unauthorized() if fragment else _to_login(request)
        await ready(request)
        status = status.upper() if status else None
        body = views.tasks(state, tenant, status, q[:200], job=job[:204])
        if fragment:
            return _html(body)
        here = f"/ui/tasks?fragment=1&status={quote(status or '')}&q={quote(q[:200])}" + \
            (f"&job={quote(job[:204], safe='')}" if job else "")
        return _html(views.page("Tasks", "tasks", tenant, body, stream="/ui/events?page=tasks", fragment=here))

    @router.get("/reservations")
    async def reservations_page(request: Request, status: str | None = None, fragment: int = 0) -> Response:
        tenant = _tenant(request)
        if tenant is None:
            return _unauthorized() if fragment else _to_login(request)
        await ready(request)
        status = status.upper()[:32] if status else None
        body = views.reservations(state, tenant, status)
        if fragment:
            return _html(body)
        here = f"/ui/reservations?fragment=1&status={quote(status or '')}"
        return _html(views.page("Reservations", "reservations", tenant, body, stream="/ui/events?page=reservations",
                                fragment=here))

    async def _task(request: Request, tenant: str, task_id: str) -> tuple[Any, list[Any]]:
        """The caller's task and its decisions, other tenants' task ids redacted
        (NotFoundError for another tenant's task, as for a missing one)."""
        service = request.app.state.service
        view = await service._find(tenant, task_id)       # noqa: SLF001 - NotFoundError for another tenant's
        records = [r for r in await service.audit.task_decisions(task_id) if r.payload.get("tenant") == tenant]
        hide = views.Redactor(state, tenant)
        records = [dataclasses.replace(r, payload=hide.deep(r.payload)) for r in records]
        return view, records

    @router.get("/tasks/{task_id}")
    async def task_page(request: Request, task_id: str, d: int | None = None, fragment: int = 0) -> Response:
        tenant = _tenant(request)
        if tenant is None:
            return _unauthorized() if fragment else _to_login(request)
        try:
            view, records = await _task(request, tenant, task_id)
        except NotFoundError:
            return _html(views.not_found(tenant, NO_TASK), 404)
        selected = d if d is not None and 0 <= d < len(records) else views.default_decision(records)
        if getattr(view, "status", "") == "PENDING":
            state.model.lifecycle.pending(view.cell)       # its current position
        body = views.task(state, view, records, selected)
        if fragment:
            return _html(body)
        here = f"/ui/tasks/{quote(task_id, safe='')}?fragment=1" + (f"&d={d}" if d is not None else "")
        return _html(views.page(f"Task {task_id}", "task", tenant, body,
                                stream=f"/ui/events?page=task&task={quote(task_id, safe='')}", fragment=here))

    @router.get("/tasks/{task_id}/audit/{n}")
    async def audit_record(request: Request, task_id: str, n: int) -> Response:
        tenant = _tenant(request)
        if tenant is None:
            return _to_login(request)
        try:
            _view, records = await _task(request, tenant, task_id)
        except NotFoundError:
            return _html(views.not_found(tenant, NO_TASK), 404)
        if not 0 <= n < len(records):
            return _html(views.not_found(tenant, "That task has no such decision."), 404)
        return _html(views.page(f"Audit {task_id}", "task", tenant, views.audit_record(task_id, n, records[n]),
                                stream="/ui/events?page=audit"))

    @router.get("/tasks/{task_id}/audit.json")
    async def audit_json(request: Request, task_id: str) -> Response:
        tenant = _tenant(request)
        if tenant is None:
            return _unauthorized()
        try:
            _view, records = await _task(request, tenant, task_id)
        except NotFoundError:
            return JSONResponse({"detail": NO_TASK}, status_code=404)
        return JSONResponse({"task_id": task_id, "tenant": tenant, "decisions": [
            {"kind": r.kind, "position": {"topic": r.topic, "partition": r.partition, "offset": r.offset},
             "payload": r.payload} for r in records]})

    # ------------------------------------------------------------------ what-if
    @router.get("/whatif")
    async def whatif_page(request: Request) -> Response:
        tenant = _tenant(request)
        if tenant is None:
            return _to_login(request)
        base = ui_whatif.root()
        return _html(views.page("What-if", "whatif", tenant,
                                views.whatif_form(ui_whatif.logdirs(base), str(base)), stream="/ui/events?page=none"))

    @router.post("/whatif")
    async def whatif_start(request: Request) -> Response:
        tenant = _tenant(request)
        if tenant is None:
            return _unauthorized()
        form = parse_qs((await request.body()).decode("utf-8", "replace"))
        logdir = (form.get("logdir") or [""])[0]
        policies = (form.get("policies") or [""])[0]
        base = ui_whatif.root()
        try:
            run = ui.whatif.start(base, logdir, policies)
        except ui_whatif.WhatifError as exc:
            body = views.whatif_form(ui_whatif.logdirs(base), str(base), policies[:500], str(exc))
            return _html(views.page("What-if", "whatif", tenant, body, stream="/ui/events?page=none"), 400)
        return RedirectResponse(f"/ui/whatif/runs/{run.id}", status_code=303)

    @router.get("/whatif/runs/{run_id}")
    async def whatif_run_page(request: Request, run_id: str) -> Response:
        tenant = _tenant(request)
        if tenant is None:
            return _to_login(request)
        run = ui.whatif.get(run_id)
        if run is None:
            return _html(views.not_found(tenant, "No such what-if run."), 404)
        return _html(views.page(f"What-if {run_id}", "whatif", tenant, views.whatif_run(run),
                                stream="/ui/events?page=none"))

    @router.get("/whatif/runs/{run_id}/status")
    async def whatif_status(request: Request, run_id: str) -> Response:
        if _tenant(request) is None:
            return _unauthorized()
        run = ui.whatif.get(run_id)
        if run is None:
            return JSONResponse({"detail": "no such what-if run"}, status_code=404)
        return JSONResponse(run.status(), headers={"Cache-Control": "no-store"})

    @router.get("/whatif/runs/{run_id}/files/{name}")
    async def whatif_file(request: Request, run_id: str, name: str) -> Response:
        if _tenant(request) is None:
            return _unauthorized()
        path = ui.whatif.file(run_id, name)
        if path is None:
            return JSONResponse({"detail": "no such file"}, status_code=404)
        return FileResponse(path, media_type="image/png", headers={"X-Content-Type-Options": "nosniff"})

    # ------------------------------------------------------------------ the stream
    @router.get("/events")
    async def events(request: Request, page: str = "cluster", cell: str = "", task: str = "") -> Response:
        tenant = _tenant(request)
        if tenant is None:
            return _unauthorized()
        await ready(request)
        return StreamingResponse(_stream(ui, request, tenant, page, cell, task), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"})

    return router


def _sse(event: str, data: Any) -> str:
    return f"event: {event}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n"


async def _stream(ui: Dashboard, request: Request, tenant: str, page: str, cell: str,
                  task: str) -> AsyncIterator[str]:
    state = ui.state
    nodes = state.model.lifecycle.nodes
    node_pos = state.node_log_end()
    last_counts: dict[str, int] | None = None
    last_stats: dict[str, Any] | None = None
    task_seq = state.task_seq.get(task, 0)
    tenant_seq = state.tenant_seq.get(tenant, 0)
    queue_seq = state.queue_seq
    reservation_seq = state.reservation_seq
    last_sent = time.monotonic()
    yield "retry: 1000\n\n" + _sse("hello", {"page": page, "at": int(time.time() * 1000)})
    while not ui.closing.is_set():
        if await request.is_disconnected():
            return
        out = []
        counts = state.tenant_counts(tenant)
        if counts != last_counts:
            out.append(_sse("counts", counts))
            last_counts = counts
        if page == "cluster" and not cell and state.cells():
            cell = state.cells()[0]          # the page was drawn before any node registered
            out.append(_sse("cell", {"cell": cell}))
            node_pos = -1                    # send every node of it
        if page == "cluster" and cell:
            changed, node_pos = state.changed_nodes(node_pos)
            keys = (k for k in nodes if k[0] == cell) if changed is None else \
                (k for k in changed if k[0] == cell and k in nodes)
            entries = [views.node_entry(state, k, nodes[k]) for k in keys]
            if entries:
                out.append(_sse("nodes", entries))
            stats = ui.stats(cell)
            if stats != last_stats:
                out.append(_sse("cluster", stats))
                last_stats = stats
        elif page == "task":
            seq = state.task_seq.get(task, 0)
            if seq != task_seq:
                task_seq = seq
                out.append(_sse("changed", {"task": task}))
        elif page == "queues":
            if state.queue_seq != queue_seq or state.tenant_seq.get(tenant, 0) != tenant_seq:
                queue_seq, tenant_seq = state.queue_seq, state.tenant_seq.get(tenant, 0)
                out.append(_sse("changed", {"queue": queue_seq}))
        elif page == "reservations":
            if state.reservation_seq != reservation_seq:
                reservation_seq = state.reservation_seq
                out.append(_sse("changed", {"reservations": reservation_seq}))
        elif page == "tasks":
            seq = state.tenant_seq.get(tenant, 0)
            if seq != tenant_seq:
                tenant_seq = seq
                out.append(_sse("changed", {"tenant": seq}))
        now = time.monotonic()
        if out:
            yield "".join(out)
            last_sent = now
        elif now - last_sent > KEEPALIVE:
            yield ": keepalive\n\n"
            last_sent = now
        try:
            await asyncio.wait_for(ui.closing.wait(), TICK)
        except TimeoutError:
            pass
