"""An ASGI app served in the test's own event loop, as a server serves it: its lifespan run
by the ASGI lifespan protocol (startup before the first request, shutdown after the last),
its lifespan state copied into each request's scope, requests sent through
``httpx.ASGITransport``. A startup that fails raises what the app raised."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from contextlib import asynccontextmanager
from typing import Any

import httpx

Scope = MutableMapping[str, Any]
App = Callable[[Scope, Any, Any], Awaitable[None]]


@asynccontextmanager
async def served(app: App) -> AsyncIterator[httpx.AsyncClient]:
    inbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    outbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    state: dict[str, Any] = {}
    scope = {"type": "lifespan", "asgi": {"version": "3.0", "spec_version": "2.0"}, "state": state}
    task = asyncio.create_task(app(scope, inbox.get, outbox.put))
    await inbox.put({"type": "lifespan.startup"})
    started = await outbox.get()
    if started["type"] != "lifespan.startup.complete":
        await task  # raises what the startup raised
        raise AssertionError(f"startup failed: {started}")

    async def with_state(scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] in ("http", "websocket"):
            scope = {**scope, "state": dict(state)}
        await app(scope, receive, send)

    try:
        transport = httpx.ASGITransport(app=with_state)
        async with httpx.AsyncClient(transport=transport, base_url="http://app") as client:
            yield client
    finally:
        await inbox.put({"type": "lifespan.shutdown"})
        stopped = await outbox.get()
        await task
        assert stopped["type"] == "lifespan.shutdown.complete", stopped
