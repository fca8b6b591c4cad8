"""The promise under real faults (docs/guarantees.md, When the server misbehaves): out-of-memory
episodes, script-cache flushes in a loop, rows that vanish, a worker's own lifecycle, false
lease_lost alarms. Each test breaks a server it started itself and ends with the invariant check:
every acknowledged job completed exactly once as a side effect, or in exactly one location; no stale
completion accepted."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import redis

from emq import (
    EmqError,
    JobContext,
    JobSpec,
    Queue,
    ServerOutOfMemory,
    Worker,
    WorkerFailed,
    WorkerOptions,
)
from emq.embedded.standalone import EmbeddedServer

from ..support.helpers import Flushing, assert_consistent, expire_leases, until, where

HANG = 90.0  # bounds a hang only; a busy machine may be many times slower than an idle one


def events(records: list[logging.LogRecord], name: str) -> list[dict[str, Any]]:
    out = []
    for r in records:
        fields = getattr(r, "emq", None)
        if isinstance(fields, dict) and fields.get("event") == name:
            out.append(fields)
    return out


def stream_events(client: redis.Redis, q: Queue, name: str) -> list[dict[str, str]]:
    """The stream's ``name`` events, each as its fields with ``event`` and ``job`` (an entry of
    one call's several events expanded, docs/events.md, Entries)."""
    return [
        {"event": e.event, **({"job": e.job} if e.job else {}), **e.fields}
        for e in q.events()
        if e.event == name
    ]


# -- out of memory ----------------------------------------------------------------------------


def test_a_call_refused_for_memory_is_a_clear_error_and_writes_nothing(
    own: EmbeddedServer, admin: redis.Redis
) -> None:
    with Queue.from_url(own.url(), "oom") as q:
        q.enqueue("warm")  # takes the id node lease while memory is free
        before = admin.dbsize()
        admin.config_set("maxmemory", 1)
        try:
            with pytest.raises(ServerOutOfMemory, match="out of memory"):
                q.enqueue_many([("send", {"n": i}) for i in range(50)])
            with pytest.raises(ServerOutOfMemory):
                q.claim(count=5)
        finally:
            admin.config_set("maxmemory", 0)
        assert admin.dbsize() == before  # refused whole, before any write
        assert q.counts()["pending"] == 1
        assert_consistent(admin, "oom")


