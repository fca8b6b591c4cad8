"""Queue.cancel on real servers, driven by hand (no worker): each state's answer, what the row
and the sets hold afterwards, and the scripts that end a job with a cancel requested (fail,
delay, the sweep) or start it again (redrive). The worker's side is in test_cancel_worker.py."""

from __future__ import annotations

import pytest
import redis

from emq import (
    Answer,
    AsyncQueue,
    Cancel,
    CancelRequested,
    InvalidId,
    InvalidOption,
    JobNotFound,
    Queue,
    QueueOptions,
)
from emq.calls.control import MAX_REASON
from emq.model.keys import QueueKeys

from ..support.helpers import expire_leases, where
from ..support.lanes_check import check_lanes

pytestmark = pytest.mark.servers("valkey", "redis", "cluster")


def events(client: redis.Redis, queue: str, name: str) -> list[dict[str, str]]:
    """The fields of every event called ``name`` in the queue's stream, oldest first."""
    entries = client.xrange(QueueKeys.of(queue).events)
    return [fields for _, fields in entries if fields.get("event") == name]


def test_cancel_a_waiting_job_makes_it_dead_at_once(queue: Queue, client: redis.Redis) -> None:
    job = queue.enqueue("send", {"to": "a"})
    other = queue.enqueue("send", {"to": "b"})
    assert queue.cancel(job, "no longer needed") is Cancel.CANCELLED
    row = queue.job(job)
    assert row is not None and row.state == "dead"
    assert row.cancelled == "no longer needed" and row.cancel_requested is None
    assert row.last_error == "cancelled: no longer needed"
    assert where(client, queue.name, job) == ["dead"]
    assert [c.id for c in queue.claim(count=10)] == [other]  # it never runs
    (ev,) = events(client, queue.name, "cancelled")
    assert (ev["job"], ev["from"], ev["reason"]) == (job, "pending", "no longer needed")
    assert client.hget(queue.core.keys.metrics, "cancelled") == "1"
    check_lanes(client, queue.name)


def test_cancel_a_waiting_job_of_a_named_lane_keeps_the_lane_consistent(
    queue: Queue, client: redis.Redis
) -> None:
    jobs = [queue.enqueue("send", {"i": i}, lane="tenant-1") for i in range(3)]
    plain = queue.enqueue("send", {"i": "plain"})
    assert queue.cancel(jobs[1]) is Cancel.CANCELLED
    check_lanes(client, queue.name)
    claimed = {c.id for c in queue.claim(count=10)}
    assert claimed == {jobs[0], jobs[2], plain}
    row = queue.job(jobs[1])
    assert row is not None and (row.state, row.cancelled, row.last_error) == (
        "dead",
        "",
        "cancelled",
    )
    check_lanes(client, queue.name)


def test_cancel_a_scheduled_job(queue: Queue, client: redis.Redis) -> None:
    job = queue.enqueue("later", None, delay_ms=60_000)
    assert queue.cancel(job) is Cancel.CANCELLED
    assert where(client, queue.name, job) == ["dead"]
    client.zadd(queue.core.keys.schedule, {job: 1})  # even "due" by hand: it is not there
    client.zrem(queue.core.keys.schedule, job)
    assert queue.claim() == []
    (ev,) = events(client, queue.name, "cancelled")
    assert ev["from"] == "schedule"
    check_lanes(client, queue.name)


def test_cancel_dead_cancelled_and_missing(queue: Queue, client: redis.Redis) -> None:
    job = queue.enqueue("x", None, max_attempts=1)
    (c,) = queue.claim()
    assert queue.fail(job, c.token, "boom") == "dead"
    assert queue.cancel(job, "late") is Cancel.DEAD  # unchanged
    row = queue.job(job)
    assert row is not None and row.last_error == "boom" and row.cancelled is None
    gone = queue.enqueue("y", None)
    assert queue.cancel(gone) is Cancel.CANCELLED
    assert queue.cancel(gone, "again") is Cancel.CANCELLED  # idempotent, first reason kept
    assert queue.job(gone).cancelled == ""  # type: ignore[union-attr]
    with pytest.raises(JobNotFound, match="does not exist"):
        queue.cancel(queue.new_id())
    assert len(events(client, queue.name, "cancelled")) == 1
    check_lanes(client, queue.name)


