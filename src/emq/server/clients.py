"""One URL, any server shape: the client emq makes for a URL, and the per-node access that a
pipeline to one node needs.

:func:`sync_client` / :func:`async_client` return, for a URL:

* ``redis+sentinel://`` (or ``valkey+sentinel://``): the current primary of a Sentinel-watched
  service (:mod:`emq.server.sentinel`); after a failover the client finds the new primary itself.
* any node of a Valkey/Redis Cluster: a cluster client (redis-py's ``RedisCluster``), which sends
  each command, script call and pipeline to the node that owns its slot, follows ``MOVED`` and
  ``ASK``, and relearns the slot map after a failover. Cluster mode is detected (``INFO
  cluster``, once per URL per process) or set with ``?cluster=yes`` / ``?cluster=no`` in the
  URL (needed only when the server cannot be reached at start).
* anything else: a plain client, as before.

Every emq key of a queue carries the hash tag ``{queue}``, so each script's keys lie in one slot
and a script runs on one node, indivisibly, exactly as on a single server.
"""

from __future__ import annotations

import contextlib
import threading
import weakref
from typing import Any, cast
from urllib.parse import parse_qsl, urlencode, urlparse, urlunparse

import redis
import redis.asyncio
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from redis.cluster import RedisCluster
from redis.exceptions import RedisClusterException

from ..errors import InvalidUrl, ServerRefused
from .packing import packed_in_c
from .urls import check_url

_MODE: dict[str, bool] = {}  # URL (without the switch) -> is a cluster node
_LOCK = threading.Lock()
_SWITCH = {"yes": True, "true": True, "1": True, "no": False, "false": False, "0": False}
# Cluster-only options of redis-py that a plain client refuses, and the reverse.
_PLAIN_ONLY = ("db",)


def _split_switch(url: str) -> tuple[str, bool | None]:
    """The URL without its ``cluster=`` query argument, and that argument's value."""
    parsed = urlparse(url)
    query = parse_qsl(parsed.query, keep_blank_values=True)
    found = [v for k, v in query if k == "cluster"]
    if not found:
        return url, None
    value = found[-1].lower()
    if value not in _SWITCH:
        raise InvalidUrl(f"cluster={found[-1]!r} in the server URL: use cluster=yes or cluster=no")
    rest = urlencode([(k, v) for k, v in query if k != "cluster"])
    return urlunparse(parsed._replace(query=rest)), _SWITCH[value]


def is_sentinel(url: str) -> bool:
    return urlparse(url).scheme.endswith("+sentinel")


def _detect(url: str, kwargs: dict[str, Any]) -> bool | None:
    """True if the server at ``url`` runs in cluster mode; None if it cannot be reached."""
    if urlparse(url).scheme == "unix":
        return False
    with _LOCK:
        if url in _MODE:
            return _MODE[url]
    timeout = kwargs.get("socket_connect_timeout") or 5.0
    probe = redis.Redis.from_url(url, socket_timeout=timeout, socket_connect_timeout=timeout)
    try:
        info = probe.info("cluster")
    except (redis.ConnectionError, redis.TimeoutError):
        return None  # unknown: not remembered, asked again by the next client
    except redis.ResponseError:
        info = {}  # INFO refused (ACL): not a cluster as far as emq can tell
    finally:
        probe.close()
    mode = bool(info.get("cluster_enabled"))
    with _LOCK:
        _MODE[url] = mode
    return mode


def _target(url: str, kwargs: dict[str, Any]) -> tuple[str, bool]:
    url, switch = _split_switch(check_url(url))
    if switch is not None or is_sentinel(url):
        return url, bool(switch)
    return url, bool(_detect(url, kwargs))


def cluster_kwargs(kwargs: dict[str, Any]) -> dict[str, Any]:
    """What a cluster client takes of a plain client's options (a cluster has no db), with a
    plain client's default read timeout (none: a blocking read such as ``XREAD BLOCK`` waits
    as long as it asked to, where redis-py's cluster client would give up after 5 s)."""
    return {"socket_timeout": None} | {k: v for k, v in kwargs.items() if k not in _PLAIN_ONLY}


def sync_client(url: str, **kwargs: Any) -> redis.Redis:
    """The sync client for ``url`` (see the module doc); ``kwargs`` as for ``redis.Redis``.
    Typed as ``redis.Redis``: a cluster client answers the same commands."""
    url, cluster = _target(url, kwargs)
    if is_sentinel(url):
        from . import sentinel

        return sentinel.sync_client(url, **kwargs)
    if cluster:
        try:
            return cast(redis.Redis, RedisCluster.from_url(url, **cluster_kwargs(kwargs)))
        except RedisClusterException as exc:
            raise _why_not(url, exc) from exc
    return redis.Redis.from_url(url, **kwargs)


def _why_not(url: str, exc: RedisClusterException) -> Exception:
    """redis-py says "Cluster mode is not enabled on this node" also when the user may not
    read the slot map: ask the node itself, and name the permission that is missing."""
    probe: Any = redis.Redis.from_url(url, socket_timeout=5.0, socket_connect_timeout=5.0)
    try:
        probe.execute_command("CLUSTER", "SLOTS")
        probe.execute_command("COMMAND", "COUNT")
    except redis.exceptions.NoPermissionError as denied:
        return ServerRefused(
            f"the server's user may not read the cluster's slot map ({denied}); give it "
            "+cluster|slots +command on every node (docs/security.md, 'On a cluster')"
        )
    except redis.RedisError:
        pass
    finally:
        probe.close()
    return exc


