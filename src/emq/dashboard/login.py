"""The login page: ``GET /login?next=PATH`` (the form) and ``POST /login`` (the token).

A dashboard with a token asks for it here once (:mod:`emq.dashboard.security`, "A token off
loopback"): the token is compared in constant time, the form's CSRF field is checked, and a
match sets the session cookie (a keyed hash of the token, never the token) and goes on to
``next`` (a path of this app only). Without a token there is nothing to log in to.
"""

from __future__ import annotations

import asyncio

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response

from . import security
from .web import done, read_form, render


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
