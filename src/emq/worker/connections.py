"""A worker's connections: made from a URL or from a client's settings, and opened as one
unit at the start of a run.

A worker opens its own clients (never the caller's) with redis-py's automatic command retry
turned off, so the worker alone decides what is safe to re-send (:mod:`.connect`). On a
cluster each client is given every seed the worker knows: every seed of a
``redis+cluster://`` URL, or every node a cluster client it was handed knows. A run's three
clients are made and, on a cluster, have read the slot map before the run starts
(:func:`open_connections`, waited for by :mod:`.startup`), so from then on each knows every
node of the cluster and a node that dies is passed over, the node the URL named too.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any, cast

import redis
import redis.asyncio
from redis.backoff import NoBackoff
from redis.retry import Retry

from ..server.clients import (
    aclose_client,
    async_client,
    async_cluster,
    close_client,
    is_cluster_client,
    known_nodes,
    no_node_is_unreachable,
    sync_client,
    sync_cluster,
)
from ..server.packing import packed_in_c
from ..server.sentinel import url_of as sentinel_url_of
from ..server.urls import check_url, redact_url
from .options import WorkerOptions

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
        if url is None and (found := sentinel_url_of(like)) is not None:
            url, like = found, None  # a sentinel client's own URL: the primary found anew
        self.url = check_url(url) if url is not None else None
        self.kwargs: dict[str, Any] = {}
        self.scheme = "redis"
        self.seeds: list[tuple[str, int]] = []  # a cluster client's nodes, when like is one
        if like is not None and is_cluster_client(like):
            kwargs = (
                getattr(like, "connection_kwargs", None) or like.nodes_manager.connection_kwargs
            )
            drop = ("host", "port", "db", "path")  # a node's own, or not for a cluster
            self.kwargs = {k: v for k, v in kwargs.items() if k in _COPIED and k not in drop}
            if "SSL" in getattr(kwargs.get("connection_class"), "__name__", ""):
                self.scheme, self.kwargs["ssl"] = "rediss", True
            self.seeds = known_nodes(like)  # before its first command: the nodes it was given
        elif like is not None:
            pool = like.connection_pool
            self.kwargs = {k: v for k, v in pool.connection_kwargs.items() if k in _COPIED}
            cls_name = pool.connection_class.__name__
            ssl = "rediss" if "SSL" in cls_name else "redis"
            self.scheme = "unix" if "Unix" in cls_name else ssl

    @property
    def shown_url(self) -> str:
        """The server's URL for logs, its password redacted."""
        if self.url is not None:
            return redact_url(self.url)
        if self.scheme == "unix":
            return f"unix://{self.kwargs.get('path', '')}"
        user = self.kwargs.get("username") or ""
        auth = f"{user}:***@" if self.kwargs.get("password") else (f"{user}@" if user else "")
        if self.seeds:
            nodes = ",".join(f"[{h}]:{p}" if ":" in h else f"{h}:{p}" for h, p in self.seeds)
            return f"{self.scheme}+cluster://{auth}{nodes}/"
        where = f"{self.kwargs.get('host', '')}:{self.kwargs.get('port', '')}"
        return f"{self.scheme}://{auth}{where}/{self.kwargs.get('db', 0)}"

    def _common(self, socket_timeout: float | None) -> dict[str, Any]:
        return {
            "decode_responses": True,
            "socket_timeout": socket_timeout,
            "socket_connect_timeout": 5.0,
            "health_check_interval": 0,
        }

    def sync(self, socket_timeout: float | None = 10.0) -> redis.Redis:
        """A sync client; on a cluster it reads the slot map now, and raises
        :class:`~emq.errors.ServerUnreachable` if no seed answers."""
        extra = self._common(socket_timeout) | {"retry": Retry(NoBackoff(), 0)}
        if self.url is not None:
            return sync_client(self.url, **extra)
        if self.seeds:
            return sync_cluster(self.seeds, self.shown_url, **self.kwargs, **extra)
        kwargs = dict(self.kwargs)
        if self.scheme == "unix":
            kwargs["unix_socket_path"] = kwargs.pop("path")
        elif self.scheme == "rediss":
            kwargs["ssl"] = True
        return redis.Redis(**kwargs, **extra)

    def asyncio(self, socket_timeout: float | None = 10.0) -> redis.asyncio.Redis:
        """An asyncio client; it connects (and reads a cluster's slot map) at its first
        command."""
        from redis.asyncio.retry import Retry as AsyncRetry

        extra = self._common(socket_timeout) | {"retry": AsyncRetry(NoBackoff(), 0)}
        if self.url is not None:
            return async_client(self.url, **extra)
        if self.seeds:
            return async_cluster(self.seeds, **self.kwargs, **extra)
        kwargs = dict(self.kwargs)
        if self.scheme == "unix":
            kwargs["unix_socket_path"] = kwargs.pop("path")
        elif self.scheme == "rediss":
            kwargs["ssl"] = True
        client = redis.asyncio.Redis(**kwargs, **extra)
        packed_in_c(client.connection_pool)
        return client


@dataclass(frozen=True, slots=True)
class Connections:
    """A run's clients: ``client`` for its calls, ``blocking`` for its parked ``BLPOP``,
    ``sync`` for the heartbeat thread; ``shown_url`` names the server in log lines."""

    client: redis.asyncio.Redis
    blocking: redis.asyncio.Redis
    sync: redis.Redis
    shown_url: str

    async def close(self) -> None:
        await aclose_client(self.client)
        await aclose_client(self.blocking)
        close_client(self.sync)


async def open_connections(factory: ClientFactory, options: WorkerOptions) -> Connections:
    """Make a run's clients; on a cluster each reads the slot map here (from the first of
    its seeds that answers), so from now on it knows every node. Raises
    :class:`~emq.errors.ServerUnreachable` if no seed answers, with nothing left open."""
    client = factory.asyncio(socket_timeout=10.0)
    blocking = factory.asyncio(socket_timeout=options.poll_ms / 1000 + 10.0)
    try:
        for made in (client, blocking):
            if is_cluster_client(made):
                with no_node_is_unreachable(factory.shown_url):
                    await cast(Any, made).initialize()
        sync = await asyncio.to_thread(factory.sync, max(1.0, options.beat_ms / 1000))
    except BaseException:
        await aclose_client(client)
        await aclose_client(blocking)
        raise
    return Connections(client, blocking, sync, factory.shown_url)
