"""Cancelling a job a worker runs, on real servers, in-process: the heartbeat's answer tells
the handler (``ctx.cancelled``, ``cancel_reason == "cancelled"``), a handler that stops ends
the job dead-cancelled, one that ignores it is abandoned after ``cancel_grace_ms``; a
cancelled job never runs again, whatever the sweep does afterwards. No wall-time bound: each
wait polls a condition, HANG only bounds a hang; "within one heartbeat" is counted in
heartbeats (the extend calls the worker made)."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest
import redis

from emq import Answer, Cancel, InvalidOption, JobContext, Queue, Worker, WorkerOptions
from emq.worker.context import Cancelled

from ..support.helpers import expire_leases, until
from ..support.lanes_check import check_lanes

HANG = 60.0


class Beats:
    """Counts the heartbeat's extend calls and the ``cancelled`` answers among them."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls = 0
        self.cancelled = 0
        original = Queue.extend_many

        def counted(q: Queue, *args: Any, **kwargs: Any) -> Any:
            answers = original(q, *args, **kwargs)
            self.calls += 1
            self.cancelled += sum(1 for a in answers if a == Answer.CANCELLED)
            return answers

        monkeypatch.setattr(Queue, "extend_many", counted)


async def stop(w: Worker, task: asyncio.Task[None]) -> None:
    w.stop()
    await asyncio.wait_for(task, HANG)


def assert_dead_cancelled(queue: Queue, job: str, reason: str) -> None:
    row = queue.job(job)
    assert row is not None and row.state == "dead", row
    assert row.cancelled == reason and row.cancel_requested is None
    assert row.last_error == (f"cancelled: {reason}" if reason else "cancelled")


