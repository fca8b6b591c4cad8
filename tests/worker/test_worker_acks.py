"""A finished handler frees its slot before its ack lands: the ack is still batched, still
fenced by the lease, and the lease is renewed until it lands (the tests that hold or break
``AsyncQueue.complete_many`` send acks apart from claims: ``ack_with_claim=False``;
tests/worker/test_ack_with_claim.py covers the acks that go with a claim). Timeouts run on
one watchdog; ``ctx.cancelled`` is made on first use."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
import redis

from emq import (
    Answer,
    AsyncQueue,
    Backoff,
    JobContext,
    LeaseLost,
    Queue,
    Worker,
    WorkerFailed,
    WorkerOptions,
)
from emq.worker import Cancelled
from emq.worker.execute import Executor

from ..support.helpers import assert_consistent, expire_leases, until, where

pytestmark = pytest.mark.servers("valkey", "redis", "cluster")

FIXED = Backoff(kind="fixed", base_ms=0, jitter=0.0)
HANG = 60.0  # every wait polls for a condition: this only bounds a hang, never a speed


def server_ms(client: redis.Redis) -> int:
    sec, usec = client.time()
    return int(sec) * 1000 + int(usec) // 1000


class HeldAcks:
    """Patches ``AsyncQueue.complete_many``: records every call, and holds the first one
    back (before it is sent) until :attr:`release` is set."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, *, hold_first: bool) -> None:
        self.calls: list[list[str]] = []
        self.release = asyncio.Event()
        if not hold_first:
            self.release.set()
        original = AsyncQueue.complete_many

        async def complete_many(q: AsyncQueue, pairs: Any) -> list[bool]:
            pairs = list(pairs)
            self.calls.append([job_id for job_id, _ in pairs])
            if len(self.calls) == 1:
                await self.release.wait()
            return await original(q, pairs)

        monkeypatch.setattr(AsyncQueue, "complete_many", complete_many)