def test_cancel_a_kept_completed_job_answers_completed(url: str, qname: str) -> None:
    q = Queue.from_url(url, qname, options=QueueOptions(keep_completed=(60_000, 10)))
    try:
        job = q.enqueue("x", None)
        (c,) = q.claim()
        q.complete(job, c.token)
        row = q.job(job)
        assert row is not None and row.state == "completed"
        assert q.cancel(job) is Cancel.COMPLETED
        assert q.job(job).state == "completed"  # type: ignore[union-attr]
    finally:
        q.close()


def test_cancel_a_leased_job_asks_its_worker(queue: Queue, client: redis.Redis) -> None:
    job = queue.enqueue("long", None, max_attempts=5)
    (c,) = queue.claim(lease_ms=5_000)
    assert queue.cancel(job, "stop it") is Cancel.REQUESTED
    assert queue.cancel(job, "second") is Cancel.REQUESTED  # the first reason is kept
    row = queue.job(job)
    assert row is not None and (row.state, row.cancel_requested) == ("active", "stop it")
    assert len(events(client, queue.name, "cancel_requested")) == 1
    before = client.zscore(queue.core.keys.active, job)
    # the heartbeat's answer carries it, and the lease is still extended
    assert queue.extend_many([(job, c.token)], 60_000) == [Answer.CANCELLED]
    assert client.zscore(queue.core.keys.active, job) > before  # type: ignore[operator]
    with pytest.raises(CancelRequested):
        queue.extend(job, c.token, 60_000)
    # the worker's fail, even one asking for a retry, ends it dead, cancelled
    assert queue.fail(job, c.token, "stopped", retry=True) == Answer.CANCELLED
    row = queue.job(job)
    assert row is not None and row.state == "dead" and row.cancelled == "stop it"
    assert row.cancel_requested is None and row.last_error == "cancelled: stop it"
    (ev,) = events(client, queue.name, "cancelled")
    assert ev["from"] == "active"
    assert queue.cancel(job) is Cancel.CANCELLED
    check_lanes(client, queue.name)


def test_a_cancel_its_worker_carried_out_counts_as_cancelled_not_failed(
    queue: Queue, client: redis.Redis
) -> None:
    """A running job's cancel ends through ``fail``: it is counted in ``cancelled`` only, so
    ``failed`` (and the dashboard's failure rate) counts failed attempts, not cancels."""
    a, b = queue.enqueue("send", None, max_attempts=2), queue.enqueue("send", None)
    ca, cb = sorted(queue.claim(2), key=lambda c: c.id != a)
    assert queue.cancel(b, "stop") is Cancel.REQUESTED
    assert queue.fail(ca.id, ca.token, "boom", delay_ms=0) == "scheduled"
    assert queue.fail(cb.id, cb.token, "cancelled: stop") == Answer.CANCELLED
    metrics = client.hgetall(QueueKeys.of(queue.name).metrics)
    assert (metrics.get("failed"), metrics.get("cancelled"), metrics.get("dead")) == (
        "1",
        "1",
        None,
    )
    assert queue.counts()["failed"] == 1


def test_a_stale_token_cannot_end_a_cancel_requested_job(queue: Queue, client: redis.Redis) -> None:
    job = queue.enqueue("long", None)
    (c,) = queue.claim(lease_ms=5_000)
    queue.cancel(job)
    assert queue.fail_many([(job, c.token + 1, "x", False, None)]) == [Answer.LOST]
    assert where(client, queue.name, job) == ["active"]
    check_lanes(client, queue.name)


def test_a_rate_limited_hold_of_a_cancel_requested_job_ends_it(
    queue: Queue, client: redis.Redis
) -> None:
    job = queue.enqueue("call", None, lane="tenant-1")
    (c,) = queue.claim(lease_ms=5_000)
    queue.cancel(job, "r")
    assert queue.delay_many([(job, c.token, 0, 1_000, "tenant-1")]) == [Answer.CANCELLED]
    row = queue.job(job)
    assert row is not None and (row.state, row.cancelled, row.attempts) == ("dead", "r", 1)
    assert client.zscore(queue.core.keys.lanes("later"), "tenant-1") is not None  # still held
    check_lanes(client, queue.name)


