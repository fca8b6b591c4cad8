"""Connections of a worker and what it does when the server goes away.

A worker opens its own clients (never the caller's) with redis-py's automatic command retry
turned off, so the worker alone decides what is safe to re-send: a claim is re-sent with the
same request id (the server kept its reply for ``lease_ms``, so the same jobs come back), a
complete or fail is re-sent and a refusal is then checked against the row (see
``docs/worker.md``). :class:`Outage` logs once per outage and hands out jittered backoff.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from typing import Any

import redis
import redis.asyncio
from redis.backoff import NoBackoff
from redis.retry import Retry

from ..config import check_url
from ..shell import UNREACHABLE

OUTAGE_ERRORS = UNREACHABLE
"""Errors that mean "the server is unreachable (or restarting)"; everything else is a bug."""

_COPIED = (
    "host",
    "port",
    "db",
    "username",
    "password",
    "path",
    "client_name",
    "credential_provider",
    "ssl_keyfile",
    "ssl_certfile",
    "ssl_cert_reqs",
    "ssl_ca_certs",
    "ssl_ca_data",
    "ssl_check_hostname",
)


class ClientFactory:
    """Makes the worker's clients from a URL or from an existing client's settings."""

    def __init__(self, *, url: str | None = None, like: Any = None) -> None:
        if url is None and like is None:
            raise ValueError("a URL or an existing client is required")
        self.url = check_url(url) if url is not None else None
        self.kwargs: dict[str, Any] = {}
        self.scheme = "redis"
        if like is not None:
            pool = like.connection_pool
            self.kwargs = {k: v for k, v in pool.connection_kwargs.items() if k in _COPIED}
            cls_name = pool.connection_class.__name__
            ssl = "rediss" if "SSL" in cls_name else "redis"
            self.scheme = "unix" if "Unix" in cls_name else ssl

    def _common(self, socket_timeout: float | None) -> dict[str, Any]:
        return {
            "decode_responses": True,
            "socket_timeout": socket_timeout,
            "socket_connect_timeout": 5.0,
            "health_check_interval": 0,
        }

    def sync(self, socket_timeout: float | None = 10.0) -> redis.Redis:
        extra = self._common(socket_timeout) | {"retry": Retry(NoBackoff(), 0)}
        if self.url is not None:
            return redis.Redis.from_url(self.url, **extra)
        kwargs = dict(self.kwargs)
        if self.scheme == "unix":
            kwargs["unix_socket_path"] = kwargs.pop("path")
        elif self.scheme == "rediss":
            kwargs["ssl"] = True
        return redis.Redis(**kwargs, **extra)

    def asyncio(self, socket_timeout: float | None = 10.0) -> redis.asyncio.Redis:
        from redis.asyncio.retry import Retry as AsyncRetry

        extra = self._common(socket_timeout) | {"retry": AsyncRetry(NoBackoff(), 0)}
        if self.url is not None:
            return redis.asyncio.Redis.from_url(self.url, **extra)
        kwargs = dict(self.kwargs)
        if self.scheme == "unix":
            kwargs["unix_socket_path"] = kwargs.pop("path")
        elif self.scheme == "rediss":
            kwargs["ssl"] = True
        return redis.asyncio.Redis(**kwargs, **extra)


QUIET = 3


class Outage:
    """Shared by every part of one worker (loop and heartbeat thread).

    :meth:`failed` logs an outage once, counts it, and returns how
    long to wait before the next try: exponential from ``base_s`` to ``cap_s``, each delay
    drawn uniformly from its upper half so a fleet does not reconnect in lockstep.
    :meth:`ok` logs the recovery once.
    """

    def __init__(self, log: logging.Logger, base_s: float = 0.05, cap_s: float = 2.0) -> None:
        self._log = log
        self._base = base_s
        self._cap = cap_s
        self._lock = threading.Lock()
        self._since: float | None = None
        self._tries = 0
        self._first = 0.0
        self.count = 0

    @property
    def down(self) -> bool:
        return self._since is not None

    def failed(self, exc: BaseException, where: str) -> float:
        """Record a failed call; returns the delay before the next try. The first
        ``QUIET`` failures in a row are retried at once and not logged: after a server
        restart each pooled connection is dead, and one failed use of each is no outage."""
        with self._lock:
            self._tries += 1
            if self._tries == 1:
                self._first = time.monotonic()
            if self._tries <= QUIET:
                return 0.0
            if self._since is None:
                self._since = self._first
                self.count += 1
                self._log.warning(
                    "server unreachable; retrying with backoff",
                    extra={"emq": {"event": "outage", "where": where, "error": repr(exc)}},
                )
            delay = min(self._cap, self._base * 2 ** min(self._tries, 16))
        return random.uniform(delay / 2, delay)

    def ok(self) -> None:
        """Record a successful call; logs the end of an outage once."""
        if self._tries == 0:
            return
        with self._lock:
            self._tries = 0
            since, self._since = self._since, None
        if since is None:
            return
        down_s = time.monotonic() - since
        self._log.warning(
            "server reachable again",
            extra={"emq": {"event": "reconnected", "down_ms": round(down_s * 1000)}},
        )
