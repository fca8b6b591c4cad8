"""The worker in-process, on real servers: batching, parking, retries, timeouts, leases on a
heartbeat, lease loss, a GIL-holding handler, graceful shutdown, lost ack replies."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from typing import Any

import pytest
import redis

from emq import AsyncQueue, Backoff, JobContext, LeaseLost, Permanent, Queue, Worker, WorkerOptions
from emq.worker.acks import Ack, AckBuffer
from emq.worker.connect import Outage
from emq.worker.heartbeat import Lease
from emq.worker.outcome import Complete, Fail

from ..support.helpers import assert_consistent, expire_leases, node_of, until

pytestmark = pytest.mark.servers("valkey", "redis", "cluster")

FIXED = Backoff(kind="fixed", base_ms=0, jitter=0.0)
# Every wait below polls for a condition; this deadline only bounds a hang, never a speed:
# a busy machine may take many times longer than an idle one and must still pass.
HANG = 60.0


async def stop(w: Worker, task: asyncio.Task[None], timeout: float = HANG) -> None:
    w.stop()
    await asyncio.wait_for(task, timeout)


def blocked_clients(client: redis.Redis) -> int:
    return int(client.info("clients")["blocked_clients"])


def evalsha_calls(client: redis.Redis) -> int:
    stats = client.info("commandstats")
    return int(stats.get("cmdstat_evalsha", {}).get("calls", 0))


async def test_burst_run_completes_everything_with_fewer_script_calls_than_jobs(
    queue: Queue, client: redis.Redis, qname: str
) -> None:
    n = 300
    queue.enqueue_many([("add", {"i": i}) for i in range(n)])
    seen: list[int] = []
    w = Worker(queue, options=WorkerOptions(concurrency=25, burst=True))

    @w.handler("add")
    async def add(payload: dict[str, int], ctx: JobContext) -> None:
        await asyncio.sleep(0.002)
        seen.append(payload["i"])

    client = node_of(client, qname)  # the queue's node: its INFO counts the calls
    before = evalsha_calls(client)
    await asyncio.wait_for(w.run(), HANG)
    calls = evalsha_calls(client) - before
    assert sorted(seen) == list(range(n))
    assert w.stats.completed == n and w.stats.claimed == n
    # one claim and one complete per batch, plus the beat: far fewer than 2 per job
    assert calls < n, calls
    c = queue.counts()
    assert (c["completed"], c["pending"], c["active"]) == (n, 0, 0)
    assert_consistent(client, qname)


async def test_parked_worker_wakes_on_enqueue_without_polling(
    queue: Queue, client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Parked on the wake list with a 5-minute poll, the worker runs a new job with one claim:
    it completes within HANG (< poll_ms), so only the wake list can have woken it."""
    claims: list[int] = []
    original = AsyncQueue.claim

    async def counted(q: AsyncQueue, *args: Any, **kwargs: Any) -> Any:
        claims.append(1)
        return await original(q, *args, **kwargs)

    monkeypatch.setattr(AsyncQueue, "claim", counted)
    client = node_of(client, queue.name)  # the queue's node: its INFO counts the parked
    blocked = blocked_clients(client)
    w = Worker(queue, {"ping": lambda p: None}, options=WorkerOptions(poll_ms=300_000))
    task = asyncio.create_task(w.run())
    await until(lambda: blocked_clients(client) > blocked, HANG, "the worker to park")
    before = len(claims)
    queue.enqueue("ping", None)
    await until(lambda: w.stats.completed == 1, HANG, "the job to run")
    await stop(w, task)
    assert len(claims) - before == 1  # woken once, claimed once, parked again


async def test_handlers_by_mapping_and_decorator_sync_and_async(queue: Queue) -> None:
    got: dict[str, Any] = {}

    def plain(payload: Any) -> None:
        got["plain"] = (payload, threading.current_thread().name)

    w = Worker(queue, {"plain": plain}, options=WorkerOptions(burst=True))

    @w.handler()
    async def fancy(payload: Any, ctx: JobContext) -> None:
        got["fancy"] = (payload, ctx.id, ctx.attempts, ctx.queue)

    ids = [queue.enqueue("plain", 1), queue.enqueue("fancy", {"x": 2})]
    await asyncio.wait_for(w.run(), HANG)
    assert got["plain"][0] == 1 and got["plain"][1].startswith("emq-handler")
    assert got["fancy"] == ({"x": 2}, ids[1], 1, queue.name)