def test_the_sweep_dead_letters_a_cancel_requested_lapsed_lease(
    queue: Queue, client: redis.Redis
) -> None:
    job = queue.enqueue("long", None, lane="tenant-1")
    other = queue.enqueue("long", None, lane="tenant-1")
    claimed = queue.claim(count=2, lease_ms=5_000)
    assert {c.id for c in claimed} == {job, other}
    queue.cancel(job, "gone away")
    expire_leases(client, queue.name)
    r = queue.sweep_stalled()
    assert (r.cancelled, r.recovered, r.dead) == ([job], [other], [])
    row = queue.job(job)
    assert row is not None and (row.state, row.stalled, row.cancelled) == ("dead", 0, "gone away")
    assert queue.counts()["recovered"] == 1  # only the other one
    check_lanes(client, queue.name)


def test_redrive_runs_a_cancelled_job_normally(queue: Queue, client: redis.Redis) -> None:
    job = queue.enqueue("x", {"n": 1}, lane="tenant-1")
    queue.cancel(job, "oops")
    assert queue.redrive(job)
    row = queue.job(job)
    assert row is not None and row.state == "pending"
    assert (row.cancelled, row.cancel_requested) == (None, None)
    (c,) = queue.claim(lease_ms=5_000)
    assert c.id == job and c.payload == {"n": 1}
    assert queue.extend_many([(job, c.token)], 5_000)[0] not in (Answer.CANCELLED, Answer.LOST)
    queue.complete(job, c.token)
    check_lanes(client, queue.name)


def test_result_waiters_are_told_of_a_cancel(queue: Queue, client: redis.Redis) -> None:
    """A result() caller registered on the row (its 'waiters' count) gets one message each."""
    job = queue.enqueue("x", None)
    client.hincrby(queue.core.keys.job(job), "waiters", 2)
    queue.cancel(job, "why")
    assert client.lrange(queue.core.keys.done(job), 0, -1) == ["cancelled\ncancelled: why"] * 2


@pytest.mark.parametrize(
    ("job_id", "reason", "error", "says"),
    [
        ("nope", "", InvalidId, "job id"),
        (None, "", InvalidId, "job id"),
        ("JOB00000000001", 42, InvalidOption, "reason must be a string"),
        ("JOB00000000001", None, InvalidOption, "reason must be a string"),
        ("JOB00000000001", "x" * (MAX_REASON + 1), InvalidOption, "at most 1000"),
        ("JOB00000000001", "bad \ud800", InvalidOption, "lone surrogate"),
    ],
)
def test_bad_input_is_refused_before_anything_is_written(
    queue: Queue, client: redis.Redis, job_id: object, reason: object, error: type, says: str
) -> None:
    job = queue.enqueue("x", None)
    before = {k: client.type(k) for k in client.scan_iter(match=queue.core.keys.prefix + "*")}
    events_before = client.xlen(queue.core.keys.events)
    with pytest.raises(error, match=says):
        queue.cancel(job_id, reason)  # type: ignore[arg-type]
    after = {k: client.type(k) for k in client.scan_iter(match=queue.core.keys.prefix + "*")}
    assert after == before and client.xlen(queue.core.keys.events) == events_before
    assert where(client, queue.name, job) == ["pending"]


def test_a_reason_of_the_largest_size_is_kept_whole(queue: Queue) -> None:
    job = queue.enqueue("x", None)
    reason = "é" * MAX_REASON
    assert queue.cancel(job, reason) is Cancel.CANCELLED
    assert queue.job(job).cancelled == reason  # type: ignore[union-attr]


async def test_async_twin(aqueue: AsyncQueue, client: redis.Redis) -> None:
    job = await aqueue.enqueue("x", None)
    assert await aqueue.cancel(job, "a") is Cancel.CANCELLED
    with pytest.raises(JobNotFound):
        await aqueue.cancel(await aqueue.new_id())
    await aqueue.close()
    check_lanes(client, aqueue.name)
