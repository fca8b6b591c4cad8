"""``create_app``: the dashboard's ASGI app (Starlette), its login, health and metrics routes.

Routes of other dashboard modules join through one hook: every module named in
:data:`EXTRA_MODULES` that exists and has a ``routes`` list (of Starlette routes) is
included, after the core pages. Security (:mod:`emq.dashboard.security`) wraps every route.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from importlib import import_module
from pathlib import Path
from typing import Any

import redis.exceptions
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles

from ..server.urls import redact_url
from . import jobs, live, overview, queues, security
from .web import HERE, Dash, done, read_form, render

DOWN = (ConnectionError, redis.exceptions.ConnectionError, redis.exceptions.TimeoutError)
EXTRA_MODULES = ("more",)  # emq.dashboard.<name>.routes: dead letters, search, workers, race


def _extra_routes() -> list[BaseRoute]:
    found: list[BaseRoute] = []
    for name in EXTRA_MODULES:
        try:
            module = import_module(f"{__package__}.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"{__package__}.{name}":
                raise
            continue
        found.extend(getattr(module, "routes", []))
    return found


async def login_form(request: Request) -> Response:
    return render(request, "login.html", {"next": security.safe_next(_next(request))})


def _next(request: Request) -> str | None:
    return request.query_params.get("next")


async def login(request: Request) -> Response:
    """Check the token (constant time) and the CSRF field; set the session cookie."""
    form = await read_form(request)
    token: str | None = request.app.state.dash.token
    target = security.safe_next(form.get("next"))
    if token is None:
        return done(request, target, "no token is needed here")
    if not security.check_csrf(request, form):
        raise HTTPException(403, "missing or wrong CSRF token: reload the page and try again")
    if not security.token_matches(form.get("token", ""), token):
        await asyncio.sleep(0.25)  # slows guessing; the token is compared in constant time
        context = {"next": target, "error": "That token is not the dashboard's token."}
        return render(request, "login.html", context, status=401)
    response = done(request, target, "logged in")
    response.set_cookie(
        security.AUTH_COOKIE,
        security.session_value(token),
        httponly=True,
        samesite="strict",
        path="/",
    )
    return response


async def healthz(request: Request) -> Response:
    await request.app.state.dash.client.ping()
    return PlainTextResponse("ok\n")


async def metrics(request: Request) -> Response:
    """Prometheus text of every queue (emq.observe.prometheus.render_queue_metrics, in a thread)."""
    from ..observe.prometheus import render_queue_metrics

    dash: Dash = request.app.state.dash
    body, content_type = await asyncio.to_thread(render_queue_metrics, dash.url, None)
    return Response(body, media_type=content_type)


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    if "text/html" in request.headers.get("accept", ""):
        context = {"status": exc.status_code, "detail": exc.detail}
        return render(request, "error.html", context, status=exc.status_code)
    return PlainTextResponse(f"{exc.detail}\n", status_code=exc.status_code)


async def _server_down(request: Request, exc: Exception) -> Response:
    """503 when the queue server does not answer (its URL shown without its password)."""
    where = redact_url(request.app.state.dash.url)
    detail = f"the server at {where} does not answer ({type(exc).__name__}); retry in a moment"
    return await _http_error(request, HTTPException(503, detail))


def create_app(
    url: str, *, read_only: bool = False, token: str | None = None, floor_dir: str | None = None
) -> Starlette:
    """The dashboard over the server at ``url``. ``read_only``: no action is rendered and
    every POST but ``/login`` answers 403. ``token``: every page needs it (asked once by
    ``/login``); without one only loopback clients are answered. ``floor_dir``: where the
    queues' floors are (``<dir>/<queue>.sqlite3``; default ``.emq/floor``)."""
    dash = Dash(url, read_only, token or None, Path(floor_dir) if floor_dir else None)
    sampler = live.Live(dash)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        sampler.start()
        try:
            yield
        finally:
            await sampler.stop()
            await dash.close()

    routes: list[BaseRoute] = [
        *overview.ROUTES,
        *queues.ROUTES,
        *jobs.ROUTES,
        Route("/events", live.events),
        Route("/login", login_form),
        Route("/login", login, methods=["POST"]),
        Route("/healthz", healthz),
        Route("/metrics", metrics),
        Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
        *_extra_routes(),
    ]
    guard = Middleware(security.Guard, token=dash.token, read_only=read_only)
    handlers: Any = {HTTPException: _http_error}
    handlers.update(dict.fromkeys(DOWN, _server_down))
    app = Starlette(
        routes=routes, middleware=[guard], lifespan=lifespan, exception_handlers=handlers
    )
    app.state.dash = dash
    app.state.live = sampler
    return app
