"""A job read back says when it runs: ``run_at_ms`` (its score in the schedule) and, while it
is leased, ``lease_deadline_ms`` (its score in active), read with its row."""

from __future__ import annotations

import pytest
import redis

from emq import AsyncQueue, Queue
from emq.model.keys import QueueKeys

from ..support.helpers import assert_consistent

pytestmark = pytest.mark.servers("valkey", "redis", "cluster")


def test_delayed_retrying_and_active_jobs_say_when(queue: Queue, client: redis.Redis) -> None:
    k = QueueKeys.of(queue.name)
    delayed = queue.enqueue("later", delay_ms=600_000)
    waiting = queue.enqueue("now")
    (held,) = queue.claim(1, lease_ms=60_000)
    assert held.id == waiting

    job = queue.job(delayed)
    assert job is not None and job.state == "scheduled"
    assert job.run_at_ms == client.zscore(k.schedule, delayed) and job.lease_deadline_ms is None

    active = queue.job(waiting)
    assert active is not None and active.state == "active" and active.run_at_ms is None
    assert active.lease_deadline_ms == held.deadline_ms == client.zscore(k.active, waiting)
    assert active.claimed_at == held.token // 1000

    assert queue.fail(held.id, held.token, "boom", delay_ms=300_000) == "scheduled"
    retrying = queue.job(waiting)
    assert retrying is not None and retrying.state == "scheduled"
    assert retrying.run_at_ms == client.zscore(k.schedule, waiting)
    assert retrying.lease_deadline_ms is None
    listed = queue.jobs("schedule")  # the schedule's order: the retry is due first
    assert [(j.id, j.run_at_ms) for j in listed] == [
        (i, client.zscore(k.schedule, i)) for i in (waiting, delayed)
    ]
    assert queue.jobs("pending") == []
    assert_consistent(client, queue.name)


async def test_the_async_twin_reads_them_too(aqueue: AsyncQueue, client: redis.Redis) -> None:
    k = QueueKeys.of(aqueue.name)
    first = await aqueue.enqueue("x")
    await aqueue.enqueue("y", delay_ms=600_000)
    (held,) = await aqueue.claim(1, lease_ms=60_000)
    assert held.id == first
    (active,) = await aqueue.jobs("active")
    assert active.lease_deadline_ms == held.deadline_ms == client.zscore(k.active, first)
    (scheduled,) = await aqueue.jobs("schedule")
    assert scheduled.run_at_ms == client.zscore(k.schedule, scheduled.id)
    await aqueue.close()
