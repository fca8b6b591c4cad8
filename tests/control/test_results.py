"""Results and completed-job retention through the API, on Valkey and Redis: kept in the same
step as the completion, read back exactly, waited for without polling, expired by the server,
trimmed by count and age, and the errors of ``result()``."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from emq import (
    AsyncQueue,
    InvalidOption,
    InvalidPayload,
    JobDead,
    JobNotFound,
    LeaseLost,
    Queue,
    QueueOptions,
    ResultTimeout,
)
from emq.model.keys import QueueKeys

from ..support.helpers import assert_consistent, expire_leases, expiring, node_of

pytestmark = pytest.mark.servers("valkey", "redis", "cluster")

HANG = 60.0  # bounds a hang, never a speed
RESULTS = QueueOptions(result_ttl_ms=60_000)


def server_ms(client: redis.Redis) -> int:
    sec, usec = client.time()
    return int(sec) * 1000 + int(usec) // 1000


def wait_for(cond: Any, what: str) -> Any:
    deadline = time.monotonic() + HANG
    while time.monotonic() < deadline:
        value = cond()
        if value:
            return value
        time.sleep(0.005)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture
def open_queue(url: str, qname: str) -> Iterator[Any]:
    opened: list[Queue] = []

    def make(options: QueueOptions | None = None) -> Queue:
        """The first queue is ``qname``; each later one a queue of its own."""
        name = f"{qname}-{len(opened)}" if opened else qname
        q = Queue.from_url(url, name, options=options)
        opened.append(q)
        return q

    yield make
    for q in opened:
        q.close()


def run_one(q: Queue, result: Any, *, payload: Any = None) -> str:
    job = q.enqueue("j", payload)
    (c,) = q.claim(1, 30_000)
    q.complete_with_result(c.id, c.token, result)
    return job


def blocked_waiters(client: redis.Redis) -> int:
    return sum(1 for c in client.client_list() if c.get("cmd") == "blpop")


class Waiter(threading.Thread):
    """``q.result(job_id)`` on a thread of its own; ``value`` or ``error`` once it returns."""

    def __init__(self, q: Queue, job_id: str, timeout_s: float | None = HANG) -> None:
        super().__init__(daemon=True)
        self.q, self.job_id, self.timeout_s = q, job_id, timeout_s
        self.value: Any = None
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.value = self.q.result(self.job_id, self.timeout_s)
        except BaseException as exc:  # handed to the test
            self.error = exc


def test_a_result_is_kept_in_the_completion_step_and_read_back(
    open_queue: Any, client: redis.Redis, qname: str
) -> None:
    q = open_queue(RESULTS)
    value = {"n": [1, 2.5, "é", None, True], "s": "x" * 1000}
    job = run_one(q, value)
    assert q.result(job) == value
    row = q.job(job)
    assert row is not None and row.state == "completed" and row.result == value
    assert row.completed_at is not None and row.completed_at <= server_ms(client)
    assert 0 < client.pttl(QueueKeys.of(qname).job(job)) <= 60_000
    assert q.counts()["completed"] == 1 and q.counts()["active"] == 0
    assert_consistent(client, qname)


def test_a_completion_refused_for_a_stale_lease_keeps_nothing(
    open_queue: Any, client: redis.Redis, qname: str
) -> None:
    q = open_queue(RESULTS)
    job = q.enqueue("j", None)
    (c,) = q.claim(1, 30_000)
    expire_leases(client, qname, job)
    with pytest.raises(LeaseLost):
        q.complete_with_result(c.id, c.token, 42)
    row = q.job(job)
    assert row is not None and row.state == "active" and "result" not in row.fields
    with pytest.raises(ResultTimeout):
        q.result(job, timeout_s=0)


def test_a_waiter_started_before_the_job_ran_gets_the_result_from_blpop(
    open_queue: Any, client: redis.Redis, qname: str
) -> None:
    q = open_queue(RESULTS)
    job = q.enqueue("j", 7)
    waiters = [Waiter(q, job) for _ in range(3)]
    for w in waiters:
        w.start()
    row_key = QueueKeys.of(qname).job(job)
    # each registered in the row and is blocked in BLPOP on done:<id> (not polling)
    wait_for(lambda: client.hget(row_key, "waiters") == "3", "three registered waiters")
    node = node_of(client, qname)
    wait_for(lambda: blocked_waiters(node) >= 3, "three clients blocked in BLPOP")
    assert all(w.is_alive() for w in waiters)
    (c,) = q.claim(1, 30_000)
    q.complete_with_result(c.id, c.token, {"got": c.payload})
    for w in waiters:
        w.join(HANG)
        assert w.error is None and w.value == {"got": 7}
    assert client.llen(QueueKeys.of(qname).done(job)) == 0  # each copy taken once
    assert_consistent(client, qname)


async def test_an_async_waiter_gets_the_result_of_a_job_completed_meanwhile(
    url: str, qname: str, open_queue: Any, client: redis.Redis
) -> None:
    import asyncio

    q = open_queue(RESULTS)
    aq = AsyncQueue.from_url(url, qname, options=RESULTS)
    job = q.enqueue("j", "a")
    task = asyncio.create_task(aq.result(job, timeout_s=HANG))
    row_key = QueueKeys.of(qname).job(job)
    while client.hget(row_key, "waiters") != "1":
        await asyncio.sleep(0.005)
    (c,) = q.claim(1, 30_000)
    q.complete_with_result(c.id, c.token, ["done", c.payload])
    assert await asyncio.wait_for(task, HANG) == ["done", "a"]
    await aq.close()


def test_a_waiter_is_told_when_a_job_ends_dead_or_is_removed(
    open_queue: Any, client: redis.Redis, qname: str
) -> None:
    q = open_queue(RESULTS)
    dead, stalled, removed = q.enqueue("d", None), q.enqueue("s", None), q.enqueue("r", None)
    waiters = {job: Waiter(q, job) for job in (dead, stalled, removed)}
    for w in waiters.values():
        w.start()
    k = QueueKeys.of(qname)
    for job in waiters:
        wait_for(lambda j=job: client.hget(k.job(j), "waiters") == "1", "registered")
    claimed = {c.id: c for c in q.claim(2, 30_000)}
    assert set(claimed) == {dead, stalled}
    q.fail(dead, claimed[dead].token, "boom: it broke\ntraceback", retry=False)
    expire_leases(client, qname, stalled)
    assert q.sweep_stalled(max_stalled=1).dead == [stalled]
    assert q.remove(removed) == "pending"
    for w in waiters.values():
        w.join(HANG)
    err = waiters[dead].error
    assert isinstance(err, JobDead) and err.error == "boom: it broke\ntraceback"
    assert "boom: it broke" in str(err) and "traceback" not in str(err)
    err = waiters[stalled].error
    assert isinstance(err, JobDead) and err.error == "stalled"
    err = waiters[removed].error
    assert isinstance(err, JobNotFound) and "removed" in str(err)
    # asked after the end, the answer is read from the row
    with pytest.raises(JobDead, match="boom"):
        q.result(dead)
    assert_consistent(client, qname)


def test_result_errors_unknown_not_kept_timeout_and_bad_input(
    open_queue: Any, client: redis.Redis, qname: str
) -> None:
    plain = open_queue()
    with pytest.raises(JobNotFound, match="not found"):
        plain.result(plain.new_id())
    job = run_one(plain, {"lost": True})  # nothing kept: the row is deleted as before
    assert plain.job(job) is None
    with pytest.raises(JobNotFound, match="result_ttl_ms"):
        plain.result(job)
    waiting = plain.enqueue("j", None)
    with pytest.raises(ResultTimeout) as info:
        plain.result(waiting, timeout_s=0.05)
    assert isinstance(info.value, TimeoutError) and "pending" in str(info.value)
    with pytest.raises(InvalidOption):
        plain.result(waiting, timeout_s=-1)
    # a row kept by retention alone holds no result
    kept = open_queue(QueueOptions(keep_completed=(60_000, 10)))
    job = run_one(kept, 5)
    assert kept.job(job) is not None
    with pytest.raises(JobNotFound, match="result_ttl_ms"):
        kept.result(job)
    # a handler-level ttl through the API: the queue keeps none, the call keeps this one
    job = kept.enqueue("j", None)
    (c,) = kept.claim(1, 30_000)
    kept.complete_with_result(c.id, c.token, "mine", result_ttl_ms=10_000)
    assert kept.result(job) == "mine"


def test_a_result_that_is_not_json_is_refused_before_anything_is_written(
    open_queue: Any, client: redis.Redis, qname: str
) -> None:
    q = open_queue(RESULTS)
    job = q.enqueue("j", None)
    (c,) = q.claim(1, 30_000)
    before = client.hgetall(QueueKeys.of(qname).job(job))
    with pytest.raises(InvalidPayload, match="not JSON"):
        q.complete_with_result(c.id, c.token, {"x": object()})
    with pytest.raises(InvalidPayload, match="not JSON"):
        q.complete_with_result(c.id, c.token, float("nan"))
    assert client.hgetall(QueueKeys.of(qname).job(job)) == before
    q.complete_with_result(c.id, c.token, None)  # the job is still held: complete it
    assert q.result(job) is None
    assert_consistent(client, qname)


def test_results_expire_after_their_ttl_on_the_server_clock(
    open_queue: Any, client: redis.Redis, qname: str
) -> None:
    k = QueueKeys.of(qname)
    q = open_queue(QueueOptions(result_ttl_ms=300))
    job = run_one(q, "short")
    row = q.job(job)
    assert row is not None and row.result == "short"
    until_ms = int(row.fields["result_until"])
    assert until_ms == row.completed_at + 300 if row.completed_at else False
    assert 0 < client.pttl(k.job(job)) <= 300
    wait_for(lambda: client.exists(k.job(job)) == 0, "the row to expire")
    assert server_ms(client) >= until_ms
    with pytest.raises(JobNotFound):
        q.result(job)
    # with retention the row lives as long as the longer of the two
    q2 = open_queue(QueueOptions(result_ttl_ms=300, keep_completed=(60_000, 100)))
    job = run_one(q2, "long")
    assert 300 < client.pttl(q2.core.keys.job(job)) <= 60_000
    q3 = open_queue(QueueOptions(result_ttl_ms=60_000, keep_completed=(300, 100)))
    job = run_one(q3, "long")
    assert 300 < client.pttl(q3.core.keys.job(job)) <= 60_000


def test_retention_keeps_at_most_max_count_newest_and_lists_them_newest_first(
    open_queue: Any, client: redis.Redis, qname: str
) -> None:
    k = QueueKeys.of(qname)
    q = open_queue(QueueOptions(keep_completed=(60_000, 5)))
    done: list[str] = []
    for batch in (1, 7, 1, 3, 1):  # single completions and batches
        ids = q.enqueue_many([("j", i) for i in range(batch)])
        claimed = q.claim(batch, 30_000)
        assert q.complete_many([(c.id, c.token) for c in claimed]) == ["completed"] * batch
        done += [c.id for c in claimed]
        assert sorted(ids) == sorted(c.id for c in claimed)
        assert client.zcard(k.completed) == min(5, len(done))
    kept = client.zrange(k.completed, 0, -1)
    by_score = [j for j, _ in sorted(client.zrange(k.completed, 0, -1, withscores=True),
                                     key=lambda p: p[1])]  # fmt: skip
    assert kept == by_score
    rows = {key.rsplit(":", 1)[1] for key in client.scan_iter(match=k.prefix + "job:*")}
    assert rows == set(kept)  # the trimmed rows were deleted with them
    listed = q.jobs("completed")
    assert [j.id for j in listed] == kept[::-1]  # newest first
    assert all(j.state == "completed" and j.completed_at for j in listed)
    assert [j.id for j in q.jobs("completed", offset=1, limit=2)] == kept[::-1][1:3]
    assert_consistent(client, qname)
    # removing a kept job takes it out of the set
    assert q.remove(kept[0]) == "completed"
    assert client.zscore(k.completed, kept[0]) is None and q.job(kept[0]) is None


def test_retention_trims_by_age_and_never_cuts_a_result_short(
    open_queue: Any, client: redis.Redis, qname: str
) -> None:
    k = QueueKeys.of(qname)
    q = open_queue(QueueOptions(keep_completed=(200, 1_000)))
    old = [run_one(q, None) for _ in range(3)]
    newest = max(client.zscore(k.completed, j) or 0 for j in old)
    wait_for(lambda: server_ms(client) > newest + 200, "the server clock to pass the age")
    fresh = run_one(q, None)
    assert client.zrange(k.completed, 0, -1) == [fresh]
    assert all(client.exists(k.job(j)) == 0 for j in old)
    # count trimming with results: the trimmed ids leave the set, their results stay readable
    # until their own ttl (the row's expiry shrinks to it)
    q2 = open_queue(QueueOptions(result_ttl_ms=30_000, keep_completed=(60_000, 2)))
    k = q2.core.keys
    jobs = [run_one(q2, i) for i in range(5)]
    assert set(client.zrange(k.completed, 0, -1)) == set(jobs[3:])
    assert [q2.result(j) for j in jobs] == [0, 1, 2, 3, 4]
    for j in jobs[:2]:
        assert 0 < client.pttl(k.job(j)) <= 30_000
    for j in jobs[3:]:
        assert 30_000 < client.pttl(k.job(j)) <= 60_000


def test_obliterate_deletes_kept_rows_and_the_completed_set(
    open_queue: Any, client: redis.Redis, qname: str
) -> None:
    q = open_queue(QueueOptions(result_ttl_ms=60_000, keep_completed=(60_000, 100)))
    for i in range(5):
        run_one(q, i)
    q.enqueue("j", None)
    assert q.obliterate(chunk=2) == 6
    left = client.scan_iter(match=QueueKeys.of(qname).prefix + "*")
    assert [key for key in left if not expiring(key)] == []  # these expire alone


def test_a_kept_row_makes_an_enqueue_of_its_id_a_duplicate(
    open_queue: Any, client: redis.Redis, qname: str
) -> None:
    q = open_queue(RESULTS)
    job = q.new_id()
    q.enqueue("j", 1, id=job)
    (c,) = q.claim(1, 30_000)
    q.complete_with_result(c.id, c.token, "r")
    again = q.enqueue("j", 1, id=job)
    assert again == job and not again.created
    assert q.result(job) == "r"
