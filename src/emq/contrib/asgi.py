"""emq in a FastAPI or Starlette app: queues opened at startup, closed at shutdown, and a
dependency that hands them to a request.

::

    app = FastAPI(lifespan=emq_lifespan(os.environ["EMQ_URL"], "emails"))

    @app.post("/signup")
    async def signup(email: str, queue: AsyncQueue = Depends(get_queue)) -> dict[str, str]:
        return {"job": await queue.enqueue("welcome", {"to": email})}

:func:`emq_lifespan` makes a lifespan (Starlette's ``lifespan=``, which FastAPI takes too):
at startup it opens one asyncio client to the server and an :class:`~emq.AsyncQueue` per
name on it, kept on ``app.state``; at shutdown it closes that client, so no connection is left
open (no ``ResourceWarning``). Connections are made on first use: an app starts while its
server is briefly down, and its first enqueue waits for the server like any other call.
``lifespan=`` runs the app's own lifespan inside (its state, if it yields one, is passed
on), and lifespans of different servers nest the same way. :func:`get_queue` (the only queue
open) and :func:`queue_dependency` (a queue by name) read ``app.state`` from a request; both
are FastAPI dependencies and plain functions for a Starlette endpoint. Needs Starlette,
which FastAPI and Starlette apps have (``pip install emq[asgi]`` otherwise); emq's core
does not import this module. See docs/asgi.md.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import AbstractAsyncContextManager
from typing import Any

try:
    from starlette.requests import HTTPConnection
except ImportError as exc:  # pragma: no cover - the suite has it
    raise ImportError(
        "emq.contrib.asgi needs Starlette: pip install 'emq[asgi]' (FastAPI brings it too)"
    ) from exc

from ..errors import InvalidOption
from ..model.config import QueueOptions
from ..model.keys import QueueKeys
from ..queue._async.queue import AsyncQueue
from ..server.clients import aclose_client, async_client
from ..server.urls import check_url

STATE = "emq_queues"
"""The attribute of ``app.state`` that holds the open queues: name -> AsyncQueue."""

Lifespan = Callable[[Any], AbstractAsyncContextManager[Any]]


def emq_lifespan(
    url: str,
    *names: str,
    options: QueueOptions | None = None,
    lifespan: Lifespan | None = None,
) -> Lifespan:
    """A lifespan that opens the queues ``names`` on the server at ``url`` (with
    ``options``) for the app's life, then runs ``lifespan`` (the app's own) inside. The URL
    and the names are checked now (:class:`~emq.errors.InvalidUrl`,
    :class:`~emq.errors.InvalidName`, :class:`~emq.errors.InvalidOption`), before the app
    starts. A queue name already open on the app (an outer ``emq_lifespan``) is refused at
    startup."""
    url = check_url(url)
    if not names:
        raise InvalidOption("emq_lifespan needs at least one queue name")
    for name in names:
        QueueKeys.of(name)
    if len(set(names)) != len(names):
        raise InvalidOption(f"emq_lifespan names a queue twice: {list(names)}")

    @contextlib.asynccontextmanager
    async def run(app: Any) -> AsyncIterator[Any]:
        opened: dict[str, AsyncQueue] = getattr(app.state, STATE, None) or {}
        taken = sorted(set(names) & set(opened))
        if taken:
            raise InvalidOption(f"queues already open on this app: {', '.join(taken)}")
        client = async_client(url, decode_responses=True)
        try:
            setattr(
                app.state,
                STATE,
                opened | {n: AsyncQueue(client, n, options=options) for n in names},
            )
            if lifespan is None:
                yield None
            else:
                async with lifespan(app) as state:
                    yield state
        finally:
            left = {n: q for n, q in getattr(app.state, STATE, {}).items() if n not in names}
            setattr(app.state, STATE, left)
            await aclose_client(client)

    return run


def _queues(conn: HTTPConnection) -> Mapping[str, AsyncQueue]:
    found: Mapping[str, AsyncQueue] | None = getattr(conn.app.state, STATE, None)
    if not found:
        raise InvalidOption("no emq queue is open on this app: give it lifespan=emq_lifespan(...)")
    return found


def get_queue(request: HTTPConnection) -> AsyncQueue:
    """The queue open on the request's app (``Depends(get_queue)`` in FastAPI); with several
    open, :func:`queue_dependency` names one. Raises :class:`~emq.errors.InvalidOption` when
    none or several are open: a mistake in the app, not in the request."""
    queues = _queues(request)
    if len(queues) != 1:
        raise InvalidOption(
            f"{len(queues)} emq queues are open ({', '.join(queues)}): "
            "use queue_dependency(name) to pick one"
        )
    return next(iter(queues.values()))


def queue_dependency(name: str) -> Callable[[HTTPConnection], AsyncQueue]:
    """A dependency that returns the open queue ``name``: ``Depends(queue_dependency("emails"))``
    (``queue_dependency("emails")(request)`` in a Starlette endpoint)."""
    QueueKeys.of(name)

    def dependency(request: HTTPConnection) -> AsyncQueue:
        queues = _queues(request)
        if name not in queues:
            raise InvalidOption(
                f"queue {name!r} is not open on this app (open: {', '.join(queues)})"
            )
        return queues[name]

    return dependency