@pytest.mark.parametrize("kind", ["async", "sync"])
async def test_a_running_job_stops_within_a_heartbeat_and_never_runs_again(
    queue: Queue, client: redis.Redis, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    beats = Beats(monkeypatch)
    runs: list[int] = []
    seen: dict[str, Any] = {}
    started = threading.Event()
    w = Worker(queue, options=WorkerOptions(lease_ms=900, stalled_interval_ms=50))

    if kind == "async":

        async def long(payload: Any, ctx: JobContext) -> str:
            runs.append(ctx.attempts)
            started.set()
            while not ctx.cancelled.is_set():
                await asyncio.sleep(0.01)
            seen.update(beats=beats.cancelled, why=ctx.cancel_reason, msg=ctx.cancel_message)
            return "returned normally"  # still not a completion: it was cancelled
    else:

        def long(payload: Any, ctx: JobContext) -> str:  # type: ignore[misc]
            runs.append(ctx.attempts)
            started.set()
            ctx.cancelled.wait(HANG)
            seen.update(beats=beats.cancelled, why=ctx.cancel_reason, msg=ctx.cancel_message)
            with pytest.raises(Cancelled):
                ctx.heartbeat()
            raise Cancelled("stopping")  # raised: no retry either

    w.register("long", long)
    job = queue.enqueue("long", None, max_attempts=5)
    task = asyncio.create_task(w.run())
    await until(started.is_set, HANG, "the handler to start")
    assert queue.cancel(job, "user pressed stop") is Cancel.REQUESTED
    await until(lambda: w.stats.cancelled == 1, HANG, "the job to end cancelled")
    # the first beat that answered 'cancelled' told it (a second may cross on a busy loop)
    assert 1 <= seen["beats"] <= 2, seen
    assert (seen["why"], seen["msg"]) == ("cancelled", "user pressed stop")
    assert_dead_cancelled(queue, job, "user pressed stop")
    # its lease would have lapsed by now, and the sweep runs: nothing to recover
    expire_leases(client, queue.name)
    r = queue.sweep_stalled()
    assert (r.recovered, r.cancelled, r.dead) == ([], [], [])
    sweeps = w.stats.sweeps
    await until(lambda: w.stats.sweeps >= sweeps + 3, HANG, "the worker's own sweeps")
    await stop(w, task)
    assert runs == [1] and w.stats.completed == 0 and w.stats.retried == 0
    assert queue.claim() == []
    check_lanes(client, queue.name)


async def test_an_async_handler_that_ignores_the_cancel_is_abandoned_and_its_slot_freed(
    queue: Queue, client: redis.Redis
) -> None:
    unwound = threading.Event()
    started = threading.Event()
    opts = WorkerOptions(concurrency=1, lease_ms=900, cancel_grace_ms=200)
    w = Worker(queue, options=opts)

    @w.handler("stubborn")
    async def stubborn(payload: Any) -> None:
        started.set()
        try:
            await asyncio.sleep(2 * HANG)  # ignores ctx.cancelled
        finally:
            unwound.set()

    w.register("quick", lambda p: None)
    job = queue.enqueue("stubborn", None, max_attempts=3)
    task = asyncio.create_task(w.run())
    await until(started.is_set, HANG, "the stubborn handler to start")
    queue.enqueue("quick", None)  # waits for the only slot
    queue.cancel(job)
    await until(lambda: w.stats.completed == 1, HANG, "the next job to run in the freed slot")
    await stop(w, task)
    assert unwound.is_set()  # its task was cancelled
    assert w.stats.cancel_abandoned == 1 and w.stats.cancelled == 1
    assert_dead_cancelled(queue, job, "")
    check_lanes(client, queue.name)


async def test_a_sync_handler_that_ignores_the_cancel_keeps_its_thread_slot_until_it_returns(
    queue: Queue, client: redis.Redis
) -> None:
    """A thread cannot be killed: after the grace the job ends dead-cancelled at once, but the
    thread keeps its slot (``concurrency`` bounds threads in use) until it returns."""
    release = threading.Event()
    started = threading.Event()
    ran: list[str] = []
    opts = WorkerOptions(concurrency=1, lease_ms=900, cancel_grace_ms=100)
    w = Worker(queue, options=opts)

    def stubborn(payload: Any) -> None:
        started.set()
        release.wait(HANG)  # ignores ctx.cancelled
        ran.append("stubborn returned")

    w.register("stubborn", stubborn)
    w.register("quick", lambda p: ran.append("quick"))
    job = queue.enqueue("stubborn", None)
    task = asyncio.create_task(w.run())
    await until(started.is_set, HANG, "the stubborn handler to start")
    queue.enqueue("quick", None)
    queue.cancel(job, "r")
    await until(lambda: w.stats.cancelled == 1, HANG, "the abandoned job to end cancelled")
    assert_dead_cancelled(queue, job, "r")
    assert ran == []  # the thread still holds the only slot
    release.set()
    await until(lambda: w.stats.completed == 1, HANG, "the next job")
    await stop(w, task)
    assert ran == ["stubborn returned", "quick"] and w.stats.cancel_abandoned == 1
    check_lanes(client, queue.name)


async def test_a_job_claimed_ahead_and_cancelled_never_starts(
    queue: Queue, client: redis.Redis
) -> None:
    release = asyncio.Event()
    ran: list[str] = []
    w = Worker(queue, options=WorkerOptions(concurrency=1, prefetch=1, lease_ms=900))

    @w.handler("job")
    async def handler(payload: str) -> None:
        ran.append(payload)
        if payload == "first":
            await release.wait()

    first = queue.enqueue("job", "first")
    second = queue.enqueue("job", "second")
    task = asyncio.create_task(w.run())
    await until(lambda: ran == ["first"] and w.stats.claimed == 2, HANG, "the claim ahead")
    assert queue.cancel(second) is Cancel.REQUESTED  # leased by the claim ahead
    await until(lambda: w.stats.cancelled == 1, HANG, "the held job to end cancelled")
    release.set()
    await until(lambda: w.stats.completed == 1, HANG, "the first job")
    await stop(w, task)
    assert ran == ["first"]
    assert_dead_cancelled(queue, second, "")
    assert queue.job(first) is None
    check_lanes(client, queue.name)


async def test_a_cancel_the_worker_never_heard_of_ends_by_the_sweep(
    queue: Queue, client: redis.Redis
) -> None:
    """The worker's beat does not come before its lease lapses (a 30 s lease: it is not due),
    so the sweep ends the job, cancelled; the handler's late completion is refused."""
    release = asyncio.Event()
    started = asyncio.Event()
    w = Worker(queue, options=WorkerOptions(lease_ms=30_000, stalled_interval_ms=60_000))

    @w.handler("long")
    async def long(payload: Any) -> None:
        started.set()
        await release.wait()

    job = queue.enqueue("long", None)
    task = asyncio.create_task(w.run())
    await asyncio.wait_for(started.wait(), HANG)
    queue.cancel(job, "cut off")
    expire_leases(client, queue.name, job)
    r = queue.sweep_stalled()
    assert (r.cancelled, r.recovered) == ([job], [])
    release.set()
    await until(lambda: w.stats.lease_lost == 1, HANG, "the late completion to be refused")
    await stop(w, task)
    assert w.stats.completed == 0
    assert_dead_cancelled(queue, job, "cut off")
    check_lanes(client, queue.name)


def test_cancel_grace_ms_is_checked() -> None:
    assert WorkerOptions().cancel_grace_ms == 10_000
    assert WorkerOptions(cancel_grace_ms=0).cancel_grace_ms == 0
    for bad in (-1, 1.5, "5", True):
        with pytest.raises(InvalidOption, match="cancel_grace_ms"):
            WorkerOptions(cancel_grace_ms=bad)  # type: ignore[arg-type]
