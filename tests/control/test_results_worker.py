"""Results through a real Worker: return values kept and read back exactly, a handler's own
``result_ttl_ms``, a return value that is not JSON, retention under load, and the lost-reply
settle of a kept completed row."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest
import redis

from emq import AsyncQueue, JobDead, JobNotFound, Queue, QueueOptions, Worker, WorkerOptions
from emq.worker.acks import Ack, AckBuffer
from emq.worker.connect import Outage
from emq.worker.heartbeat import Lease
from emq.worker.outcome import Complete

from ..support.helpers import assert_consistent, until

HANG = 60.0


def burst(q: Queue, concurrency: int = 50) -> Worker:
    return Worker(q, options=WorkerOptions(concurrency=concurrency, burst=True))


async def test_a_thousand_results_through_a_worker_are_read_back_exactly(
    url: str, qname: str, client: redis.Redis
) -> None:
    q = Queue.from_url(url, qname, options=QueueOptions(result_ttl_ms=60_000))
    w = burst(q)

    @w.handler("square")
    async def square(payload: Any) -> Any:
        return {"i": payload, "sq": payload * payload, "s": f"é{payload}", "l": [payload, None]}

    @w.handler("echo")
    def echo(payload: Any) -> Any:  # a sync handler's value is kept too
        return payload

    ids = q.enqueue_many([("square", i) for i in range(1_000)])
    echoed = q.enqueue_many([("echo", {"k": [i, "x"]}) for i in range(50)])
    await asyncio.wait_for(w.run(), HANG)
    assert w.stats.completed == 1_050
    for i, job in enumerate(ids):
        assert q.result(job) == {"i": i, "sq": i * i, "s": f"é{i}", "l": [i, None]}
    for i, job in enumerate(echoed):
        assert q.result(job) == {"k": [i, "x"]}
    assert q.counts()["completed"] == 1_050
    assert_consistent(client, qname)
    q.close()


async def test_a_handler_keeps_its_own_results_on_a_queue_that_keeps_none(
    url: str, qname: str, client: redis.Redis
) -> None:
    q = Queue.from_url(url, qname)
    w = burst(q)
    w.register("kept", lambda p: p + 1, result_ttl_ms=30_000)
    w.register("plain", lambda p: p + 1)
    kept, plain = q.enqueue("kept", 1), q.enqueue("plain", 1)
    await asyncio.wait_for(w.run(), HANG)
    assert q.result(kept) == 2
    assert 0 < client.pttl(q.core.keys.job(kept)) <= 30_000
    with pytest.raises(JobNotFound, match="result_ttl_ms"):
        q.result(plain)
    # and a handler's 0 keeps none on a queue that keeps results
    q2 = Queue.from_url(url, qname + "-2", options=QueueOptions(result_ttl_ms=30_000))
    w2 = burst(q2)
    w2.register("none", lambda p: p, result_ttl_ms=0)
    job = q2.enqueue("none", 1)
    await asyncio.wait_for(w2.run(), HANG)
    assert q2.job(job) is None
    q.close()
    q2.close()


async def test_a_return_value_that_is_not_json_fails_the_job_and_the_worker_goes_on(
    url: str, qname: str, client: redis.Redis
) -> None:
    q = Queue.from_url(url, qname, options=QueueOptions(result_ttl_ms=60_000))
    w = burst(q)

    @w.handler("bad")
    async def bad(payload: Any) -> Any:
        return {"when": object()}

    w.register("good", lambda p: "fine")
    bad_job, good_job = q.enqueue("bad", None), q.enqueue("good", None)
    await asyncio.wait_for(w.run(), HANG)  # no crash: WorkerFailed would be raised here
    assert w.stats.dead == 1 and w.stats.completed == 1
    row = q.job(bad_job)
    assert row is not None and row.state == "dead" and row.attempts == 1  # no retry
    assert row.last_error is not None and "return value is not kept" in row.last_error
    assert "not JSON" in row.last_error and "result" not in row.fields
    with pytest.raises(JobDead, match="not JSON"):
        q.result(bad_job)
    assert q.result(good_job) == "fine"
    assert_consistent(client, qname)
    q.close()


async def test_retention_under_a_worker_keeps_at_most_max_count(
    url: str, qname: str, client: redis.Redis
) -> None:
    q = Queue.from_url(url, qname, options=QueueOptions(keep_completed=(60_000, 25)))
    w = burst(q, concurrency=20)

    async def noop(payload: Any) -> None:
        return None

    w.register("j", noop)
    ids = q.enqueue_many([("j", i) for i in range(500)])
    await asyncio.wait_for(w.run(), HANG)
    k = q.core.keys
    kept = client.zrange(k.completed, 0, -1)
    assert len(kept) == 25 and set(kept) <= set(ids)
    rows = {key.rsplit(":", 1)[1] for key in client.scan_iter(match=k.prefix + "job:*")}
    assert rows == set(kept)
    assert [j.id for j in q.jobs("completed", limit=100)] == kept[::-1]
    assert_consistent(client, qname)
    q.close()


async def test_a_waiter_gets_the_result_when_a_worker_runs_the_job(
    url: str, qname: str, client: redis.Redis
) -> None:
    q = Queue.from_url(url, qname, options=QueueOptions(result_ttl_ms=60_000))
    aq = AsyncQueue.from_url(url, qname, options=QueueOptions(result_ttl_ms=60_000))
    job = q.enqueue("j", 21)
    waiting = asyncio.create_task(aq.result(job, timeout_s=HANG))
    await until(lambda: client.hget(q.core.keys.job(job), "waiters") == "1", HANG, "waiter")
    w = burst(q)
    w.register("j", lambda p: p * 2)
    await asyncio.wait_for(w.run(), HANG)
    assert await asyncio.wait_for(waiting, HANG) == 42
    await aq.close()
    q.close()


class _ReplyLost:
    """An AsyncQueue whose first complete is applied but whose reply is lost."""

    def __init__(self, q: AsyncQueue) -> None:
        self._q, self.dropped = q, 0
        self.name, self.core, self.client = q.name, q.core, q.client

    async def complete_results(self, items: Any) -> Any:
        result = await self._q.complete_results(items)
        if not self.dropped:
            self.dropped += 1
            raise redis.ConnectionError("reply lost (simulated)")
        return result


async def test_a_lost_reply_of_a_kept_completion_is_settled_from_the_row(
    url: str, qname: str, client: redis.Redis
) -> None:
    options = QueueOptions(result_ttl_ms=60_000, keep_completed=(60_000, 10))
    q = Queue.from_url(url, qname, options=options)
    aq = AsyncQueue.from_url(url, qname, options=options)
    a = q.enqueue("x", None)
    (c,) = q.claim(1, 30_000)
    answers: dict[str, str] = {}
    log = logging.getLogger("test")
    buf = AckBuffer(Outage(log), log, lambda ack, ans: answers.update({ack.lease.id: ans}))
    done = Complete(result='{"v":1}', result_ttl_ms=60_000)
    ack = Ack(_ReplyLost(aq), Lease(qname, a, c.token), done)  # type: ignore[arg-type]
    await buf.flush([ack])
    assert answers == {a: "completed"} and buf.uncertain == 1
    assert q.result(a) == {"v": 1}
    # a kept completed row with another attempt's token is not this attempt's completion
    b = q.enqueue("x", None)
    (c2,) = q.claim(1, 30_000)
    q.complete_with_result(c2.id, c2.token, 2)
    stale = Ack(_ReplyLost(aq), Lease(qname, b, c2.token + 1), done)  # type: ignore[arg-type]
    await buf.flush([stale])  # refused, its reply lost, re-sent, refused: the row is read
    assert answers[b] == "lost" and buf.uncertain == 1
    assert q.result(b) == 2
    assert_consistent(client, qname)
    await aq.close()
    q.close()
