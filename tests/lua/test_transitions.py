"""Each transition driven against a real server; every location set checked afterwards (G1)."""

from __future__ import annotations

import pytest
import redis

from emq import (
    Answer,
    Backoff,
    DuplicateConflict,
    InvalidOption,
    JobNotFound,
    JobSpec,
    Queue,
    WrongState,
)
from emq.model.keys import QueueKeys

from ..support.helpers import assert_consistent, expiring, where

pytestmark = pytest.mark.servers("valkey", "redis", "cluster")


def server_ms(client: redis.Redis) -> int:
    """The server's clock in ms (the clock every lease and due time is on)."""
    sec, usec = client.time()
    return int(sec) * 1000 + int(usec) // 1000


def test_enqueue_one_goes_to_pending_with_a_row(queue: Queue, client: redis.Redis) -> None:
    job_id = queue.enqueue("send", {"to": "a@b"}, priority=3, max_attempts=5)
    assert job_id.created
    assert where(client, queue.name, job_id) == ["pending"]
    job = queue.job(job_id)
    assert job is not None
    assert (job.state, job.name, job.payload, job.priority, job.max_attempts) == (
        "pending",
        "send",
        {"to": "a@b"},
        3,
        5,
    )
    assert (job.attempts, job.stalled, job.token) == (0, 0, 0)
    assert client.zscore(queue.core.keys.pending, job_id) == 3
    assert_consistent(client, queue.name)


def test_enqueue_many_is_fifo_within_a_priority(queue: Queue, client: redis.Redis) -> None:
    ids = queue.enqueue_many([("n", {"i": i}) for i in range(50)])
    urgent = queue.enqueue("n", {"i": "urgent"}, priority=-1)
    claimed = queue.claim(count=51)
    assert [c.id for c in claimed] == [urgent, *ids]
    assert [c.payload["i"] for c in claimed[1:]] == list(range(50))
    assert_consistent(client, queue.name)


def test_delayed_enqueue_goes_to_schedule_and_claim_promotes_when_due(
    queue: Queue, client: redis.Redis
) -> None:
    job_id = queue.enqueue("later", delay_ms=60_000)
    assert where(client, queue.name, job_id) == ["schedule"]
    assert queue.job(job_id).state == "scheduled"  # type: ignore[union-attr]
    assert queue.claim() == []
    client.zadd(queue.core.keys.schedule, {job_id: 1}, xx=True)  # due now, by the server clock
    (c,) = queue.claim()
    assert c.id == job_id
    assert_consistent(client, queue.name)


def test_enqueue_by_id_is_idempotent(queue: Queue, client: redis.Redis) -> None:
    job_id = queue.new_id()
    first = queue.enqueue("send", {"x": 1}, id=job_id)
    again = queue.enqueue("send", {"x": 1}, id=job_id)
    assert first == again == job_id and first.created and not again.created
    assert queue.counts()["pending"] == 1
    with pytest.raises(DuplicateConflict):
        queue.enqueue("send", {"x": 2}, id=job_id)
    assert queue.job(job_id).payload == {"x": 1}  # type: ignore[union-attr]
    assert client.xlen(queue.core.keys.events) == 1


def test_a_conflict_anywhere_in_a_batch_writes_nothing(queue: Queue, client: redis.Redis) -> None:
    taken = queue.enqueue("a", 1)
    with pytest.raises(DuplicateConflict):
        queue.enqueue_many([JobSpec("b", 1), JobSpec("c", 2), JobSpec("a", 999, id=taken)])
    assert queue.counts()["pending"] == 1
    assert_consistent(client, queue.name)


def test_dedup_key_admits_one_live_job(queue: Queue, client: redis.Redis) -> None:
    a = queue.enqueue("report", {"day": 1}, key="report:1")
    b = queue.enqueue("report", {"day": 1}, key="report:1")
    assert a == b and not b.created
    both = queue.enqueue_many([JobSpec("r", 1, key="k2"), JobSpec("r", 2, key="k2")])
    assert both[0] == both[1] and both[0].created and not both[1].created
    (c, _) = queue.claim(count=2)[0], None
    queue.complete(c.id, c.token)
    assert client.get(queue.core.keys.dedup("report:1")) is None
    fresh = queue.enqueue("report", {"day": 1}, key="report:1")
    assert fresh != a and fresh.created


