"""``ctx.progress`` on real servers: readable while the handler runs (sync and async), throttled
so a tight loop writes a bounded number of times, the last value stored before the job's
completion, fenced by the lease token, and refused at once when it is not JSON."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from typing import Any

import pytest
import redis

from emq import (
    InvalidOption,
    InvalidPayload,
    JobContext,
    JobNotFound,
    LeaseLost,
    Queue,
    Worker,
    WorkerOptions,
)

from ..support.helpers import assert_consistent, expire_leases, until

pytestmark = pytest.mark.servers("valkey", "redis", "cluster")

HANG = 60.0  # bounds a hang, never a speed


def progress_events(queue: Queue, job_id: str) -> list[Any]:
    return [
        json.loads(e.fields["progress"])
        for e in queue.events()
        if e.job == job_id and e.event == "progress"
    ]


async def run_until(w: Worker, done: Any, what: str) -> None:
    task = asyncio.create_task(w.run())
    try:
        await until(done, HANG, what)
    finally:
        w.stop()
        await asyncio.wait_for(task, HANG)


async def test_progress_of_a_sync_handler_is_readable_while_it_runs(
    queue: Queue, client: redis.Redis
) -> None:
    job = queue.enqueue("work")
    release = threading.Event()
    w = Worker(queue, options=WorkerOptions(concurrency=2, progress_interval_ms=20))

    @w.handler("work")
    def work(payload: Any, ctx: JobContext) -> None:
        ctx.progress({"pct": 10})
        ctx.heartbeat(progress={"pct": 50})  # heartbeat(progress=...) reports through it
        assert ctx.last_progress == {"pct": 50}
        release.wait(HANG)

    task = asyncio.create_task(w.run())
    try:
        row = await until(
            lambda: (j := queue.job(job)) and j.progress == {"pct": 50} and j, HANG, "50%"
        )
        assert row.state == "active" and row.progress_at is not None
        release.set()
        await until(lambda: queue.counts()["completed"] == 1, HANG, "completed")
    finally:
        release.set()
        w.stop()
        await asyncio.wait_for(task, HANG)
    assert progress_events(queue, job)[-1] == {"pct": 50}
    assert_consistent(client, queue.name)


async def test_progress_of_an_async_handler_is_readable_while_it_runs(queue: Queue) -> None:
    job = queue.enqueue("work")
    release = asyncio.Event()
    w = Worker(queue, options=WorkerOptions(concurrency=2, progress_interval_ms=20))

    @w.handler("work")
    async def work(payload: Any, ctx: JobContext) -> None:
        for pct in (1, 2, 3):
            ctx.progress(pct)
        await asyncio.wait_for(release.wait(), HANG)

    task = asyncio.create_task(w.run())
    try:
        await until(lambda: (j := queue.job(job)) and j.progress == 3, HANG, "progress 3")
        release.set()
        await until(lambda: queue.counts()["completed"] == 1, HANG, "completed")
    finally:
        release.set()
        w.stop()
        await asyncio.wait_for(task, HANG)


@pytest.mark.parametrize("kind", ["sync", "async"])
async def test_a_tight_loop_of_progress_makes_a_bounded_number_of_writes(
    queue: Queue, kind: str
) -> None:
    """100,000 calls: at most one write per ``progress_interval_ms`` while the loop runs
    (the first at once), plus the last value before the completion: writes <= D / interval
    + 2, D measured around the loop (whatever the machine's speed: no timing assert)."""
    n, interval_ms = 100_000, 50
    job = queue.enqueue("spin")
    spent: list[float] = []
    w = Worker(queue, options=WorkerOptions(concurrency=1, progress_interval_ms=interval_ms))

    def spin(ctx: JobContext) -> None:
        start = time.monotonic()
        for i in range(n):
            ctx.progress({"i": i})
        spent.append(time.monotonic() - start)

    if kind == "sync":
        w.handler("spin")(lambda payload, ctx: spin(ctx))
    else:

        async def spin_async(payload: Any, ctx: JobContext) -> None:
            spin(ctx)  # never yields: nothing is sent before it returns

        w.handler("spin")(spin_async)

    await run_until(w, lambda: queue.counts()["completed"] == 1, "completed")
    # the window in which the flusher may send: the loop, and the ack that follows it
    writes = progress_events(queue, job)
    assert writes[-1] == {"i": n - 1}  # the last value, before the completion
    bound = spent[0] * 1000 / interval_ms + 2
    assert 1 <= len(writes) <= bound, (len(writes), spent[0])
    order = [e.event for e in queue.events() if e.job == job]
    assert order[-1] == "completed" and order[-2] == "progress"


async def test_the_last_progress_is_stored_before_the_completion(
    url: str, qname: str, client: redis.Redis
) -> None:
    from emq import QueueOptions

    with Queue.from_url(url, qname, options=QueueOptions(keep_completed=(60_000, 10))) as q:
        job = q.enqueue("step")
        w = Worker(q, options=WorkerOptions(progress_interval_ms=3_600_000))

        @w.handler("step")
        async def step(payload: Any, ctx: JobContext) -> None:
            ctx.progress("first")
            await asyncio.sleep(0)
            ctx.progress("second")
            ctx.progress("last")

        await run_until(w, lambda: q.counts()["completed"] == 1, "completed")
        kept = q.job(job)
        assert kept is not None and kept.state == "completed" and kept.progress == "last"
        assert progress_events(q, job)[-1] == "last"
        events = [e.event for e in q.events() if e.job == job]
        assert events.index("completed") > max(i for i, e in enumerate(events) if e == "progress")


def test_a_stale_token_cannot_store_progress(queue: Queue, client: redis.Redis) -> None:
    job = queue.enqueue("x")
    (first,) = queue.claim(1)
    assert queue.set_progress(job, first.token, {"pct": 1}) > 0
    expire_leases(client, queue.name, job)  # the lease lapsed: refused even before the sweep
    with pytest.raises(LeaseLost):
        queue.set_progress(job, first.token, {"pct": 2})
    queue.sweep_stalled()
    (second,) = queue.claim(1)
    before = client.hgetall(queue.core.keys.job(job))
    answers = queue.set_progress_many([(job, first.token, "3")])
    assert [a.value for a in answers if not isinstance(a, int)] == ["lost"]
    assert client.hgetall(queue.core.keys.job(job)) == before  # nothing written
    assert queue.job(job).progress == {"pct": 1}  # type: ignore[union-attr]
    queue.set_progress(job, second.token, {"pct": 4})
    assert queue.job(job).progress == {"pct": 4}  # type: ignore[union-attr]
    assert progress_events(queue, job) == [{"pct": 1}, {"pct": 4}]
    with pytest.raises(JobNotFound):
        queue.set_progress("JOB0000000000A", 5, 1)


def _ctx() -> JobContext:
    return JobContext(queue="q", id="JOB0000000000A", name="n", token=1, attempts=1, stalled=0,
                      beat=lambda: None)  # fmt: skip


@pytest.mark.parametrize(
    ("value", "says"),
    [
        (object(), "not JSON-serialisable"),
        ({1, 2}, "not JSON-serialisable"),
        (float("nan"), "not JSON-serialisable"),
        ("x" * 70_000, "over the limit"),
    ],
)
def test_progress_that_is_not_json_raises_at_once(value: Any, says: str) -> None:
    ctx = _ctx()
    with pytest.raises(InvalidPayload, match=f"progress value .*{says}"):
        ctx.progress(value)
    assert ctx.last_progress is None


async def test_a_handler_sees_bad_progress_raise_and_goes_on(queue: Queue) -> None:
    job = queue.enqueue("bad")
    seen: list[str] = []
    w = Worker(queue, options=WorkerOptions(progress_interval_ms=10))

    @w.handler("bad")
    def bad(payload: Any, ctx: JobContext) -> None:
        try:
            ctx.progress({"when": time})  # a module: not JSON
        except InvalidPayload as exc:
            seen.append(str(exc))
        ctx.progress("fine")

    await run_until(w, lambda: queue.counts()["completed"] == 1, "completed")
    assert len(seen) == 1 and "not JSON-serialisable" in seen[0]
    assert progress_events(queue, job) == ["fine"]


def test_progress_interval_is_validated() -> None:
    for bad in (0, 5, -1, 1.5, None):
        with pytest.raises(InvalidOption, match="progress_interval_ms"):
            WorkerOptions(progress_interval_ms=bad)  # type: ignore[arg-type]


def test_every_last_progress_of_many_short_jobs_lands_before_their_acks(
    url: str, qname: str, client: redis.Redis
) -> None:
    """A value in flight (the flusher's own send) lands before the ack of its job, which would
    make it 'gone': 2,000 jobs reporting one value each, every kept row shows it."""
    from emq import QueueOptions

    with Queue.from_url(url, qname, options=QueueOptions(keep_completed=(600_000, 5_000))) as q:
        ids = q.enqueue_many([("one", i) for i in range(2_000)])
        w = Worker(q, options=WorkerOptions(burst=True, concurrency=50))

        @w.handler("one")
        async def one(payload: Any, ctx: JobContext) -> None:
            ctx.progress(payload)

        w.run_sync(handle_signals=False)
        shown = [j.progress if j else None for j in map(q.job, ids)]
        missing = [i for i, p in enumerate(shown) if p != i]
        assert missing == [], (len(missing), [shown[i] for i in missing[:5]])