async def test_slot_frees_before_the_ack_lands_and_the_ack_is_still_fenced(
    queue: Queue, client: redis.Redis, qname: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    acks = HeldAcks(monkeypatch, hold_first=True)
    runs: list[tuple[str, int]] = []
    w = Worker(queue, options=WorkerOptions(concurrency=1, lease_ms=30_000, ack_with_claim=False))

    @w.handler("j")
    async def j(payload: Any, ctx: JobContext) -> None:
        runs.append((payload, ctx.attempts))

    a = queue.enqueue("j", "a")
    task = asyncio.create_task(w.run())
    await until(lambda: acks.calls, HANG, "the first ack to be sent")
    assert acks.calls[0] == [a] and runs == [("a", 1)]
    # the one slot is free although a's ack has not landed: b runs meanwhile
    queue.enqueue("j", "b")
    await until(lambda: len(runs) == 2, HANG, "b to run while a's ack is held")
    assert w.stats.completed == 0 and queue.counts()["active"] == 2
    # a's lease lapses and is recovered while its ack waits: the late ack must be refused
    expire_leases(client, qname, a)
    assert queue.sweep_stalled().recovered == [a]
    acks.release.set()
    await until(lambda: w.stats.completed == 2, HANG, "b and a's second run to complete")
    w.stop()
    await asyncio.wait_for(task, HANG)
    assert runs == [("a", 1), ("b", 1), ("a", 2)]
    assert w.stats.lease_lost == 1 and w.stats.lost_ids == [a]
    c = queue.counts()
    assert (c["completed"], c["recovered"], c["active"], c["pending"]) == (2, 1, 0, 0)
    assert_consistent(client, qname)


@pytest.mark.slow
async def test_a_lease_is_renewed_until_its_held_ack_lands(
    queue: Queue, client: redis.Redis, qname: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    acks = HeldAcks(monkeypatch, hold_first=True)
    lease = 1500  # beats every 500 ms; a beat may be up to 1000 ms late
    w = Worker(queue, options=WorkerOptions(lease_ms=lease, stalled_interval_ms=100,
                                            ack_with_claim=False))  # fmt: skip
    w.register("j", lambda p: None)
    job = queue.enqueue("j", None)
    task = asyncio.create_task(w.run())
    await until(lambda: acks.calls, HANG, "the ack to be sent")
    held_until = client.zscore(queue.core.keys.active, job)
    assert held_until is not None
    recovered: list[str] = []
    # hold the ack until the lease it had when it was sent is two leases past, on the server
    # clock; the worker sweeps too, and an outside sweep must find nothing either
    while server_ms(client) < held_until + 2 * lease:
        recovered += queue.sweep_stalled().recovered
        await asyncio.sleep(0.1)
    acks.release.set()
    await until(lambda: w.stats.completed == 1, HANG, "the held ack to land")
    w.stop()
    await asyncio.wait_for(task, HANG)
    assert recovered == [] and w.stats.lease_lost == 0
    c = queue.counts()
    assert (c["completed"], c["recovered"]) == (1, 0)
    assert queue.job(job) is None
    assert_consistent(client, qname)


async def test_acks_of_handlers_that_finish_together_share_a_call(
    queue: Queue, client: redis.Redis, qname: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    acks = HeldAcks(monkeypatch, hold_first=False)
    n = 1_000
    w = Worker(queue, options=WorkerOptions(concurrency=50, burst=True, ack_with_claim=False))

    async def noop(payload: Any) -> None:
        return None

    w.register("j", noop)
    ids = queue.enqueue_many([("j", i) for i in range(n)])
    await asyncio.wait_for(w.run(), HANG)
    sent = [job for call in acks.calls for job in call]
    assert sorted(sent) == sorted(ids) and w.stats.completed == n
    # one complete per claimed batch of 50 or so, never one per job
    assert len(acks.calls) <= n // 25, [len(c) for c in acks.calls]
    assert queue.counts()["completed"] == n
    assert_consistent(client, qname)


@pytest.mark.slow
async def test_timeouts_on_one_watchdog_fail_at_the_limit_even_if_cancel_is_ignored(
    queue: Queue, client: redis.Redis, qname: str
) -> None:
    """Two limits in one run; an async handler that swallows its cancellation still has its
    attempt failed at the limit, and keeps its slot until it returns. The handlers would
    sleep 2 * HANG: the run ends within HANG only because the limits stopped them. The
    limits are checked as lower bounds with a factor-2 margin (a busy machine only makes an
    attempt run longer)."""
    marks: dict[str, float] = {}
    w = Worker(queue, options=WorkerOptions(concurrency=1, burst=True, backoff=FIXED))

    @w.handler("stubborn", timeout_ms=200)
    async def stubborn(payload: Any) -> None:
        marks["stubborn"] = time.monotonic()
        try:
            await asyncio.sleep(2 * HANG)
        except asyncio.CancelledError:
            marks["cancelled"] = time.monotonic()
            await asyncio.sleep(0.5)  # ignores the cancellation for a while
        marks["stubborn_returned"] = time.monotonic()

    @w.handler("slow", timeout_ms=400)
    async def slow(payload: Any) -> None:
        marks["slow"] = time.monotonic()
        await asyncio.sleep(2 * HANG)

    @w.handler("quick")
    async def quick(payload: Any) -> None:
        marks["quick"] = time.monotonic()

    first = queue.enqueue("stubborn", None, max_attempts=1)
    second = queue.enqueue("slow", None, max_attempts=1)
    queue.enqueue("quick", None)
    await asyncio.wait_for(w.run(), HANG)
    for job in (first, second):
        row = queue.job(job)
        assert row is not None and row.state == "dead"
        assert row.last_error is not None and row.last_error.startswith("timeout")
    assert marks["cancelled"] - marks["stubborn"] > 0.1  # not before its 200 ms limit
    assert marks["slow"] >= marks["stubborn_returned"]  # the slot was held until then
    assert marks["quick"] > marks["slow"] + 0.2  # the slot was held until the 400 ms limit
    assert w.stats.timeouts == 2 and w.stats.completed == 1
    assert_consistent(client, qname)


def test_job_context_makes_cancelled_on_first_use() -> None:
    beats: list[int] = []
    ctx = JobContext(
        queue="q", id="JOB1", name="n", token=3, attempts=1, stalled=0, beat=lambda: beats.append(1)
    )
    ctx.heartbeat("half")
    assert beats == [1] and ctx.last_progress == "half" and ctx.cancel_reason == ""
    ctx.cancel("timeout")  # before anyone looked: the event made later is already set
    assert ctx.cancelled.is_set() and ctx.cancel_reason == "timeout"
    with pytest.raises(Cancelled):
        ctx.heartbeat()
    ctx.cancel("lease_lost")  # the first reason stays; a lost lease still wins in heartbeat
    assert ctx.cancel_reason == "timeout"
    with pytest.raises(LeaseLost):
        ctx.heartbeat()

    other = JobContext(queue="q", id="JOB2", name="n", token=1, attempts=1, stalled=0, beat=list)
    event = other.cancelled  # looked at first, set later
    assert not event.is_set()
    other.cancel("shutdown")
    assert event.is_set() and other.cancelled is event


@pytest.mark.slow
async def test_claim_ahead_grows_for_short_handlers_and_stays_off_for_long_ones(
    queue: Queue, client: redis.Redis, qname: str
) -> None:
    async def noop(payload: Any) -> None:
        return None

    short = Worker(queue, {"j": noop}, options=WorkerOptions(concurrency=10, burst=True))
    seen: list[int] = []

    async def watch(w: Worker) -> None:
        while True:
            if w._runner is not None:
                seen.append(w._runner.ahead)
            await asyncio.sleep(0)

    queue.enqueue_many([("j", i) for i in range(3_000)])
    watcher = asyncio.create_task(watch(short))
    await asyncio.wait_for(short.run(), HANG)
    watcher.cancel()
    assert short.stats.completed == 3_000
    assert 0 < max(seen) <= 20  # claimed ahead, at most twice the concurrency

    async def slow(payload: Any) -> None:
        # long next to any round trip: a claim would have to take 250 ms (4 * RTT >= 1 s)
        # for the runner to take a batch finishing together for short handlers
        await asyncio.sleep(1.0)

    long = Worker(queue, {"j": slow}, options=WorkerOptions(concurrency=2, burst=True))
    queue.enqueue_many([("j", i) for i in range(6)])
    task = asyncio.create_task(long.run())
    active: list[int] = []
    while not task.done():
        active.append(queue.counts()["active"])
        await asyncio.sleep(0.02)
    await task
    assert long.stats.completed == 6
    # a job may be claimed one round trip early, never hoarded
    assert max(active) <= 3, active
    assert_consistent(client, qname)


async def test_an_ack_refused_by_the_server_is_resent_until_it_lands(
    queue: Queue, client: redis.Redis, qname: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    original = AsyncQueue.complete_many
    calls: list[int] = []

    async def refused_twice(q: AsyncQueue, pairs: Any) -> list[Answer]:
        calls.append(1)
        if len(calls) <= 2:
            raise redis.ResponseError("OOM command not allowed when used memory > 'maxmemory'")
        return await original(q, pairs)

    monkeypatch.setattr(AsyncQueue, "complete_many", refused_twice)
    runs: list[int] = []
    w = Worker(queue, options=WorkerOptions(lease_ms=5_000, ack_with_claim=False))

    @w.handler("j")
    async def j(payload: Any, ctx: JobContext) -> None:
        runs.append(ctx.attempts)

    queue.enqueue("j", None)
    task = asyncio.create_task(w.run())
    await until(lambda: w.stats.completed == 1, HANG, "the ack to land on its third send")
    w.stop()
    await asyncio.wait_for(task, HANG)
    assert runs == [1] and len(calls) == 3  # never dropped, never run twice
    c = queue.counts()
    assert (c["completed"], c["recovered"], c["active"]) == (1, 0, 0)
    assert_consistent(client, qname)


async def test_an_ack_that_fails_with_a_bug_stops_the_worker_loudly(
    queue: Queue, client: redis.Redis, qname: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def broken(q: AsyncQueue, pairs: Any) -> list[Answer]:
        raise RuntimeError("a bug in the ack path")

    monkeypatch.setattr(AsyncQueue, "complete_many", broken)
    w = Worker(queue, options=WorkerOptions(lease_ms=5_000, ack_with_claim=False))

    @w.handler("j")
    async def j(payload: Any) -> None:
        return None

    job = queue.enqueue("j", None)
    with pytest.raises(WorkerFailed, match="acks failed: RuntimeError: a bug in the ack path"):
        await asyncio.wait_for(w.run(), HANG)
    # the worker did not go on half-alive: the job waits in active for the sweep
    assert where(client, qname, job) == ["active"]
    expire_leases(client, qname, job)
    assert queue.sweep_stalled().recovered == [job]
    assert_consistent(client, qname)


@pytest.mark.parametrize("kind", ["async", "sync"])
async def test_a_bug_in_a_jobs_story_stops_the_worker_loudly(
    queue: Queue, client: redis.Redis, qname: str, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    """An error of the executor itself (here: deciding an outcome), not of the handler, ends
    the run with WorkerFailed instead of an unretrieved task exception; the job is left in
    active for the sweep, never dropped."""

    def broken(self: Executor, job: Any, outcome: Any) -> None:
        raise RuntimeError("a bug in the job's story")

    monkeypatch.setattr(Executor, "decide", broken)

    async def run_async(payload: Any) -> None:
        return None

    def run_sync(payload: Any) -> None:
        return None

    w = Worker(queue, options=WorkerOptions(lease_ms=5_000))
    w.handler("j")(run_async if kind == "async" else run_sync)
    job = queue.enqueue("j", None)
    with pytest.raises(WorkerFailed, match="executor failed: RuntimeError: a bug in the job"):
        await asyncio.wait_for(w.run(), HANG)
    assert where(client, qname, job) == ["active"]
    expire_leases(client, qname, job)
    assert queue.sweep_stalled().recovered == [job]
    assert_consistent(client, qname)