def test_claim_leases_on_the_server_clock(queue: Queue, client: redis.Redis) -> None:
    ids = queue.enqueue_many([("j", i) for i in range(5)])
    before = server_ms(client)
    claimed = queue.claim(count=3, lease_ms=10_000)
    after = server_ms(client)
    assert [c.id for c in claimed] == ids[:3]
    assert all(c.attempts == 1 and c.stalled == 0 for c in claimed)
    assert all(c.token >= before * 1000 for c in claimed)  # tokens carry the server clock (us)
    for c in claimed:
        score = client.zscore(queue.core.keys.active, c.id)
        assert score == c.deadline_ms and before + 10_000 <= score <= after + 10_000
    assert queue.counts()["active"] == 3 and queue.counts()["pending"] == 2
    assert_consistent(client, queue.name)


def test_claim_names_its_worker_in_the_row_until_the_next_claim(
    queue: Queue, client: redis.Redis
) -> None:
    job_id = queue.enqueue("j")
    (first,) = queue.claim(1, 10_000, worker="w-1")
    row = queue.core.keys.job(job_id)
    assert client.hget(row, "worker") == "w-1" and queue.job(job_id).worker == "w-1"  # type: ignore[union-attr]
    queue.fail(job_id, first.token, "again", delay_ms=0)
    queue.claim(1, 10_000)  # a claim naming no worker leaves no stale holder behind
    assert client.hget(row, "worker") is None and queue.job(job_id).worker is None  # type: ignore[union-attr]
    with pytest.raises(InvalidOption, match="worker must be"):
        queue.claim(1, 10_000, worker="w" * 201)
    assert_consistent(client, queue.name)


def test_extend_complete_fail_delay(queue: Queue, client: redis.Redis) -> None:
    a, b, c = queue.enqueue_many([("j", 1), ("j", 2), ("j", 3)])
    ca, cb, cc = queue.claim(count=3, lease_ms=5_000)
    deadline = queue.extend(ca.id, ca.token, lease_ms=60_000)
    assert deadline > ca.deadline_ms and client.zscore(queue.core.keys.active, a) == deadline
    queue.complete(ca.id, ca.token)
    assert where(client, queue.name, a) == [] and queue.job(a) is None
    assert queue.fail(cb.id, cb.token, "boom", delay_ms=60_000) == "scheduled"
    row = queue.job(b)
    assert row is not None and row.state == "scheduled" and row.last_error == "boom"
    assert queue.delay(cc.id, cc.token) == "pending"
    assert queue.job(c).attempts == 0  # type: ignore[union-attr]
    counts = queue.counts()
    assert (counts["completed"], counts["failed"], counts["schedule"], counts["pending"]) == (
        1,
        1,
        1,
        1,
    )
    assert_consistent(client, queue.name)


def test_delay_keeps_tokens_increasing(queue: Queue) -> None:
    queue.enqueue("j")
    first = queue.claim()[0]
    queue.delay(first.id, first.token)
    second = queue.claim()[0]
    assert second.token > first.token and second.attempts == first.attempts == 1


def test_fail_dead_letters_when_attempts_are_spent(queue: Queue, client: redis.Redis) -> None:
    job_id = queue.enqueue("flaky", max_attempts=2)
    first = queue.claim()[0]
    assert queue.fail(job_id, first.token, "e1", delay_ms=0) == "scheduled"
    second = queue.claim()[0]  # due at once: claim promotes it
    assert second.attempts == 2
    assert queue.fail(job_id, second.token, "e2") == "dead"
    row = queue.job(job_id)
    assert row is not None and row.state == "dead" and row.last_error == "e2"
    assert where(client, queue.name, job_id) == ["dead"]
    assert queue.counts()["dead_total"] == 1


def test_fail_without_retry_goes_straight_to_dead(queue: Queue) -> None:
    job_id = queue.enqueue("x", max_attempts=10)
    c = queue.claim()[0]
    assert queue.fail(job_id, c.token, "permanent", retry=False) == "dead"


def test_exponential_backoff_is_evaluated_on_the_rows_attempts(
    queue: Queue, client: redis.Redis
) -> None:
    job_id = queue.enqueue("x", max_attempts=5)
    backoff = Backoff(kind="exponential", base_ms=1_000, cap_ms=3_000, jitter=0)
    due: list[tuple[int, float, int]] = []  # server time before the fail, due time, after
    for _ in range(4):
        c = queue.claim()[0]
        before = server_ms(client)
        assert queue.fail(job_id, c.token, "e", backoff=backoff) == "scheduled"
        after = server_ms(client)
        due.append((before, client.zscore(queue.core.keys.schedule, job_id), after))
        client.zadd(queue.core.keys.schedule, {job_id: 1}, xx=True)
    expected = [1_000, 2_000, 3_000, 3_000]
    # the fail ran between the two clock reads: its "now" is in [before, after]
    assert all(b + e <= d <= a + e for (b, d, a), e in zip(due, expected, strict=True)), due


