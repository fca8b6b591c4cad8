"""Handlers in their own process (``isolation="process"``, emq.worker.children), each run by
a real worker against a real server: a timeout kills the child and frees its slot, a memory
cap or a dying child fails only that attempt, children are recycled, a cancel asks before it
kills, and the lease is renewed while the child runs. Ends with the invariant check."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import pytest
import redis

from emq import InvalidOption, Queue, QueueOptions, Tasks, Worker, WorkerOptions

from ..support import isolated_handlers as h
from ..support.helpers import assert_consistent, until

pytestmark = pytest.mark.servers("valkey", "redis")

KEEP = QueueOptions(result_ttl_ms=600_000)


def burst(queue: Queue, **options: Any) -> Worker:
    return Worker(queue, options=WorkerOptions(burst=True, **options))


def dead_error(queue: Queue, job_id: str) -> str:
    job = queue.job(job_id)
    assert job is not None and job.state == "dead", job
    return job.last_error or ""


def test_results_come_from_children_recycled_after_max_jobs(
    url: str, qname: str, client: redis.Redis
) -> None:
    with Queue.from_url(url, qname, options=KEEP) as q:
        ids = q.enqueue_many([("pid", i) for i in range(4)] + [("apid", {"n": 1})])
        w = burst(q, concurrency=1)
        w.register("pid", h.pid, isolation="process", max_jobs_per_child=2)
        w.register("apid", h.apid, isolation="process")
        w.run_sync(handle_signals=False)
        pids = [q.result(i) for i in ids[:4]]
        assert os.getpid() not in pids
        assert pids[0] == pids[1] != pids[2] == pids[3]  # a new child after two jobs
        assert q.result(ids[4])["got"] == {"n": 1}
        assert q.counts()["completed"] == 5
        assert w.stats.completed == 5
    assert_consistent(client, qname)


def test_a_timeout_kills_the_child_and_frees_its_slot(
    url: str, qname: str, client: redis.Redis
) -> None:
    with Queue.from_url(url, qname, options=KEEP) as q:
        stuck = q.enqueue("hang", max_attempts=1)
        after = q.enqueue("pid")
        w = burst(q, concurrency=1)
        w.register("hang", h.hang, isolation="process", timeout_ms=300)
        w.register("pid", h.pid, isolation="process")
        w.run_sync(handle_signals=False)  # one slot: "pid" runs only once "hang" freed it
        assert "timeout" in dead_error(q, stuck)
        assert isinstance(q.result(after), int)
        assert w.stats.timeouts == 1 and w.stats.abandoned == 0
    assert_consistent(client, qname)


def test_a_memory_cap_and_a_dying_child_fail_only_their_attempt(
    url: str, qname: str, client: redis.Redis
) -> None:
    with Queue.from_url(url, qname, options=KEEP) as q:
        hog = q.enqueue("eat", {"mb": 2048}, max_attempts=1)
        small = q.enqueue("eat", {"mb": 1}, max_attempts=1)
        killed = q.enqueue("die", max_attempts=1)
        crashed = q.enqueue("segfault", max_attempts=1)
        refused = q.enqueue("refuse", "x", max_attempts=5)
        failed = q.enqueue("fail", 7, max_attempts=1)
        w = burst(q, concurrency=2)
        w.register("eat", h.eat_memory, isolation="process", max_memory_mb=1024)
        w.register("die", h.die, isolation="process")
        w.register("segfault", h.segfault, isolation="process")
        w.register("refuse", h.refuse, isolation="process")
        w.register("fail", h.fail, isolation="process")
        w.run_sync(handle_signals=False)
        assert dead_error(q, hog).startswith("MemoryError")
        assert q.result(small) == 1024 * 1024
        assert "killed by SIGKILL" in dead_error(q, killed)
        assert "killed by SIGSEGV" in dead_error(q, crashed)
        refusal = q.job(refused)
        assert refusal is not None and refusal.attempts == 1  # Permanent: never retried
        assert dead_error(q, refused).startswith("Permanent: cannot handle")
        error = dead_error(q, failed)
        assert error.startswith("ValueError: bad value 7")
        assert "isolated_handlers.py" in error  # the child's own traceback
    assert_consistent(client, qname)


@pytest.mark.slow
async def test_a_cancel_asks_the_child_to_stop_and_the_lease_is_renewed_meanwhile(
    url: str, qname: str, client: redis.Redis, tmp_path: Path
) -> None:
    mark = tmp_path / "mark"
    with Queue.from_url(url, qname, options=KEEP) as q:
        slow = q.enqueue("slow", {"s": 2.5})  # ten heartbeats of a 0.75 s lease
        started = tmp_path / "started"
        job = q.enqueue("hang", {"mark": str(mark), "started": str(started)})
        w = Worker(q, options=WorkerOptions(concurrency=2, lease_ms=750, heartbeat_ms=250))
        w.register("slow", h.slow, isolation="process")
        w.register("hang", h.hang_then_mark, isolation="process")
        task = asyncio.create_task(w.run())
        await until(started.exists, 30, "the handler running in its child")
        q.cancel(job, "no longer needed")
        await until(lambda: mark.exists(), 30, "the handler's finally ran in its child")
        await until(lambda: q.counts()["completed"] == 1, 30, "the slow job done")
        w.stop()
        await asyncio.wait_for(task, 30)
        assert mark.read_text() == "cleaned up"
        cancelled = q.job(job)
        assert cancelled is not None and cancelled.state == "dead" and cancelled.cancelled
        assert isinstance(q.result(slow), int)
        assert q.counts()["recovered"] == 0 and w.stats.lease_lost == 0
    assert_consistent(client, qname)


def test_what_cannot_run_in_a_child_is_refused_at_registration(queue: Queue) -> None:
    w = Worker(queue)
    with pytest.raises(InvalidOption, match="module-level def"):
        w.register("l", lambda p: p, isolation="process")
    with pytest.raises(InvalidOption, match="no ctx"):
        w.register("c", _with_ctx, isolation="process")
    with pytest.raises(InvalidOption, match="isolation must be"):
        w.register("x", h.pid, isolation="fork")
    with pytest.raises(InvalidOption, match="need isolation='process'"):
        w.register("y", h.pid, max_memory_mb=100)


def _with_ctx(payload: Any, ctx: Any) -> None:
    return None


def test_a_typed_task_runs_in_a_child_with_its_arguments(
    url: str, qname: str, client: redis.Redis
) -> None:
    tasks = Tasks(qname, url=url, options=KEEP)
    typed = tasks.task(isolation="process", max_jobs_per_child=10)(h.typed_pid)
    atyped = tasks.task(isolation="process")(h.atyped)
    with Queue.from_url(url, qname, options=KEEP) as q:
        first = typed.using(queue=q).enqueue(6, times=7)
        by_name = q.enqueue("typed_pid", {"n": 2})  # a job sent by name runs the same way
        unfit = q.enqueue("typed_pid", {"m": 2}, max_attempts=3)
        plus = atyped.using(queue=q).enqueue(41)
        w = burst(q, concurrency=2)
        w.include(tasks)
        w.run_sync(handle_signals=False)
        assert q.result(first)["product"] == 42 and q.result(first)["pid"] != os.getpid()
        assert q.result(by_name)["product"] == 2
        assert q.result(plus) == 42
        assert "cannot take its payload" in dead_error(q, unfit)
        job = q.job(unfit)
        assert job is not None and job.attempts == 1  # a payload that does not fit: no retry
    tasks.close()
    assert_consistent(client, qname)
