"""What every dashboard page and action shares: the app's state, rendering with the common
context, reading and guarding an action's form, and the flash message after an action.

Every page's module (the route table is :mod:`emq.dashboard.routes`) uses:

- :func:`dash` -> :class:`Dash`: the server URL, ``read_only``, the shared asyncio client,
  one :class:`~emq.AsyncQueue` per queue name (:meth:`Dash.queue`), the floor of a queue
  (:meth:`Dash.floor`), every queue name (:meth:`Dash.queue_names`);
- :func:`render` (a template extending ``base.html``) with ``csrf``, ``read_only``, ``nav``
  and ``flash`` in its context;
- :func:`action_form`: the form of a POST action, or 403 (read-only, or a missing or wrong
  CSRF field) before anything changes;
- :func:`done`: 303 back to a page with a flash message (``<p role="status" id="flash">``).

Templates are Jinja2 with autoescape on; data is never marked safe.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, quote, unquote

import redis.asyncio
from jinja2 import Environment, FileSystemLoader
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response

from ..errors import InvalidInput
from ..model.keys import check_queue_name
from ..queue._async.queue import AsyncQueue
from ..server.clients import aclose_client, async_client
from ..server.discovery import aqueue_names
from . import security

HERE = Path(__file__).parent
NAV = (("Overview", "/"), ("Search", "/search"), ("Workers", "/workers"), ("Race lab", "/race"))
FLASH_COOKIE = "emq_flash"


@dataclass
class Dash:
    """The app's state (``request.app.state.dash``); one per app, used from its event loop."""

    url: str
    read_only: bool = False
    token: str | None = None
    floor_dir: Path | None = None
    _client: redis.asyncio.Redis | None = None
    _queues: dict[str, AsyncQueue] = field(default_factory=dict)

    @property
    def client(self) -> redis.asyncio.Redis:
        """The app's asyncio client (created on first use, in the serving loop)."""
        if self._client is None:
            self._client = async_client(self.url, decode_responses=True)
        return self._client

    def queue(self, name: str) -> AsyncQueue:
        """The queue ``name`` on the shared client; 404 for a name that is not a queue name."""
        q = self._queues.get(name)
        if q is None:
            try:
                check_queue_name(name)
            except InvalidInput:
                raise HTTPException(404, "no such queue") from None
            q = self._queues[name] = AsyncQueue(self.client, name)
        return q

    def floor(self, name: str) -> Path | None:
        """The floor file of queue ``name`` under ``floor_dir`` if it exists (None: the
        default ``.emq/floor/<queue>.sqlite3`` applies)."""
        if self.floor_dir is None:
            return None
        path = self.floor_dir / f"{check_queue_name(name)}.sqlite3"
        return path if path.exists() else None

    async def queue_names(self) -> list[str]:
        """Every queue known on the server, sorted."""
        return await aqueue_names(self.client)

    async def close(self) -> None:
        if self._client is not None:
            await aclose_client(self._client)
            self._client = None
        self._queues.clear()


def dash(request: Request) -> Dash:
    d: Dash = request.app.state.dash
    return d


def csrf_token(request: Request) -> str:
    """This session's CSRF token (a new one is set as a cookie by :func:`render`)."""
    token = getattr(request.state, "csrf", None) or request.cookies.get(security.CSRF_COOKIE)
    if not token:
        token = security.new_csrf()
    request.state.csrf = token
    return str(token)


def _ms_time(ms: Any) -> str:
    if ms in (None, ""):
        return ""
    stamp = datetime.fromtimestamp(int(ms) / 1000, tz=UTC)
    return stamp.strftime("%Y-%m-%d %H:%M:%S.") + f"{int(ms) % 1000:03d}Z"