async def test_retries_with_backoff_then_succeeds(queue: Queue, client: redis.Redis) -> None:
    attempts: list[int] = []
    w = Worker(queue, options=WorkerOptions(burst=True))

    @w.handler("flaky", backoff=FIXED)
    def flaky(payload: Any, ctx: JobContext) -> None:
        attempts.append(ctx.attempts)
        if ctx.attempts < 3:
            raise RuntimeError(f"try {ctx.attempts}")

    queue.enqueue("flaky", None, max_attempts=3)
    await asyncio.wait_for(w.run(), HANG)
    assert attempts == [1, 2, 3]
    assert (w.stats.retried, w.stats.completed, w.stats.dead) == (2, 1, 0)


async def test_permanent_goes_straight_to_dead(queue: Queue) -> None:
    w = Worker(queue, options=WorkerOptions(burst=True))

    @w.handler("charge")
    def charge(payload: Any) -> None:
        raise Permanent("card declined")

    job = queue.enqueue("charge", None, max_attempts=5)
    await asyncio.wait_for(w.run(), HANG)
    row = queue.job(job)
    assert row is not None and row.state == "dead" and row.attempts == 1
    assert row.last_error is not None and "card declined" in row.last_error


async def test_handler_max_attempts_caps_the_jobs_own(queue: Queue) -> None:
    w = Worker(queue, options=WorkerOptions(burst=True))
    w.register("boom", lambda p: 1 / 0, max_attempts=2, backoff=FIXED)
    job = queue.enqueue("boom", None, max_attempts=10)
    await asyncio.wait_for(w.run(), HANG)
    row = queue.job(job)
    assert row is not None and (row.state, row.attempts) == ("dead", 2)
    assert row.last_error is not None and row.last_error.startswith("ZeroDivisionError")


@pytest.mark.slow
async def test_hard_timeout_fails_the_attempt_async_and_sync(queue: Queue) -> None:
    """The handlers would run for 2 * HANG: the run ends within HANG only if the 200 ms limit
    stopped them."""
    stopped = threading.Event()
    w = Worker(queue, options=WorkerOptions(burst=True, backoff=FIXED))

    @w.handler("slow_async", timeout_ms=200)
    async def slow_async(payload: Any) -> None:
        await asyncio.sleep(2 * HANG)

    @w.handler("slow_sync", timeout_ms=200)
    def slow_sync(payload: Any, ctx: JobContext) -> None:
        if ctx.cancelled.wait(2 * HANG):  # a cooperative handler: stops when told
            stopped.set()

    a = queue.enqueue("slow_async", None, max_attempts=2)
    s = queue.enqueue("slow_sync", None, max_attempts=1)
    await asyncio.wait_for(w.run(), HANG)
    assert stopped.wait(HANG)  # told to stop (not timed out on its own)
    for job, attempts in ((a, 2), (s, 1)):
        row = queue.job(job)
        assert row is not None and (row.state, row.attempts) == ("dead", attempts)
        assert row.last_error is not None and row.last_error.startswith("timeout")
    assert w.stats.timeouts == 3