def test_jitter_shortens_the_delay_within_bounds(queue: Queue, client: redis.Redis) -> None:
    job_id = queue.enqueue("x", max_attempts=2)
    c = queue.claim()[0]
    before = server_ms(client)
    queue.fail(job_id, c.token, "e", backoff=Backoff(kind="fixed", base_ms=10_000, jitter=0.5))
    after = server_ms(client)
    due = client.zscore(queue.core.keys.schedule, job_id)
    assert due is not None and before + 5_000 <= due <= after + 10_000


def test_promote_moves_only_due_jobs(queue: Queue, client: redis.Redis) -> None:
    due, later = queue.enqueue("a", delay_ms=50_000), queue.enqueue("b", delay_ms=50_000)
    client.zadd(queue.core.keys.schedule, {due: 1}, xx=True)
    assert queue.promote_due() == [due]
    assert where(client, queue.name, due) == ["pending"]
    assert where(client, queue.name, later) == ["schedule"]
    assert client.llen(queue.core.keys.wake) >= 1
    assert_consistent(client, queue.name)


def test_redrive_resets_counters_unless_asked(queue: Queue, client: redis.Redis) -> None:
    a, b = queue.enqueue_many([("x", 1), ("x", 2)])
    first = {}
    for c in queue.claim(count=2):
        first[c.id] = c.token
        queue.fail(c.id, c.token, "no", retry=False)
    assert queue.redrive(a)
    assert queue.redrive_many([b], keep_counters=True) == [b]
    assert queue.job(a).attempts == 0 and queue.job(b).attempts == 1  # type: ignore[union-attr]
    assert not queue.redrive(a)  # no longer dead: nothing moves twice
    assert where(client, queue.name, a) == ["pending"]
    tokens = {c.id: c.token for c in queue.claim(count=2)}
    assert tokens[a] > first[a] and tokens[b] > first[b]  # tokens never reset
    assert_consistent(client, queue.name)


def test_redrive_all_in_chunks(queue: Queue) -> None:
    queue.enqueue_many([("x", i) for i in range(25)])
    queue.fail_many([(c.id, c.token, "x", False, None) for c in queue.claim(count=25)])
    assert queue.counts()["dead"] == 25
    assert queue.redrive_all(chunk=10) == 25
    assert queue.counts()["pending"] == 25


def test_remove_from_each_location(queue: Queue, client: redis.Redis) -> None:
    p = queue.enqueue("p")
    s = queue.enqueue("s", delay_ms=99_000)
    a = queue.enqueue("a", priority=-5)
    ca = queue.claim()[0]
    assert ca.id == a
    assert queue.remove(p) == "pending" and queue.remove(s) == "schedule"
    assert queue.remove(a) == "active"
    with pytest.raises(JobNotFound):
        queue.remove(p)
    assert queue.extend_many([(a, ca.token)], 1000) == [Answer.GONE]
    assert assert_consistent(client, queue.name) == {
        "pending": set(),
        "active": set(),
        "schedule": set(),
        "dead": set(),
        "waiting": set(),
    }


def test_pause_is_checked_inside_claim(queue: Queue) -> None:
    queue.enqueue("x")
    assert queue.pause() and not queue.pause()
    assert queue.is_paused()
    assert queue.claim(count=10) == []
    assert queue.counts()["pending"] == 1
    assert queue.resume() and not queue.resume()
    assert len(queue.claim()) == 1


def test_drain_keeps_leased_and_dead(queue: Queue, client: redis.Redis) -> None:
    queue.enqueue_many([("x", i) for i in range(30)])
    queue.enqueue("later", delay_ms=50_000)
    _c1, c2 = queue.claim(count=2)
    queue.fail(c2.id, c2.token, "x", retry=False)
    assert queue.drain(chunk=7) == 29
    counts = queue.counts()
    assert (counts["pending"], counts["schedule"], counts["active"], counts["dead"]) == (0, 0, 1, 1)
    assert_consistent(client, queue.name)


def test_obliterate_refuses_leased_jobs_then_deletes_everything(
    queue: Queue, client: redis.Redis
) -> None:
    queue.enqueue_many([("x", i) for i in range(40)])
    queue.enqueue("x", key="dk")
    queue.claim(count=3)
    with pytest.raises(WrongState):
        queue.obliterate()
    assert queue.obliterate(force=True, chunk=9) == 41
    left = list(client.scan_iter(match=queue.core.keys.prefix + "*"))
    assert all(expiring(k) and client.pttl(k) > 0 for k in left), "only expiring keys"