def age(ms: Any) -> str:
    """A duration in ms as ``2h 03m``, ``4m 05s``, ``12.3s`` or ``—`` when unknown."""
    if ms is None:
        return "—"
    s = max(0, int(ms)) / 1000
    if s < 60:
        return f"{s:.1f}s"
    m, sec = divmod(int(s), 60)
    if m < 60:
        return f"{m}m {sec:02d}s"
    h, m = divmod(m, 60)
    return f"{h}h {m:02d}m" if h < 48 else f"{h // 24}d {h % 24:02d}h"


def since(ms: Any, now_ms: int) -> str:
    """A server-clock time seen from ``now_ms`` (the server's clock when the page was read):
    ``in 4m 05s``, ``4m 05s ago`` or ``now`` (within a second); ``""`` when unknown."""
    if ms in (None, ""):
        return ""
    delta = int(ms) - now_ms
    if abs(delta) < 1000:
        return "now"
    return f"in {age(delta)}" if delta > 0 else f"{age(-delta)} ago"


def pretty(value: Any) -> str:
    """A decoded value (payload, result, progress) as indented JSON text (the template
    escapes it)."""
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True, default=str)


def pretty_text(text: Any) -> str:
    """JSON text as written in an event field, indented; any other text as it is."""
    try:
        return pretty(json.loads(text))
    except (TypeError, ValueError):
        return str(text)


def _environment() -> Environment:
    env = Environment(loader=FileSystemLoader(HERE / "templates"), autoescape=True)
    env.filters.update(
        ms_time=_ms_time, age=age, since=since, pretty=pretty, pretty_text=pretty_text
    )
    env.filters["urlpart"] = lambda s: quote(s, "")
    return env


ENV = _environment()


def render(
    request: Request, template: str, context: dict[str, Any] | None = None, status: int = 200
) -> HTMLResponse:
    """``template`` rendered with ``context`` plus the common context: ``request``, ``csrf``,
    ``read_only``, ``nav``, ``path`` and ``flash`` (the message of the last action, once)."""
    d = dash(request)
    flash = unquote(request.cookies.get(FLASH_COOKIE, ""))[:500]
    csrf = csrf_token(request)
    ctx = {
        "request": request,
        "csrf": csrf,
        "read_only": d.read_only,
        "nav": NAV,
        "path": request.url.path,
        "flash": flash,
        "now_ms": int(time.time() * 1000),
    }
    ctx.update(context or {})
    response = HTMLResponse(ENV.get_template(template).render(ctx), status_code=status)
    if request.cookies.get(security.CSRF_COOKIE) != csrf:
        response.set_cookie(security.CSRF_COOKIE, csrf, httponly=True, samesite="strict", path="/")
    if flash:
        response.delete_cookie(FLASH_COOKIE, path="/")
    response.headers["cache-control"] = "no-store"
    return response


async def read_form(request: Request) -> dict[str, str]:
    """An ``application/x-www-form-urlencoded`` body as a dict (last wins). Its size is
    capped where every request passes (:class:`~emq.dashboard.security.BodyCap`, 64 KiB):
    a larger one never reaches this read whole, it fails with 413."""
    body = await request.body()
    try:
        return dict(parse_qsl(body.decode(), keep_blank_values=True))
    except UnicodeDecodeError:
        raise HTTPException(400, "form is not UTF-8") from None


async def action_form(request: Request) -> dict[str, str]:
    """The form of a POST action once it may run: 403 when the dashboard is read-only or the
    ``csrf`` field does not match the session's cookie (nothing has changed then)."""
    if dash(request).read_only:
        raise HTTPException(403, "this dashboard is read-only")
    form = await read_form(request)
    if not security.check_csrf(request, form):
        raise HTTPException(403, "missing or wrong CSRF token: reload the page and try again")
    return form


def done(request: Request, to: str, message: str) -> Response:
    """303 to ``to`` (a path of this app) with ``message`` shown there once."""
    response = RedirectResponse(security.safe_next(to), status_code=303)
    response.set_cookie(
        FLASH_COOKIE, quote(message[:500]), httponly=True, samesite="strict", path="/"
    )
    return response
