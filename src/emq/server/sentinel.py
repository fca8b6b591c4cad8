"""Sentinel URLs: a primary with replicas, found through Valkey or Redis Sentinel.

A URL names the sentinels, the service (the primary's name in the sentinels' configuration)
and the database::

    redis+sentinel://[[user]:password@]host[:port][,host[:port]...]/service[/db][?query]

``valkey+sentinel://`` is the same. The user and password are the data nodes' (primary and
replicas); the sentinels' own, if they require one, are query arguments:
``sentinel_password=...`` and ``sentinel_username=...``. A port defaults to 26379.

:func:`sync_client` and :func:`async_client` return a client of the current primary. Before each
new connection it asks the sentinels where the primary is, so after a failover the client finds
the promoted replica by itself. A connection still open to a primary that was demoted answers
``READONLY``: redis-py turns that into a ``ConnectionError`` and drops the connection, so emq
sees an outage like any other and re-sends what is safe to re-send (an enqueue with its ids, a
claim with its request id, an acknowledgement checked against its lease). While no sentinel
names a healthy primary (the seconds of a failover), connecting raises a ``ConnectionError``
too (``MasterNotFoundError``). A running client also asks the sentinels again every second
(:data:`RECHECK_S`), so connections to a primary that was replaced without being demoted (it was
frozen or cut off, then came back) are dropped within about a second of the sentinels'
switch. See docs/sentinel.md.
"""

from __future__ import annotations

import contextlib
import time
from typing import Any

import redis
import redis.asyncio
import redis.asyncio.sentinel
import redis.sentinel
from redis.backoff import NoBackoff

from .packing import packed_in_c
from .urls import SentinelUrl, parse_sentinel_url

SENTINEL_TIMEOUT_S = 1.0
"""Connect and read timeout of a question to one sentinel: a sentinel that is down or hung
costs at most this before the next one is asked."""
RECHECK_S = 1.0
"""How often a client asks the sentinels again while it runs (when it next takes a
connection), besides before every new connection: a primary that the sentinels replaced
without demoting it (it was frozen, or cut off, and came back) would otherwise keep the open
connections and their writes until the sentinels reconfigure it, which takes them seconds."""


def _split(url: str, kwargs: dict[str, Any]) -> tuple[SentinelUrl, dict[str, Any], dict[str, Any]]:
    """The parsed URL, the primary's connection settings (``kwargs`` plus the URL's db and
    credentials) and the sentinels' (their own credentials, short timeouts, no retry)."""
    parsed = parse_sentinel_url(url)
    primary = dict(kwargs)
    primary.setdefault("db", parsed.db)
    if parsed.password is not None:
        primary.setdefault("password", parsed.password)
    if parsed.username is not None:
        primary.setdefault("username", parsed.username)
    timeout = min(SENTINEL_TIMEOUT_S, kwargs.get("socket_timeout") or SENTINEL_TIMEOUT_S)
    sentinels: dict[str, Any] = {
        "socket_timeout": timeout,
        "socket_connect_timeout": timeout,
        "password": parsed.sentinel_password,
        "username": parsed.sentinel_username,
    }
    return parsed, primary, sentinels


class _Pool(redis.sentinel.SentinelConnectionPool):
    """Asks the sentinels where the primary is at most every :data:`RECHECK_S` when a
    connection is taken; closing the client also closes its connections to the sentinels."""

    emq_url = ""  # the URL the client was made from (:func:`url_of`)
    _asked = 0.0

    def get_connection(self, *args: Any, **kwargs: Any) -> Any:
        now = time.monotonic()
        if now - self._asked >= RECHECK_S:
            self._asked = now
            with contextlib.suppress(redis.ConnectionError, redis.TimeoutError):
                self.get_master_address()  # type: ignore[no-untyped-call]  # moved: idle ones dropped
        return super().get_connection(*args, **kwargs)

    def disconnect(self, inuse_connections: bool = True) -> None:
        super().disconnect(inuse_connections)
        if inuse_connections:
            for sentinel in self.sentinel_manager.sentinels:
                sentinel.connection_pool.disconnect()


class _AsyncPool(redis.asyncio.sentinel.SentinelConnectionPool):
    """The asyncio twin of :class:`_Pool`."""

    emq_url = ""
    _asked = 0.0

    async def get_connection(self, *args: Any, **kwargs: Any) -> Any:
        now = time.monotonic()
        if now - self._asked >= RECHECK_S:
            self._asked = now
            with contextlib.suppress(redis.ConnectionError, redis.TimeoutError):
                await self.get_master_address()  # type: ignore[no-untyped-call]
        return await super().get_connection(*args, **kwargs)  # type: ignore[no-untyped-call]

    async def release(self, connection: Any) -> None:
        where = (connection.host, connection.port)
        if self.master_address is not None and where != self.master_address:
            await connection.disconnect()  # opened to a former primary: not kept (as
        await super().release(connection)  # redis-py's sync pool does)

    async def disconnect(self, inuse_connections: bool = True) -> None:
        await super().disconnect(inuse_connections)
        if inuse_connections:
            for sentinel in self.sentinel_manager.sentinels:
                await sentinel.connection_pool.disconnect()


def sync_client(url: str, **kwargs: Any) -> redis.Redis:
    """A client of the service's current primary; ``kwargs`` are those of ``redis.Redis``
    (``decode_responses``, ``socket_timeout``, ``retry``, ...) and apply to the primary's
    connections. Each sentinel is asked with a timeout of at most 1 s and no retry."""
    from redis.retry import Retry

    parsed, primary, sentinels = _split(url, kwargs)
    make: Any = redis.sentinel.Sentinel  # redis-py's sentinel classes are untyped
    manager = make(
        list(parsed.sentinels), sentinel_kwargs=sentinels | {"retry": Retry(NoBackoff(), 0)}
    )
    client: redis.Redis = manager.master_for(parsed.service, connection_pool_class=_Pool, **primary)
    client.connection_pool.emq_url = url  # type: ignore[attr-defined]
    return client


def async_client(url: str, **kwargs: Any) -> redis.asyncio.Redis:
    """The asyncio twin of :func:`sync_client`."""
    from redis.asyncio.retry import Retry

    parsed, primary, sentinels = _split(url, kwargs)
    make: Any = redis.asyncio.sentinel.Sentinel
    manager = make(
        list(parsed.sentinels), sentinel_kwargs=sentinels | {"retry": Retry(NoBackoff(), 0)}
    )
    client: redis.asyncio.Redis = manager.master_for(
        parsed.service, connection_pool_class=_AsyncPool, **primary
    )
    client.connection_pool.emq_url = url  # type: ignore[attr-defined]
    packed_in_c(client.connection_pool)
    return client


def url_of(client: object) -> str | None:
    """The ``redis+sentinel://`` URL a client of :func:`sync_client` or :func:`async_client`
    was made from (passwords included: keep it out of logs), so that more clients of the same
    service can be made from it (a worker given a queue opens its own); None for any other
    client."""
    pool = getattr(client, "connection_pool", None)
    return pool.emq_url or None if isinstance(pool, _Pool | _AsyncPool) else None