async def test_unknown_job_name_is_retried_not_dropped(queue: Queue) -> None:
    w = Worker(queue, {"known": lambda p: None}, options=WorkerOptions(burst=True))
    job = queue.enqueue("unknown", None, max_attempts=3)
    await asyncio.wait_for(w.run(), HANG)
    row = queue.job(job)
    assert row is not None and row.state == "scheduled" and row.attempts == 1
    assert row.last_error == "no handler registered for 'unknown'"


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["async", "sync"])
async def test_job_three_times_longer_than_its_lease_runs_exactly_once(
    queue: Queue, client: redis.Redis, qname: str, kind: str
) -> None:
    """The handler runs past three leases and past ten outside sweeps: only the heartbeat
    keeps it. A beat may be up to ``lease - beat`` (800 ms) late before the lease lapses."""
    runs: list[int] = []
    lease = 1200
    opts = WorkerOptions(lease_ms=lease, stalled_interval_ms=100, burst=True)
    w = Worker(queue, options=opts)
    # an outside sweep every 50 ms would recover the job if its lease ever lapsed
    recovered: list[str] = []
    sweeps = 0

    def outlived(started: float) -> bool:
        return time.monotonic() - started >= 3 * lease / 1000 and sweeps >= 10

    if kind == "async":

        async def long(payload: Any, ctx: JobContext) -> None:
            runs.append(ctx.attempts)
            started = time.monotonic()
            while not outlived(started):
                await asyncio.sleep(0.05)
    else:

        def long(payload: Any, ctx: JobContext) -> None:  # type: ignore[misc]
            runs.append(ctx.attempts)
            started = time.monotonic()
            while not outlived(started):
                time.sleep(0.05)

    w.register("long", long)

    async def sweeper() -> None:
        nonlocal sweeps
        while True:
            recovered.extend((await asyncio.to_thread(queue.sweep_stalled)).recovered)
            sweeps += 1
            await asyncio.sleep(0.05)

    sweeping = asyncio.create_task(sweeper())
    queue.enqueue("long", None)
    await asyncio.wait_for(w.run(), HANG)
    sweeping.cancel()
    assert runs == [1]
    assert w.stats.heartbeats >= 3 and w.stats.lease_lost == 0
    c = queue.counts()
    assert (c["completed"], c["recovered"]) == (1, 0)
    assert recovered == [] and sweeps >= 10
    assert_consistent(client, qname)


async def test_heartbeat_refused_cancels_the_handler_and_discards_its_result(
    queue: Queue, client: redis.Redis, qname: str
) -> None:
    started = threading.Event()
    outcomes: list[str] = []
    w = Worker(queue, options=WorkerOptions(lease_ms=900, stalled_interval_ms=100))

    @w.handler("watch")
    def watch(payload: Any, ctx: JobContext) -> None:
        if ctx.attempts > 1:
            outcomes.append("second attempt ran")
            return
        started.set()
        cancelled = ctx.cancelled.wait(HANG)
        outcomes.append(f"first: cancelled={cancelled} why={ctx.cancel_reason}")
        with pytest.raises(LeaseLost):
            ctx.heartbeat()

    job = queue.enqueue("watch", None)
    task = asyncio.create_task(w.run())
    await until(started.is_set, HANG, "the handler to start")
    expire_leases(client, qname, job)  # the next beat (<= 300 ms) is refused
    await until(lambda: w.stats.completed == 1, HANG, "the retry to complete")
    # the first attempt's thread may still be unwinding when the retry completes
    await until(lambda: len(outcomes) == 2, HANG, "the first attempt to see its cancellation")
    await stop(w, task)
    assert sorted(outcomes) == ["first: cancelled=True why=lease_lost", "second attempt ran"]
    assert w.stats.lease_lost == 1 and w.stats.lost_ids == [job]
    assert queue.counts()["recovered"] == 1
    assert_consistent(client, qname)


async def test_late_completion_is_refused_and_the_job_runs_again(
    queue: Queue, client: redis.Redis, qname: str, caplog: pytest.LogCaptureFixture
) -> None:
    release = asyncio.Event()
    runs: list[int] = []
    tokens: list[int] = []
    # a long lease: no beat comes before the handler returns, so the complete is refused
    w = Worker(queue, options=WorkerOptions(concurrency=1, lease_ms=30_000))

    @w.handler("late")
    async def late(payload: Any, ctx: JobContext) -> None:
        runs.append(ctx.attempts)
        tokens.append(ctx.token)
        if ctx.attempts == 1:
            await release.wait()

    job = queue.enqueue("late", None)
    task = asyncio.create_task(w.run())
    with caplog.at_level(logging.WARNING, logger="emq.worker"):
        await until(lambda: runs, HANG, "the handler to start")
        expire_leases(client, qname, job)
        assert queue.sweep_stalled().recovered == [job]
        release.set()
        await until(lambda: w.stats.completed == 1, HANG, "the second run to complete")
        await stop(w, task)
    assert runs == [1, 2]
    lost = [r for r in caplog.records if getattr(r, "emq", {}).get("event") == "lease_lost"]
    seen = [(r.emq["job"], r.emq["token"], r.emq["via"]) for r in lost]  # type: ignore[attr-defined]
    assert seen == [(job, tokens[0], "complete")]
    assert queue.counts()["completed"] == 1
    assert_consistent(client, qname)


