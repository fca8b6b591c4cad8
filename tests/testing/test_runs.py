"""emq.testing's helpers on the suite's servers: run_worker says what became of each job it
claimed (from the queue's event stream and the wrapped handlers), and enqueued lists what
waits in a queue."""

from __future__ import annotations

import asyncio

import pytest

from emq import AsyncQueue, Backoff, InvalidOption, Permanent, Queue, QueueOptions, Worker
from emq.errors import EmqError
from emq.testing import aenqueued, arun_worker, enqueued, run_worker
from emq.worker import JobContext

pytestmark = pytest.mark.servers("valkey", "redis", "cluster")
NOW = Backoff.exactly(0)  # a retry due at once: the same burst run claims it again


def test_a_completing_job_reports_its_result_and_one_attempt(queue: Queue) -> None:
    job = queue.enqueue("add", {"a": 2, "b": 3})
    run = run_worker({"add": lambda p: p["a"] + p["b"]}, queue=queue)
    [done] = run.values()
    assert (done.id, done.name, done.outcome) == (job, "add", "completed")
    assert (done.attempts, done.result, done.error, done.exception) == (1, 5, None, None)
    assert done.events == ("claimed", "completed")
    assert run.stats.completed == 1


def test_a_job_failing_every_attempt_ends_dead_with_its_error(queue: Queue) -> None:
    job = queue.enqueue("boom", {}, max_attempts=2)
    worker = Worker(queue)

    @worker.handler("boom", backoff=NOW)
    def boom(payload: dict[str, int]) -> None:
        raise ValueError("no luck")

    run = run_worker(worker)
    dead = run[job]
    assert (dead.outcome, dead.attempts, dead.result) == ("dead", 2, None)
    assert dead.error is not None and dead.error.startswith("ValueError: no luck")
    assert isinstance(dead.exception, ValueError)
    assert dead.events == ("claimed", "retrying", "promoted", "claimed", "dead")


def test_a_job_that_fails_once_is_retried_and_completes(queue: Queue) -> None:
    job = queue.enqueue("flaky", "x")

    def flaky(payload: str, ctx: JobContext) -> str:
        if ctx.attempts == 1:
            raise ConnectionError("try again")
        return payload * 2

    worker = Worker(queue)
    worker.register("flaky", flaky, backoff=NOW)
    run = run_worker(worker)
    assert run.outcomes() == {job: "completed"}
    assert (run[job].attempts, run[job].result, run[job].exception) == (2, "xx", None)
    assert "retrying" in run[job].events


def test_a_retry_in_its_backoff_is_left_retrying(queue: Queue) -> None:
    job = queue.enqueue("later", None)

    def later(payload: None) -> None:
        raise TimeoutError("upstream slow")

    run = run_worker({"later": later}, queue=queue)  # the default backoff: 1 s and more
    assert (run[job].outcome, run[job].attempts) == ("retrying", 1)
    assert queue.job(job).state == "scheduled"


def test_permanent_and_cancel_end_dead_and_cancelled(queue: Queue, url: str) -> None:
    bad = queue.enqueue("check", {"to": "nobody"})
    stop = queue.enqueue("stop", None)

    def check(payload: dict[str, str]) -> None:
        raise Permanent("bad address")

    def cancel_me(payload: None, ctx: JobContext) -> None:
        with Queue.from_url(url, ctx.queue) as q:
            q.cancel(ctx.id, "not needed")
        for _ in range(400):  # bounded: the heartbeat brings the cancel within a beat
            if ctx.cancelled.wait(0.05):
                return
            ctx.heartbeat()

    run = run_worker({"check": check, "stop": cancel_me}, queue=queue, lease_ms=3_000)
    assert run.outcomes() == {bad: "dead", stop: "cancelled"}
    assert run[bad].attempts == 1 and isinstance(run[bad].exception, Permanent)


def test_a_given_worker_gets_its_options_and_handlers_back(queue: Queue) -> None:
    queue.enqueue("noop", None)
    worker = Worker(queue, {"noop": lambda p: None})
    before = (worker.options, dict(worker.handlers))
    run_worker(worker)
    assert (worker.options, worker.handlers) == before
    assert worker.options.burst is False


def test_only_the_jobs_of_this_run_are_reported(queue: Queue) -> None:
    queue.enqueue("noop", 1)
    run_worker({"noop": lambda p: p}, queue=queue)
    second = queue.enqueue("noop", 2)
    assert list(run_worker({"noop": lambda p: p}, queue=queue)) == [second]
    assert run_worker({"noop": lambda p: p}, queue=queue).outcomes() == {}


async def test_arun_worker_runs_async_handlers_on_the_tests_loop(aqueue: AsyncQueue) -> None:
    job = await aqueue.enqueue("sleepy", 7)

    async def sleepy(payload: int) -> int:
        await asyncio.sleep(0)
        return payload + 1

    run = await arun_worker({"sleepy": sleepy}, queue=aqueue)
    assert (run[job].outcome, run[job].result) == ("completed", 8)
    assert run.named("sleepy") == [run[job]]
    with pytest.raises(EmqError, match="await arun_worker"):
        run_worker({"sleepy": sleepy}, queue=aqueue)
    await aqueue.close()


def test_bad_arguments_are_refused_before_anything_runs(queue: Queue) -> None:
    with pytest.raises(InvalidOption, match="queue="):
        run_worker({"x": print})
    with pytest.raises(InvalidOption, match="either a Worker"):
        run_worker(Worker(queue), queue=queue)
    with pytest.raises(InvalidOption, match="Worker or a dict"):
        run_worker([print])  # type: ignore[arg-type]


def test_enqueued_lists_waiting_jobs_oldest_first_and_by_name(queue: Queue) -> None:
    a = queue.enqueue("welcome", {"to": "ada"})
    b = queue.enqueue("report", {"day": 1}, delay_ms=60_000)
    c = queue.enqueue("welcome", {"to": "bob"}, priority=5)
    assert [j.id for j in enqueued(queue)] == [a, b, c]
    assert [(j.name, j.payload) for j in enqueued(queue, "welcome")] == [
        ("welcome", {"to": "ada"}),
        ("welcome", {"to": "bob"}),
    ]
    [report] = enqueued(queue, "report")
    assert report.state == "scheduled" and report.run_at_ms is not None
    run_worker({"welcome": lambda p: None, "report": lambda p: None}, queue=queue)
    assert [j.id for j in enqueued(queue)] == [b]  # the due ones ran, the delayed one waits


async def test_aenqueued_reads_an_async_queue(aqueue: AsyncQueue) -> None:
    job = await aqueue.enqueue("welcome", {"to": "ada"})
    assert [(j.id, j.payload) for j in await aenqueued(aqueue)] == [(job, {"to": "ada"})]
    assert await aenqueued(aqueue, "other") == []
    await aqueue.close()


def test_a_queue_without_events_is_a_clear_error(url: str, qname: str) -> None:
    with Queue.from_url(url, qname, options=QueueOptions(events_maxlen=0)) as queue:
        queue.enqueue("noop", None)
        worker = Worker(queue, {"noop": lambda p: None})
        with pytest.raises(EmqError, match="events are off"):
            run_worker(worker)
        assert worker.stats.completed == 1  # the run itself went as usual


def test_a_job_with_no_handler_is_retrying_under_its_name(queue: Queue) -> None:
    job = queue.enqueue("unknown", None)
    run = run_worker(Worker(queue))  # a worker with no handler at all
    assert (run[job].name, run[job].outcome, run[job].result) == ("unknown", "retrying", None)
    assert run[job].error is not None and "no handler" in run[job].error