def async_client(url: str, **kwargs: Any) -> redis.asyncio.Redis:
    """The asyncio client for ``url`` (see the module doc). It has no read timeout unless
    ``kwargs`` or the URL's ``socket_timeout`` set one, as redis-py's sync client: its asyncio
    client gives up on any read after 5 s, which would end a blocking read (``XREAD BLOCK``,
    ``BLPOP``) that asked to wait longer."""
    kwargs = {"socket_timeout": None} | kwargs
    url, cluster = _target(url, kwargs)
    if is_sentinel(url):
        from . import sentinel

        return sentinel.async_client(url, **kwargs)
    if cluster:
        client = AsyncRedisCluster.from_url(url, **cluster_kwargs(kwargs))
        packed_in_c(client)
        return cast(redis.asyncio.Redis, client)
    plain = redis.asyncio.Redis.from_url(url, **kwargs)
    packed_in_c(plain.connection_pool)
    return plain


def is_cluster_client(client: object) -> bool:
    return isinstance(client, RedisCluster | AsyncRedisCluster)


def pool_of(client: Any) -> object:
    """What identifies a client's connections for per-server caches (id lease, probe facts):
    its connection pool, or the cluster client itself."""
    return client if is_cluster_client(client) else client.connection_pool


def decodes(client: Any) -> bool:
    """Whether ``client`` was made with ``decode_responses=True``."""
    if is_cluster_client(client):
        return bool(client.get_encoder().decode_responses)
    return bool(client.connection_pool.connection_kwargs.get("decode_responses"))


def node_client(client: Any, key: str) -> redis.Redis:
    """A plain client on the node that owns ``key``'s slot (``client`` itself off a cluster):
    for a pipeline that must run on one connection (a script call and its ``WAIT``)."""
    if not isinstance(client, RedisCluster):
        return cast(redis.Redis, client)
    cluster: Any = client  # redis-py's cluster methods are untyped
    node = cluster.get_node_from_key(key)
    if node is None or node.redis_connection is None:
        cluster.nodes_manager.initialize()
        node = cluster.get_node_from_key(key)
    return cast(redis.Redis, node.redis_connection)


_NODES: weakref.WeakKeyDictionary[AsyncRedisCluster, dict[str, redis.asyncio.Redis]] = (
    weakref.WeakKeyDictionary()
)


async def anode_client(client: Any, key: str) -> redis.asyncio.Redis:
    """The asyncio twin of :func:`node_client`: a plain client per node, kept per cluster
    client and closed by :func:`aclose_client`."""
    if not isinstance(client, AsyncRedisCluster):
        return cast(redis.asyncio.Redis, client)
    await client.initialize()
    node: Any = client.get_node_from_key(key)
    per_node = _NODES.setdefault(client, {})
    plain = per_node.get(node.name)
    if plain is None:
        kw = {k: v for k, v in client.connection_kwargs.items() if k in _NODE_OPTIONS}
        plain = redis.asyncio.Redis(host=node.host, port=int(node.port), **kw)
        per_node[node.name] = plain
    return plain


_NODE_OPTIONS = (
    "username",
    "password",
    "credential_provider",
    "client_name",
    "decode_responses",
    "encoding",
    "encoding_errors",
    "socket_timeout",
    "socket_connect_timeout",
    "socket_keepalive",
    "health_check_interval",
)


def relearn_slots(client: Any) -> None:
    """After a node stopped answering: read the slot map again (a replica may have taken
    over). A plain client needs nothing."""
    if isinstance(client, RedisCluster):
        with contextlib.suppress(redis.RedisError, OSError):  # none answers: tried again later
            client.nodes_manager.initialize()


async def arelearn_slots(client: Any) -> None:
    if isinstance(client, AsyncRedisCluster):
        with contextlib.suppress(redis.RedisError, OSError):
            await client.nodes_manager.initialize()
        for plain in _NODES.pop(client, {}).values():
            await plain.aclose()


async def adisconnect(client: Any) -> None:
    """Drop every connection of the asyncio ``client``, those in use too: a command waiting on
    one (a ``BLPOP`` whose cancel redis-py swallowed) ends at once with a connection error.
    The client stays usable: its next command connects anew. Never raises."""
    with contextlib.suppress(redis.RedisError, OSError):
        if isinstance(client, AsyncRedisCluster):
            for node in client.get_nodes():
                await node.disconnect()
        else:
            await client.connection_pool.disconnect()


def close_client(client: Any) -> None:
    """Close ``client`` and, on a cluster, every node's connections."""
    if isinstance(client, RedisCluster):
        for node in cast(Any, client).get_nodes():
            if node.redis_connection is not None:
                node.redis_connection.connection_pool.disconnect()
    client.close()


async def aclose_client(client: Any) -> None:
    """Close ``client`` and, on a cluster, the per-node clients of :func:`anode_client`."""
    if isinstance(client, AsyncRedisCluster):
        for plain in _NODES.pop(client, {}).values():
            await plain.aclose()
    await client.aclose()