def _hold_gil(seconds: float) -> None:
    """Hold the GIL in C code for about ``seconds`` (builtin sum over a range never releases
    it, and the interpreter cannot switch threads inside it). Calibrated on this thread's CPU
    time, so a busy machine makes the hold longer in wall time, never shorter."""
    n = 5_000_000
    t0 = time.thread_time()
    sum(range(n))
    per = max(time.thread_time() - t0, 1e-3) / n
    sum(range(int(seconds / per)))


@pytest.mark.slow
async def test_pure_python_busy_handler_does_not_starve_the_heartbeat(
    queue: Queue, client: redis.Redis, qname: str
) -> None:
    """A pure-Python busy handler 3x longer than the lease starves nothing: the interpreter
    switches threads every 5 ms, so no beat comes anywhere near ``lease - beat`` (1000 ms)
    late. How late beats are behind a C-level GIL hold (the bound in docs/worker.md) is
    measured by ``benchmarks/timing_bounds.py``, not asserted here: it is a speed."""
    lease = 1500  # beats every 500 ms; a beat may be up to 1000 ms late
    w = Worker(queue, options=WorkerOptions(lease_ms=lease, concurrency=4, burst=True))

    @w.handler("busy_python")
    def busy_python(payload: Any) -> None:
        end = time.monotonic() + 3 * lease / 1000
        x = 0
        while time.monotonic() < end:
            x += 1

    @w.handler("bystander")
    async def bystander(payload: Any) -> None:
        await asyncio.sleep(3 * lease / 1000)

    queue.enqueue_many([("busy_python", None), ("bystander", None)])
    await asyncio.wait_for(w.run(), HANG)
    print(f"\nbusy Python handler: heartbeat at most {w.stats.heartbeat_max_late_ms:.0f} ms late")
    assert w.stats.lease_lost == 0 and w.stats.completed == 2
    assert w.stats.heartbeats >= 6  # 4.5 s of beats every 500 ms: the thread kept beating
    assert queue.counts()["recovered"] == 0
    assert_consistent(client, qname)


async def test_graceful_stop_mid_batch_gives_back_unstarted_jobs_unspent(
    queue: Queue, client: redis.Redis, qname: str
) -> None:
    started: list[str] = []
    gate = asyncio.Event()
    w = Worker(queue, options=WorkerOptions(concurrency=2, prefetch=6))

    @w.handler("job")
    async def job(payload: Any, ctx: JobContext) -> None:
        started.append(ctx.id)
        await gate.wait()  # still running when the stop comes, however slow the machine

    ids = queue.enqueue_many([("job", i) for i in range(8)])
    task = asyncio.create_task(w.run())
    await until(lambda: len(started) == 2, HANG, "two jobs to start")
    assert queue.counts()["active"] == 8
    w.stop()
    await until(lambda: w.stats.given_back == 6, HANG, "the unstarted jobs to be given back")
    gate.set()  # the running two finish inside the grace period
    await asyncio.wait_for(task, HANG)
    c = queue.counts()
    assert (c["completed"], c["pending"], c["active"]) == (2, 6, 0)
    assert w.stats.given_back == 6
    pending = queue.jobs("pending")
    assert all(j.attempts == 0 and j.token > 0 for j in pending)  # a claim's attempt undone
    assert {j.id for j in pending} | set(started) == set(ids)
    assert_consistent(client, qname)