def test_events_are_appended_in_script_and_capped(
    url: str, qname: str, client: redis.Redis
) -> None:
    from emq import QueueOptions

    q = Queue.from_url(url, qname, options=QueueOptions(events_maxlen=100))
    job_id = q.enqueue("x")
    c = q.claim()[0]
    q.fail(job_id, c.token, "bad", delay_ms=0)
    events = [f for _, f in client.xrange(q.core.keys.events)]
    assert [e["event"] for e in events] == ["enqueued", "claimed", "retrying"]
    assert events[2]["error"] == "bad" and events[2]["attempts"] == "1"
    assert all(e["job"] == job_id for e in events)
    q.enqueue_many([("x", i) for i in range(1000)])
    assert client.xlen(q.core.keys.events) < 400  # approximate MAXLEN trims in whole nodes
    off = Queue.from_url(url, qname + "-off", options=QueueOptions(events_maxlen=0))
    off.enqueue("x")
    assert not client.exists(off.core.keys.events)
    q.close()
    off.close()


def test_counts_and_jobs_listing(queue: Queue) -> None:
    ids = queue.enqueue_many([("x", i) for i in range(5)])
    listed = queue.jobs("pending", offset=1, limit=2)
    assert [j.id for j in listed] == ids[1:3]
    counts = queue.counts()
    assert counts["pending"] == 5 and counts["completed"] == 0
    assert set(counts) >= {"pending", "active", "schedule", "dead", "completed"}


def test_missing_row_keys_stay_isolated(queue: Queue, client: redis.Redis) -> None:
    other = Queue(client, queue.name + "-b")
    queue.enqueue("x")
    assert other.counts()["pending"] == 0
    assert all(
        k.startswith(QueueKeys.of(queue.name).prefix)
        for k in client.scan_iter(match=f"emq:{{{queue.name}}}*")
    )


def test_a_resent_claim_returns_the_same_jobs(queue: Queue, client: redis.Redis) -> None:
    """A claim whose reply was lost and is sent again (same request id) leases nothing more."""
    queue.enqueue_many([("x", i) for i in range(5)])
    first = queue.claim(2, 30_000, request="req-1")
    again = queue.claim(2, 30_000, request="req-1")
    assert first == again and len(first) == 2
    assert queue.counts()["active"] == 2 and queue.counts()["pending"] == 3
    other = queue.claim(count=2)
    assert {c.id for c in other}.isdisjoint({c.id for c in first})


def test_completing_a_gone_row_is_not_a_lease_lost_event(queue: Queue, client: redis.Redis) -> None:
    job_id = queue.enqueue("x")
    c = queue.claim()[0]
    queue.complete(job_id, c.token)
    assert queue.complete_many([(job_id, c.token)]) == [Answer.GONE]
    assert queue.extend_many([(job_id, c.token)], 1000) == [Answer.GONE]  # a crossing beat
    with pytest.raises(JobNotFound):
        queue.complete(job_id, c.token)
    with pytest.raises(JobNotFound):  # an id that never existed
        queue.complete(queue.new_id(), 1)
    assert [f["event"] for _, f in client.xrange(queue.core.keys.events)][-1] == "completed"


def test_obliterate_hands_retention_back_to_the_scripts(queue: Queue, client: redis.Redis) -> None:
    k = queue.core.keys
    queue.enqueue("x")
    client.set(k.events_archived, "0-1")
    client.set(k.events_archiver, "floor-1", px=60_000)
    queue.obliterate(force=True)
    assert not client.exists(k.events_archived, k.events_archiver)


def test_large_batches_are_pipelined_and_keep_fifo(queue: Queue, client: redis.Redis) -> None:
    client.script_flush()  # every pipelined chunk answers NOSCRIPT once and is re-run alone
    ids = queue.enqueue_many([("x", {"i": i}) for i in range(3500)])
    assert len(set(ids)) == 3500 and all(i.created for i in ids)
    assert client.lrange(queue.core.keys.ready, 0, -1) == ids  # packed, in order (layout 3)
    again = queue.enqueue_many(
        [JobSpec("x", {"i": i}, id=job_id) for i, job_id in enumerate(ids[:1500])]
    )
    assert not any(i.created for i in again) and queue.counts()["pending"] == 3500
    assert_consistent(client, queue.name)