@pytest.mark.slow
@pytest.mark.timeout(180)
async def test_worker_rides_out_an_out_of_memory_episode_without_losing_a_component(
    own: EmbeddedServer, admin: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    """Before: the heartbeat thread and the maintenance task died on the first OOM refusal and
    the process went on half-alive. Now every loop retries, logs the episode once, recovers."""
    q = Queue.from_url(own.url(), "oomw")
    ran: dict[str, int] = {}
    long_started = threading.Event()
    # the long job outlives its lease twice over: only a live heartbeat can keep it; the lease
    # outlasts the episode with room for a loaded machine's late beat
    w = Worker(q, options=WorkerOptions(concurrency=4, lease_ms=4_000, stalled_interval_ms=200))

    @w.handler("short")
    async def short(payload: Any, ctx: JobContext) -> None:
        ran[ctx.id] = ran.get(ctx.id, 0) + 1
        await asyncio.sleep(0.01)

    @w.handler("long")
    def long(payload: Any, ctx: JobContext) -> None:
        ran[ctx.id] = ran.get(ctx.id, 0) + 1
        long_started.set()
        end = time.monotonic() + 9.0
        while time.monotonic() < end and not ctx.cancelled.is_set():
            time.sleep(0.02)

    long_id = q.enqueue("long")
    ids = [long_id, *q.enqueue_many([("short", i) for i in range(100)])]
    with caplog.at_level(logging.INFO, logger="emq.worker"):
        task = asyncio.create_task(w.run())
        await until(long_started.is_set, HANG, "the long job to start")
        admin.config_set("maxmemory", 1)  # every write refused: extend, claim, acks, the guard
        await asyncio.sleep(1.0)  # the episode (shorter than the lease: nothing may lapse)
        admin.config_set("maxmemory", 0)
        more = q.enqueue_many([("short", i) for i in range(100, 150)])
        ids += more
        await until(lambda: q.counts()["completed"] == len(ids), HANG, "every job to complete")
        runner = w._runner
        assert runner is not None and runner.hb.alive and not task.done()
        w.stop()
        await asyncio.wait_for(task, HANG)
    assert ran == {i: 1 for i in ids}  # every job ran exactly once, the long one too
    assert w.stats.lease_lost == 0 and w.stats.outages == 1  # one episode, logged once
    outages = events(caplog.records, "outage")
    # the registry's write keeps its own episode (logged once, not counted in stats.outages),
    # so it shows up only if a registry beat fell inside the episode
    mine = [o for o in outages if o.get("where") != "registry"]
    assert len(mine) == w.stats.outages  # once per episode, not once per failed call
    assert len(outages) - len(mine) <= 1
    assert any("out of memory" in o["error"] for o in mine)
    password = own.url().split("@")[0].rsplit(":", 1)[1]
    assert all(o["url"].startswith("redis://:***@127.0.0.1:") for o in outages)  # redacted
    assert all(password not in str(o) for o in outages)
    assert events(caplog.records, "reconnected")
    c = q.counts()
    assert (c["pending"], c["active"], c["dead"], c["recovered"]) == (0, 0, 0, 0)
    assert_consistent(admin, "oomw")
    q.close()


# -- script cache flushed again and again ------------------------------------------------------


@pytest.mark.slow
@pytest.mark.timeout(180)
async def test_worker_and_producer_survive_script_flush_in_a_loop(
    own: EmbeddedServer, admin: redis.Redis
) -> None:
    q = Queue.from_url(own.url(), "flush")
    with Flushing(own.url()) as flushes:
        ids = [str(i) for i in q.enqueue_many([("j", i) for i in range(300)])]
        ran: dict[str, int] = {}
        w = Worker(q, options=WorkerOptions(concurrency=8, lease_ms=10_000, burst=True))

        @w.handler("j")
        async def j(payload: Any, ctx: JobContext) -> None:
            ran[ctx.id] = ran.get(ctx.id, 0) + 1

        await asyncio.wait_for(w.run(), HANG)
    assert flushes.count > 0
    assert ran == {i: 1 for i in ids}
    assert q.counts()["completed"] == 300
    assert_consistent(admin, "flush")
    q.close()


# -- rows that vanish ------------------------------------------------------------------------


def test_an_id_without_its_row_is_counted_emitted_and_returned_never_dropped_silently(
    queue: Queue, client: redis.Redis
) -> None:
    # priority 1: rows (a job of the common case waits packed, without a row to lose)
    a, b, c = queue.enqueue_many([JobSpec("x", n, priority=1) for n in (1, 2, 3)])
    s = queue.enqueue("x", 4, delay_ms=1)
    client.delete(queue.core.keys.job(b), queue.core.keys.job(s))  # as an evicting policy would
    time.sleep(0.01)  # s is due: the claim promotes it first
    claims = queue.claim(count=3)
    assert [j.id for j in claims] == [a, c]
    assert sorted(claims.missing) == sorted([b, s])
    held = queue.claim(count=1)
    assert not held
    client.delete(queue.core.keys.job(a))
    expire_leases(client, queue.name, a)
    result = queue.sweep_stalled()
    assert result.missing == [a] and result.recovered == []
    assert int(client.hget(queue.core.keys.metrics, "missing") or 0) == 3
    missing = stream_events(client, queue, "missing")
    assert sorted((e["job"], e["from"]) for e in missing) == sorted(
        [(b, "pending"), (s, "schedule"), (a, "active")]
    )
    assert where(client, queue.name, c) == ["active"]
    assert_consistent(client, queue.name)


async def test_the_worker_logs_every_missing_id(
    queue: Queue, client: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    ids = queue.enqueue_many([JobSpec("x", i, priority=1) for i in range(5)])  # rows
    client.delete(queue.core.keys.job(ids[2]))
    w = Worker(queue, options=WorkerOptions(burst=True))

    @w.handler("x")
    async def x(payload: Any) -> None:
        return None

    with caplog.at_level(logging.INFO, logger="emq.worker"):
        await asyncio.wait_for(w.run(), HANG)
    assert [e["job"] for e in events(caplog.records, "missing")] == [ids[2]]
    assert w.stats.missing == 1 and w.stats.completed == 4
    assert_consistent(client, queue.name)


# -- the worker's own lifecycle ---------------------------------------------------------------


async def test_stop_before_run_ends_that_run(queue: Queue) -> None:
    w = Worker(queue, options=WorkerOptions(poll_ms=60_000))
    w.stop()
    await asyncio.wait_for(w.run(), HANG)  # before: run() never returned
    # the stop was consumed: the worker can run again and be stopped while running
    task = asyncio.create_task(w.run())
    await until(lambda: w._runner is not None, HANG, "the second run to start")
    w.stop()
    await asyncio.wait_for(task, HANG)


async def test_a_second_concurrent_run_is_refused_and_stop_still_ends_the_first(
    queue: Queue,
) -> None:
    w = Worker(queue, options=WorkerOptions(poll_ms=60_000))
    first = asyncio.create_task(w.run())
    await until(lambda: w._runner is not None, HANG, "the first run to start")
    with pytest.raises(EmqError, match="already running"):
        await w.run()
    w.stop()
    await asyncio.wait_for(first, HANG)  # before: the second run took over stop()


async def test_a_bug_in_a_component_stops_the_worker_and_raises(
    queue: Queue, client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    from emq.worker.maintenance import Maintenance

    async def broken(self: Maintenance) -> None:
        raise KeyError("a bug in the maintenance beat")

    monkeypatch.setattr(Maintenance, "beat", broken)
    w = Worker(queue, options=WorkerOptions(poll_ms=60_000))
    with pytest.raises(WorkerFailed, match="maintenance failed: KeyError") as err:
        await asyncio.wait_for(w.run(), HANG)
    assert isinstance(err.value.__cause__, KeyError)


# -- no false alarms --------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.timeout(120)
async def test_completed_jobs_raise_no_lease_lost_events(queue: Queue, client: redis.Redis) -> None:
    """A heartbeat that crosses an ack finds the row gone: that is no lost lease. A lease_lost
    event may only name a run whose job was really claimed again afterwards."""
    # a loaded machine may really let a 300 ms lease lapse: the sweep then recovers the job
    opts = WorkerOptions(concurrency=8, lease_ms=300, stalled_interval_ms=100)
    w = Worker(queue, options=opts)

    @w.handler("x")
    async def x(payload: int) -> None:
        await asyncio.sleep((payload % 7) * 0.02)

    queue.enqueue_many([("x", i) for i in range(120)])
    task = asyncio.create_task(w.run())
    await until(lambda: queue.counts()["completed"] == 120, HANG, "every job to complete")
    w.stop()
    await asyncio.wait_for(task, HANG)
    claimed: dict[str, list[int]] = {}
    for e in stream_events(client, queue, "claimed"):
        claimed.setdefault(e["job"], []).append(int(e["token"]))
    for e in stream_events(client, queue, "lease_lost"):
        later = [t for t in claimed[e["job"]] if t > int(e["token"])]
        assert later, f"false alarm: {e} names a run that nobody replaced"
    assert queue.counts()["completed"] == 120
    assert_consistent(client, queue.name)


def test_a_worker_refuses_bad_names_and_urls_at_construction() -> None:
    from emq import InvalidName, InvalidOption, InvalidUrl

    with pytest.raises(InvalidName, match="queue name 'a b' is invalid"):
        Worker("a b", url="redis://127.0.0.1:6379/0")
    with pytest.raises(InvalidUrl, match="scheme 'http'"):
        Worker("q", url="http://user:s3cret@x")
    with pytest.raises(InvalidUrl) as err:
        Worker("q", url="http://user:s3cret@x")
    assert "s3cret" not in str(err.value)
    w = Worker("q", url="redis://127.0.0.1:6379/0")
    with pytest.raises(InvalidName, match="job name 'bad name' is invalid"):
        w.register("bad name", lambda p: None)
    with pytest.raises(InvalidOption):
        Worker([])
    with pytest.raises(InvalidName) as long_err:
        Worker("x" * 100_000, url="redis://127.0.0.1:6379/0")
    assert len(str(long_err.value)) < 300  # a 100 KB name is cut, not repeated


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_the_archiver_loop_rides_out_an_out_of_memory_episode(
    own: EmbeddedServer, admin: redis.Redis, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from emq.archive import Archive

    q = Queue.from_url(own.url(), "arch")
    q.enqueue_many([("x", i) for i in range(50)])
    events = admin.xlen(q.core.keys.events)
    a = Archive(q, tmp_path / "floor.sqlite3")
    stop = threading.Event()
    cycles: list[int] = []
    admin.config_set("maxmemory", 1)  # its lease and trims are refused from the first cycle
    thread = threading.Thread(target=a.run, args=(0.01, stop, lambda t: cycles.append(1)))
    with caplog.at_level(logging.WARNING, logger="emq.archive"):
        thread.start()
        deadline = time.monotonic() + HANG
        while not any("retrying" in r.getMessage() for r in caplog.records):
            assert time.monotonic() < deadline, "the refusal was never logged"
            time.sleep(0.02)
        time.sleep(0.3)  # the episode goes on for a while
        assert thread.is_alive() and not cycles  # refused, not dead
        admin.config_set("maxmemory", 0)
        while a.floor.count() < events:
            assert time.monotonic() < deadline, "the archiver did not catch up"
            time.sleep(0.02)
        stop.set()
        thread.join(HANG)
    assert not thread.is_alive()
    said = [r.getMessage() for r in caplog.records]
    assert sum("retrying" in m for m in said) == 1  # once per episode, not per cycle
    assert any("succeeds again" in m for m in said)
    a.close()
    q.close()
