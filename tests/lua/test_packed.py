"""Keyspace layout 3: a waiting job of the common case packed without a row (docs/keyspace.md,
Packed waiting jobs), driven through every script that meets one, with G1 checked after each
step: claim order across packed jobs and rows, unpacking by id, tombstones in ``ready``, lane
mode over a packed backlog, drain and obliterate, and the upgrade of a layout-2 queue."""

from __future__ import annotations

import pytest
import redis

from emq import Answer, JobSpec, Queue, ResultTimeout

from ..support.helpers import assert_consistent, where

pytestmark = pytest.mark.servers("valkey", "redis", "cluster")


def packed_ids(client: redis.Redis, queue: Queue) -> set[str]:
    return set(client.hkeys(queue.core.keys.packed))


def test_the_common_case_is_packed_and_the_rest_get_rows(queue: Queue, client: redis.Redis) -> None:
    k = queue.core.keys
    plain = queue.enqueue("send", {"to": "a@b"})
    ranked = queue.enqueue("send", 1, priority=2)
    later = queue.enqueue("send", 2, delay_ms=60_000)
    keyed = queue.enqueue("send", 3, key="once")
    lifo = queue.enqueue("send", 4, lifo=True)
    assert packed_ids(client, queue) == {plain}
    assert not client.exists(k.job(plain))
    assert all(client.exists(k.job(i)) for i in (ranked, later, keyed, lifo))
    assert client.hget(k.meta, "layout") == "3"
    job = queue.job(plain)
    assert job is not None and (job.state, job.name) == ("pending", "send")
    assert job.payload == {"to": "a@b"}
    assert (job.attempts, job.stalled, job.token, job.priority) == (0, 0, 0, 0)
    assert queue.counts()["pending"] == 4 and queue.counts()["schedule"] == 1
    assert where(client, queue.name, plain) == ["pending"]
    assert_consistent(client, queue.name)


def test_claim_serves_priorities_first_and_merges_rows_with_packed_jobs_by_id(
    queue: Queue, client: redis.Redis
) -> None:
    oldest = queue.new_id()  # minted first: a row at priority 0 that must come first among 0s
    urgent = queue.enqueue("n", "urgent", priority=-1)
    a = queue.enqueue("n", "a")
    b = queue.enqueue("n", "b")
    queue.enqueue_many([JobSpec("n", "oldest", id=oldest, priority=3)])
    queue.set_priority(oldest, 0)  # a row in pending at score 0, older than a and b
    late = queue.enqueue("n", "late", priority=5)
    c = queue.enqueue("n", "c")
    assert packed_ids(client, queue) == {a, b, c}
    order = [job.id for job in queue.claim(2)] + [job.id for job in queue.claim(10)]
    assert order == [urgent, oldest, a, b, c, late]
    assert not client.exists(queue.core.keys.packed, queue.core.keys.ready)
    assert_consistent(client, queue.name)


def test_a_claim_makes_the_row_and_the_job_ends_like_any_other(
    queue: Queue, client: redis.Redis
) -> None:
    job_id = queue.enqueue("send", {"x": 1})
    (leased,) = queue.claim(1, worker="w-1")
    assert (leased.attempts, leased.stalled, leased.name) == (1, 0, "send")
    assert leased.payload == {"x": 1}
    row = client.hgetall(queue.core.keys.job(job_id))
    assert row["state"] == "active" and row["worker"] == "w-1" and row["token"] == str(leased.token)
    assert queue.complete_many([(job_id, leased.token)]) == [Answer.COMPLETED]
    assert queue.job(job_id) is None
    assert_consistent(client, queue.name)


def test_a_stale_call_on_a_packed_job_is_lost_never_gone(queue: Queue, client: redis.Redis) -> None:
    job_id = queue.enqueue("n", 1)
    assert queue.complete_many([(job_id, 7)]) == [Answer.LOST]
    assert queue.extend_many([(job_id, 7)], 1_000) == [Answer.LOST]
    assert queue.fail_many([(job_id, 7, "x", True, None)]) == [Answer.LOST]
    assert queue.delay_many([(job_id, 7, 0)]) == [Answer.LOST]
    assert packed_ids(client, queue) == {job_id}, "nothing was unpacked"
    lost = [e for e in queue.events() if e.event == "lease_lost"]
    assert len(lost) == 4 and all(e.job == job_id for e in lost)
    assert_consistent(client, queue.name)