async def test_grace_period_interrupts_a_handler_that_does_not_finish(
    queue: Queue, client: redis.Redis, qname: str
) -> None:
    """The handler would wait 2 * HANG: the stop returns within HANG only because the 300 ms
    grace period ran out and interrupted it."""
    w = Worker(queue, options=WorkerOptions(grace_ms=300, backoff=FIXED))
    w.register("forever", lambda p, ctx: ctx.cancelled.wait(2 * HANG))
    job = queue.enqueue("forever", None)
    task = asyncio.create_task(w.run())
    await until(lambda: w.stats.claimed == 1, HANG, "the claim")
    await stop(w, task)
    row = queue.job(job)
    assert row is not None and row.state in ("scheduled", "pending") and row.attempts == 1
    assert row.last_error is not None and row.last_error.startswith("interrupted")
    assert_consistent(client, qname)


class _ReplyLost:
    """An AsyncQueue whose first complete/fail is applied but whose reply is lost."""

    def __init__(self, q: Any) -> None:
        self._q, self.dropped = q, 0
        self.name, self.core, self.client = q.name, q.core, q.client

    async def complete_many(self, pairs: Any) -> list[bool]:
        result: list[bool] = await self._q.complete_many(pairs)
        return await self._maybe_drop(result)

    async def fail_many(self, items: Any) -> list[str]:
        result: list[str] = await self._q.fail_many(items)
        return await self._maybe_drop(result)

    async def _maybe_drop(self, result: Any) -> Any:
        if not self.dropped:
            self.dropped += 1
            raise redis.ConnectionError("reply lost (simulated)")
        return result


async def test_ack_whose_reply_was_lost_is_settled_from_the_row(
    url: str, qname: str, queue: Queue
) -> None:
    aq = AsyncQueue.from_url(url, qname)
    a, b = queue.enqueue("x", None), queue.enqueue("y", None)
    claimed = {c.id: c for c in queue.claim(2, 30_000)}
    answers: dict[str, str] = {}
    outage = Outage(logging.getLogger("test"))
    buf = AckBuffer(
        outage, logging.getLogger("test"), lambda ack, ans: answers.update({ack.lease.id: ans})
    )
    lossy = _ReplyLost(aq)
    ok = Ack(lossy, Lease(qname, a, claimed[a].token), Complete())  # type: ignore[arg-type]
    await buf.flush([ok])
    bad = Ack(_ReplyLost(aq), Lease(qname, b, claimed[b].token), Fail("e", True, FIXED))  # type: ignore[arg-type]
    await buf.flush([bad])
    assert answers == {a: "completed", b: "scheduled"}
    assert buf.uncertain == 2
    assert queue.counts()["completed"] == 1
    await aq.close()


async def test_worker_from_url_and_queue_names(url: str, qname: str, queue: Queue) -> None:
    other = qname + "-b"
    seen: list[str] = []
    w = Worker([qname, other], url=url, options=WorkerOptions(burst=True))
    w.register("t", lambda p, ctx: seen.append(ctx.queue))
    queue.enqueue("t", None)
    with Queue.from_url(url, other) as q2:
        q2.enqueue("t", None)
        await asyncio.wait_for(w.run(), HANG)
        q2.obliterate(force=True)
    assert sorted(seen) == sorted([qname, other])


