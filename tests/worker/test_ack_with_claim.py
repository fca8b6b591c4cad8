"""A worker's steady state (docs/worker.md, Acknowledgements): the completions waiting for
their ack go with the next claim of their queue in one call (``complete_claim``), still
fenced by the lease; a call whose reply is lost loses no ack and runs nothing twice."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import redis

from emq import AsyncQueue, JobContext, Queue, Worker, WorkerOptions

from ..support.helpers import assert_consistent

pytestmark = pytest.mark.servers("valkey", "redis", "cluster")

HANG = 60.0  # bounds a hang, never a speed


def _run(queue: Queue, n: int, **options: Any) -> tuple[Worker, list[int]]:
    queue.enqueue_many([("j", i) for i in range(n)])
    runs: list[int] = []
    w = Worker(queue, options=WorkerOptions(burst=True, **options))

    @w.handler("j")
    async def j(payload: int, ctx: JobContext) -> None:
        runs.append(payload)

    asyncio.run(asyncio.wait_for(w.run(), HANG))
    return w, runs


@pytest.mark.parametrize("concurrency", [1, 8])
def test_acks_go_with_the_next_claim_and_every_job_runs_once(
    queue: Queue, client: redis.Redis, qname: str, concurrency: int
) -> None:
    n = 200
    w, runs = _run(queue, n, concurrency=concurrency)
    assert sorted(runs) == list(range(n)), "each job once"
    assert w.stats.completed == n and w.stats.lease_lost == 0
    assert 0 < w.stats.joined_acks <= n  # at least one claim carried acks
    c = queue.counts()
    assert (c["completed"], c["pending"], c["active"]) == (n, 0, 0)
    assert_consistent(client, qname)


def test_apart_no_ack_goes_with_a_claim(queue: Queue, client: redis.Redis, qname: str) -> None:
    w, runs = _run(queue, 50, concurrency=4, ack_with_claim=False)
    assert sorted(runs) == list(range(50)) and w.stats.joined_acks == 0
    assert queue.counts()["completed"] == 50
    assert_consistent(client, qname)


def test_a_lost_reply_loses_no_ack_and_runs_nothing_twice(
    queue: Queue, client: redis.Redis, qname: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first joined calls land on the server but their replies are lost (the connection
    drops after the write): the completions come back to the flusher as perhaps applied and
    are settled from their rows (``uncertain_acks``), the claims are re-sent with their
    request ids and return the jobs they leased: none is leased twice, none lost."""
    original = AsyncQueue.complete_and_claim
    lost: list[int] = []

    async def reply_lost(q: AsyncQueue, *args: Any, **kwargs: Any) -> Any:
        reply = await original(q, *args, **kwargs)
        if len(lost) < 3:
            lost.append(1)
            raise redis.ConnectionError("the reply was lost")
        return reply

    monkeypatch.setattr(AsyncQueue, "complete_and_claim", reply_lost)
    n = 60
    w, runs = _run(queue, n, concurrency=2)
    assert len(lost) == 3
    assert sorted(runs) == list(range(n)), "each job once: no claim leased a job twice"
    assert w.stats.lease_lost == 0 and w.stats.uncertain_acks > 0
    assert w.stats.completed + w.stats.uncertain_acks >= n
    c = queue.counts()
    assert (c["completed"], c["recovered"], c["pending"], c["active"]) == (n, 0, 0, 0)
    assert_consistent(client, qname)


def test_a_joined_call_the_server_refuses_is_logged_once_and_acks_go_apart(
    queue: Queue, client: redis.Redis, qname: str, monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:  # fmt: skip
    """A refusal that is no lost connection (here NOPERM, every time): nothing of the joined
    call ran; its completions go to the flusher, the claim goes alone, the episode is logged
    once, and the joined call is tried again only after its backoff."""
    refused: list[int] = []

    async def noperm(q: AsyncQueue, *args: Any, **kwargs: Any) -> Any:
        refused.append(1)
        raise redis.ResponseError("NOPERM this user has no permissions to run 'evalsha'")

    monkeypatch.setattr(AsyncQueue, "complete_and_claim", noperm)
    n = 100
    with caplog.at_level("WARNING", logger="emq.worker"):
        w, runs = _run(queue, n, concurrency=4)
    assert sorted(runs) == list(range(n)), "each job once"
    assert w.stats.completed == n and w.stats.lease_lost == 0 and w.stats.joined_acks == 0
    assert 0 < len(refused) < n, "backed off, not tried for every claim"
    logged = [r for r in caplog.records if "(complete_claim)" in r.getMessage()]
    assert len(logged) == 1, [r.getMessage() for r in logged]
    assert queue.counts()["completed"] == n
    assert_consistent(client, qname)