@pytest.mark.parametrize("edit", ["cancel", "remove", "set_priority", "update_payload", "result"])
def test_an_edit_by_id_unpacks_the_job_and_claim_skips_its_tombstone(
    queue: Queue, client: redis.Redis, edit: str
) -> None:
    k = queue.core.keys
    first, target, last = (queue.enqueue("n", i) for i in range(3))
    if edit == "cancel":
        queue.cancel(target, reason="no")
    elif edit == "remove":
        queue.remove(target)
    elif edit == "set_priority":
        queue.set_priority(target, 0)
    elif edit == "update_payload":
        queue.update_payload(target, {"new": True})
    else:
        with pytest.raises(ResultTimeout):  # a waiter is counted on the job's row
            queue.result(target, timeout_s=0.05)
    assert target not in packed_ids(client, queue)
    assert client.lrange(k.ready, 0, -1) == [first, target, last], "a tombstone stays in ready"
    assert_consistent(client, queue.name)
    claimed = [job.id for job in queue.claim(10)]
    if edit in ("cancel", "remove"):
        assert claimed == [first, last]
    else:
        assert claimed == [first, target, last], "the unpacked job keeps its place (id order)"
    if edit == "update_payload":
        updated = queue.job(target)
        assert updated is not None and updated.payload == {"new": True}
    assert client.llen(k.ready) == 0
    assert_consistent(client, queue.name)


def test_an_id_packed_again_after_its_end_runs_once(queue: Queue, client: redis.Redis) -> None:
    job_id = queue.new_id()
    queue.enqueue_many([JobSpec("n", 1, id=job_id)])
    queue.remove(job_id)  # its id stays in ready as a tombstone
    queue.enqueue_many([JobSpec("n", 1, id=job_id)])  # packed again, pushed again
    assert client.lrange(queue.core.keys.ready, 0, -1) == [job_id, job_id]
    assert [job.id for job in queue.claim(10)] == [job_id], "served once, never twice"
    assert queue.claim(10) == [] and client.llen(queue.core.keys.ready) == 0
    assert_consistent(client, queue.name)


def test_lane_mode_serves_a_packed_backlog_in_the_default_lane(
    queue: Queue, client: redis.Redis
) -> None:
    backlog = queue.enqueue_many([("n", i) for i in range(30)])
    laned = queue.enqueue("n", "laned", lane="tenant-a")  # turns lane mode on
    assert client.hget(queue.core.keys.meta, "lanes") == "1"
    fresh = queue.enqueue("n", "fresh")  # lane mode: a row in the default lane
    assert fresh not in packed_ids(client, queue)
    (default,) = [lane for lane in queue.lanes() if lane.name == "default"]
    assert default.pending == 31
    seen: list[str] = []
    for _ in range(40):  # bounded: 32 jobs
        got = queue.claim(5)
        if not got:
            break
        seen += [job.id for job in got]
        assert_consistent(client, queue.name)
    assert sorted(seen) == sorted([*backlog, laned, fresh]) and len(seen) == 32
    default_order = [i for i in seen if i != laned]
    assert default_order == [*backlog, fresh], "FIFO in the default lane"


def test_drain_and_obliterate_take_packed_jobs_in_bounded_calls(
    queue: Queue, client: redis.Redis
) -> None:
    k = queue.core.keys
    ids = queue.enqueue_many([("n", i) for i in range(25)])
    queue.remove(ids[0])  # a tombstone
    queue.enqueue("n", "ranked", priority=1)
    assert queue.drain() == 25  # the queue's own loop, in calls of its limit
    assert not client.exists(k.packed, k.ready, k.pending)
    queue.enqueue_many([("n", i) for i in range(10)])
    queue.obliterate()
    assert not client.exists(k.packed, k.ready, k.meta)


def test_an_upgraded_layout_2_queue_serves_its_rows_then_packs(
    queue: Queue, client: redis.Redis
) -> None:
    k = queue.core.keys
    client.hset(k.meta, "layout", "2")  # a queue a layout-2 emq made
    old = queue.enqueue_many([("n", i) for i in range(3)])
    assert not client.exists(k.packed) and client.zcard(k.pending) == 3, "layout 2: rows"
    assert queue.upgrade() == (2, 3)
    new = queue.enqueue_many([("n", i) for i in range(3)])
    assert packed_ids(client, queue) == set(new)
    assert_consistent(client, queue.name)
    assert [job.id for job in queue.claim(10)] == [*old, *new], "FIFO across the layouts"
    assert_consistent(client, queue.name)


def test_a_packed_entry_damaged_by_hand_is_dropped_as_missing(
    queue: Queue, client: redis.Redis
) -> None:
    """A claim that meets an entry not in the packed shape counts and reports it as missing,
    as a vanished row is, instead of failing the call for every job behind it."""
    a, b, c = queue.enqueue_many([("n", i) for i in range(3)])
    client.hset(queue.core.keys.packed, b, "no-spaces-here")
    claims = queue.claim(3)
    assert [j.id for j in claims] == [a, c] and claims.missing == [b]
    assert int(client.hget(queue.core.keys.metrics, "missing") or 0) == 1
    assert b not in packed_ids(client, queue)
    assert_consistent(client, queue.name)
