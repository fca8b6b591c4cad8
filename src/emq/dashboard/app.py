"""``create_app``: the dashboard's ASGI app (Starlette) over a queue server.

Its routes are the table in :mod:`emq.dashboard.routes`; the body cap
(:class:`emq.dashboard.security.BodyCap`) and the security middleware
(:class:`emq.dashboard.security.Guard`) wrap every one of them. Here: the app's state
(:class:`~emq.dashboard.web.Dash`), the live sampler's lifespan, and the error pages (an
HTTP error as a page or as text; 503 when the queue server does not answer).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import redis.exceptions
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response

from ..server.urls import redact_url
from . import live, security
from .routes import ROUTES
from .web import Dash, render

DOWN = (
    ConnectionError,
    redis.exceptions.ConnectionError,
    redis.exceptions.TimeoutError,
    redis.exceptions.RedisClusterException,  # a cluster client's own: no node answers, say
)


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

    cap = Middleware(security.BodyCap)  # outermost: before any layer could read a body
    guard = Middleware(security.Guard, token=dash.token, read_only=read_only)
    handlers: Any = {HTTPException: _http_error}
    handlers.update(dict.fromkeys(DOWN, _server_down))
    app = Starlette(
        routes=ROUTES, middleware=[cap, guard], lifespan=lifespan, exception_handlers=handlers
    )
    app.state.dash = dash
    app.state.live = sampler
    return app
