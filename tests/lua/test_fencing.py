"""G4 fencing: a lapsed lease's token changes nothing once the job moved on (an extend refuses, a
late completion leaves no id without a row nor in two sets)."""

from __future__ import annotations

import pytest
import redis

from emq import Answer, Claimed, LeaseLost, Queue

from ..support.helpers import assert_consistent, expire_leases, where

pytestmark = pytest.mark.servers("valkey", "redis")  # one queue's keys only: no cross-slot path


def _snapshot(client: redis.Redis, queue: Queue, job_id: str) -> tuple[object, ...]:
    k = queue.core.keys
    return (
        client.hgetall(k.job(job_id)),
        where(client, queue.name, job_id),
        client.zscore(k.pending, job_id),
        client.zscore(k.active, job_id),
        client.hgetall(k.metrics),
    )


def _stale_calls(queue: Queue, old: Claimed) -> list[tuple[str, object]]:
    return [
        ("complete", lambda: queue.complete(old.id, old.token)),
        ("fail", lambda: queue.fail(old.id, old.token, "late")),
        ("extend", lambda: queue.extend(old.id, old.token, 60_000)),
        ("delay", lambda: queue.delay(old.id, old.token, 0)),
    ]


def test_swept_lease_refuses_every_finishing_call(queue: Queue, client: redis.Redis) -> None:
    job_id = queue.enqueue("x")
    old = queue.claim(lease_ms=60_000)[0]
    expire_leases(client, queue.name, job_id)
    assert queue.sweep_stalled().recovered == [job_id]
    before = _snapshot(client, queue, job_id)
    for name, call in _stale_calls(queue, old):
        with pytest.raises(LeaseLost, match=name):
            call()  # type: ignore[operator]
    assert _snapshot(client, queue, job_id) == before, "refusals change nothing"
    assert where(client, queue.name, job_id) == ["pending"], "a late extend must not re-lease it"
    new = queue.claim()[0]
    assert new.token > old.token
    assert_consistent(client, queue.name)


def test_stale_token_cannot_touch_the_new_lease(queue: Queue, client: redis.Redis) -> None:
    job_id = queue.enqueue("x")
    old = queue.claim()[0]
    expire_leases(client, queue.name)
    queue.sweep_stalled()
    new = queue.claim(lease_ms=60_000)[0]
    before = _snapshot(client, queue, job_id)
    for _, call in _stale_calls(queue, old):
        with pytest.raises(LeaseLost):
            call()  # type: ignore[operator]
    assert _snapshot(client, queue, job_id) == before
    queue.complete(new.id, new.token)
    assert queue.job(job_id) is None and where(client, queue.name, job_id) == []


def test_lapsed_but_unswept_lease_is_refused_too(queue: Queue, client: redis.Redis) -> None:
    """G5: expired means deadline <= now on the server clock, swept or not."""
    job_id = queue.enqueue("x")
    c = queue.claim()[0]
    expire_leases(client, queue.name)
    with pytest.raises(LeaseLost):
        queue.complete(c.id, c.token)
    assert where(client, queue.name, job_id) == ["active"]
    assert queue.sweep_stalled().recovered == [job_id]


def test_dead_job_cannot_be_completed_by_its_stale_worker(
    queue: Queue, client: redis.Redis
) -> None:
    """A stale completion leaves no id in dead without a row, nor in two sets."""
    job_id = queue.enqueue("x")
    old = queue.claim()[0]
    expire_leases(client, queue.name)
    assert queue.sweep_stalled(max_stalled=1).dead == [job_id]
    for _, call in _stale_calls(queue, old):
        with pytest.raises(LeaseLost):
            call()  # type: ignore[operator]
    assert where(client, queue.name, job_id) == ["dead"] and queue.job(job_id) is not None
    assert_consistent(client, queue.name)


def test_batch_calls_report_lost_per_job(queue: Queue, client: redis.Redis) -> None:
    a, b = queue.enqueue_many([("x", 1), ("x", 2)])
    ca, cb = queue.claim(count=2)
    expire_leases(client, queue.name, a)
    assert queue.complete_many([(a, ca.token), (b, cb.token)]) == [Answer.LOST, Answer.COMPLETED]
    events = [e.event for e in queue.events()]
    assert events[-2:] == ["lease_lost", "completed"]