async def test_large_async_batches_keep_fifo(url: str, qname: str, client: redis.Redis) -> None:
    from emq import AsyncQueue

    q = AsyncQueue.from_url(url, qname)
    client.script_flush()
    ids = await q.enqueue_many([("x", i) for i in range(4200)])
    assert len(set(ids)) == 4200 and client.lrange(q.core.keys.ready, 0, -1) == ids
    assert (await q.counts())["pending"] == 4200
    await q.close()


def test_an_id_repeated_inside_one_batch(queue: Queue) -> None:
    job_id = queue.new_id()
    same = queue.enqueue_many([JobSpec("a", 1, id=job_id), JobSpec("a", 1, id=job_id)])
    assert [i.created for i in same] == [True, False]
    other = queue.new_id()
    with pytest.raises(DuplicateConflict):
        queue.enqueue_many([JobSpec("a", 1, id=other), JobSpec("a", 2, id=other)])
    assert queue.job(other) is None and queue.counts()["pending"] == 1


def test_a_stored_claim_reply_lives_at_most_a_minute(queue: Queue, client: redis.Redis) -> None:
    queue.enqueue("x")
    queue.claim(1, lease_ms=3_600_000, request="long")
    assert 0 < client.pttl(queue.core.keys.claim_reply("long")) <= 60_000


def test_a_waiting_row_stores_no_start_values(queue: Queue, client: redis.Redis) -> None:
    """attempts, stalled, token and created_at are not stored until they mean something;
    they read as 0 (created_at: the id's mint time), and every transition still tells a row
    that exists from one that does not. A job of the common case has no row at all while it
    waits (packed, layout 3); one with a priority has a row of five fields."""
    from emq.model.ids import minted_at_ms

    k = queue.core.keys
    ranked = queue.enqueue("send", {"to": "a@b"}, priority=2)
    assert set(client.hgetall(k.job(ranked))) == {
        "state", "name", "payload", "priority", "max_attempts"
    }  # fmt: skip
    job_id = queue.enqueue("send", {"to": "a@b"})
    assert not client.exists(k.job(job_id))
    most = client.hget(k.job(ranked), "max_attempts")
    assert client.hget(k.packed, job_id) == f'send {most}  {{"to":"a@b"}}'  # no trace: two spaces
    assert client.lrange(k.ready, 0, -1) == [job_id]
    job = queue.job(job_id)
    assert job is not None and (job.attempts, job.stalled, job.token) == (0, 0, 0)
    assert job.created_at == minted_at_ms(job_id)
    # a never-leased row exists: a stale call on it is LOST (with its event), never GONE
    assert queue.complete_many([(job_id, 7)]) == [Answer.LOST]
    assert queue.extend_many([(job_id, 7)], 1_000) == [Answer.LOST]
    assert queue.fail_many([(job_id, 7, "x", True, None)]) == [Answer.LOST]
    (leased,) = queue.claim(1)
    assert leased.id == job_id, "priority 0 first, then 2"
    row = client.hgetall(queue.core.keys.job(job_id))
    assert (row["attempts"], row["token"], "stalled" in row) == ("1", str(leased.token), False)
    assert leased.stalled == 0 and not client.hexists(k.packed, job_id)
    queue.complete(job_id, leased.token)
    assert_consistent(client, queue.name)


def test_cancel_and_remove_of_a_never_leased_job(queue: Queue, client: redis.Redis) -> None:
    """The events of a job that was never claimed carry attempts 0, not an error."""
    a, b = queue.enqueue("n", 1), queue.enqueue("n", 2)
    queue.cancel(a, reason="no longer needed")
    queue.remove(b)
    entries = client.xrange(queue.core.keys.events)
    ended = {f["job"]: f for _, f in entries if f["event"] in ("cancelled", "removed")}
    assert (ended[a]["attempts"], ended[b]["attempts"]) == ("0", "0")
    assert queue.redrive_many([a]) == [a]
    assert where(client, queue.name, a) == ["pending"]
    assert_consistent(client, queue.name)


def test_the_wake_list_holds_at_most_32_tokens(queue: Queue, client: redis.Redis) -> None:
    """A push trims only once the list would pass 32 (LPUSH answers the length)."""
    wake = queue.core.keys.wake
    queue.enqueue_many([("w", i) for i in range(5)])
    assert client.llen(wake) == 5, "five jobs, five tokens, nothing trimmed"
    queue.enqueue_many([("w", i) for i in range(40)])
    assert client.llen(wake) == 32
    queue.enqueue("w", 1)
    assert client.llen(wake) == 32
