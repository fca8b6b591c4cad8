"""The wire: commands packed by hiredis's C packer on the asyncio clients emq makes.

redis-py's sync connections pack with hiredis; its asyncio ones pack in Python, one argument
at a time. :func:`packed_in_c` gives an asyncio pool (or every node of an asyncio cluster
client) a connection class that packs in C: the same bytes, half a bulk enqueue's client CPU.
"""

from __future__ import annotations

from typing import Any, cast

from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster

_PACKED: dict[type, type] = {}  # a connection class -> its packed twin (a twin -> itself)


def _packed_class(base: Any) -> Any:
    """``base`` (an asyncio connection class) with hiredis's C packer, made once per class."""
    import hiredis

    fast = _PACKED.get(base)
    if fast is None:
        python_pack = base.pack_command

        def pack_command(self: Any, *args: Any) -> list[bytes]:
            first = args[0]
            words = first.encode().split() if isinstance(first, str) else first.split()
            try:
                return [hiredis.pack_command((*words, *args[1:]))]
            except TypeError:
                return cast(list[bytes], python_pack(self, *args))

        fast = type(base.__name__, (base,), {"pack_command": pack_command})
        _PACKED[base] = _PACKED[fast] = fast
    return fast


def packed_in_c(target: Any) -> None:
    """Make the new connections of an asyncio connection pool, or of every node of an asyncio
    cluster client, pack commands with hiredis's C packer, as redis-py's sync connections
    already do (its asyncio ones pack in Python, one argument at a time: most of a bulk
    enqueue's client CPU). The bytes sent are the same; an argument the C packer refuses goes
    through redis-py's own packer, so errors are redis-py's too. (hiredis comes with emq's
    ``redis[hiredis]`` dependency.)"""
    if isinstance(target, AsyncRedisCluster):
        manager: Any = target.nodes_manager  # redis-py's cluster internals are untyped
        kwargs = manager.connection_kwargs
        kwargs["connection_class"] = _packed_class(kwargs["connection_class"])
        for node in manager.startup_nodes.values():
            node.connection_class = _packed_class(node.connection_class)
        return
    target.connection_class = _packed_class(target.connection_class)
