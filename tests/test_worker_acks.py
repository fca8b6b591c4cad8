"""A finished handler frees its slot before its ack lands: the ack is still batched, still
fenced by the lease, and the lease is renewed until it lands. Timeouts run on one watchdog;
``ctx.cancelled`` is made on first use."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import pytest
import redis

from emq import AsyncQueue, Backoff, JobContext, LeaseLost, Queue, Worker, WorkerOptions
from emq.worker import Cancelled

from .helpers import assert_consistent, expire_leases

FIXED = Backoff(kind="fixed", base_ms=0, jitter=0.0)


async def until(cond: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = cond()
        if value:
            return value
        await asyncio.sleep(0.01)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


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


@pytest.mark.timeout(30)
async def test_slot_frees_before_the_ack_lands_and_the_ack_is_still_fenced(
    queue: Queue, client: redis.Redis, qname: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    acks = HeldAcks(monkeypatch, hold_first=True)
    runs: list[tuple[str, int]] = []
    w = Worker(queue, options=WorkerOptions(concurrency=1, lease_ms=30_000))

    @w.handler("j")
    async def j(payload: Any, ctx: JobContext) -> None:
        runs.append((payload, ctx.token))

    a = queue.enqueue("j", "a")
    task = asyncio.create_task(w.run())
    await until(lambda: acks.calls, 10, "the first ack to be sent")
    assert acks.calls[0] == [a] and runs == [("a", 1)]
    # the one slot is free although a's ack has not landed: b runs meanwhile
    queue.enqueue("j", "b")
    await until(lambda: len(runs) == 2, 10, "b to run while a's ack is held")
    assert w.stats.completed == 0 and queue.counts()["active"] == 2
    # a's lease lapses and is recovered while its ack waits: the late ack must be refused
    expire_leases(client, qname, a)
    assert queue.sweep_stalled().recovered == [a]
    acks.release.set()
    await until(lambda: w.stats.completed == 2, 10, "b and a's second run to complete")
    w.stop()
    await asyncio.wait_for(task, 10)
    assert runs == [("a", 1), ("b", 1), ("a", 2)]
    assert w.stats.lease_lost == 1 and w.stats.lost_ids == [a]
    c = queue.counts()
    assert (c["completed"], c["recovered"], c["active"], c["pending"]) == (2, 1, 0, 0)
    assert_consistent(client, qname)


@pytest.mark.timeout(30)
async def test_a_lease_is_renewed_until_its_held_ack_lands(
    queue: Queue, client: redis.Redis, qname: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    acks = HeldAcks(monkeypatch, hold_first=True)
    lease = 600  # beats every 200 ms; the ack is held for 3 leases
    w = Worker(queue, options=WorkerOptions(lease_ms=lease, stalled_interval_ms=100))
    w.register("j", lambda p: None)
    job = queue.enqueue("j", None)
    task = asyncio.create_task(w.run())
    await until(lambda: acks.calls, 10, "the ack to be sent")
    recovered: list[str] = []
    for _ in range(18):  # the worker sweeps too; an outside sweep must find nothing either
        recovered += queue.sweep_stalled().recovered
        await asyncio.sleep(0.1)
    acks.release.set()
    await until(lambda: w.stats.completed == 1, 10, "the held ack to land")
    w.stop()
    await asyncio.wait_for(task, 10)
    assert recovered == [] and w.stats.lease_lost == 0
    c = queue.counts()
    assert (c["completed"], c["recovered"]) == (1, 0)
    assert queue.job(job) is None
    assert_consistent(client, qname)


@pytest.mark.timeout(30)
async def test_acks_of_handlers_that_finish_together_share_a_call(
    queue: Queue, client: redis.Redis, qname: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    acks = HeldAcks(monkeypatch, hold_first=False)
    n = 1_000
    w = Worker(queue, options=WorkerOptions(concurrency=50, burst=True))

    async def noop(payload: Any) -> None:
        return None

    w.register("j", noop)
    ids = queue.enqueue_many([("j", i) for i in range(n)])
    await asyncio.wait_for(w.run(), 20)
    sent = [job for call in acks.calls for job in call]
    assert sorted(sent) == sorted(ids) and w.stats.completed == n
    # one complete per claimed batch of 50 or so, never one per job
    assert len(acks.calls) <= n // 25, [len(c) for c in acks.calls]
    assert queue.counts()["completed"] == n
    assert_consistent(client, qname)


@pytest.mark.timeout(30)
async def test_timeouts_on_one_watchdog_fail_at_the_limit_even_if_cancel_is_ignored(
    queue: Queue, client: redis.Redis, qname: str
) -> None:
    """Two limits in one run; an async handler that swallows its cancellation still has its
    attempt failed at the limit, and keeps its slot until it returns."""
    marks: dict[str, float] = {}
    w = Worker(queue, options=WorkerOptions(concurrency=1, burst=True, backoff=FIXED))

    @w.handler("stubborn", timeout_ms=200)
    async def stubborn(payload: Any) -> None:
        marks["stubborn"] = time.monotonic()
        try:
            await asyncio.sleep(5)
        except asyncio.CancelledError:
            marks["cancelled"] = time.monotonic()
            await asyncio.sleep(0.5)  # ignores the cancellation for a while
        marks["stubborn_returned"] = time.monotonic()

    @w.handler("slow", timeout_ms=100)
    async def slow(payload: Any) -> None:
        marks["slow"] = time.monotonic()
        await asyncio.sleep(5)

    @w.handler("quick")
    async def quick(payload: Any) -> None:
        marks["quick"] = time.monotonic()

    first = queue.enqueue("stubborn", None, max_attempts=1)
    second = queue.enqueue("slow", None, max_attempts=1)
    queue.enqueue("quick", None)
    t0 = time.monotonic()
    await asyncio.wait_for(w.run(), 20)
    assert time.monotonic() - t0 < 5
    for job in (first, second):
        row = queue.job(job)
        assert row is not None and row.state == "dead"
        assert row.last_error is not None and row.last_error.startswith("timeout")
    assert 0.15 < marks["cancelled"] - marks["stubborn"] < 2.0
    assert marks["slow"] >= marks["stubborn_returned"]  # the slot was held until then
    assert marks["quick"] > marks["slow"] + 0.05
    assert w.stats.timeouts == 2 and w.stats.completed == 1
    assert_consistent(client, qname)


def test_job_context_makes_cancelled_on_first_use() -> None:
    beats: list[int] = []
    ctx = JobContext(
        queue="q", id="JOB1", name="n", token=3, attempts=1, stalled=0, beat=lambda: beats.append(1)
    )
    ctx.heartbeat("half")
    assert beats == [1] and ctx.progress == "half" and ctx.cancel_reason == ""
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


@pytest.mark.timeout(30)
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
    await asyncio.wait_for(short.run(), 20)
    watcher.cancel()
    assert short.stats.completed == 3_000
    assert 0 < max(seen) <= 20  # claimed ahead, at most twice the concurrency

    async def slow(payload: Any) -> None:
        await asyncio.sleep(0.3)

    long = Worker(queue, {"j": slow}, options=WorkerOptions(concurrency=2, burst=True))
    queue.enqueue_many([("j", i) for i in range(8)])
    task = asyncio.create_task(long.run())
    active: list[int] = []
    while not task.done():
        active.append(queue.counts()["active"])
        await asyncio.sleep(0.02)
    await task
    assert long.stats.completed == 8
    # a job may be claimed one round trip early, never hoarded
    assert max(active) <= 3, active
    assert_consistent(client, qname)


@pytest.mark.timeout(30)
async def test_an_ack_that_fails_for_good_leaves_its_lease_to_lapse_and_the_job_runs_again(
    queue: Queue, client: redis.Redis, qname: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    original = AsyncQueue.complete_many
    calls: list[int] = []

    async def broken_once(q: AsyncQueue, pairs: Any) -> list[bool]:
        calls.append(1)
        if len(calls) == 1:
            raise redis.ResponseError("ERR something the worker cannot retry")
        return await original(q, pairs)

    monkeypatch.setattr(AsyncQueue, "complete_many", broken_once)
    runs: list[int] = []
    w = Worker(queue, options=WorkerOptions(lease_ms=600, stalled_interval_ms=100))

    @w.handler("j")
    async def j(payload: Any, ctx: JobContext) -> None:
        runs.append(ctx.attempts)

    queue.enqueue("j", None)
    task = asyncio.create_task(w.run())
    await until(lambda: w.stats.completed == 1, 15, "the second run to complete")
    w.stop()
    await asyncio.wait_for(task, 10)
    assert runs == [1, 2]  # not renewed forever: the lease lapsed and the sweep recovered it
    c = queue.counts()
    assert (c["completed"], c["recovered"], c["active"]) == (1, 1, 0)
    assert_consistent(client, qname)
