"""The asyncio clients emq makes pack commands with hiredis's C packer (emq.server.clients
packed_in_c): the bytes on the wire are redis-py's own, and what the C packer refuses is
refused as redis-py refuses it."""

from __future__ import annotations

from typing import Any

import pytest
import redis.asyncio
from redis.exceptions import DataError

from emq import AsyncQueue
from emq.server.clients import async_client
from emq.server.packing import packed_in_c

ARGS: list[tuple[Any, ...]] = [
    ("EVALSHA", "a" * 40, 2, "k1", "k2", "", 0, -5, 2**70, 0.1, 1e20, "ünïcødé", b"\x00\xff"),
    ("CONFIG GET", "maxmemory"),  # a command name with its subcommand in one string
    (b"CLIENT INFO",),
    ("SET", "big", "x" * 100_000),  # past redis-py's buffer cutoff
]


async def test_the_c_packer_sends_redis_pys_bytes(url: str) -> None:
    client = async_client(url)
    try:
        pool = client.connection_pool
        fast = pool.connection_class
        base = fast.__mro__[1]
        assert fast is not base and fast.__name__ == base.__name__
        conn = pool.make_connection()
        python = base(**pool.connection_kwargs)
        for args in ARGS:
            assert b"".join(conn.pack_command(*args)) == b"".join(python.pack_command(*args))
        with pytest.raises(DataError):
            conn.pack_command("SET", "k", True)  # what redis-py refuses, refused the same way
        with pytest.raises(DataError):
            python.pack_command("SET", "k", True)
    finally:
        await client.aclose()


async def test_values_round_trip_through_the_c_packer(url: str, qname: str) -> None:
    client = async_client(url, decode_responses=True)
    try:
        await client.set(f"{qname}:text", "ünïcødé")
        await client.set(f"{qname}:int", 2**70)
        await client.set(f"{qname}:float", 0.1)
        got = await client.mget(f"{qname}:text", f"{qname}:int", f"{qname}:float")
        assert got == ["ünïcødé", str(2**70), "0.1"]
        await client.delete(f"{qname}:text", f"{qname}:int", f"{qname}:float")
    finally:
        await client.aclose()


async def test_a_bulk_enqueue_through_the_c_packer_is_whole(url: str, qname: str) -> None:
    q = AsyncQueue.from_url(url, qname)
    try:
        payloads = [{"i": i, "text": "ünï" * (i % 7)} for i in range(2_500)]
        ids = await q.enqueue_many([("noop", p) for p in payloads])
        assert len(set(ids)) == 2_500
        jobs = await q.claim(1_000)
        seen = {job.id: job.payload for job in jobs}
        assert all(seen[i] == payloads[ids.index(i)] for i in seen)
    finally:
        await q.close()


def test_a_pool_is_packed_once_per_connection_class() -> None:
    pools = [redis.asyncio.ConnectionPool(), redis.asyncio.ConnectionPool()]
    for pool in pools:
        packed_in_c(pool)
    assert pools[0].connection_class is pools[1].connection_class
    packed_in_c(pools[0])  # again: the packed class is not wrapped twice
    assert pools[0].connection_class.__mro__[1] is redis.asyncio.Connection


async def test_a_cluster_clients_nodes_pack_in_c(cluster_server: Any, qname: str) -> None:
    """Every node of an asyncio cluster client emq makes, the ones it learns later included,
    packs in C; a bulk enqueue across the cluster's slot still lands whole."""
    client = async_client(cluster_server.url())
    try:
        await client.ping()  # learns the slot map: nodes beyond the URL's
        nodes = client.get_nodes()  # type: ignore[attr-defined]
        assert len(nodes) >= 3
        assert all(n.connection_class.__mro__[1] is redis.asyncio.Connection for n in nodes)
    finally:
        await client.aclose()
    q = AsyncQueue.from_url(cluster_server.url(), qname)
    try:
        ids = await q.enqueue_many([("noop", {"i": i}) for i in range(1_500)])
        assert len(set(ids)) == 1_500
        assert (await q.counts())["pending"] == 1_500
    finally:
        await q.close()