@pytest.mark.slow
async def test_gil_hold_beyond_the_bound_lapses_leases_and_a_process_pool_avoids_it(
    queue: Queue, client: redis.Redis, qname: str
) -> None:
    """The documented limit, shown: a C-level GIL hold longer than ``lease_ms`` stops the
    heartbeat thread too, and the leases of the process lapse. The same work awaited from
    an async handler in a process pool leaves the worker's GIL free. Load only lengthens
    the hold (it is at least 1.2 s of CPU), so it cannot turn the first half into a pass;
    the second half compares the two runs' lateness with a factor-2 margin."""
    import concurrent.futures
    import multiprocessing

    lease = 600  # beats every 200 ms; a beat 400 ms late loses the lease
    w = Worker(queue, options=WorkerOptions(lease_ms=lease, concurrency=4, burst=True))
    pool = concurrent.futures.ProcessPoolExecutor(
        1, mp_context=multiprocessing.get_context("spawn")
    )
    await asyncio.get_running_loop().run_in_executor(pool, _hold_gil, 0.01)  # warm the child

    @w.handler("in_thread")
    def in_thread(payload: Any) -> None:
        time.sleep(0.05)
        _hold_gil(1.2)

    @w.handler("in_process")
    async def in_process(payload: Any) -> None:
        await asyncio.get_running_loop().run_in_executor(pool, _hold_gil, 1.2)

    @w.handler("bystander")
    async def bystander(payload: Any) -> None:
        await asyncio.sleep(1.5)

    try:
        queue.enqueue_many([("in_thread", None), ("bystander", None)])
        await asyncio.wait_for(w.run(), HANG)
        held_late = w.stats.heartbeat_max_late_ms
        assert w.stats.lease_lost >= 1  # both leases lapsed during the hold
        assert held_late > lease - lease // 3
        queue.sweep_all()

        w2 = Worker(queue, options=WorkerOptions(lease_ms=lease, concurrency=4, burst=True))
        w2.handlers.update(
            {"in_process": w.handlers["in_process"], "bystander": w.handlers["bystander"]}
        )
        queue.drain()
        queue.enqueue_many([("in_process", None), ("bystander", None)])
        await asyncio.wait_for(w2.run(), HANG)
        assert (w2.stats.lease_lost, w2.stats.completed) == (0, 2)
        # the hold in the other process did not delay the beats the way the in-thread one did
        assert w2.stats.heartbeat_max_late_ms < held_late / 2, (w2.stats, held_late)
    finally:
        pool.shutdown()
    assert_consistent(client, qname)


@pytest.mark.slow
async def test_sync_handler_past_its_timeout_keeps_its_thread_slot_until_it_returns(
    queue: Queue,
) -> None:
    """A thread cannot be killed: the attempt fails at the timeout, but ``concurrency``
    still counts the thread until it returns, so threads in use never exceed it."""
    marks: dict[str, float] = {}
    w = Worker(queue, options=WorkerOptions(concurrency=1, burst=True, backoff=FIXED))

    @w.handler("stubborn", timeout_ms=200)
    def stubborn(payload: Any) -> None:
        marks["stubborn"] = time.monotonic()
        time.sleep(0.5)  # ignores ctx.cancelled, well past its 200 ms limit
        marks["stubborn_returned"] = time.monotonic()

    @w.handler("quick")
    def quick(payload: Any) -> None:
        marks["quick"] = time.monotonic()

    first = queue.enqueue("stubborn", None, max_attempts=1)
    queue.enqueue("quick", None)
    await asyncio.wait_for(w.run(), HANG)
    row = queue.job(first)
    assert row is not None and row.state == "dead" and row.last_error is not None
    assert row.last_error.startswith("timeout")
    assert marks["quick"] >= marks["stubborn_returned"]
    assert w.stats.completed == 1 and w.stats.timeouts == 1


async def test_a_payload_damaged_on_the_server_fails_its_job_not_the_worker(
    queue: Queue, client: redis.Redis
) -> None:
    """A row whose payload was edited by hand into text that is not JSON used to stop the
    worker's claim loop (WorkerFailed, a JSONDecodeError) with its batch leased. Now that one
    job is dead, with the reason, and the others of the same claim complete."""
    w = Worker(queue, options=WorkerOptions(burst=True, concurrency=5))
    seen: list[Any] = []
    w.register("x", seen.append)
    ids = queue.enqueue_many([("x", {"i": i}) for i in range(5)])
    k = queue.core.keys
    name, most, trace, _ = client.hget(k.packed, ids[2]).split(" ", 3)  # it waits packed
    client.hset(k.packed, ids[2], f"{name} {most} {trace} {{not json")
    await asyncio.wait_for(w.run(), HANG)
    assert sorted(p["i"] for p in seen) == [0, 1, 3, 4]
    row = queue.job(ids[2])
    assert row is not None and (row.state, row.attempts) == ("dead", 1)
    assert row.last_error is not None and "stored payload is not JSON" in row.last_error
    assert queue.counts()["completed"] == 4
    assert_consistent(client, queue.name)
