"""AsyncQueue is the awaitable twin of Queue: the same calls, the same results."""

from __future__ import annotations

import asyncio

import pytest
import redis

from emq import AsyncQueue, LeaseLost

from ..support.helpers import assert_consistent, expire_leases

pytestmark = pytest.mark.servers("valkey", "redis", "cluster")


async def test_full_lifecycle(aqueue: AsyncQueue, client: redis.Redis) -> None:
    ids = await aqueue.enqueue_many([("x", {"i": i}) for i in range(10)])
    dup = await aqueue.enqueue("x", {"i": 0}, id=ids[0])
    assert not dup.created
    claimed = await aqueue.claim(count=4, lease_ms=30_000)
    assert [c.id for c in claimed] == ids[:4]
    await aqueue.extend(claimed[0].id, claimed[0].token)
    await aqueue.complete(claimed[0].id, claimed[0].token)
    assert await aqueue.fail(claimed[1].id, claimed[1].token, "e", retry=False) == "dead"
    assert await aqueue.delay(claimed[2].id, claimed[2].token, 10_000) == "scheduled"
    expire_leases(client, aqueue.name, claimed[3].id)
    r = await aqueue.sweep_all()
    assert r.recovered == [claimed[3].id]
    with pytest.raises(LeaseLost):
        await aqueue.complete(claimed[3].id, claimed[3].token)
    assert await aqueue.redrive(claimed[1].id)
    counts = await aqueue.counts()
    assert (counts["completed"], counts["pending"], counts["schedule"], counts["dead"]) == (
        1,
        8,
        1,
        0,
    )
    job = await aqueue.job(ids[5])
    assert job is not None and job.payload == {"i": 5}
    assert len(await aqueue.jobs("pending", 0, 3)) == 3
    assert await aqueue.pause() and await aqueue.is_paused()
    assert await aqueue.claim(count=5) == []
    assert await aqueue.resume()
    assert await aqueue.drain() == 9
    assert_consistent(client, aqueue.name)
    assert await aqueue.obliterate() == 0
    await aqueue.close()


async def test_concurrent_enqueues_mint_distinct_ids(aqueue: AsyncQueue) -> None:
    batches = await asyncio.gather(
        *(aqueue.enqueue_many([("x", i) for i in range(100)]) for _ in range(10))
    )
    ids = [i for b in batches for i in b]
    assert len(set(ids)) == 1000 and all(i.created for i in ids)
    assert (await aqueue.counts())["pending"] == 1000
    await aqueue.close()
