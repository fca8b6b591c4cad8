"""Who may see the dashboard and who may act through it.

Guarantees, each checked before any page or action runs (:class:`Guard`, an ASGI middleware):

- **Loopback by default.** Without a token the app answers only clients on a loopback address
  whose ``Host`` header names a loopback host (``127.0.0.1``, ``::1``, ``localhost``), so a web
  page elsewhere cannot reach it by DNS rebinding. ``emq dashboard`` refuses to bind anywhere
  else unless ``EMQ_DASHBOARD_TOKEN`` is set.
- **A token off loopback.** With a token every path except ``/login``, ``/healthz`` and
  ``/static`` needs the session cookie (HttpOnly, SameSite=Strict) that ``POST /login`` sets
  once the token matches, or ``Authorization: Bearer <token>`` (for a Prometheus scraper).
  Pages redirect to ``/login``; other requests get 401. Tokens are compared in constant time,
  and the cookie holds a keyed hash of the token, never the token itself; no response ever
  contains the token.
- **CSRF.** Every POST must carry the form field ``csrf`` equal to the per-session
  ``emq_csrf`` cookie (SameSite=Strict, so another site's form never sends it), and its
  ``Origin`` (or, failing that, ``Referer``) must be this app's own origin when present.
  :func:`check_csrf` does the field check (the endpoint reads the form); the middleware does
  the origin check.
- **Read-only.** With ``read_only`` every POST except ``/login`` is refused with 403, whatever
  route it names, and pages render no action.
- **Bodies of at most 64 KiB.** :class:`BodyCap`, outside every other layer, answers 413 to a
  request whose ``Content-Length`` is over :data:`MAX_BODY_BYTES` before reading a byte of
  it, and counts a body that streams (chunked, or a length that lies) as the app reads it:
  past the cap the read fails with 413. No request, on any route, authenticated or not,
  makes the dashboard hold more than the cap of it.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import secrets
from collections.abc import Mapping
from urllib.parse import quote, urlsplit

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

MAX_BODY_BYTES = 64 * 1024  # every form of the dashboard is far smaller
AUTH_COOKIE = "emq_auth"
CSRF_COOKIE = "emq_csrf"
CSRF_FIELD = "csrf"
OPEN_PATHS = ("/login", "/healthz", "/static/")
LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost"})


def is_loopback(host: str) -> bool:
    """True for a loopback address or name (``127.0.0.0/8``, ``::1``, ``localhost``)."""
    name = host.strip("[]").lower()
    if name in LOOPBACK_NAMES:
        return True
    try:
        address = ipaddress.ip_address(name)
    except ValueError:
        return False
    mapped = getattr(address, "ipv4_mapped", None)  # ::ffff:127.0.0.1
    return address.is_loopback or bool(mapped and mapped.is_loopback)


def host_name(host_header: str) -> str:
    """The host part of a ``Host`` header (``[::1]:8080`` -> ``::1``)."""
    return urlsplit("//" + host_header).hostname or ""


def session_value(token: str) -> str:
    """What the auth cookie holds: a keyed hash of the token (the token never leaves)."""
    return hmac.new(token.encode(), b"emq-dashboard-session-v1", hashlib.sha256).hexdigest()


def token_matches(given: str, token: str) -> bool:
    """Constant-time comparison of a submitted token with the configured one."""
    return hmac.compare_digest(given.encode(), token.encode())


def new_csrf() -> str:
    return secrets.token_urlsafe(24)


def check_csrf(request: Request, form: Mapping[str, str]) -> bool:
    """True if the form's ``csrf`` field equals the session's CSRF cookie (both present)."""
    cookie = request.cookies.get(CSRF_COOKIE, "")
    field = form.get(CSRF_FIELD, "")
    return bool(cookie) and hmac.compare_digest(cookie.encode(), field.encode())


def _same_origin(request: Request) -> bool:
    """The POST's ``Origin`` (or ``Referer``) names this app's scheme, host and port; a
    request with neither (not sent by a browser) passes this check and still needs the
    CSRF field."""
    claimed = request.headers.get("origin") or request.headers.get("referer")
    if not claimed or claimed == "null":
        return not claimed
    here = urlsplit(str(request.base_url))
    there = urlsplit(claimed)
    return (there.scheme, there.netloc) == (here.scheme, here.netloc)


def _authenticated(request: Request, token: str) -> bool:
    cookie = request.cookies.get(AUTH_COOKIE, "")
    if cookie and hmac.compare_digest(cookie.encode(), session_value(token).encode()):
        return True
    scheme, _, given = request.headers.get("authorization", "").partition(" ")
    return scheme.lower() == "bearer" and bool(given) and token_matches(given.strip(), token)


def refusal(request: Request, *, token: str | None, read_only: bool) -> Response | None:
    """The response that refuses ``request``, or None if it may go on (module doc)."""
    path = request.url.path
    if token is None:
        client = request.client.host if request.client else ""
        host = host_name(request.headers.get("host", ""))
        if not (is_loopback(client) and is_loopback(host)):
            return PlainTextResponse(
                "this dashboard answers loopback only; set EMQ_DASHBOARD_TOKEN to serve "
                "other hosts",
                status_code=403,
            )
    elif not path.startswith(OPEN_PATHS) and not _authenticated(request, token):
        if request.method == "GET" and "text/html" in request.headers.get("accept", ""):
            target = quote(path + ("?" + request.url.query if request.url.query else ""))
            return RedirectResponse(f"/login?next={target}", status_code=303)
        return PlainTextResponse("log in first: /login", status_code=401)
    if request.method not in ("GET", "HEAD", "OPTIONS"):
        if read_only and path != "/login":
            return PlainTextResponse("this dashboard is read-only", status_code=403)
        if not _same_origin(request):
            return PlainTextResponse("cross-origin request refused", status_code=403)
    return None


HEADERS = [
    (
        b"content-security-policy",
        b"default-src 'self'; img-src 'self' data:; object-src 'none'; base-uri 'none'; "
        b"form-action 'self'; frame-ancestors 'none'",
    ),
    (b"x-frame-options", b"DENY"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"same-origin"),
]
"""Sent with every response: no inline script or style runs even if escaping were ever
missed (the pages have none), no other site may frame the dashboard (clickjacking), and
job URLs are not sent to other sites as a referrer."""


class Guard:
    """ASGI middleware applying :func:`refusal` to every HTTP request and adding
    :data:`HEADERS` to every response."""

    def __init__(self, app: ASGIApp, *, token: str | None, read_only: bool) -> None:
        self.app = app
        self.token = token
        self.read_only = read_only

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), *HEADERS]}
            await send(message)

        refused = refusal(Request(scope), token=self.token, read_only=self.read_only)
        if refused is not None:
            await refused(scope, receive, send_with_headers)
            return
        await self.app(scope, receive, send_with_headers)


CLOSE = (b"connection", b"close")


class BodyTooLarge(HTTPException):
    """A request body read past :data:`MAX_BODY_BYTES` (the error pages answer 413)."""

    def __init__(self) -> None:
        super().__init__(413, f"the request body is over {MAX_BODY_BYTES} bytes")


class BodyCap:
    """ASGI middleware: the one place the body cap is enforced (module doc). A declared
    ``Content-Length`` over the cap, or one that is not a number, is answered (413, 400)
    without calling the app and with ``Connection: close``, so the server never reads the
    body; otherwise every ``http.request`` message the app receives is counted, and the
    receive that passes the cap raises :class:`BodyTooLarge` instead of returning it."""

    def __init__(self, app: ASGIApp, *, limit: int = MAX_BODY_BYTES) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        lengths = [v for k, v in scope["headers"] if k.lower() == b"content-length"]
        if lengths:
            if not all(v.strip().isdigit() for v in lengths):
                await _refuse(400, "Content-Length is not a number", scope, receive, send)
                return
            if max(int(v) for v in lengths) > self.limit:
                await _refuse(413, BodyTooLarge().detail, scope, receive, send)
                return
        seen = 0
        started = False

        async def counted() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.limit:
                    raise BodyTooLarge()
            return message

        async def watched(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
                if seen > self.limit:  # the 413 of the route: read no more of the body
                    message = {**message, "headers": [*message.get("headers", []), CLOSE]}
            await send(message)

        try:
            await self.app(scope, counted, watched)
        except Exception:
            if seen <= self.limit:
                raise
            if not started:  # a read outside a route's error handling (none today)
                await _refuse(413, BodyTooLarge().detail, scope, receive, send)


async def _refuse(status: int, text: str, scope: Scope, receive: Receive, send: Send) -> None:
    response = PlainTextResponse(f"{text}\n", status_code=status)
    response.raw_headers += [CLOSE, *HEADERS]  # close: the server reads no more of the body
    await response(scope, receive, send)


def safe_next(target: str | None) -> str:
    """A post-login redirect target limited to this app's own paths."""
    if not target or not target.startswith("/") or target.startswith("//") or "\\" in target:
        return "/"
    return target
